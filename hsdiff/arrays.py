"""Tensors as numpy arrays: the dtypes dumps hold, float32 conversion, and the way to torch.

Everything that reads and compares hidden states works on numpy arrays, so that ``hsdiff compare``
runs without importing torch (about 2 s of a run on a small machine). numpy has no bfloat16 or
float8: such an array holds the raw bits (``uint16``/``uint8``) in a dtype tagged with the type's
name, which views, slices and memory maps keep. :func:`as_f32` is the one way to values: always
convert through it, never with ``astype``, which would read the bits as integers.

>>> import numpy as np
>>> a = np.array([[0x3FC0, 0xC000]], dtype=np.uint16).view(np_dtype("bfloat16"))
>>> dtype_name(a), as_f32(a).tolist()
('bfloat16', [[1.5, -2.0]])
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = [
    "FLOATS",
    "np_dtype",
    "dtype_name",
    "as_f32",
    "is_float",
    "row_norms",
    "row_sq_norms",
    "unique_ints",
    "quantile",
    "lower_median",
    "to_torch",
    "from_torch",
]

_TAG = "hsdiff_dtype"
_BITS = {"bfloat16": np.uint16, "float8_e4m3fn": np.uint8, "float8_e5m2": np.uint8}
_TAGGED = {name: np.dtype(bits, metadata={_TAG: name}) for name, bits in _BITS.items()}
#: dtype names (torch's spelling) of the floating-point types a dump may hold
FLOATS = ("float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")


def np_dtype(name: str) -> np.dtype:
    """The numpy dtype for a dtype name as torch and safetensors readers spell it (``bfloat16``, ``bool``, ...)."""
    return _TAGGED.get(name) or np.dtype(name)


def dtype_name(a: np.ndarray) -> str:
    """``a``'s dtype as torch spells it (``bfloat16``, ``float32``, ``int64``)."""
    dt = a.dtype
    known = _NAMES.get(id(dt))
    if known is not None and known[0] is dt:
        return known[1]
    md = dt.metadata
    name = str(md[_TAG]) if md and _TAG in md else str(dt.name)
    if len(_NAMES) < 1024:  # a dtype kept here keeps its id
        _NAMES[id(dt)] = (dt, name)
    return name


#: Names of the dtypes seen, by id (reading a dtype's metadata costs microseconds, and the C loop's
#: callers ask for every block).
_NAMES: dict[int, tuple[np.dtype, str]] = {}


def is_float(a: np.ndarray) -> bool:
    return dtype_name(a) in FLOATS


def as_f32(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``a``'s values as float32: a copy unless it already is float32, or written into ``out`` (a float32
    array of ``a``'s shape, returned) when given."""
    name = dtype_name(a)
    if name == "bfloat16":  # the top 16 bits of a float32
        bits = np.empty(a.shape, dtype=np.uint32) if out is None else out.view(np.uint32)
        np.left_shift(a.view(np.uint16), 16, out=bits, dtype=np.uint32)
        return bits.view(np.float32)
    if name in _BITS:
        return np.take(_fp8_table(name), a.view(np.uint8), out=out)
    if out is not None:
        np.copyto(out, a, casting="same_kind")
        return out
    return a if a.dtype == np.float32 and not a.dtype.metadata else a.astype(np.float32)


_FP8: dict[str, np.ndarray] = {}


def _fp8_table(name: str) -> np.ndarray:
    """The float32 value of each of the 256 bit patterns of a float8 type."""
    if name not in _FP8:
        b = np.arange(256, dtype=np.uint16)
        if name == "float8_e5m2":  # the top byte of a float16
            table = (b << 8).view(np.float16).astype(np.float32)
        else:  # e4m3fn: bias 7, no infinities, S.1111.111 is NaN
            s, e, m = b >> 7, (b >> 3) & 15, (b & 7).astype(np.float32)
            mag = np.where(e == 0, m / 8 * 2.0**-6, (1 + m / 8) * np.exp2(e.astype(np.float32) - 7))
            table = np.where(s == 1, -mag, mag).astype(np.float32)
            table[(e == 15) & (m == 7)] = np.nan
        _FP8[name] = table
    return _FP8[name]


def row_norms(x: np.ndarray) -> np.ndarray:
    """The Euclidean norm of each row of a float ``[N, W]`` array (float32 in, float32 out)."""
    return np.sqrt(row_sq_norms(x))


def row_sq_norms(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The squared Euclidean norm of each row of a float ``[N, W]`` array (of a vector: a scalar),
    accumulated in the array's precision; into ``out`` when given."""
    if x.ndim == 1:
        return np.dot(x, x)
    if _vecdot is not None:  # numpy >= 2: a BLAS dot per row, twice as fast as einsum's loop
        return _vecdot(x, x, out=out)
    return np.einsum("ij,ij->i", x, x, out=out)


_vecdot = getattr(np, "vecdot", None)


def unique_ints(v: np.ndarray) -> np.ndarray:
    """The distinct values of an integer array, ascending (``np.unique`` without its import of
    ``numpy.ma``, a twentieth of a second of every run)."""
    v = np.sort(v.ravel())
    return v[np.concatenate(([True], v[1:] != v[:-1]))] if v.size else v


def quantile(v: np.ndarray, q: float) -> float:
    """``np.quantile(v, q)`` (linear interpolation) of a float array without NaN, the same value to the
    bit, without the ``numpy.ma`` import ``np.quantile`` pays on its first call."""
    v = v.ravel()
    h = (v.size - 1) * q
    lo = int(math.floor(h))
    hi = min(lo + 1, v.size - 1)
    part = np.partition(v, [lo, hi] if hi != lo else lo)
    a, b, t, cast = part[lo], part[hi], h - lo, v.dtype.type
    d = b - a  # in the array's precision, as numpy's interpolation, and the weight cast to it
    return float(b - d * cast(1 - t)) if t >= 0.5 else float(a + d * cast(t))


def lower_median(v: np.ndarray) -> float:
    """The middle value, the lower one of an even count (as ``torch.median``); NaN when ``v`` is empty."""
    if v.size == 0:
        return float("nan")
    k = (v.size - 1) // 2
    return float(np.partition(v.ravel(), k)[k])


def to_torch(a: np.ndarray) -> Any:
    """A torch tensor with ``a``'s values and dtype (bfloat16 and float8 included), for the model-running
    parts (capture, draft): torch is imported here, never by the comparison."""
    import torch

    name = dtype_name(a)
    if name in _BITS:
        bits = np.array(a, copy=True).view(np.int16 if name == "bfloat16" else np.uint8)
        return torch.from_numpy(bits).view(getattr(torch, name))
    return torch.from_numpy(np.array(a, copy=True))


def from_torch(t: Any) -> np.ndarray:
    """A numpy array with a torch tensor's values and dtype (bfloat16 and float8 included)."""
    import torch

    t = t.detach().cpu().contiguous()
    name = str(t.dtype).replace("torch.", "")
    if name in _BITS:
        return t.view(torch.int16 if name == "bfloat16" else torch.uint8).numpy().view(_TAGGED[name])
    return t.numpy()
