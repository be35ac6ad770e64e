"""Scoring at scale: pairs estimated on a sample of tokens, and many pairs verified in one pass.

Both give what :func:`hsdiff.align.score` gives, computed another way: :func:`sketch` on a few dozen
ordinary tokens read as row slices (an estimate, to shortlist candidates), :func:`score_many` on every
token of many pairs at once, reading each block of each tensor once on two threads. On a large dump
whose tensors are bfloat16 or float32 the norms come from the C loop of :mod:`hsdiff.fused`, one pass
per block in the stored dtype: the same answers as scoring the pairs one by one, the metrics to
float32 accuracy (numpy's sums and the loop's differ in the last bits).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from . import fused
from .align import TrainSlot, _summarise, token_metrics
from .arrays import row_norms, row_sq_norms, unique_ints
from .model import Capture, Metrics
from .rows import (
    CHUNK_BYTES,
    THREADS,
    RowStats,
    block_rows,
    extent,
    in_order,
    raw_block_rows,
    read,
    read_at,
    read_raw,
    row_buffers,
    scratch,
)

__all__ = ["read_sample", "sketch", "score_many"]


def sketch(train: TrainSlot, x: np.ndarray | Capture, offset: int, n: int,
           cache: dict | None = None) -> Metrics:
    """Metrics on at most ``n`` ordinary tokens, in a few runs of neighbours spread over the overlap at
    ``offset``: an estimate that reads a few rows of each side (``cache``: see :func:`read_sample`)."""
    got = read_sample(train, x, offset, n, cache)
    if got is None:
        return Metrics.empty()
    rows, pick, xs, nx = got
    ys = train.sample([r + offset for r in rows])
    with np.errstate(all="ignore"):
        if fused.AVAILABLE:  # an estimate: the C loop's sums whatever the size
            diff = np.sqrt(fused.rows_sq(xs, ys)[1]).astype(np.float32)  # type: ignore[arg-type]
        else:
            (d,) = scratch(1, xs.size)
            diff = row_norms(np.subtract(xs, ys, out=d.reshape(xs.shape)))
    err, cos, ratio = token_metrics(nx, train.norms[pick + offset], diff)
    return _summarise(err, cos, ratio, np.zeros(len(rows), dtype=bool), extent(x)[1])


def read_sample(train: TrainSlot, x: np.ndarray | Capture, offset: int, n: int, cache: dict | None = None
                ) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray] | None:
    """The rows :func:`sketch` compares at ``offset`` (None: the sides do not overlap), their
    positions in the training slot less ``offset``, and those rows of ``x`` with their norms.
    ``cache`` keeps the rows read, by row number, and each sample with its norms, by its rows (the
    training slots of one sample at one offset sample the same rows); the training rows are read too
    (:meth:`TrainSlot.sample` keeps them)."""
    ti, tt = extent(x)[0], train.tokens
    i0, i1 = max(0, -offset), min(ti, tt - offset)
    if i1 <= i0:
        return None
    ok = np.zeros(0, dtype=np.int64)
    if train.ordinary is not None:  # the same rows for every slot of the sample
        ok = np.flatnonzero(train.ordinary[i0 + offset : i1 + offset])
    if ok.size == 0:
        norms = train.norms[i0 + offset : i1 + offset]
        with np.errstate(invalid="ignore"):
            ok = np.flatnonzero(~train.sinks[i0 + offset : i1 + offset] & np.isfinite(norms) & (norms > 0))
    if ok.size == 0:
        ok = np.arange(i1 - i0)
    pick = ok[_runs(ok.size, n)] + i0
    rows = [int(i) for i in pick]
    cache = {} if cache is None else cache
    key = ("sample", *rows)
    if key not in cache:
        xs = read_at(x, rows, cache)
        cache[key] = (xs, row_norms(xs))
        train.sample([r + offset for r in rows])
    return (rows, pick, *cache[key])


@functools.lru_cache(maxsize=64)
def _runs(size: int, n: int, runs: int = 8) -> np.ndarray:
    """``n`` of ``size`` positions in ``runs`` runs of neighbours spread evenly: neighbouring tokens are
    neighbouring rows, so a sample is a few reads, not ``n`` (kept, read-only: every pair of a dump asks)."""
    if size <= n:
        got = np.arange(size)
    else:
        per = -(-n // runs)
        starts = np.round(np.linspace(0, size - per, num=runs)).astype(np.int64)
        got = unique_ints(starts[:, None] + np.arange(per)[None, :])[:n]
    got.flags.writeable = False
    return got


#: Training slots compared in one walk over the rows (each holds a block in every thread's buffers).
_SLOTS_PER_WALK = 16


@dataclass
class _Walk:
    """Pairs of one offset walking the inference rows ``[lo, hi)`` together, a task of rows at a time."""

    offset: int
    ks: list[int]  # the pairs
    span: dict[int, tuple[int, int]]  # pair -> its inference rows
    slots: list[TrainSlot]
    xs: list[np.ndarray | Capture]
    slot_of: dict[int, int]  # pair -> index in slots
    x_of: dict[int, int]  # pair -> index in xs
    width: int
    fused: bool = False  # read the rows in their stored dtype, compared by the C loop (:mod:`hsdiff.fused`)

    def extent(self, keys: list[int]) -> tuple[int, int]:
        return min(self.span[k][0] for k in keys), max(self.span[k][1] for k in keys)


def _walks(pairs: Sequence[tuple[TrainSlot, np.ndarray | Capture, int]]) -> list[_Walk]:
    by_offset: dict[int, list[int]] = {}
    for k, (_, _, o) in enumerate(pairs):
        by_offset.setdefault(o, []).append(k)
    walks = []
    for o, ks in by_offset.items():
        span = {k: (max(0, -o), min(extent(pairs[k][1])[0], pairs[k][0].tokens - o)) for k in ks}
        ks = [k for k in ks if span[k][1] > span[k][0]]
        slot_ids = list(dict.fromkeys(id(pairs[k][0]) for k in ks))
        for g in range(0, len(slot_ids), _SLOTS_PER_WALK):
            group = set(slot_ids[g : g + _SLOTS_PER_WALK])
            mine = [k for k in ks if id(pairs[k][0]) in group]
            slots = list({id(pairs[k][0]): pairs[k][0] for k in mine}.values())
            xs = list({id(pairs[k][1]): pairs[k][1] for k in mine}.values())
            values = sum((span[k][1] - span[k][0]) * extent(pairs[k][1])[1] for k in mine)
            slot_at = {id(t): i for i, t in enumerate(slots)}  # by identity: a TrainSlot's == compares arrays
            x_at = {id(x): i for i, x in enumerate(xs)}
            walks.append(_Walk(o, mine, {k: span[k] for k in mine}, slots,
                               xs, {k: slot_at[id(pairs[k][0])] for k in mine}, {k: x_at[id(pairs[k][1])] for k in mine},
                               max(extent(x)[1] for x in xs), fused.worth([t.source for t in slots] + xs, values)))
    return walks


def _block(buf: np.ndarray, rows: int, width: int) -> np.ndarray:
    return buf[: rows * width].reshape(rows, width)


def _compare_rows(w: _Walk, a: int, b: int) -> tuple[dict[int, tuple[int, np.ndarray, dict[int, np.ndarray]]],
                                                       dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """Rows ``[a, b)`` of every pair of a walk, a block at a time: each block of each tensor is read and
    converted once, into this thread's buffers. Gives, per inference capture, its first row here, the norms
    of its rows and the rows whose norm is not finite or zero (by position); per pair, its per-token metrics."""
    o = w.offset
    rows = block_rows(w.width)
    x_keys = {xi: [k for k in w.ks if w.x_of[k] == xi] for xi in range(len(w.xs))}
    t_keys = {ti: [k for k in w.ks if w.slot_of[k] == ti] for ti in range(len(w.slots))}
    clip = {k: (max(a, s0), min(b, s1)) for k, (s0, s1) in w.span.items()}
    x_rows = {xi: (max(a, lo), min(b, hi)) for xi, ks in x_keys.items() for lo, hi in [w.extent(ks)]}
    t_rows = {ti: (max(a, lo), min(b, hi)) for ti, ks in t_keys.items() for lo, hi in [w.extent(ks)]}
    kind = np.float64 if w.fused else np.float32
    x_sq = {xi: np.full(max(0, hi - lo), np.nan, dtype=kind) for xi, (lo, hi) in x_rows.items()}
    d_sq = {k: np.full(max(0, hi - lo), np.nan, dtype=kind) for k, (lo, hi) in clip.items()}
    if w.fused:  # the stored rows, a buffer per file the training slots read (their rows once) and one for x
        rows = raw_block_rows(w.width)
        nx2_scratch = np.empty(rows, dtype=np.float64)
        files = list(dict.fromkeys(t.file_rows for t in w.slots))
        *ybuf, xbuf = row_buffers(len(files) + 1)
        slot_buf = [ybuf[files.index(t.file_rows)] for t in w.slots]
    else:
        *fbuf, xf, dbuf = scratch(len(w.slots) + 2, rows * w.width)
    with np.errstate(all="ignore"):
        for r0 in range(a, b, rows):
            r1 = min(r0 + rows, b)
            ys: dict[int, tuple[int, np.ndarray]] = {}
            for ti, t in enumerate(w.slots):
                lo, hi = max(r0, t_rows[ti][0]), min(r1, t_rows[ti][1])
                if hi > lo:
                    ys[ti] = (lo, read_raw(t.source, lo + o, hi + o, slot_buf[ti]) if w.fused
                              else t.rows(lo + o, hi + o, _block(fbuf[ti], hi - lo, t.width)))
            for xi, x in enumerate(w.xs):
                lo, hi = max(r0, x_rows[xi][0]), min(r1, x_rows[xi][1])
                if hi <= lo:
                    continue
                x0 = x_rows[xi][0]
                if w.fused:
                    xb = read_raw(x, lo, hi, xbuf)
                    first = x_keys[xi][0]
                    if (max(lo, clip[first][0]), min(hi, clip[first][1])) != (lo, hi):  # else its first pair's pass
                        fused.rows_sq_into(xb, None, x_sq[xi][lo - x0 : hi - x0], None)
                else:
                    xb = read(x, lo, hi, _block(xf, hi - lo, extent(x)[1]))
                    row_sq_norms(xb, out=x_sq[xi][lo - x0 : hi - x0])
                for k in x_keys[xi]:
                    p0, p1 = max(lo, clip[k][0]), min(hi, clip[k][1])
                    if p1 <= p0:
                        continue
                    y0, yb = ys[w.slot_of[k]]
                    xs, ys_ = xb[p0 - lo : p1 - lo], yb[p0 - y0 : p1 - y0]
                    at = slice(p0 - clip[k][0], p1 - clip[k][0])
                    if w.fused:
                        nx2 = x_sq[xi][p0 - x0 : p1 - x0] if k == first else nx2_scratch[: p1 - p0]
                        fused.rows_sq_into(xs, ys_, nx2, d_sq[k][at])
                    else:
                        d = _block(dbuf, p1 - p0, xb.shape[1])
                        np.subtract(xs, ys_, out=d)
                        row_sq_norms(d, out=d_sq[k][at])
        x_out = {}
        for xi, (lo, _) in x_rows.items():
            norms = np.sqrt(x_sq[xi]).astype(np.float32)
            bad = np.flatnonzero(~np.isfinite(norms) | (norms == 0))
            x_out[xi] = (lo, norms, {int(i): read(w.xs[xi], lo + int(i), lo + int(i) + 1)[0].copy() for i in bad})
        pair_out = {}
        for k, (lo, hi) in clip.items():
            if hi <= lo:
                continue
            x_lo, norms, _ = x_out[w.x_of[k]]
            t = w.slots[w.slot_of[k]]
            pair_out[k] = token_metrics(norms[lo - x_lo : hi - x_lo], t.norms[lo + o : hi + o],
                                         np.sqrt(d_sq[k]).astype(np.float32))
    return x_out, pair_out


def score_many(pairs: Sequence[tuple[TrainSlot, np.ndarray | Capture, int]],
               stats: Sequence[RowStats | None] | None = None,
               errors: list[np.ndarray | None] | None = None,
               progress: Callable[[int, int], None] | None = None) -> list[Metrics]:
    """:func:`score` of many ``(train, infer, offset)`` pairs at once, with the same results: pairs of one
    offset walk the tokens together, a task of rows at a time on :data:`THREADS` threads, so that each
    block of each inference capture and of each training slot is read and converted once and shared by
    every pair that needs it. ``errors``, when given, receives each pair's per-token errors over its
    overlap; ``progress`` is called with the tasks done so far and their number."""
    out: list[Metrics] = [Metrics.empty()] * len(pairs)
    walks = _walks(pairs)
    tasks = [(w, a, min(a + _task_rows(w), hi)) for w in walks for lo, hi in [w.extent(w.ks)]
             for a in range(lo, hi, _task_rows(w))]
    parts: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {k: [] for w in walks for k in w.ks}
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        for n, (w, (x_out, pair_out)) in enumerate(zip((t[0] for t in tasks), in_order(pool, _compare_rows, tasks))):
            if progress is not None:
                progress(n, len(tasks))
            for xi, (start, norms, odd) in x_out.items():
                if stats is None or not norms.size:
                    continue
                for st in {id(stats[k]): stats[k] for k in w.ks if w.x_of[k] == xi and stats[k] is not None}.values():
                    st.add_norms(start, norms, odd)  # type: ignore[union-attr]
            for k, r in pair_out.items():
                parts[k].append(r)
    if progress is not None:
        progress(len(tasks), len(tasks))
    for w in walks:
        for k in w.ks:
            t, x, o = pairs[k]
            i0, i1 = w.span[k]
            err, cos, ratio = (np.concatenate(p) for p in zip(*parts[k]))
            out[k] = _summarise(err, cos, ratio, t.sinks[i0 + o : i1 + o], extent(x)[1])
            if errors is not None:
                errors[k] = err
    return out


def _task_rows(w: _Walk) -> int:
    """Rows per task: a chunk's worth, fewer when that would leave a thread idle (at least four tasks
    per thread when the rows allow it)."""
    lo, hi = w.extent(w.ks)
    block = raw_block_rows(w.width) if w.fused else block_rows(w.width)
    return max(block, min(CHUNK_BYTES // (4 * max(1, w.width)), -(-(hi - lo) // (4 * THREADS))))
