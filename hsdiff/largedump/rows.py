"""Reading tensors a few rows at a time: bounded memory on multi-GB dumps.

A :class:`~hsdiff.model.Capture` whose file allows it (safetensors, ``torch.save`` zip) reads rows
``[i0, i1)`` alone, as float32 (into a buffer the caller reuses, when it gives one) or in their stored
dtype (``raw``); anything else is loaded once and sliced. :func:`chunks` walks rows in pieces of about
:data:`CHUNK_BYTES` with the next piece read on a second thread; :func:`norms_of` and the verification
split the rows into tasks for :data:`THREADS` threads, each with its own buffers (:func:`scratch`,
:func:`row_buffers`). :class:`RowStats` collects, from exactly the rows read, what is no hidden state
(NaN/Inf, all-zero rows) for the data-quality warnings.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..arrays import as_f32, np_dtype, row_norms, row_sq_norms
from ..model import Capture
from ..rowio import RowBuffer, files_held
from . import backend

__all__ = [
    "BLOCK_BYTES",
    "CHUNK_BYTES",
    "RAW_BLOCK_BYTES",
    "THREADS",
    "RowStats",
    "block_rows",
    "chunks",
    "extent",
    "gather_columns",
    "in_order",
    "norms_of",
    "raw_block_rows",
    "read",
    "read_at",
    "read_raw",
    "row_buffers",
    "scratch",
    "source",
]

#: Rows per chunk are chosen so that one chunk of one side holds about this many float32 bytes.
CHUNK_BYTES = 8 * 2**20


def _cpus() -> int:
    """The CPUs this process may run on (its affinity, which a container or ``taskset`` narrows), at
    most :data:`MAX_THREADS`."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity call (macOS, Windows)
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_THREADS))


#: The most threads a walk uses: each holds a block of every tensor it walks in its own buffers.
MAX_THREADS = 16
#: Threads reading and computing on rows (``pread`` and numpy release the GIL, so they share the
#: cores): one per CPU of the process. How rows are split among them changes no result: every
#: row's sums are its own.
THREADS = _cpus()
#: Bytes of float32 per block of one tensor: a block stays in cache from its conversion to its last use.
BLOCK_BYTES = 2**20
#: Bytes per block of a tensor read in its stored dtype for the C loop.
RAW_BLOCK_BYTES = 2**21


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

    def _add(
        self, n: int, start: int | None, norms: np.ndarray | None, rows_at: Callable[[np.ndarray], np.ndarray]
    ) -> np.ndarray | None:
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

    def add_at(self, x: np.ndarray, positions: Sequence[int], norms: np.ndarray | None = None) -> None:
        """Rows ``x`` read at token ``positions`` (ascending, each once; ``norms``: theirs, when known; ``x``
        in its stored dtype when ``norms`` are given)."""
        if self.tokens is None or not len(positions):
            return
        if self._seen is None:
            self._seen = np.zeros(self.tokens, dtype=bool)
            self._norms = np.zeros(self.tokens, dtype=np.float32)
        pos = np.asarray(positions, dtype=np.int64)
        new = np.flatnonzero(~self._seen[pos])
        if not new.size:
            return
        if norms is None:
            with np.errstate(all="ignore"):
                norms = row_norms(x[new])
        else:
            norms = norms[new]
        pos = pos[new]
        self._seen[pos] = True
        self.rows += int(new.size)
        assert self._norms is not None
        odd = ~np.isfinite(norms) | (norms == 0)
        if bool(odd.any()):
            self._count(as_f32(x[new[odd]]), bool((~odd).any()))
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


def read(src: np.ndarray | Capture, i0: int, i1: int, out: np.ndarray | None = None) -> np.ndarray:
    """Rows ``[i0, i1)`` as float32: of a tensor in memory, a view; of a capture, read (into ``out``, a
    float32 ``[i1 - i0, width]`` buffer, when given)."""
    return src[i0:i1] if isinstance(src, np.ndarray) else src.read_rows(i0, i1, out)


def read_raw(src: np.ndarray | Capture, i0: int, i1: int, buf: RowBuffer | None = None) -> np.ndarray:
    """Rows ``[i0, i1)`` in their stored dtype, not converted (of a tensor in memory, a view; of a
    capture, read into ``buf``: see :meth:`~hsdiff.model.Capture.read_rows`)."""
    return src[i0:i1] if isinstance(src, np.ndarray) else src.read_rows(i0, i1, buf, raw=True)


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


def read_at(src: np.ndarray | Capture, rows: list[int], cache: dict | None, raw: bool = False) -> np.ndarray:
    """Rows ``rows`` (ascending) as float32 ``[len(rows), W]``, reading runs of neighbouring rows at once
    (``cache`` keeps the rows read, by row number, for the next call). ``raw``: in their stored dtype
    (:func:`read_raw`), kept in ``cache`` by ``("raw", row)``."""
    if isinstance(src, np.ndarray):
        return src[np.asarray(rows, dtype=np.int64)]
    cache = {} if cache is None else cache
    key: Callable[[int], Any] = (lambda r: ("raw", r)) if raw else (lambda r: r)
    out = np.empty((len(rows), extent(src)[1]), dtype=np_dtype(src.dtype) if raw else np.float32)
    i = 0
    while i < len(rows):
        if key(rows[i]) in cache:
            out[i] = cache[key(rows[i])]
            i += 1
            continue
        j = i
        while j + 1 < len(rows) and rows[j + 1] == rows[j] + 1 and key(rows[j + 1]) not in cache:
            j += 1
        if raw:
            out[i : j + 1] = read_raw(src, rows[i], rows[j] + 1)
        else:
            read(src, rows[i], rows[j] + 1, out[i : j + 1])
        for q in range(i, j + 1):
            cache[key(rows[q])] = out[q]
        i = j + 1
    return out


def raw_block_rows(width: int) -> int:
    """Rows per block read in the stored dtype for the C loop (:mod:`~hsdiff.largedump.backend`): it makes one pass
    over each, so its blocks can be larger than numpy's (fewer calls) at no cost in cache (2 MB of
    bfloat16 was the quickest on the 4 GB benchmark pair here)."""
    return max(8, min(1024, RAW_BLOCK_BYTES // (2 * max(1, width))))


def block_rows(width: int) -> int:
    """Rows per block of a tensor ``width`` wide (:data:`BLOCK_BYTES` of float32)."""
    return max(8, min(256, BLOCK_BYTES // (4 * max(1, width))))


_scratch = threading.local()


def scratch(n: int, size: int) -> list[np.ndarray]:
    """``n`` float32 buffers of ``size`` values for the calling thread, kept from one call to the next
    (a walk over a multi-GB dump allocates nothing per block)."""
    got = getattr(_scratch, "bufs", None)
    if got is None or got.shape[0] < n or got.shape[1] < size:
        have = (0, 0) if got is None else got.shape
        got = _scratch.bufs = np.empty((max(n, have[0]), max(size, have[1])), dtype=np.float32)
    return [got[i, :size] for i in range(n)]


def row_buffers(n: int) -> list[RowBuffer]:
    """``n`` buffers for rows read in their stored dtype, for the calling thread (kept, like :func:`scratch`)."""
    got = _scratch.__dict__.setdefault("row_buffers", [])
    while len(got) < n:
        got.append(RowBuffer())
    return got[:n]


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _row_pool() -> ThreadPoolExecutor:
    """The :data:`THREADS` threads that read and compare rows, kept for the process: their buffers
    (:func:`scratch`, :func:`row_buffers`) are then allocated and faulted in once, not per pass. Only
    :func:`in_order` submits to it, and never from one of its own tasks."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="hsdiff-rows")
        return _pool


def _forget_pool() -> None:  # a forked child has none of its parent's threads
    global _pool
    _pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def in_order(fn: Callable[..., Any], tasks: Iterable[tuple], ahead: int = 2 * THREADS) -> Iterator[Any]:
    """``fn(*task)`` of each task on the row threads, yielded in order, with at most ``ahead`` tasks
    queued (two per thread: what waits to be used stays small). Left early (an error, a consumer that
    stops), it cancels the tasks not started and waits for the others."""
    pool = _row_pool()
    pending: deque[Future] = deque()
    try:
        for task in tasks:
            pending.append(pool.submit(fn, *task))
            if len(pending) >= ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for f in pending:
            f.cancel()
        wait(pending)


def norms_of(srcs: Sequence[np.ndarray | Capture]) -> list[tuple[np.ndarray, dict[int, np.ndarray]]]:
    """Each tensor's row norms (float32) and its rows whose norm is not finite or is zero (by position),
    the tensors read together a chunk of rows at a time on :data:`THREADS` threads: the slots of one
    concatenated tensor read one after the other read each row of the file once."""
    if not srcs:
        return []
    tokens = [extent(s)[0] for s in srcs]
    width = max(extent(s)[1] for s in srcs)
    step = max(1, CHUNK_BYTES // (4 * max(1, width)))
    tasks = [(a, a + step) for a in range(0, max(tokens), step)]

    c_loop = backend.BACKEND.worth(srcs, sum(t * extent(s)[1] for s, t in zip(srcs, tokens)))

    def task(a: int, b: int) -> list[np.ndarray]:
        rows = raw_block_rows(width) if c_loop else block_rows(width)
        (buf,) = scratch(1, rows * width)
        out = [np.zeros(max(0, min(b, t) - a), dtype=np.float64 if c_loop else np.float32) for t in tokens]
        with np.errstate(all="ignore"), files_held():
            for r0 in range(a, b, rows):
                for src, t, o in zip(srcs, tokens, out):
                    r1 = min(r0 + rows, b, t)
                    if r1 <= r0:
                        continue
                    if c_loop:  # the slots of one file find their rows in this thread's buffer
                        backend.rows_sq_into(read_raw(src, r0, r1), None, o[r0 - a : r1 - a], None)
                    else:
                        w = extent(src)[1]
                        x = read(src, r0, r1, buf[: (r1 - r0) * w].reshape(r1 - r0, w))
                        row_sq_norms(x, out=o[r0 - a : r1 - a])
        return [np.sqrt(o).astype(np.float32) for o in out]

    parts = list(in_order(task, tasks))
    got = []
    for i, src in enumerate(srcs):
        norms = np.concatenate([p[i] for p in parts]) if parts else np.zeros(0, dtype=np.float32)
        bad = np.flatnonzero(~np.isfinite(norms) | (norms == 0))
        got.append((norms, {int(r): read(src, int(r), int(r) + 1)[0].copy() for r in bad}))
    return got
