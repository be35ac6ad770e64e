"""torch.save files, zip and legacy: read as numpy arrays, the pickle restricted or scanned, never run.

Zip archives (the format since torch 1.6) are read without torch: :mod:`.torchzip`'s restricted
unpickler accepts only the globals a dict of tensors needs and maps every storage read-only from
the file, so nothing is read until used. Legacy (non-zip) files are loaded with
``torch.load(weights_only=True)`` and their tensors converted to numpy. A pickle that references
any other global is refused, never executed; when the loader stops before naming what a refused
pickle asks for, :func:`scan_pickle` reads its opcodes (``pickletools``, which only decodes) to say it.
"""

from __future__ import annotations

import errno
import functools
import io
import pickle
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ...arrays import dtype_name, from_torch
from ...errors import FormatError, HsdiffError, MissingExtraError, UnsafeFileError
from . import limits, torchzip
from .filerows import file_rows
from .table import Entry, Table, short

_GLOBAL_RE = re.compile(r"GLOBAL ([\w.]+)")
_OBJECT_RE = re.compile(r"(?:but got|unrecognized function) (<[^>]*>|[\w.]+)")
_UNPICKLER_DETAIL_RE = re.compile(r"WeightsUnpickler error:\s*(.+)")
_SAFE_MODULES = ("torch", "collections", "_codecs", "numpy.core.multiarray", "numpy._core.multiarray")
#: Nesting of dicts and lists flattened into dotted keys; deeper values stay extras.
_MAX_NESTING = 4


def open_table(path: Path, container: str) -> Table:
    """Open a ``torch`` (zip, memory-mapped) or ``torch-legacy`` file as a :class:`Table` of numpy arrays."""
    LEGACY_TORCH_LIMIT = limits.LEGACY_TORCH_LIMIT  # read when called: a test or caller may change it

    mapped = container == "torch"
    if not mapped and path.stat().st_size > LEGACY_TORCH_LIMIT:
        raise FormatError(
            f"legacy (non-zip) torch file of {path.stat().st_size / 2**30:.1f} GiB cannot be memory-mapped",
            path=path,
            hint="re-save it with torch.save (zip format, the default since torch 1.6) or as safetensors",
        )
    try:
        obj = torchzip.load_archive(path) if mapped else _load_legacy(path)
    except pickle.UnpicklingError as e:
        raise _refusal(path, container, e) from None
    except (HsdiffError, MemoryError):
        raise
    except Exception as e:  # noqa: BLE001 - the loader parses untrusted bytes: whatever it raises means damage
        if isinstance(e, OSError) and e.errno in (errno.EMFILE, errno.ENFILE):
            raise  # the machine's open-file limit, not the file (the command line says so)
        raise FormatError(
            f"torch file is damaged or truncated ({short(e)})",
            path=path,
            hint="re-copy or re-dump the file",
        ) from None
    table = Table(path=path, container="torch", raw=obj)
    _flatten(obj, "", table, depth=0)
    if mapped:
        for entry in table.entries.values():
            a = entry.loader()
            if entry.is_float and a.ndim >= 1 and a.shape[-1] > 0 and a.flags.c_contiguous:
                entry.rows = file_rows(a)
    return table


def _load_legacy(path: Path) -> Any:
    """A legacy (non-zip) file through torch's safe loader, its tensors converted to numpy arrays."""
    try:
        import torch
    except ModuleNotFoundError as e:
        if e.name != "torch":
            raise
        raise MissingExtraError(
            "a legacy (non-zip) torch.save file",
            "torch",
            "torch",
            path=path,
            alternative="re-save it with torch.save (zip, the default since torch 1.6) or as safetensors: "
            "those read without torch",
        ) from None

    with warnings.catch_warnings():  # e.g. "Detected pickle protocol 3": stderr stays one line per problem
        warnings.simplefilter("ignore")
        obj = torch.load(path, map_location="cpu", weights_only=True)
    return _to_numpy(obj, torch.Tensor, depth=0)


def _to_numpy(obj: Any, tensor: type, depth: int) -> Any:
    if isinstance(obj, tensor):
        return from_torch(obj)
    if depth > 32:
        return obj
    if isinstance(obj, dict):
        for k, v in list(obj.items()):
            obj[k] = _to_numpy(v, tensor, depth + 1)  # in place: keeps the container's type and order
        return obj
    if isinstance(obj, list):
        return [_to_numpy(v, tensor, depth + 1) for v in obj]
    if isinstance(obj, tuple) and type(obj) is tuple:
        return tuple(_to_numpy(v, tensor, depth + 1) for v in obj)
    return obj


def _refusal(path: Path, container: str, e: pickle.UnpicklingError) -> FormatError:
    """The error for a pickle torch's safe loader refused: unsafe (naming what it asks for) or damaged."""
    msg = str(e)
    what, protocol = _pickle_problem(msg), 0
    if what is None:
        found, protocol = scan_pickle(path, container)
        what = next(iter(found), None)
    if what is None and protocol >= 4:
        return FormatError(
            f"saved with pickle protocol {protocol}, which hsdiff's torch.save reader does not read (nor does torch's "
            "safe loader, weights_only=True)",
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


def _identity(a: Any) -> Any:
    return a


def _flatten(obj: Any, prefix: str, table: Table, depth: int) -> None:
    if isinstance(obj, np.ndarray):
        table.entries[prefix] = Entry(prefix, tuple(obj.shape), dtype_name(obj), functools.partial(_identity, obj))
    elif isinstance(obj, dict) and depth < _MAX_NESTING:
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), table, depth + 1)
    elif (
        isinstance(obj, (list, tuple))
        and depth < _MAX_NESTING
        and obj
        and (all(isinstance(v, np.ndarray) for v in obj) or all(isinstance(v, dict) for v in obj))
    ):  # records
        for i, v in enumerate(obj):
            _flatten(v, f"{prefix}.{i}" if prefix else str(i), table, depth + 1)
    else:
        table.extras[prefix] = obj
