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


#: Threads reading the training rows ahead, and threads reading and comparing the inference rows
#: (bf16 -> float32 and per-token metrics, a block at a time): numpy releases the GIL, so they share the cores.
READ_THREADS = 2
COMPUTE_THREADS = 2
#: Rows per block of that work: a block of both sides stays in a core's cache from its conversion to
#: float32 to its last metric.
_BLOCK = 128

Job = tuple[int, int, np.ndarray, np.ndarray]  # rows [s0, s1) of the chunk, the training rows, their norms


def _chunk_metrics(x: np.ndarray | Capture, a: int, b: int, jobs: list[Job]
                   ) -> tuple[np.ndarray, dict[int, np.ndarray], list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """Rows ``[a, b)`` of an inference capture read a block at a time: their norms, the rows whose norm
    is not finite or zero (by position from ``a``, for the data-quality counts), and per-token metrics
    against the training rows of each job."""
    x_norm = np.empty(b - a, dtype=np.float32)
    odd: dict[int, np.ndarray] = {}
    parts: list[list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = [[] for _ in jobs]
    for b0 in range(0, b - a, _BLOCK):
        b1 = min(b0 + _BLOCK, b - a)
        xb = read(x, a + b0, a + b1)
        with np.errstate(all="ignore"):
            nb = row_norms(xb)
        x_norm[b0:b1] = nb
        bad = np.flatnonzero(~np.isfinite(nb) | (nb == 0))
        odd.update((b0 + int(i), xb[i].copy()) for i in bad)
        for job, (s0, s1, yc, ny) in zip(parts, jobs):
            lo, hi = max(b0, s0), min(b1, s1)
            if hi > lo:
                job.append(_per_token(xb[lo - b0 : hi - b0], yc[lo - s0 : hi - s0], nb[lo - b0 : hi - b0], ny[lo - s0 : hi - s0]))
    out = [tuple(np.concatenate(p) for p in zip(*job)) if len(job) != 1 else job[0] for job in parts]
    return x_norm, odd, out  # type: ignore[return-value]


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

        reads = [item for item in todo if item[0] == "y"]

        def fetch(item: tuple[str, int, int], o: int = o, step: int = step, ts: dict = ts,
                  y_end: dict = y_end) -> np.ndarray:
            _, key, a = item
            return ts[key].rows(a + o, min(a + step, y_end[key]) + o)

        ys: dict[int, tuple[int, np.ndarray]] = {}  # training rows of the current window
        # chunks being compared, oldest first: (its norms, odd rows and metrics; its first row; (pair, rows) it serves)
        inflight: deque[tuple[Future, int, list[tuple[int, int, int]]]] = deque()

        def finish(item: tuple[Future, int, list[tuple[int, int, int]]], parts: dict = parts) -> None:
            fut, a, meta = item
            x_norm, odd, results = fut.result()
            for (k, s0, s1), r in zip(meta, results):
                if stats is not None and stats[k] is not None:
                    rows = {i - s0: v for i, v in odd.items() if s0 <= i < s1}
                    stats[k].add_norms(a + s0, x_norm[s0:s1], rows)  # type: ignore[union-attr]
                parts[k].append(r)

        with ThreadPoolExecutor(max_workers=READ_THREADS) as pool, ThreadPoolExecutor(max_workers=COMPUTE_THREADS) as work:
            pending = deque(pool.submit(fetch, item) for item in reads[:READ_THREADS])
            n_read = 0
            for n, (side, key, a) in enumerate(todo):
                if progress is not None:
                    progress(n, len(todo))
                if side == "y":
                    got = pending.popleft().result()
                    if n_read + READ_THREADS < len(reads):
                        pending.append(pool.submit(fetch, reads[n_read + READ_THREADS]))
                    n_read += 1
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
                end = a + max(s1 for _, _, s1 in meta) if meta else a
                inflight.append((work.submit(_chunk_metrics, xs[key], a, end, jobs), a, meta))
                while len(inflight) > 2 * COMPUTE_THREADS:
                    finish(inflight.popleft())
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
