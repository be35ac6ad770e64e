"""Reading tensors a few rows at a time: bounded memory on multi-GB dumps.

A :class:`~hsdiff.model.Capture` whose file allows it (safetensors, memory-mapped ``torch.save``)
reads rows ``[i0, i1)`` alone, as float32; anything else is loaded once and sliced. :func:`chunks`
walks rows in pieces of about :data:`CHUNK_BYTES` with the next piece read on a second thread, so
that reading and computing overlap on two cores. :class:`RowStats` collects, from exactly the rows
read, what is no hidden state (NaN/Inf, all-zero rows) for the data-quality warnings.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from .arrays import as_f32, row_norms
from .model import Capture

__all__ = ["CHUNK_BYTES", "RowStats", "chunks", "extent", "gather_columns", "give_back_freed_memory", "read", "read_at",
           "source"]

#: Rows per chunk are chosen so that one chunk of one side holds about this many float32 bytes.
CHUNK_BYTES = 8 * 2**20


@dataclass
class RowStats:
    """What the rows read of one tensor hold: NaN/Inf values, all-zero rows, and each row's norm (the
    norm profile the pictures draw). With ``tokens`` given, each row counts once however often it is
    read, and :meth:`norms_read` gives the norms of the rows read with their positions."""

    tokens: int | None = None
    rows: int = 0
    nonfinite: int = 0
    zero_rows: int = 0
    nonzero: bool = False
    _seen: np.ndarray | None = None
    _norms: np.ndarray | None = None

    def add(self, x: np.ndarray, start: int | None = None, norms: np.ndarray | None = None) -> np.ndarray | None:
        """Count rows ``x`` (read at token ``start``; ``norms``: their norms, when already computed); the
        norms of the rows counted (None: none new)."""
        if norms is None and (self.tokens is None or start is None):
            with np.errstate(all="ignore"):
                norms = row_norms(x)
        return self._add(len(x), start, norms, lambda idx: x[idx])

    def add_norms(self, start: int, norms: np.ndarray, odd: dict[int, np.ndarray]) -> None:
        """Count rows ``[start, start + len(norms))`` read elsewhere, given their norms and, by position
        from ``start``, the rows whose norm is not finite or is zero (what the counts need of them)."""
        self._add(len(norms), start, norms, lambda idx: np.stack([odd[int(i)] for i in idx]))

    def _add(self, n: int, start: int | None, norms: np.ndarray | None,
             rows_at: Callable[[np.ndarray], np.ndarray]) -> np.ndarray | None:
        sel = None  # which of the n rows are new, when some were counted before
        if self.tokens is not None and start is not None:
            if self._seen is None:
                self._seen = np.zeros(self.tokens, dtype=bool)
                self._norms = np.zeros(self.tokens, dtype=np.float32)
            new = ~self._seen[start : start + n]
            if not bool(new.any()):
                return None
            self._seen[start : start + n] = True
            if not bool(new.all()):
                sel = np.flatnonzero(new)
        if norms is None:
            with np.errstate(all="ignore"):
                norms = row_norms(rows_at(np.arange(n) if sel is None else sel))
        elif sel is not None:
            norms = norms[sel]
        self.rows += len(norms)
        if not len(norms):
            return np.zeros(0, dtype=np.float32)
        odd = ~np.isfinite(norms) | (norms == 0)
        if bool(odd.any()):
            where = np.flatnonzero(odd)
            self._count(rows_at(where if sel is None else sel[where]), bool((~odd).any()))
        else:
            self.nonzero = True
        if self._norms is not None and start is not None:
            self._norms[start + (np.arange(len(norms)) if sel is None else sel)] = norms
        return norms

    def _count(self, rows: np.ndarray, others_nonzero: bool) -> None:
        """Count NaN/Inf values and all-zero rows among ``rows`` (the rows whose norm is not finite or
        is zero: a row's norm is finite and non-zero for nearly every row, so only these are looked at)."""
        self.nonfinite += int((~np.isfinite(rows)).sum())
        amax = np.abs(rows).max(axis=1)
        self.zero_rows += int((amax == 0).sum())
        self.nonzero = self.nonzero or bool((amax != 0).any()) or others_nonzero

    def add_at(self, x: np.ndarray, positions: list[int]) -> None:
        """Rows ``x`` read at token ``positions`` (ascending, each once)."""
        if self.tokens is None or not positions:
            return
        if self._seen is None:
            self._seen = np.zeros(self.tokens, dtype=bool)
            self._norms = np.zeros(self.tokens, dtype=np.float32)
        pos = np.asarray(positions, dtype=np.int64)
        new = ~self._seen[pos]
        if not bool(new.any()):
            return
        x, pos = x[new], pos[new]
        self._seen[pos] = True
        self.rows += int(x.shape[0])
        assert self._norms is not None
        with np.errstate(all="ignore"):
            norms = row_norms(x)
        odd = ~np.isfinite(norms) | (norms == 0)
        if bool(odd.any()):
            self._count(x[odd], bool((~odd).any()))
        else:
            self.nonzero = True
        self._norms[pos] = norms

    def norms_read(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Norms of the rows read and their token positions (ascending); None if nothing was read."""
        if self._seen is None or self._norms is None or not bool(self._seen.any()):
            return None
        pos = np.flatnonzero(self._seen)
        return self._norms[pos], pos


def source(cap: Capture) -> np.ndarray | Capture:
    """What rows are read from: the capture itself when its file gives rows alone, else its tensor loaded once."""
    return cap if cap.reads_rows else as_f32(cap.array())


def extent(src: np.ndarray | Capture) -> tuple[int, int]:
    """Tokens and width of a tensor or a capture."""
    if isinstance(src, np.ndarray):
        return int(src.shape[0]), int(src.shape[1])
    shape = src.shape or ()
    return int(src.tokens or 0), int(shape[-1]) if shape else 0


def read(src: np.ndarray | Capture, i0: int, i1: int) -> np.ndarray:
    """Rows ``[i0, i1)`` as float32."""
    return src[i0:i1] if isinstance(src, np.ndarray) else src.read_rows(i0, i1)


def chunks(src: np.ndarray | Capture, i0: int, i1: int, step: int | None = None) -> Iterator[np.ndarray]:
    """Rows ``[i0, i1)`` in chunks of about :data:`CHUNK_BYTES`; from a file, the next chunk is read on
    a second thread while the caller works on the current one."""
    width = max(1, extent(src)[1])
    step = step or max(1, CHUNK_BYTES // (4 * width))
    starts = list(range(i0, i1, step))
    if isinstance(src, np.ndarray) or len(starts) < 2:
        for a in starts:
            yield read(src, a, min(a + step, i1))
        return
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(read, src, starts[0], min(starts[0] + step, i1))
        for k in range(len(starts)):
            x = pending.result()
            if k + 1 < len(starts):
                a = starts[k + 1]
                pending = pool.submit(read, src, a, min(a + step, i1))
            yield x


def gather_columns(src: np.ndarray | Capture, cols: np.ndarray, tokens: int) -> np.ndarray:
    if isinstance(src, np.ndarray):
        return src[:, cols]
    parts = [x[:, cols] for x in chunks(src, 0, tokens)]
    return np.concatenate(parts) if parts else np.zeros((0, len(cols)), dtype=np.float32)


def read_at(src: np.ndarray | Capture, rows: list[int], cache: dict[int, np.ndarray] | None) -> np.ndarray:
    """Rows ``rows`` (ascending) as float32 ``[len(rows), W]``, reading runs of neighbouring rows at once."""
    if isinstance(src, np.ndarray):
        return src[np.asarray(rows, dtype=np.int64)]
    cache = {} if cache is None else cache
    need = [r for r in rows if r not in cache]
    k = 0
    while k < len(need):
        j = k
        while j + 1 < len(need) and need[j + 1] == need[j] + 1:
            j += 1
        block = read(src, need[k], need[j] + 1)
        for r in range(need[k], need[j] + 1):
            cache[r] = block[r - need[k]]
        k = j + 1
    return np.stack([cache[r] for r in rows]) if rows else np.zeros((0, extent(src)[1]), dtype=np.float32)


def give_back_freed_memory() -> None:
    """Return the C allocator's free memory to the system (glibc ``malloc_trim``; nothing elsewhere).

    Chunks read on one thread and freed on another leave glibc's heaps fragmented and growing: a 4 GB
    dump walked chunk by chunk would keep over a GB it no longer uses. Called once per window of rows
    compared, which bounds what the heaps hold by one window's buffers at the cost of page faults."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        lib = ctypes.CDLL(None)
        lib.malloc_trim.argtypes = [ctypes.c_size_t]
        return lib
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        return None


_LIBC = _glibc()
