"""torch.save files, zip and legacy: loaded with ``weights_only=True``, the pickle scanned, never run.

Every load uses ``weights_only=True`` (and ``mmap=True`` for zip archives), so a pickle that
references arbitrary globals is refused, never executed. When torch's loader stops before naming
what a refused pickle asks for, :func:`scan_pickle` reads its opcodes (``pickletools``, which only
decodes) to say it.
"""

from __future__ import annotations

import ctypes
import functools
import io
import mmap
import pickle
import re
import sys
import warnings
import zipfile
from pathlib import Path
from typing import Any

from ...errors import FormatError, UnsafeFileError
from . import limits
from .table import Entry, Table, short

_GLOBAL_RE = re.compile(r"GLOBAL ([\w.]+)")
_OBJECT_RE = re.compile(r"(?:but got|unrecognized function) (<[^>]*>|[\w.]+)")
_UNPICKLER_DETAIL_RE = re.compile(r"WeightsUnpickler error:\s*(.+)")
_SAFE_MODULES = ("torch", "collections", "_codecs", "numpy.core.multiarray", "numpy._core.multiarray")
#: Nesting of dicts and lists flattened into dotted keys; deeper values stay extras.
_MAX_NESTING = 4


def open_table(path: Path, container: str) -> Table:
    """Open a ``torch`` (zip, memory-mapped) or ``torch-legacy`` file as a :class:`Table`."""
    import torch

    LEGACY_TORCH_LIMIT = limits.LEGACY_TORCH_LIMIT  # read when called: a test or caller may change it

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
        raise _refusal(path, container, e) from None
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - torch.load parses untrusted bytes: whatever it raises means damage
        raise FormatError(
            f"torch file is damaged or truncated ({short(e)})",
            path=path,
            hint="re-copy or re-dump the file",
        ) from None
    table = Table(path=path, container="torch", raw=obj)
    _flatten(obj, "", table, depth=0)
    if mmap:
        for entry in table.entries.values():
            t = entry.loader()
            if entry.is_float and t.dim() >= 1 and t.shape[-1] > 0 and t.is_contiguous():
                entry.rows = functools.partial(_mapped_rows, t.reshape(-1, t.shape[-1]))
    return table


def _mapped_rows(t: Any, i0: int, i1: int, c0: int = 0, c1: int | None = None) -> Any:
    """Rows of a memory-mapped ``[N, W]`` tensor as a float32 copy; the mapped pages just read are given
    back (``MADV_DONTNEED`` on a private file mapping only drops clean pages: a later read maps them
    again), so the resident memory stays that of one chunk however large the file."""
    import torch

    part = t[i0:i1]
    out = part[:, c0:c1].to(torch.float32, copy=True)
    _release(part.data_ptr(), part.numel() * part.element_size())
    return out


def _release(addr: int, nbytes: int) -> None:
    page = mmap.PAGESIZE
    lo, hi = -(-addr // page) * page, (addr + nbytes) // page * page  # whole pages inside the range only
    if hi > lo and _LIBC is not None:
        _LIBC.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), _MADV_DONTNEED)


def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        return lib
    except (OSError, AttributeError):  # pragma: no cover - no libc symbols: pages stay mapped until the file closes
        return None


_MADV_DONTNEED = 4
_LIBC = _libc()


def _refusal(path: Path, container: str, e: pickle.UnpicklingError) -> FormatError:
    """The error for a pickle torch's safe loader refused: unsafe (naming what it asks for) or damaged."""
    msg = str(e)
    what, protocol = _pickle_problem(msg), 0
    if what is None:
        found, protocol = scan_pickle(path, container)
        what = next(iter(found), None)
    if what is None and protocol >= 4:
        return FormatError(
            f"saved with pickle protocol {protocol}, which torch's safe loader (weights_only=True) cannot read",
            path=path,
            hint="re-save it with torch.save's default protocol, or as safetensors",
        )
    if what is None:
        d = _UNPICKLER_DETAIL_RE.search(msg)
        detail = d.group(1).strip() if d else short(e)
        return FormatError(
            f"torch file is damaged: its pickle is unreadable ({detail[:200]})",
            path=path,
            hint="re-copy or re-dump the file",
        )
    return UnsafeFileError(
        f"refused to load: the pickle references {what}, which could run arbitrary code",
        path=path,
        hint="hsdiff only loads plain tensors (weights_only=True); re-save the dump as a dict of tensors "
        "or as safetensors",
    )


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


#: The most of a refused pickle read to name what it asks for: its objects come first (a legacy
#: file's tensor bytes follow them), and this much stays well inside the reader's memory bound.
_SCAN_LIMIT = 16 * 2**20


def scan_pickle(path: Path, container: str, max_ops: int = 1_000_000) -> tuple[list[str], int]:
    """Globals a pickle names that a tensor file never needs, and its protocol; read, never run.

    ``pickletools.genops`` only decodes opcodes, so this is safe on hostile input. Used to name what
    a refused pickle asks for when torch's loader stops before saying (protocol 4+ frames).

    >>> scan_pickle(Path("evil.pt"), "torch")            # doctest: +SKIP
    (['posix.system'], 2)
    """
    import pickletools
    from _compat_pickle import IMPORT_MAPPING

    found: list[str] = []
    protocol = 0
    try:
        if container == "torch":
            with zipfile.ZipFile(path) as z:
                member = next(i for i in z.infolist() if i.filename.endswith("data.pkl"))
                if member.file_size > _SCAN_LIMIT:
                    return found, protocol
                data = z.read(member)
        else:
            with open(path, "rb") as f:
                data = f.read(min(path.stat().st_size, _SCAN_LIMIT))
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
    elif isinstance(obj, dict) and depth < _MAX_NESTING:
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), table, depth + 1)
    elif isinstance(obj, (list, tuple)) and depth < _MAX_NESTING and obj and all(isinstance(v, torch.Tensor) for v in obj):
        for i, v in enumerate(obj):
            _flatten(v, f"{prefix}.{i}" if prefix else str(i), table, depth + 1)
    else:
        table.extras[prefix] = obj
