"""Opening files safely: container detection by content, lazy tensor tables.

Every torch load uses ``weights_only=True`` (and ``mmap=True`` for zip archives), so a pickle that
references arbitrary globals is refused, never executed. ``.npz`` files are opened with
``allow_pickle=False``. Gzip is streamed to a private temporary file with a size cap: nothing is
ever written next to the user's files.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import re
import struct
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import FormatError, UnsafeFileError

#: Largest file decompressed from gzip (bytes); larger is treated as a bomb and refused.
GZIP_LIMIT = int(os.environ.get("HSDIFF_GZIP_LIMIT", str(64 * 2**30)))
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
    """``torch``, ``torch-legacy``, ``safetensors``, ``npy``, ``npz``, ``gzip``, ``text`` or ``empty``."""
    with open(path, "rb") as f:
        head = f.read(16)
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
        except (zipfile.BadZipFile, OSError, ValueError) as e:
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
    if len(head) >= 9 and head[8:9] == b"{":
        (n,) = struct.unpack("<Q", head[:8])
        if 2 <= n <= 100 * 2**20:
            return "safetensors"
    if size >= 8 and path.suffix == ".safetensors":
        return "safetensors"
    return "text"


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


_GLOBAL_RE = re.compile(r"(?:Unsupported global|GLOBAL|global)[:\s]+([\w.]+(?:[ .][\w.]+)?)")


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
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        msg = str(e)
        m = _GLOBAL_RE.search(msg)
        what = m.group(1).replace(" ", ".") if m else "a non-tensor object"
        raise UnsafeFileError(
            f"refused to load: the pickle references {what}, which could run arbitrary code",
            path=path,
            hint="hsdiff only loads plain tensors (weights_only=True); re-save the dump as a dict of tensors "
            "or as safetensors",
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError, KeyError, IndexError, zipfile.BadZipFile, struct.error) as e:
        raise FormatError(
            f"torch file is damaged or truncated ({_short(e)})",
            path=path,
            hint="re-copy or re-dump the file",
        ) from None
    table = Table(path=path, container="torch", raw=obj)
    _flatten(obj, "", table, depth=0)
    return table


def _flatten(obj: Any, prefix: str, table: Table, depth: int) -> None:
    import torch

    if isinstance(obj, torch.Tensor):
        t = obj
        table.entries[prefix] = Entry(prefix, tuple(t.shape), str(t.dtype).replace("torch.", ""), lambda t=t: t)
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
            header = json.loads(f.read(n))
    except (struct.error, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FormatError(f"safetensors header is unreadable ({_short(e)})", path=path, hint="re-copy the file") from None
    if not isinstance(header, dict):
        raise FormatError("safetensors header is not a JSON object", path=path, hint="re-copy the file")
    metadata = header.pop("__metadata__", None) or {}
    data_len = size - 8 - n
    table = Table(path=path, container="safetensors", metadata={str(k): str(v) for k, v in metadata.items()})
    for name, info in header.items():
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
        table.entries[name] = Entry(name, shape, dtype, lambda p=path, k=name: _st_get(p, k))
    return table


def _st_get(path: Path, key: str) -> Any:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return f.get_tensor(key)
    except Exception as e:  # safetensors raises its own SafetensorError
        raise FormatError(f"cannot read tensor {key!r} ({_short(e)})", path=path, hint="re-copy the file") from None


def _open_npy(path: Path) -> Table:
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as e:
        if "pickle" in str(e).lower() or "object" in str(e).lower():
            raise UnsafeFileError(
                "refused to load: the array holds Python objects (needs pickle)", path=path,
                hint="save numeric arrays only",
            ) from None
        raise FormatError(f"npy file is damaged ({_short(e)})", path=path, hint="re-copy the file") from None
    except OSError as e:
        raise FormatError(f"npy file is damaged ({_short(e)})", path=path, hint="re-copy the file") from None
    table = Table(path=path, container="npy")
    table.entries[""] = Entry("", tuple(arr.shape), str(arr.dtype), lambda a=arr: _np_to_torch(a))
    return table


def _open_npz(path: Path) -> Table:
    table = Table(path=path, container="npz")
    try:
        npz = np.load(path, allow_pickle=False)
        for name in npz.files:
            arr = npz[name]
            table.entries[name] = Entry(name, tuple(arr.shape), str(arr.dtype), lambda a=arr: _np_to_torch(a))
    except ValueError as e:
        if "pickle" in str(e).lower() or "object" in str(e).lower():
            raise UnsafeFileError(
                "refused to load: an array holds Python objects (needs pickle)", path=path,
                hint="save numeric arrays only (np.savez with numeric dtypes)",
            ) from None
        raise FormatError(f"npz file is damaged ({_short(e)})", path=path, hint="re-copy the file") from None
    except (OSError, zipfile.BadZipFile, EOFError) as e:
        raise FormatError(f"npz file is damaged ({_short(e)})", path=path, hint="re-copy the file") from None
    return table


def _np_to_torch(arr: np.ndarray) -> Any:
    import torch

    if arr.dtype == object:
        raise UnsafeFileError("array holds Python objects", hint="save numeric arrays only")
    return torch.from_numpy(np.ascontiguousarray(arr))


def _open_gzip(path: Path) -> Table:
    fd, tmp = tempfile.mkstemp(prefix="hsdiff-", suffix=".bin")
    tmp_path = Path(tmp)
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
                out.write(chunk)
        inner = sniff_container(tmp_path)
        if inner in ("text", "empty", "gzip"):
            raise FormatError(f"gzip holds no tensor file ({inner})", path=path, hint="expected a gzipped torch.save file")
        table = open_table(tmp_path, inner)
        table.path = path
        table.temp = tmp_path
        return table
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        tmp_path.unlink(missing_ok=True)
        raise FormatError(f"gzip stream is damaged or truncated ({_short(e)})", path=path, hint="re-copy the file") from None
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def cleanup(table: Table) -> None:
    """Remove a temporary file made for a gzip member (the mapping stays valid on POSIX)."""
    if table.temp is not None:
        table.temp.unlink(missing_ok=True)
        table.temp = None


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:200]
