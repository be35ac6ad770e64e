"""numpy ``.npy`` (memory-mapped) and ``.npz`` files, opened with ``allow_pickle=False``."""

from __future__ import annotations

import functools
import tokenize
import warnings
import zipfile
import zlib
from pathlib import Path

import numpy as np

from ...errors import FormatError, UnsafeFileError
from .table import Entry, Table, short

# what numpy raises on a damaged header (it is parsed as a Python literal) or data
_NUMPY_DAMAGE = (OSError, EOFError, SyntaxError, TypeError, KeyError, OverflowError, tokenize.TokenError)


def open_table(path: Path, container: str) -> Table:
    """Open an ``npy`` or ``npz`` file as a :class:`Table`; arrays of Python objects are refused."""
    return _open_npy(path) if container == "npy" else _open_npz(path)


def _needs_pickle(e: ValueError) -> bool:
    return "pickle" in str(e).lower() or "object" in str(e).lower()


def _open_npy(path: Path) -> Table:
    try:
        with warnings.catch_warnings():  # a damaged header is parsed as a literal: no SyntaxWarning on stderr
            warnings.simplefilter("ignore")
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as e:
        if _needs_pickle(e):
            raise UnsafeFileError(
                "refused to load: the array holds Python objects (needs pickle)",
                path=path,
                hint="save numeric arrays only",
            ) from None
        raise FormatError(f"npy file is damaged ({short(e)})", path=path, hint="re-copy the file") from None
    except _NUMPY_DAMAGE as e:
        raise FormatError(f"npy file is damaged ({short(e)})", path=path, hint="re-copy the file") from None
    table = Table(path=path, container="npy")
    table.entries[""] = Entry("", tuple(arr.shape), arr.dtype.name, functools.partial(checked, arr, path))
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
            table.entries[name] = Entry(name, tuple(arr.shape), arr.dtype.name, functools.partial(checked, arr, path))
    except ValueError as e:
        if _needs_pickle(e):
            raise UnsafeFileError(
                f"refused to load: array {name!r} holds Python objects (needs pickle)",
                path=path,
                hint="save numeric arrays only (np.savez with numeric dtypes)",
            ) from None
        raise FormatError(f"npz file is damaged ({short(e)})", path=path, hint="re-copy the file") from None
    except (
        zipfile.BadZipFile,
        zlib.error,
        NotImplementedError,
        RuntimeError,
        *_NUMPY_DAMAGE,
    ) as e:  # RuntimeError: "encrypted"
        raise FormatError(f"npz file is damaged ({short(e)})", path=path, hint="re-copy the file") from None
    return table


def checked(arr: np.ndarray, path: Path | None = None) -> np.ndarray:
    """A numeric array in native byte order; object and other non-numeric arrays are refused."""
    if arr.dtype == object:
        raise UnsafeFileError("array holds Python objects", path=path, hint="save numeric arrays only")
    if arr.dtype.kind not in "fiub" or (arr.dtype.kind == "f" and arr.dtype.itemsize > 8):
        raise FormatError(
            f"array dtype {arr.dtype} is not a number type hsdiff reads",
            path=path,
            hint="save hidden states as float16/bfloat16/float32/float64",
        )
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr
