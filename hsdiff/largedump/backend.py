"""The arithmetic backend of the large-dump walk: per-row squared norms of ``x`` and of ``x - y``.

The comparison's cost on a multi-GB dump is this arithmetic on every token of the verified pairs. In
numpy it takes a pass per step (bfloat16 to float32 into a buffer, ``|x|^2``, ``x - y`` into another,
``|x - y|^2``); the C loop (``hsdiff/_fused.c``, reached through ctypes, which releases the GIL)
reads each element once: on the 4 GB benchmark pair it verified in about a third of the numpy
path's time (``benchmarks/results/scale.json``). It handles float32 and bfloat16 rows, accumulating
in float32 per lane and summing the lanes in double; anything else takes the numpy path, whose sums
differ from the loop's in the last bits only.

The backend is chosen once, at import (:data:`BACKEND`): :class:`CLoop` where the loop was built and
is fast on this machine and ``HSDIFF_NO_C`` is not ``1``, else :class:`Numpy`. It decides how rows
are summed, never what is compared: the strategy of a comparison (every token, or a sample then a
shortlist) and its data-quality warnings are the same with either.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
from typing import Any

import numpy as np

from ..arrays import as_f32, dtype_name, row_sq_norms

__all__ = [
    "BACKEND",
    "DTYPES",
    "WORTH",
    "Backend",
    "CLoop",
    "Numpy",
    "choose",
    "rows_sq",
    "rows_sq_into",
    "rows_sq_many",
]

_DTYPES = {"float32": 0, "bfloat16": 1}
#: The stored dtypes the C loop reads.
DTYPES = frozenset(_DTYPES)


def _load() -> Any:
    if os.environ.get("HSDIFF_NO_C") == "1":  # the numpy path, on request (tests compare the two)
        return None
    spec = importlib.util.find_spec("hsdiff._fused")
    if spec is None or not spec.origin:
        return None
    try:
        lib = ctypes.CDLL(spec.origin)
    except OSError:
        return None
    lib.hs_rows.restype = None
    lib.hs_rows.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_long,
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_long,
        ctypes.c_long,
        ctypes.c_long,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_int,
    ]
    lib.hs_rows_many.restype = None
    lib.hs_rows_many.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_long,
        ctypes.c_long,
        ctypes.c_long,
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_int,
    ]
    lib.hs_fast.restype = ctypes.c_int
    return lib


#: Values (all tensors together) from which the training norms are summed by the C loop. Below it numpy
#: sums them, so that every small dump (each fixture and golden report) gives the same numbers
#: whether the loop was built or not; the loop's sums differ from numpy's in the last bits.
WORTH = 2**24


class Backend:
    """How rows are summed: which tensors are read in their stored dtype for a loop that converts as it
    sums. The numpy backend reads none that way (every row is converted to float32 first)."""

    name = "numpy"
    #: Whether rows are read in their stored dtype for the loop (else as float32).
    loop = False

    def reads(self, srcs: Any) -> bool:
        """Whether the loop reads these tensors or captures in their stored dtype."""
        return False

    def worth(self, srcs: Any, values: int) -> bool:
        """Whether to sum the squared norms of these tensors or captures (``values`` in all) by the loop."""
        return False

    def handles(self, *arrays: np.ndarray) -> bool:
        """Whether the loop takes these ``[N, W]`` arrays."""
        return False


class Numpy(Backend):
    """Every row converted to float32 and summed by numpy."""


class CLoop(Backend):
    """The C loop: float32 and bfloat16 rows summed as stored, in one pass."""

    name = "c"
    loop = True

    def reads(self, srcs: Any) -> bool:
        return {dtype_name(s) if isinstance(s, np.ndarray) else s.dtype for s in srcs} <= DTYPES

    def worth(self, srcs: Any, values: int) -> bool:
        return values >= WORTH and self.reads(srcs)

    def handles(self, *arrays: np.ndarray) -> bool:
        """float32 or bfloat16 rows, each contiguous."""
        return all(
            a.ndim == 2
            and dtype_name(a) in _DTYPES
            and (a.shape[1] < 2 or a.strides[1] == a.itemsize)
            and a.strides[0] % a.itemsize == 0
            for a in arrays
        )


_LIB = _load()


def choose() -> Backend:
    """The backend of this process: the C loop when it was built and is fast here, else numpy."""
    return CLoop() if _LIB is not None and bool(_LIB.hs_fast()) else Numpy()


#: The backend every part of the walk asks, chosen once.
BACKEND: Backend = choose()


def rows_sq(x: np.ndarray, y: np.ndarray | None = None, portable: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
    """The squared norm of each row of ``x`` (float32 or bfloat16 ``[N, W]``) and, with ``y`` (the same
    shape), of each row of ``x - y``, as float64 ``[N]`` arrays. By the C loop when :func:`handles`
    them (``portable``: its loop without AVX2, which gives the same bits), else in numpy."""
    n = x.shape[0]
    nx2 = np.empty(n, dtype=np.float64)
    d2 = None if y is None else np.empty(n, dtype=np.float64)
    if y is not None and x.shape != y.shape:
        raise ValueError(f"rows of shape {x.shape} and {y.shape}")
    if n and (BACKEND.handles(x) if y is None else BACKEND.handles(x, y)):
        rows_sq_into(x, y, nx2, d2, portable)
        return nx2, d2
    xf = as_f32(x)
    nx2[:] = row_sq_norms(xf) if n else 0
    if y is not None and d2 is not None:
        with np.errstate(all="ignore"):
            d2[:] = row_sq_norms(xf - as_f32(y)) if n else 0
    return nx2, d2


def rows_sq_into(
    x: np.ndarray, y: np.ndarray | None, nx2: np.ndarray, d2: np.ndarray | None, portable: bool = False
) -> None:
    """:func:`rows_sq` by the C loop into float64 ``nx2`` (and ``d2``), for arrays :func:`handles` takes
    (not checked: the caller asked :meth:`Backend.handles` once)."""
    _LIB.hs_rows(
        x.ctypes.data,
        _DTYPES[dtype_name(x)],
        _stride(x),
        None if y is None else y.ctypes.data,
        0 if y is None else _DTYPES[dtype_name(y)],
        0 if y is None else _stride(y),
        x.shape[0],
        x.shape[1],
        nx2.ctypes.data,
        None if d2 is None else d2.ctypes.data,
        int(portable),
    )


def rows_sq_many(
    x: np.ndarray, ys: list[np.ndarray], nx2: np.ndarray, d2s: list[np.ndarray], portable: bool = False
) -> None:
    """:func:`rows_sq_into` of ``x`` against each of ``ys`` (arrays of its shape) into ``d2s``, reading
    each row of ``x`` once for several of them: the same bits as one call per pair."""
    k = len(ys)
    _LIB.hs_rows_many(
        x.ctypes.data,
        _DTYPES[dtype_name(x)],
        _stride(x),
        x.shape[0],
        x.shape[1],
        k,
        (ctypes.c_void_p * k)(*[y.ctypes.data for y in ys]),
        (ctypes.c_int * k)(*[_DTYPES[dtype_name(y)] for y in ys]),
        (ctypes.c_long * k)(*[_stride(y) for y in ys]),
        nx2.ctypes.data,
        (ctypes.c_void_p * k)(*[d.ctypes.data for d in d2s]),
        int(portable),
    )


def _stride(a: np.ndarray) -> int:
    return int(a.strides[0] // a.itemsize) if a.shape[0] > 1 else int(a.shape[1])
