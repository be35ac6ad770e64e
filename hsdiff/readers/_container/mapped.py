"""Rows of a memory-mapped tensor, read a chunk at a time with bounded resident memory.

The readers map a tensor file read-only (``np.memmap``) and convert only the rows asked for to
float32; the mapped pages just read are given back at once (``MADV_DONTNEED`` on a read-only file
mapping drops them from this process only: a later read maps them again from the page cache), so the
resident memory stays that of one chunk however large the file. Reading through the mapping saves
the copy a ``read`` into a buffer would make.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from ...arrays import as_f32

__all__ = ["mapped_rows"]


def mapped_rows(a: np.ndarray) -> Callable[..., np.ndarray]:
    """``(i0, i1, c0=0, c1=None) -> float32`` rows ``[i0, i1)`` and columns ``[c0, c1)`` of a mapped
    C-contiguous array seen as ``[-1, last dimension]``."""
    return functools.partial(_rows, a.reshape(-1, a.shape[-1]))


def _rows(a: np.ndarray, i0: int, i1: int, c0: int = 0, c1: int | None = None) -> np.ndarray:
    """Rows of a memory-mapped ``[N, W]`` array as a float32 copy; the mapped pages just read are given
    back (``MADV_DONTNEED`` on a read-only file mapping drops them from this process only: a later read
    maps them again from the file), so the resident memory stays that of one chunk however large the file."""
    part = a[i0:i1]
    out = as_f32(part[:, c0:c1])
    if np.may_share_memory(out, part):  # float32 already: as_f32 gives the mapped view itself
        out = out.copy()
    if part.size:
        _release(part.ctypes.data, part.nbytes)
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


