"""Scoring at scale: pairs estimated on a sample of tokens, and many pairs verified in one pass.

Both give what :func:`hsdiff.align.score` gives, computed another way: :func:`sketch` on a few dozen
ordinary tokens read as row slices (an estimate, to shortlist candidates), :func:`score_many` on every
token of many pairs at once, reading each chunk of each tensor once (the same results as scoring the
pairs one by one).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from .align import TrainSlot, _per_token, _summarise
from .arrays import row_norms
from .model import Capture, Metrics
from .rows import CHUNK_BYTES, RowStats, extent, give_back_freed_memory, read, read_at

__all__ = ["sketch", "score_many"]


def sketch(train: TrainSlot, x: np.ndarray | Capture, offset: int, n: int,
           cache: dict[int, np.ndarray] | None = None) -> Metrics:
    """Metrics on at most ``n`` ordinary tokens, in a few runs of neighbours spread over the overlap at
    ``offset``: an estimate that reads a few rows of each side (``cache`` keeps inference rows read, by
    row number)."""
    ti, tt = extent(x)[0], train.tokens
    i0, i1 = max(0, -offset), min(ti, tt - offset)
    if i1 <= i0:
        return Metrics.empty()
    norms = train.norms[i0 + offset : i1 + offset]
    ok = np.flatnonzero(~train.sinks[i0 + offset : i1 + offset] & np.isfinite(norms) & (norms > 0))
    if ok.size == 0:
        ok = np.arange(i1 - i0)
    pick = ok[_runs(ok.size, n)]
    rows = [i0 + int(i) for i in pick]
    xs = read_at(x, rows, cache)
    ys = train.rows_at([r + offset for r in rows])
    err, cos, ratio = _per_token(xs, ys)
    return _summarise(err, cos, ratio, np.zeros(len(rows), dtype=bool), extent(x)[1])


#: Threads reading the next chunks (bf16 -> float32) and threads computing per-token metrics on the
#: chunks read: numpy releases the GIL, so they share the cores.
READ_THREADS = 2
COMPUTE_THREADS = 2
#: Rows per block of that computation (a block of both sides fits in a core's cache).
_BLOCK = 128


def _chunk_metrics(got: np.ndarray, jobs: list[tuple[int, int, np.ndarray, np.ndarray]]
                   ) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """Row norms of one chunk of an inference capture and its per-token metrics against each training
    chunk in ``jobs`` (rows ``[s0, s1)`` of the chunk, the training rows, their norms)."""
    with np.errstate(all="ignore"):
        x_norm = row_norms(got)
    out = []
    for s0, s1, yc, ny in jobs:  # in blocks that stay in the CPU's cache between the operations on them
        parts = [_per_token(got[s0 + b : min(s0 + b + _BLOCK, s1)], yc[b : b + _BLOCK], x_norm[s0 + b : min(s0 + b + _BLOCK, s1)],
                            ny[b : b + _BLOCK]) for b in range(0, s1 - s0, _BLOCK)]
        out.append(tuple(np.concatenate(p) for p in zip(*parts)) if len(parts) != 1 else parts[0])
    return x_norm, out  # type: ignore[return-value]


def _runs(size: int, n: int, runs: int = 8) -> np.ndarray:
    """``n`` of ``size`` positions in ``runs`` runs of neighbours spread evenly: neighbouring tokens are
    neighbouring rows, so a sample is a few reads, not ``n``."""
    if size <= n:
        return np.arange(size)
    per = -(-n // runs)
    starts = np.round(np.linspace(0, size - per, num=runs)).astype(np.int64)
    return np.unique((starts[:, None] + np.arange(per)[None, :]).ravel())[:n]


def score_many(pairs: Sequence[tuple[TrainSlot, np.ndarray | Capture, int]],
               stats: Sequence[RowStats | None] | None = None,
               errors: list[np.ndarray | None] | None = None,
               progress: Callable[[int, int], None] | None = None) -> list[Metrics]:
    """:func:`score` of many ``(train, infer, offset)`` pairs at once, with the same results: pairs of one
    offset walk the tokens together, so that each chunk of each inference capture and of each training
    slot is read once (the next chunk on a second thread) and shared by every pair that needs it.
    ``errors``, when given, receives each pair's per-token errors over its overlap; ``progress`` is
    called with the chunks read so far and their number."""
    out: list[Metrics] = [Metrics.empty()] * len(pairs)
    by_offset: dict[int, list[int]] = {}
    for k, (_, _, o) in enumerate(pairs):
        by_offset.setdefault(o, []).append(k)
    for o, ks in by_offset.items():
        span = {k: (max(0, -o), min(extent(pairs[k][1])[0], pairs[k][0].tokens - o)) for k in ks}
        ks = [k for k in ks if span[k][1] > span[k][0]]
        if not ks:
            continue
        xs = {id(pairs[k][1]): pairs[k][1] for k in ks}
        ts = {id(pairs[k][0]): pairs[k][0] for k in ks}
        x_end = {key: max(span[k][1] for k in ks if id(pairs[k][1]) == key) for key in xs}
        y_end = {key: max(span[k][1] for k in ks if id(pairs[k][0]) == key) for key in ts}
        lo, hi = min(span[k][0] for k in ks), max(span[k][1] for k in ks)
        step = max(1, CHUNK_BYTES // (4 * max(extent(x)[1] for x in xs.values())))
        # the reads in order: per window of rows, the training slots' rows, then each capture's
        todo: list[tuple[str, int, int]] = []
        for a in range(lo, hi, step):
            todo += [("y", key, a) for key in ts if a < y_end[key]] + [("x", key, a) for key in xs if a < x_end[key]]
        parts: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {k: [] for k in ks}

        def fetch(item: tuple[str, int, int], o: int = o, step: int = step, xs: dict = xs, ts: dict = ts,
                  x_end: dict = x_end, y_end: dict = y_end) -> np.ndarray:
            side, key, a = item
            if side == "y":
                return ts[key].rows(a + o, min(a + step, y_end[key]) + o)
            return read(xs[key], a, min(a + step, x_end[key]))

        ys: dict[int, tuple[int, np.ndarray]] = {}  # training rows of the current window
        # chunks being computed, oldest first: (its metrics, the chunk, its first row, (pair, rows) it serves)
        inflight: deque[tuple[Future, np.ndarray, int, list[tuple[int, int, int]]]] = deque()

        def finish(item: tuple[Future, np.ndarray, int, list[tuple[int, int, int]]], parts: dict = parts) -> None:
            fut, got, a, meta = item
            x_norm, results = fut.result()
            for (k, s0, s1), r in zip(meta, results):
                if stats is not None and stats[k] is not None:
                    stats[k].add(got[s0:s1], a + s0, x_norm[s0:s1])  # type: ignore[union-attr]
                parts[k].append(r)

        with ThreadPoolExecutor(max_workers=READ_THREADS) as pool, ThreadPoolExecutor(max_workers=COMPUTE_THREADS) as work:
            pending = deque(pool.submit(fetch, item) for item in todo[:READ_THREADS])
            for n, (side, key, a) in enumerate(todo):
                if progress is not None:
                    progress(n, len(todo))
                got = pending.popleft().result()
                if n + READ_THREADS < len(todo):
                    pending.append(pool.submit(fetch, todo[n + READ_THREADS]))
                if side == "y":
                    if ys and next(iter(ys.values()))[0] != a:
                        ys = {}
                        give_back_freed_memory()
                    ys[key] = (a, got)
                    continue
                meta, jobs = [], []
                for k in ks:
                    t, x, _ = pairs[k]
                    if id(x) != key:
                        continue
                    i0, i1 = max(a, span[k][0]), min(a + step, span[k][1])
                    if i1 <= i0:
                        continue
                    meta.append((k, i0 - a, i1 - a))
                    jobs.append((i0 - a, i1 - a, ys[id(t)][1][i0 - a : i1 - a], t.norms[i0 + o : i1 + o]))
                inflight.append((work.submit(_chunk_metrics, got, jobs), got, a, meta))
                while len(inflight) > COMPUTE_THREADS + 1:
                    finish(inflight.popleft())
                del got
            while inflight:
                finish(inflight.popleft())
        for k in ks:
            t, x, _ = pairs[k]
            i0, i1 = span[k]
            err, cos, ratio = (np.concatenate(p) for p in zip(*parts[k]))
            out[k] = _summarise(err, cos, ratio, t.sinks[i0 + o : i1 + o], extent(x)[1])
            if errors is not None:
                errors[k] = err
    return out
