"""safetensors files: one header reader that checks everything before a byte of data is trusted.

:func:`read_safetensors_header` validates the length prefix, that the header is a JSON object
without NUL bytes, its ``__metadata__``, every entry's dtype, shape and data offsets against the
file's size, and that the entries tile the data without overlaps or gaps. Tensors are read lazily
as numpy arrays memory-mapped at their offsets, or a few rows at a time (:class:`_Rows`, read into a
buffer and converted to float32), so that a multi-GB file is never held in memory. torch is never
imported.
"""

from __future__ import annotations

import functools
import json
import math
import struct
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

from ...arrays import FLOATS, np_dtype
from ...errors import FormatError
from .filerows import file_rows, identity
from .sniff import MAX_SAFETENSORS_HEADER
from .table import Entry, Table, short

#: safetensors dtype names -> the names hsdiff (and torch) use
DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
}
_ITEMSIZE = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}


def read_safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file, validated; raises :class:`FormatError` naming the damage.

    The result is the header as written: tensor names mapped to ``{"dtype", "shape", "data_offsets"}``
    and, when present, ``"__metadata__"`` (a dict). No tensor data is read.

    >>> read_safetensors_header(Path("model.safetensors"))["fc.weight"]["shape"]     # doctest: +SKIP
    [576, 1728]
    """
    return _header(path)[0]


def _header(path: Path) -> tuple[dict[str, Any], int]:
    """The validated header and its length in bytes (the data start 8 bytes after it)."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > size - 8 or n > MAX_SAFETENSORS_HEADER:
                raise FormatError(
                    f"safetensors header claims {n} bytes but the file has {size}",
                    path=path,
                    hint="the file is truncated or not safetensors; re-copy it",
                )
            raw = _read_header(f, n, path)
            header = json.loads(raw)
    except (struct.error, json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise FormatError(
            f"safetensors header is unreadable ({short(e)})", path=path, hint="re-copy the file"
        ) from None
    if not isinstance(header, dict):
        raise FormatError("safetensors header is not a JSON object", path=path, hint="re-copy the file")
    metadata = header.get("__metadata__") or {}
    if not isinstance(metadata, dict):
        raise FormatError("safetensors __metadata__ is not a JSON object", path=path, hint="re-copy the file")
    data_len = size - 8 - n
    spans: list[tuple[int, int, str]] = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if isinstance(info, dict) and isinstance(info.get("dtype"), str) and info["dtype"] not in DTYPES:
            raise FormatError(
                f"safetensors entry {name!r} has dtype {info['dtype'][:20]!r}, which hsdiff does not read",
                path=path,
                hint=f"save hidden states as one of {', '.join(DTYPES)}",
            )
        try:
            dtype = DTYPES[info["dtype"]]
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
    spans.sort()
    for (_, prev_stop, prev), (start, _, name) in zip(spans, spans[1:]):
        if start < prev_stop:
            raise FormatError(
                f"safetensors entries {prev!r} and {name!r} overlap (bytes {start}..{prev_stop})",
                path=path,
                hint="the header is damaged; re-copy the file",
            )
    end = 0
    for start, stop, name in spans:
        if start != end:
            raise FormatError(
                f"safetensors entry {name!r} leaves a gap before it (bytes {end}..{start})",
                path=path,
                hint="the header is damaged; re-copy the file",
            )
        end = stop
    return header, n


def open_table(path: Path, container: str = "safetensors") -> Table:
    """Open a safetensors file as a :class:`Table` whose entries load lazily."""
    ident = identity(path)  # before the header: a file rewritten after this is refused when its rows are read
    header, n = _header(path)
    metadata = header.get("__metadata__") or {}
    table = Table(path=path, container="safetensors", metadata={str(k): str(v) for k, v in metadata.items()})
    for name, info in header.items():
        if name != "__metadata__":
            shape = tuple(int(d) for d in info["shape"])
            dtype = DTYPES[info["dtype"]]
            start = 8 + n + int(info["data_offsets"][0])
            rows = None
            if dtype in FLOATS and shape and shape[-1] > 0 and 0 not in shape:
                rows = _Rows(path, start, shape, dtype, name, ident)
            table.entries[name] = Entry(
                name, shape, dtype, functools.partial(_get, path, start, shape, dtype, name), rows
            )
    return table


class _Rows:
    """Rows ``[i0, i1)`` of a tensor seen as ``[-1, width]``, as float32 (into ``out`` when given): only
    their bytes are read (:mod:`.filerows`, set up at the first call and kept with the entry)."""

    def __init__(
        self, path: Path, start: int, shape: tuple[int, ...], dtype: str, key: str, ident: tuple[int, ...] | None = None
    ):
        self.args, self.ident = (path, start, shape, dtype, key), ident
        self.read: Callable[..., np.ndarray] | None = None

    def __call__(
        self, i0: int, i1: int, c0: int = 0, c1: int | None = None, out: np.ndarray | None = None, raw: bool = False
    ) -> np.ndarray:
        if self.read is None:
            self.read = file_rows(_get(*self.args), self.ident)
        return self.read(i0, i1, c0, c1, out, raw)


def _read_header(f: IO[bytes], n: int, path: Path) -> bytes:
    """The ``n`` header bytes, read in pieces so that a damaged (zero-filled) header stops early."""
    parts, left = [], n
    while left:
        piece = f.read(min(left, 1 << 20))
        if not piece:
            break
        if b"\x00" in piece:
            raise FormatError(
                "safetensors header holds NUL bytes: it is not a header",
                path=path,
                hint="the file is damaged or not safetensors; re-copy it",
            )
        parts.append(piece)
        left -= len(piece)
    return b"".join(parts)


def _get(path: Path, start: int, shape: tuple[int, ...], dtype: str, key: str) -> np.ndarray:
    """The tensor as a read-only array memory-mapped from the file (nothing read until used)."""
    try:
        if not math.prod(shape):
            return np.zeros(shape, dtype=np_dtype(dtype))
        return np.memmap(path, dtype=np_dtype(dtype), mode="r", offset=start, shape=shape or (1,)).reshape(shape)
    except (OSError, ValueError) as e:
        raise FormatError(f"cannot read tensor {key!r} ({short(e)})", path=path, hint="re-copy the file") from None
