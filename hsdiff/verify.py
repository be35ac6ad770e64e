"""Scoring at scale: pairs estimated on a sample of tokens, and many pairs verified in one pass.

Both give what :func:`hsdiff.align.score` gives, computed another way: :func:`sketch` on a few dozen
ordinary tokens read as row slices (an estimate, to shortlist candidates), :func:`score_many` on every
token of many pairs at once, reading each chunk of each tensor once (the same results as scoring the
pairs one by one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import torch

from .align import TrainSlot, _per_token, _summarise
from .model import Capture, Metrics
from .rows import CHUNK_BYTES, RowStats, extent, give_back_freed_memory, read, read_at

__all__ = ["sketch", "score_many"]


def sketch(train: TrainSlot, x: torch.Tensor | Capture, offset: int, n: int,
           cache: dict[int, torch.Tensor] | None = None) -> Metrics:
    """Metrics on at most ``n`` ordinary tokens spread over the overlap at ``offset``: an estimate that
    reads a few rows of each side (``cache`` keeps inference rows read, by row number)."""
    ti, tt = extent(x)[0], train.tokens
    i0, i1 = max(0, -offset), min(ti, tt - offset)
    if i1 <= i0:
        return Metrics.empty()
    norms = train.norms[i0 + offset : i1 + offset]
    ok = torch.nonzero(~train.sinks[i0 + offset : i1 + offset] & torch.isfinite(norms) & (norms > 0)).flatten()
    if ok.numel() == 0:
        ok = torch.arange(i1 - i0)
    pick = ok[torch.linspace(0, ok.numel() - 1, steps=min(n, ok.numel())).round().long().unique()]
    rows = [i0 + int(i) for i in pick]
    xs = read_at(x, rows, cache)
    ys = train.rows_at([r + offset for r in rows])
    err, cos, ratio = _per_token(xs, ys)
    return _summarise(err, cos, ratio, torch.zeros(len(rows), dtype=torch.bool), extent(x)[1])


def score_many(pairs: Sequence[tuple[TrainSlot, torch.Tensor | Capture, int]],
               stats: Sequence[RowStats | None] | None = None,
               errors: list[torch.Tensor | None] | None = None,
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
        parts: dict[int, list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]] = {k: [] for k in ks}

        def fetch(item: tuple[str, int, int], o: int = o, step: int = step, xs: dict = xs, ts: dict = ts,
                  x_end: dict = x_end, y_end: dict = y_end) -> torch.Tensor:
            side, key, a = item
            if side == "y":
                return ts[key].rows(a + o, min(a + step, y_end[key]) + o)
            return read(xs[key], a, min(a + step, x_end[key]))

        ys: dict[int, tuple[int, torch.Tensor]] = {}  # training rows of the current window
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(fetch, todo[0])
            for n, (side, key, a) in enumerate(todo):
                if progress is not None:
                    progress(n, len(todo))
                got = pending.result()
                if n + 1 < len(todo):
                    pending = pool.submit(fetch, todo[n + 1])
                if side == "y":
                    if ys and next(iter(ys.values()))[0] != a:
                        ys = {}
                        give_back_freed_memory()
                    ys[key] = (a, got)
                    continue
                x_norm = got.norm(dim=1)
                for k in ks:
                    t, x, _ = pairs[k]
                    if id(x) != key:
                        continue
                    i0, i1 = max(a, span[k][0]), min(a + step, span[k][1])
                    if i1 <= i0:
                        continue
                    xc = got[i0 - a : i1 - a]
                    yc = ys[id(t)][1][i0 - a : i1 - a]
                    if stats is not None and stats[k] is not None:
                        stats[k].add(xc, i0)  # type: ignore[union-attr]
                    parts[k].append(_per_token(xc, yc, x_norm[i0 - a : i1 - a], t.norms[i0 + o : i1 + o]))
                del got
        for k in ks:
            t, x, _ = pairs[k]
            i0, i1 = span[k]
            err, cos, ratio = (torch.cat(p) for p in zip(*parts[k]))
            out[k] = _summarise(err, cos, ratio, t.sinks[i0 + o : i1 + o], extent(x)[1])
            if errors is not None:
                errors[k] = err
    return out
