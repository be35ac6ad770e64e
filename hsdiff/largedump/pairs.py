"""Pair scoring at scale: pairs estimated on a sample of tokens, and many pairs verified in one pass.

Both give what :func:`hsdiff.align.score` gives, computed another way: :func:`sketch` on a few dozen
ordinary tokens read as row slices (an estimate, to shortlist candidates), :func:`score_many` on every
token of many pairs at once, reading each block of each tensor once on the row threads. With the C
loop backend (:mod:`~hsdiff.largedump.backend`) the norms of a large dump whose tensors are bfloat16
or float32 come from one pass per block in the stored dtype: the same answers as scoring the pairs
one by one, the metrics to float32 accuracy (numpy's sums and the loop's differ in the last bits).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..arrays import as_f32, row_norms, row_sq_norms, unique_ints
from ..model import Capture, Metrics
from ..rowio import files_held
from . import backend
from .metrics import summarise, token_metrics
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
from .trainslot import TrainSlot

__all__ = ["NormsRead", "PairKey", "SampleCache", "read_sample", "sketch", "sketch_all", "score_many"]


class PairKey(NamedTuple):
    """A pair scored: a training capture against an inference capture at a token offset (captures are
    keys by identity)."""

    train: Capture
    infer: Capture
    offset: int


class NormsRead(NamedTuple):
    """The per-token norms of the rows read of a capture, their token positions (ascending), and its
    token count (more than the positions when only a sample was read)."""

    norms: np.ndarray
    positions: np.ndarray
    tokens: int


class SampleKey(NamedTuple):
    """A sample of a capture's rows: which rows, and whether read in their stored dtype."""

    raw: bool
    rows: tuple[int, ...]


@dataclass(eq=False)
class SampleCache:
    """What the sketch read of one capture: its rows by row number (shared by the samples of every
    offset), and each sample of rows with their norms (the training slots of one sample at one offset
    sample the same rows)."""

    rows: dict = field(default_factory=dict)
    samples: dict[SampleKey, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def sampled(self) -> Iterator[tuple[tuple[int, ...], np.ndarray, np.ndarray]]:
        """Each sample: its row numbers, the rows as read, and their float32 norms."""
        for key, (xs, norms) in self.samples.items():
            yield key.rows, xs, norms


def sketch(train: TrainSlot, x: np.ndarray | Capture, offset: int, n: int, cache: SampleCache | None = None) -> Metrics:
    """Metrics on at most ``n`` ordinary tokens, in a few runs of neighbours spread over the overlap at
    ``offset``: an estimate that reads a few rows of each side (``cache``: see :func:`read_sample`).
    The norms of ``x - y`` come from the backend's loop when it has one (whatever the size: an
    estimate), those of ``x`` from numpy."""
    return sketch_all([train], x, offset, n, cache)[0]


def sketch_all(
    trains: Sequence[TrainSlot], x: np.ndarray | Capture, offset: int, n: int, cache: SampleCache | None = None
) -> list[Metrics]:
    """:func:`sketch` of each training slot against ``x``, the same results: the slots that sample the
    same rows (the slots of one sample) are compared with them in one pass over them."""
    out = [Metrics.empty()] * len(trains)
    got: dict[int, tuple[list[int], np.ndarray, np.ndarray, np.ndarray]] = {}
    same: dict[tuple[tuple[int, ...], bool], list[int]] = {}  # slots by the rows they sample
    for i, t in enumerate(trains):
        g = read_sample(t, x, offset, n, cache)
        if g is not None:
            got[i] = g
            same.setdefault((tuple(g[0]), _raw_sample(t, x)), []).append(i)
    for (rows, raw), idx in same.items():
        _, pick, xs, nx = got[idx[0]]
        ys = [trains[i].sample([r + offset for r in rows], raw) for i in idx]
        with np.errstate(all="ignore"):
            if backend.BACKEND.handles(xs, *ys):  # bf16 rows as read, or float32: the same sums
                d2 = [np.empty(len(rows)) for _ in idx]
                backend.rows_sq_many(xs, ys, np.empty(len(rows)), d2)
                diff = np.sqrt(np.stack(d2)).astype(np.float32)
            else:
                (d,) = scratch(1, xs.size)
                diff = np.stack([row_norms(np.subtract(xs, y, out=d.reshape(xs.shape))) for y in ys])
        err, cos, ratio = token_metrics(nx, np.stack([trains[i].norms[pick + offset] for i in idx]), diff)
        sinks = np.zeros(len(rows), dtype=bool)
        for k, i in enumerate(idx):
            out[i] = summarise(err[k], cos[k], ratio[k], sinks, extent(x)[1])
    return out


def _raw_sample(train: TrainSlot, x: np.ndarray | Capture) -> bool:
    """Whether the sample is read in its stored dtype, for the backend's loop to convert as it sums
    (bfloat16 to float32 is exact: the same sums as on converted rows, the same rows sampled)."""
    return backend.BACKEND.reads([train.source, x])


def read_sample(
    train: TrainSlot, x: np.ndarray | Capture, offset: int, n: int, cache: SampleCache | None = None
) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray] | None:
    """The rows :func:`sketch` compares at ``offset`` (None: the sides do not overlap), their
    positions in the training slot less ``offset``, and those rows of ``x`` (in their stored dtype with
    the loop) with their norms, kept in ``cache``; the training rows are read too
    (:meth:`TrainSlot.sample` keeps them)."""
    ti, tt = extent(x)[0], train.tokens
    i0, i1 = max(0, -offset), min(ti, tt - offset)
    if i1 <= i0:
        return None
    pick, rows = train.kept(("pick", i0, i1, offset, n), lambda: _pick(train, i0, i1, offset, n))
    cache = SampleCache() if cache is None else cache
    raw = _raw_sample(train, x)
    key = SampleKey(raw, tuple(rows))
    if key not in cache.samples:
        xs = read_at(x, rows, cache.rows, raw)
        with np.errstate(all="ignore"):
            cache.samples[key] = (xs, row_norms(as_f32(xs)))
        train.sample([r + offset for r in rows], raw)
    return (rows, pick, *cache.samples[key])


def _pick(train: TrainSlot, i0: int, i1: int, offset: int, n: int) -> tuple[np.ndarray, list[int]]:
    """The inference rows :func:`read_sample` compares, as an array and a list (the same for every
    capture of the same extent: kept by the training slot)."""
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
    return pick, [int(i) for i in pick]


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
    """Pairs of one offset walking the inference rows ``[lo, hi)`` together, a task of rows at a time;
    the tasks fill the walk's squared norms, each its own rows of them."""

    offset: int
    ks: list[int]  # the pairs
    span: dict[int, tuple[int, int]]  # pair -> its inference rows
    slots: list[TrainSlot]
    xs: list[np.ndarray | Capture]
    slot_of: dict[int, int]  # pair -> index in slots
    x_of: dict[int, int]  # pair -> index in xs
    width: int
    loop: bool = False  # read the rows in their stored dtype, compared by the backend's loop
    x_keys: dict[int, list[int]] = field(default_factory=dict)  # capture -> its pairs
    x_rows: dict[int, tuple[int, int]] = field(default_factory=dict)  # capture -> the rows its pairs need
    t_rows: dict[int, tuple[int, int]] = field(default_factory=dict)  # training slot -> the same
    x_sq: dict[int, np.ndarray] = field(default_factory=dict)  # capture -> |x|^2 of its rows
    d_sq: dict[int, np.ndarray] = field(default_factory=dict)  # pair -> |x - y|^2 over its span

    def __post_init__(self) -> None:
        self.x_keys = {xi: [k for k in self.ks if self.x_of[k] == xi] for xi in range(len(self.xs))}
        self.x_rows = {xi: self.extent(ks) for xi, ks in self.x_keys.items()}
        self.t_rows = {ti: self.extent([k for k in self.ks if self.slot_of[k] == ti]) for ti in range(len(self.slots))}
        kind = np.float64 if self.loop else np.float32
        self.x_sq = {xi: np.full(hi - lo, np.nan, dtype=kind) for xi, (lo, hi) in self.x_rows.items()}
        self.d_sq = {k: np.full(hi - lo, np.nan, dtype=kind) for k, (lo, hi) in self.span.items()}

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
        all_slots = list(dict.fromkeys(pairs[k][0] for k in ks))  # by identity (TrainSlot: eq=False)
        for g in range(0, len(all_slots), _SLOTS_PER_WALK):
            slots = all_slots[g : g + _SLOTS_PER_WALK]
            slot_at = {t: i for i, t in enumerate(slots)}
            mine = [k for k in ks if pairs[k][0] in slot_at]
            x_at: dict[int, int] = {}  # by id: an inference side may be an array, which hashes by nothing
            xs: list[np.ndarray | Capture] = []
            for k in mine:
                if id(pairs[k][1]) not in x_at:
                    x_at[id(pairs[k][1])] = len(xs)
                    xs.append(pairs[k][1])
            values = sum((span[k][1] - span[k][0]) * extent(pairs[k][1])[1] for k in mine)
            walks.append(
                _Walk(
                    o,
                    mine,
                    {k: span[k] for k in mine},
                    slots,
                    xs,
                    {k: slot_at[pairs[k][0]] for k in mine},
                    {k: x_at[id(pairs[k][1])] for k in mine},
                    max(extent(x)[1] for x in xs),
                    backend.BACKEND.worth([t.source for t in slots] + xs, values),
                )
            )
    return walks


def _block(buf: np.ndarray, rows: int, width: int) -> np.ndarray:
    return buf[: rows * width].reshape(rows, width)


def _compare_rows(w: _Walk, a: int, b: int) -> None:
    """Rows ``[a, b)`` of every pair of a walk, a block at a time: each block of each tensor is read and
    converted once, into this thread's buffers, and the squared norms of ``x`` and ``x - y`` of those
    rows go into the walk's arrays."""
    o = w.offset
    rows = block_rows(w.width)
    if w.loop:  # the stored rows, a buffer per file the training slots read (their rows once) and one for x
        rows = raw_block_rows(w.width)
        nx2_scratch = np.empty(rows, dtype=np.float64)
        files = list(dict.fromkeys(t.file_rows for t in w.slots))
        *ybuf, xbuf = row_buffers(len(files) + 1)
        slot_buf = [ybuf[files.index(t.file_rows)] for t in w.slots]
    else:
        *fbuf, xf, dbuf = scratch(len(w.slots) + 2, rows * w.width)
    with np.errstate(all="ignore"), files_held():
        for r0 in range(a, b, rows):
            r1 = min(r0 + rows, b)
            ys: dict[int, tuple[int, np.ndarray]] = {}
            for ti, t in enumerate(w.slots):
                lo, hi = max(r0, w.t_rows[ti][0]), min(r1, w.t_rows[ti][1])
                if hi > lo:
                    ys[ti] = (
                        lo,
                        read_raw(t.source, lo + o, hi + o, slot_buf[ti])
                        if w.loop
                        else t.rows(lo + o, hi + o, _block(fbuf[ti], hi - lo, t.width)),
                    )
            for xi, x in enumerate(w.xs):
                x0, x1 = w.x_rows[xi]
                lo, hi = max(r0, x0), min(r1, x1)
                if hi <= lo:
                    continue
                x_sq = w.x_sq[xi][lo - x0 : hi - x0]
                # its pairs over every row of the block, and over some
                whole: list[tuple[int, int, int]] = []
                part: list[tuple[int, int, int]] = []
                for k in w.x_keys[xi]:
                    s0, s1 = w.span[k]
                    p0, p1 = max(lo, s0), min(hi, s1)
                    if p1 > p0:
                        (whole if (p0, p1) == (lo, hi) else part).append((k, p0, p1))
                if w.loop:
                    xb = read_raw(x, lo, hi, xbuf)
                    if whole:  # x read once for all of them, its norms too
                        backend.rows_sq_many(
                            xb,
                            [_y_rows(ys[w.slot_of[k]], p0, p1) for k, p0, p1 in whole],
                            x_sq,
                            [w.d_sq[k][p0 - w.span[k][0] : p1 - w.span[k][0]] for k, p0, p1 in whole],
                        )
                    else:
                        backend.rows_sq_into(xb, None, x_sq, None)
                    for k, p0, p1 in part:
                        backend.rows_sq_into(
                            xb[p0 - lo : p1 - lo],
                            _y_rows(ys[w.slot_of[k]], p0, p1),
                            nx2_scratch[: p1 - p0],
                            w.d_sq[k][p0 - w.span[k][0] : p1 - w.span[k][0]],
                        )
                    continue
                xb = read(x, lo, hi, _block(xf, hi - lo, extent(x)[1]))
                row_sq_norms(xb, out=x_sq)
                for k, p0, p1 in whole + part:
                    d = _block(dbuf, p1 - p0, xb.shape[1])
                    np.subtract(xb[p0 - lo : p1 - lo], _y_rows(ys[w.slot_of[k]], p0, p1), out=d)
                    row_sq_norms(d, out=w.d_sq[k][p0 - w.span[k][0] : p1 - w.span[k][0]])


def _y_rows(got: tuple[int, np.ndarray], p0: int, p1: int) -> np.ndarray:
    """Inference rows ``[p0, p1)`` of a training block read from inference row ``got[0]`` on."""
    return got[1][p0 - got[0] : p1 - got[0]]


def score_many(
    pairs: Sequence[tuple[TrainSlot, np.ndarray | Capture, int]],
    stats: Sequence[RowStats | None] | None = None,
    errors: list[np.ndarray | None] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[Metrics]:
    """:func:`score` of many ``(train, infer, offset)`` pairs at once, with the same results: pairs of one
    offset walk the tokens together, a task of rows at a time on :data:`THREADS` threads, so that each
    block of each inference capture and of each training slot is read and converted once and shared by
    every pair that needs it. ``errors``, when given, receives each pair's per-token errors over its
    overlap; ``progress`` is called with the tasks done so far and their number."""
    out: list[Metrics] = [Metrics.empty()] * len(pairs)
    walks = _walks(pairs)
    tasks = [
        (w, a, min(a + _task_rows(w), hi))
        for w in walks
        for lo, hi in [w.extent(w.ks)]
        for a in range(lo, hi, _task_rows(w))
    ]
    for n, _ in enumerate(in_order(_compare_rows, tasks)):
        if progress is not None:
            progress(n, len(tasks))
    if progress is not None:
        progress(len(tasks), len(tasks))
    with np.errstate(all="ignore"):
        for w in walks:
            for xi, (x0, _) in w.x_rows.items():
                norms = np.sqrt(w.x_sq[xi]).astype(np.float32)
                bad = np.flatnonzero(~np.isfinite(norms) | (norms == 0))
                odd = {int(i): read(w.xs[xi], x0 + int(i), x0 + int(i) + 1)[0].copy() for i in bad}
                if stats is not None and norms.size:
                    for st in {id(stats[k]): stats[k] for k in w.x_keys[xi] if stats[k] is not None}.values():
                        st.add_norms(x0, norms, odd)  # type: ignore[union-attr]
                for k in w.x_keys[xi]:
                    t, x, o = pairs[k]
                    i0, i1 = w.span[k]
                    err, cos, ratio = token_metrics(
                        norms[i0 - x0 : i1 - x0], t.norms[i0 + o : i1 + o], np.sqrt(w.d_sq[k]).astype(np.float32)
                    )
                    out[k] = summarise(err, cos, ratio, t.sinks[i0 + o : i1 + o], extent(x)[1])
                    if errors is not None:
                        errors[k] = err
    return out


#: The fewest rows per task: each task reads a block of every tensor of its walk.
_MIN_TASK_ROWS = 64


def _task_rows(w: _Walk) -> int:
    """Rows per task: a chunk's worth, fewer when that would leave a thread idle (at least three tasks
    per thread when the rows allow it: a short dump's walk is a few tasks, and each costs the same)."""
    lo, hi = w.extent(w.ks)
    block = raw_block_rows(w.width) if w.loop else block_rows(w.width)
    return max(min(block, _MIN_TASK_ROWS), min(CHUNK_BYTES // (4 * max(1, w.width)), -(-(hi - lo) // (3 * THREADS))))
