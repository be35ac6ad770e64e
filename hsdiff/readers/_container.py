"""Opening files safely: container detection by content, lazy tensor tables.

Every torch load uses ``weights_only=True`` (and ``mmap=True`` for zip archives), so a pickle that
references arbitrary globals is refused, never executed. ``.npz`` files are opened with
``allow_pickle=False``. Gzip is streamed to a private temporary file with a size cap: nothing is
ever written next to the user's files.
"""

from __future__ import annotations

import functools
import gzip
import io
import json
import math
import os
import pickle
import re
import struct
import tempfile
import tokenize
import warnings
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import FormatError, HsdiffError, UnsafeFileError

#: Largest file decompressed from gzip (bytes); larger is treated as a bomb and refused.
GZIP_LIMIT = int(os.environ.get("HSDIFF_GZIP_LIMIT", str(64 * 2**30)))
#: Largest expansion ratio accepted once more than :data:`GZIP_RATIO_AFTER` bytes came out. Tensors
#: of real activations compress by less than 2x; a gzip bomb expands about 1000x.
GZIP_MAX_RATIO = 100
GZIP_RATIO_AFTER = 64 * 2**20
#: Largest legacy (non-zip) torch file read fully into memory; zip archives are memory-mapped.
LEGACY_TORCH_LIMIT = 2 * 2**30

_SAFETENSORS_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
}


@dataclass
class Entry:
    """One tensor inside a file: name, shape, dtype and how to load it."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    loader: Callable[[], Any]

    @property
    def is_float(self) -> bool:
        return self.dtype.startswith(("float", "bfloat"))


@dataclass
class Table:
    """The tensors of one file (flattened with dotted keys) and its non-tensor values."""

    path: Path
    container: str  # "torch", "safetensors", "npy", "npz"
    entries: dict[str, Entry] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    raw: Any = None
    temp: Path | None = None

    def keys(self) -> set[str]:
        return set(self.entries) | set(self.extras)


def sniff_container(path: Path) -> str:
    """``torch``, ``torch-legacy``, ``safetensors``, ``npy``, ``npz``, ``gzip``, ``text``, ``binary`` or ``empty``."""
    with open(path, "rb") as f:
        head = f.read(_SNIFF_BYTES)
    size = path.stat().st_size
    if not head:
        return "empty"
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head[:6] == b"\x93NUMPY":
        return "npy"
    if head[:4] == b"PK\x03\x04" or head[:4] == b"PK\x05\x06":
        try:
            with zipfile.ZipFile(path) as z:
                names = z.namelist()
        except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError, struct.error) as e:
            raise FormatError(
                f"zip archive is damaged or truncated ({e})",
                path=path,
                hint="re-copy the file; a torch.save that was interrupted leaves such files",
            ) from None
        if any(n.endswith("data.pkl") for n in names):
            return "torch"
        if names and all(n.endswith(".npy") for n in names):
            return "npz"
        raise FormatError(
            "zip archive holds neither a torch.save archive nor .npy arrays", path=path,
            hint="hsdiff reads torch .pt/.ckpt/.bin, safetensors, .npy/.npz and text logs",
        )
    if head[:1] == b"\x80" and len(head) > 1 and head[1] in range(2, 6):
        return "torch-legacy"
    if _OLD_PICKLE_RE.match(head) and (claimed_format(path) == "torch" or path.suffix.lower() in (".bin", ".pkl")):
        return "torch-legacy"  # a text (protocol 0/1) pickle opening with a global: the torch loader refuses it
    if len(head) >= 9 and head[8:9] == b"{":
        (n,) = struct.unpack("<Q", head[:8])
        if 2 <= n <= 100 * 2**20:
            return "safetensors"
    if size >= 8 and path.suffix == ".safetensors":
        return "safetensors"
    return "binary" if b"\x00" in head else "text"


_SNIFF_BYTES = 8192
_OLD_PICKLE_RE = re.compile(rb"[(]?c[A-Za-z_][\w.]*\n[A-Za-z_][\w.]*\n")
#: Suffixes that promise a tensor container; a file named so whose content is none is damaged.
_CLAIMS = {".gz": "gzip", ".safetensors": "safetensors", ".pt": "torch", ".pth": "torch", ".ckpt": "torch",
           ".npy": "numpy", ".npz": "numpy"}


def claimed_format(path: Path) -> str | None:
    """The container a file's name promises (``data_1.ckpt.gz`` -> ``gzip``), or None."""
    return _CLAIMS.get(path.suffix.lower())


def not_what_it_claims(path: Path, container: str) -> FormatError:
    """The error for a file named like a tensor container whose content is text, binary junk or too short."""
    size = path.stat().st_size
    what = {"text": "text", "binary": "unrecognised binary data"}.get(container, container)
    if size < 64:
        what = f"only {size} bytes"
    return FormatError(
        f"named like a {claimed_format(path)} file but holds {what}",
        path=path,
        hint="the file is truncated or is not a dump (an HTML error page from a failed download?); re-copy it or "
        "leave it out",
    )


def open_table(path: Path, container: str) -> Table:
    """Open ``path`` as a lazy :class:`Table`. Raises :class:`FormatError` on damage."""
    if container == "gzip":
        return _open_gzip(path)
    if container in ("torch", "torch-legacy"):
        return _open_torch(path, container)
    if container == "safetensors":
        return _open_safetensors(path)
    if container == "npy":
        return _open_npy(path)
    if container == "npz":
        return _open_npz(path)
    raise FormatError(f"not a tensor file ({container})", path=path)


_GLOBAL_RE = re.compile(r"GLOBAL ([\w.]+)")
_OBJECT_RE = re.compile(r"(?:but got|unrecognized function) (<[^>]*>|[\w.]+)")
_UNPICKLER_DETAIL_RE = re.compile(r"WeightsUnpickler error:\s*(.+)")


def _pickle_problem(msg: str) -> str | None:
    """What a refused pickle asks for (``posix.system``), or None when the pickle is merely damaged."""
    m = _GLOBAL_RE.search(msg)
    if m:
        module, _, name = m.group(1).rpartition(".")
        # protocol-2 pickles spell some modules the Python 2 way (subprocess -> commands)
        from _compat_pickle import IMPORT_MAPPING

        module = IMPORT_MAPPING.get(module, module)
        return f"{module}.{name}" if module else f"builtins.{name}"
    m = _OBJECT_RE.search(msg)
    if m and ("Can only build" in msg or "Can only create new object" in msg or "reduce" in msg):
        return f"a non-tensor object ({m.group(1)})"
    return None


def _open_torch(path: Path, container: str) -> Table:
    import torch

    mmap = container == "torch"
    if not mmap and path.stat().st_size > LEGACY_TORCH_LIMIT:
        raise FormatError(
            f"legacy (non-zip) torch file of {path.stat().st_size / 2**30:.1f} GiB cannot be memory-mapped",
            path=path,
            hint="re-save it with torch.save (zip format, the default since torch 1.6) or as safetensors",
        )
    try:
        with warnings.catch_warnings():  # e.g. "Detected pickle protocol 3": stderr stays one line per problem
            warnings.simplefilter("ignore")
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        msg = str(e)
        what, protocol = _pickle_problem(msg), 0
        if what is None:
            found, protocol = _scan_pickle(path, container)
            what = next(iter(found), None)
        if what is None and protocol >= 4:
            raise FormatError(
                f"saved with pickle protocol {protocol}, which torch's safe loader (weights_only=True) cannot read",
                path=path,
                hint="re-save it with torch.save's default protocol, or as safetensors",
            ) from None
        if what is None:
            d = _UNPICKLER_DETAIL_RE.search(msg)
            detail = d.group(1).strip() if d else _short(e)
            raise FormatError(
                f"torch file is damaged: its pickle is unreadable ({detail[:200]})",
                path=path,
                hint="re-copy or re-dump the file",
            ) from None
        raise UnsafeFileError(
            f"refused to load: the pickle references {what}, which could run arbitrary code",
            path=path,
            hint="hsdiff only loads plain tensors (weights_only=True); re-save the dump as a dict of tensors "
            "or as safetensors",
        ) from None
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - torch.load parses untrusted bytes: whatever it raises means damage
        raise FormatError(
            f"torch file is damaged or truncated ({_short(e)})",
            path=path,
            hint="re-copy or re-dump the file",
        ) from None
    table = Table(path=path, container="torch", raw=obj)
    _flatten(obj, "", table, depth=0)
    return table


_SAFE_MODULES = ("torch", "collections", "_codecs", "numpy.core.multiarray", "numpy._core.multiarray")


def _scan_pickle(path: Path, container: str, max_ops: int = 1_000_000) -> tuple[list[str], int]:
    """Globals a pickle names that a tensor file never needs, and its protocol; read, never run.

    ``pickletools.genops`` only decodes opcodes, so this is safe on hostile input. Used to name what
    a refused pickle asks for when torch's loader stops before saying (protocol 4+ frames).
    """
    import pickletools
    from _compat_pickle import IMPORT_MAPPING

    found: list[str] = []
    protocol = 0
    try:
        if container == "torch":
            with zipfile.ZipFile(path) as z:
                member = next(i for i in z.infolist() if i.filename.endswith("data.pkl"))
                if member.file_size > 64 * 2**20:
                    return found, protocol
                data = z.read(member)
        else:
            with open(path, "rb") as f:
                data = f.read(min(path.stat().st_size, 64 * 2**20))
    except Exception:  # noqa: BLE001 - best effort on a file already known to be bad: the caller reports it
        return found, protocol
    stream = io.BytesIO(data)
    pushed: list[str | None] = []  # the last values pushed, as far as STACK_GLOBAL needs them (strings)
    memo: dict[int, str | None] = {}
    ops = 0
    try:
        while stream.tell() < len(data) and ops < max_ops:  # a legacy file is several pickles in a row
            for op, arg, _ in pickletools.genops(stream):
                ops += 1
                kind = op.name
                index = int(arg) if isinstance(arg, (int, str)) and str(arg).isdecimal() else -1
                if kind == "PROTO":
                    protocol = max(protocol, index)
                elif kind in ("FRAME", "STOP"):
                    pass
                elif kind == "MEMOIZE":
                    memo[len(memo)] = pushed[-1] if pushed else None
                elif kind in ("PUT", "BINPUT", "LONG_BINPUT"):
                    memo[index] = pushed[-1] if pushed else None
                elif kind in ("GET", "BINGET", "LONG_BINGET"):
                    pushed = (pushed + [memo.get(index)])[-2:]
                elif isinstance(arg, str) and ("UNICODE" in kind or "STRING" in kind):
                    pushed = (pushed + [arg])[-2:]
                elif kind in ("GLOBAL", "STACK_GLOBAL"):
                    module, name = str(arg).split(" ", 1) if kind == "GLOBAL" else ((pushed + [None, None])[:2])
                    if isinstance(module, str) and isinstance(name, str):
                        module = IMPORT_MAPPING.get(module, "builtins" if module == "__builtin__" else module)
                        if not module.startswith(_SAFE_MODULES):
                            found.append(f"{module}.{name}")
                    pushed = (pushed + [None])[-2:]
                else:
                    pushed = (pushed + [None])[-2:]
                if ops >= max_ops:
                    break
    except Exception:  # noqa: BLE001 - the rest is tensor data or damage: what was read is enough
        pass
    return list(dict.fromkeys(found)), protocol


def _identity(t: Any) -> Any:
    return t


def _flatten(obj: Any, prefix: str, table: Table, depth: int) -> None:
    import torch

    if isinstance(obj, torch.Tensor):
        t = obj
        table.entries[prefix] = Entry(prefix, tuple(t.shape), str(t.dtype).replace("torch.", ""), functools.partial(_identity, t))
    elif isinstance(obj, dict) and depth < 4:
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), table, depth + 1)
    elif isinstance(obj, (list, tuple)) and depth < 4 and obj and all(isinstance(v, torch.Tensor) for v in obj):
        for i, v in enumerate(obj):
            _flatten(v, f"{prefix}.{i}" if prefix else str(i), table, depth + 1)
    else:
        table.extras[prefix] = obj


def _open_safetensors(path: Path) -> Table:
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > size - 8 or n > 100 * 2**20:
                raise FormatError(
                    f"safetensors header claims {n} bytes but the file has {size}", path=path,
                    hint="the file is truncated or not safetensors; re-copy it",
                )
            raw = _read_header(f, n, path)
            header = json.loads(raw)
    except (struct.error, json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise FormatError(f"safetensors header is unreadable ({_short(e)})", path=path, hint="re-copy the file") from None
    if not isinstance(header, dict):
        raise FormatError("safetensors header is not a JSON object", path=path, hint="re-copy the file")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise FormatError("safetensors __metadata__ is not a JSON object", path=path, hint="re-copy the file")
    data_len = size - 8 - n
    spans: list[tuple[int, int, str]] = []
    table = Table(path=path, container="safetensors", metadata={str(k): str(v) for k, v in metadata.items()})
    for name, info in header.items():
        if isinstance(info, dict) and isinstance(info.get("dtype"), str) and info["dtype"] not in _SAFETENSORS_DTYPES:
            raise FormatError(
                f"safetensors entry {name!r} has dtype {info['dtype'][:20]!r}, which hsdiff does not read",
                path=path,
                hint=f"save hidden states as one of {', '.join(_SAFETENSORS_DTYPES)}",
            )
        try:
            dtype = _SAFETENSORS_DTYPES[info["dtype"]]
            shape = tuple(int(d) for d in info["shape"])
            start, stop = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise FormatError(f"safetensors entry {name!r} is malformed", path=path, hint="re-copy the file") from None
        if not 0 <= start <= stop <= data_len:
            raise FormatError(
                f"safetensors entry {name!r} points past the end of the file (bytes {start}..{stop} of {data_len})",
                path=path,
                hint="the file is truncated; re-copy it",
            )
        need = math.prod(shape) * _ITEMSIZE[dtype]
        if min(shape, default=0) < 0 or stop - start != need:
            raise FormatError(
                f"safetensors entry {name!r} has {stop - start} bytes but shape {list(shape)} of {dtype} needs {need}",
                path=path,
                hint="the header is damaged; re-copy the file",
            )
        spans.append((start, stop, name))
        table.entries[name] = Entry(name, shape, dtype, functools.partial(_st_get, path, name))
    spans.sort()
    for (_, prev_stop, prev), (start, _, name) in zip(spans, spans[1:]):
        if start < prev_stop:
            raise FormatError(f"safetensors entries {prev!r} and {name!r} overlap (bytes {start}..{prev_stop})",
                              path=path, hint="the header is damaged; re-copy the file")
    end = 0
    for start, stop, name in spans:
        if start != end:
            raise FormatError(f"safetensors entry {name!r} leaves a gap before it (bytes {end}..{start})",
                              path=path, hint="the header is damaged; re-copy the file")
        end = stop
    return table


_ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
             "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


def _read_header(f: Any, n: int, path: Path) -> bytes:
    """The ``n`` header bytes, read in pieces so that a damaged (zero-filled) header stops early."""
    parts, left = [], n
    while left:
        piece = f.read(min(left, 1 << 20))
        if not piece:
            break
        if b"\x00" in piece:
            raise FormatError("safetensors header holds NUL bytes: it is not a header", path=path,
                              hint="the file is damaged or not safetensors; re-copy it")
        parts.append(piece)
        left -= len(piece)
    return b"".join(parts)


def _st_get(path: Path, key: str) -> Any:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return f.get_tensor(key)
    except Exception as e:  # safetensors raises its own SafetensorError
        raise FormatError(f"cannot read tensor {key!r} ({_short(e)})", path=path, hint="re-copy the file") from None


def _open_npy(path: Path) -> Table:
    try:
        with warnings.catch_warnings():  # a damaged header is parsed as a literal: no SyntaxWarning on stderr
            warnings.simplefilter("ignore")
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as e:
        if "pickle" in str(e).lower() or "object" in str(e).lower():
            raise UnsafeFileError(
                "refused to load: the array holds Python objects (needs pickle)", path=path,
                hint="save numeric arrays only",
            ) from None
        raise FormatError(f"npy file is damaged ({_short(e)})", path=path, hint="re-copy the file") from None
    except _NUMPY_DAMAGE as e:
        raise FormatError(f"npy file is damaged ({_short(e)})", path=path, hint="re-copy the file") from None
    table = Table(path=path, container="npy")
    table.entries[""] = Entry("", tuple(arr.shape), arr.dtype.name, functools.partial(_np_to_torch, arr, path))
    return table


def _open_npz(path: Path) -> Table:
    table = Table(path=path, container="npz")
    name = None
    try:
        npz = np.load(path, allow_pickle=False)
        for name in npz.files:
            with warnings.catch_warnings():  # as in _open_npy
                warnings.simplefilter("ignore")
                arr = npz[name]
            if not isinstance(arr, np.ndarray):
                raise FormatError(f"npz member {name!r} is not a numpy array", path=path, hint="re-copy the file")
            table.entries[name] = Entry(name, tuple(arr.shape), arr.dtype.name, functools.partial(_np_to_torch, arr, path))
    except ValueError as e:
        if "pickle" in str(e).lower() or "object" in str(e).lower():
            raise UnsafeFileError(
                f"refused to load: array {name!r} holds Python objects (needs pickle)", path=path,
                hint="save numeric arrays only (np.savez with numeric dtypes)",
            ) from None
        raise FormatError(f"npz file is damaged ({_short(e)})", path=path, hint="re-copy the file") from None
    except (zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError, *_NUMPY_DAMAGE) as e:  # RuntimeError: "encrypted"
        raise FormatError(f"npz file is damaged ({_short(e)})", path=path, hint="re-copy the file") from None
    return table


# what numpy raises on a damaged header (it is parsed as a Python literal) or data
_NUMPY_DAMAGE = (OSError, EOFError, SyntaxError, TypeError, KeyError, OverflowError, tokenize.TokenError)


def _np_to_torch(arr: np.ndarray, path: Path | None = None) -> Any:
    import torch

    if arr.dtype == object:
        raise UnsafeFileError("array holds Python objects", path=path, hint="save numeric arrays only")
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    try:
        with warnings.catch_warnings():  # "array is not writable": memory-mapped, and never written to
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(np.ascontiguousarray(arr))
    except TypeError as e:
        raise FormatError(f"array dtype {arr.dtype} has no torch equivalent ({_short(e)})", path=path,
                          hint="save hidden states as float16/bfloat16/float32/float64") from None


def _open_gzip(path: Path) -> Table:
    fd, tmp = tempfile.mkstemp(prefix="hsdiff-", suffix=".bin")
    tmp_path = Path(tmp)
    packed = max(path.stat().st_size, 1)
    try:
        with os.fdopen(fd, "wb") as out, gzip.open(path, "rb") as src:
            copied = 0
            while True:
                chunk = src.read(1 << 20)
                if not chunk:
                    break
                copied += len(chunk)
                if copied > GZIP_LIMIT:
                    raise FormatError(
                        f"gzip expands past {GZIP_LIMIT / 2**30:.0f} GiB; refused as a possible gzip bomb",
                        path=path,
                        hint="decompress it yourself if it is genuine, or raise HSDIFF_GZIP_LIMIT (bytes)",
                    )
                if copied > GZIP_RATIO_AFTER and copied > GZIP_MAX_RATIO * packed:
                    raise FormatError(
                        f"gzip expands more than {GZIP_MAX_RATIO}x ({packed} bytes give over {copied // 2**20} MiB); "
                        "refused as a possible gzip bomb",
                        path=path,
                        hint="hidden states do not compress that well; decompress it yourself if it is genuine",
                    )
                out.write(chunk)
        try:
            inner = sniff_container(tmp_path)
            if inner in ("text", "binary", "empty", "gzip"):
                raise FormatError(f"gzip holds no tensor file ({inner})", path=path, hint="expected a gzipped torch.save file")
            table = open_table(tmp_path, inner)
            if inner == "safetensors":  # read now: the temporary file is removed when the table is closed
                for e in table.entries.values():
                    e.loader = _constant(e.loader())
        except HsdiffError as e:
            if e.path is None or e.path == str(path):
                raise
            raise type(e)(f"{e.detail} (in the file it decompresses to)", path=path, hint=e.hint) from None
        table.path = path
        table.temp = tmp_path
        return table
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as e:
        tmp_path.unlink(missing_ok=True)
        raise FormatError(f"gzip stream is damaged or truncated ({_short(e)})", path=path, hint="re-copy the file") from None
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def _constant(value: Any) -> Callable[[], Any]:
    return lambda: value


def cleanup(table: Table) -> None:
    """Remove a temporary file made for a gzip member (the mapping stays valid on POSIX)."""
    if table.temp is not None:
        table.temp.unlink(missing_ok=True)
        table.temp = None


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:200]
