"""Matching by value: token alignment, per-token errors, attention-sink handling.

The metric is the *per-token* relative error ``||x_t - y_t|| / ||y_t||``, summarised by its upper
median over the compared tokens (a strict majority of the tokens lies at or below it). Real LLMs put
massive activations on the first token (the attention sink): a whole-tensor error is dominated by
that one token, whose value barely changes across middle layers, so whole-tensor errors cannot tell
neighbouring layers apart. Sink tokens are therefore left out whenever ordinary tokens are
available, and a comparison that saw only sink tokens is flagged ``sink_only``.

Measured on SmolLM2-135M (fp32 training side, bf16 inference side, ``fixtures/README.md``): the
same boundary gives 0.5–7 % median error, adjacent boundaries 15–30 % on ordinary tokens, and on
the sink token alone adjacent middle boundaries differ by under 1 %.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..arrays import lower_median, row_norms, unique_ints
from ..largedump import TrainSlot
from ..largedump.metrics import summarise, token_metrics, upper_median
from ..largedump.rows import RowStats, chunks, extent, source
from ..model import Capture, Metrics, best_of
from ..sinks import sink_mask
from .token_ids import id_offsets, shared_prefix

__all__ = [
    "SINK_PENALTY",
    "TrainSlot",
    "id_offsets",
    "shared_prefix",
    "upper_median",
    "score",
    "best_alignment",
    "search_offset",
    "observation_tokens",
    "observation_arrays",
]

#: Placing printed rows: a placement that compared only attention-sink tokens ranks as if its error
#: were this much larger, so one that compared ordinary tokens at a similar error wins.
SINK_PENALTY = 1.5
_COLS_FOR_SEARCH = 64
_EPS = 1e-12


def _per_token(
    x: np.ndarray, y: np.ndarray, nx: np.ndarray | None = None, ny: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    with np.errstate(all="ignore"):
        diff = row_norms(x - y)
        ny = row_norms(y) if ny is None else ny
        nx = row_norms(x) if nx is None else nx
    return token_metrics(nx, ny, diff)


def score(train: TrainSlot, infer: np.ndarray | Capture, offset: int, stats: RowStats | None = None) -> Metrics:
    """Metrics of an inference capture against a training slot with ``infer[i] ~ train[i + offset]``.

    Both sides are read in row chunks (bf16 -> float32 one chunk at a time); ``stats`` collects what
    the inference rows read hold (NaN/Inf, zero rows)."""
    if isinstance(infer, Capture) and infer.observation is not None:
        return _score_observation(train, infer, offset)
    x = infer if isinstance(infer, np.ndarray) or infer.reads_rows else source(infer)
    ti, tt = extent(x)[0], train.tokens
    i0, i1 = max(0, -offset), min(ti, tt - offset)
    if i1 <= i0:
        return Metrics.empty()
    parts = []
    a = i0
    for xc in chunks(x, i0, i1):
        if stats is not None:
            stats.add(xc, a)
        b = a + xc.shape[0]
        parts.append(_per_token(xc, train.rows(a + offset, b + offset)))
        a = b
    err, cos, ratio = (np.concatenate(p) for p in zip(*parts))
    return summarise(err, cos, ratio, train.sinks[i0 + offset : i1 + offset], extent(x)[1])


def observation_arrays(cap: Capture, width: int) -> tuple[np.ndarray, list[int], list[int]]:
    """Printed values [R, C] (float64, NaN where nothing was printed), their rows and absolute columns."""
    obs = cap.observation
    assert obs is not None
    cols = [c if c >= 0 else width + c for c in obs.cols]
    keep_c = [i for i, c in enumerate(cols) if 0 <= c < width]
    vals = np.asarray(obs.values, dtype=np.float64)[:, keep_c]
    return vals, list(obs.rows), [cols[i] for i in keep_c]


def _resolve_rows(cap: Capture, rows: list[int]) -> list[int] | None:
    """Rows counted from the start of the printed tensor; None if some count from an unknown end."""
    if all(r >= 0 for r in rows):
        return rows
    t = cap.tokens
    if t is None:
        return None
    return [r if r >= 0 else t + r for r in rows]


@dataclass
class _ObsErrors:
    """Per-token metrics of every printed row against every training token: [R, T] each."""

    err: np.ndarray
    cos: np.ndarray
    ratio: np.ndarray
    counts: np.ndarray  # [R] printed finite values per row

    @classmethod
    def of(cls, train: TrainSlot, cap: Capture) -> _ObsErrors | None:
        vals, _, cols = observation_arrays(cap, train.width)
        if not cols:
            return None
        m = np.isfinite(vals)
        x = np.where(m, vals, 0.0)
        md = m.astype(np.float64)
        y = train.columns(np.asarray(cols, dtype=np.int64)).astype(np.float64)
        with np.errstate(all="ignore"):
            y = np.where(np.isfinite(y), y, np.nan)
            dot = x @ y.T
            ny2 = md @ (y * y).T
            nx2 = (x * x).sum(axis=1, keepdims=True)
            d2 = np.maximum(nx2 - 2 * dot + ny2, 0)
            ny = np.maximum(np.sqrt(ny2), _EPS)
            nx = np.sqrt(nx2)
            err = (np.sqrt(d2) / ny).astype(np.float32)
            cos = (dot / np.maximum(nx * ny, _EPS)).astype(np.float32)
            ratio = (nx / ny).astype(np.float32)
        empty = m.sum(axis=1) == 0
        err[empty] = np.nan
        return cls(err, cos, ratio, m.sum(axis=1))


def _metrics_at(train: TrainSlot, oe: _ObsErrors, rows: list[int], tokens: list[int]) -> Metrics:
    keep = [(r, j) for r, j in zip(rows, tokens) if 0 <= j < train.tokens]
    if not keep:
        return Metrics.empty()
    r = np.asarray([k[0] for k in keep], dtype=np.int64)
    j = np.asarray([k[1] for k in keep], dtype=np.int64)
    sinks = train.sinks[j]
    m = summarise(oe.err[r, j], oe.cos[r, j], oe.ratio[r, j], sinks, 1)
    if m.tokens == 0:
        return m
    e = oe.err[r, j]
    used = np.isfinite(e) & (~sinks if m.sink_only is False else np.ones_like(sinks))
    # the middle of an even count is the mean of the two middle values: with two printed tokens
    # the lower one alone would hide a token that does not match at all
    return replace(
        m,
        rel_err=float(np.median(e[used].astype(np.float64))),
        cosine=float(np.median(oe.cos[r, j][used].astype(np.float64))),
        values=int(oe.counts[r][used].sum()),
    )


def _score_observation(train: TrainSlot, cap: Capture, offset: int) -> Metrics:
    """Metrics of printed values whose row 0 sits at training token ``offset``."""
    obs = cap.observation
    assert obs is not None
    oe = _ObsErrors.of(train, cap)
    if oe is None:
        return Metrics.empty()
    rows = list(range(len(obs.rows)))
    resolved = _resolve_rows(cap, list(obs.rows))
    if resolved is not None:
        return _metrics_at(train, oe, rows, [p + offset for p in resolved])
    return _place_unknown_end(train, oe, list(obs.rows), offset)[1]


def observation_tokens(train: TrainSlot, cap: Capture, offset: int) -> list[int | None]:
    """The training token each printed row of ``cap`` was compared with at ``offset`` (None: outside)."""
    obs = cap.observation
    assert obs is not None
    resolved = _resolve_rows(cap, list(obs.rows))
    if resolved is not None:
        toks = [p + offset for p in resolved]
    else:
        oe = _ObsErrors.of(train, cap)
        if oe is None:
            return [None] * len(obs.rows)
        toks = _place_unknown_end(train, oe, list(obs.rows), offset)[2]
    return [t if 0 <= t < train.tokens else None for t in toks]


def best_alignment(
    train: TrainSlot,
    infer: Capture,
    x: np.ndarray | Capture | None,
    offsets: Sequence[int] | None,
    stats: RowStats | None = None,
) -> tuple[int, Metrics]:
    """The token offset with the smallest error (from ``offsets`` if the ids fixed them); ``x`` is
    the inference tensor, or the capture itself to read it in chunks."""
    if offsets:
        results = [(o, score(train, x if x is not None else infer, o, stats)) for o in offsets]
        return best_of(results, lambda r: r[1].rel_err, lambda r: abs(r[0]))
    if infer.observation is not None:
        return _search_observation(train, infer)
    assert x is not None
    return _search_full(train, x, stats=stats)


def search_offset(train: TrainSlot, x: np.ndarray | Capture, columns: dict | None = None) -> int:
    """The token offset :func:`best_alignment` would choose without token ids, without scoring it
    (``columns`` keeps the columns and norms read of ``x`` for the next training slot)."""
    return _search_full(train, x, only_offset=True, columns=columns)[0]


def _search_full(
    train: TrainSlot,
    x: np.ndarray | Capture,
    exhaustive: bool = False,
    stats: RowStats | None = None,
    only_offset: bool = False,
    columns: dict | None = None,
) -> tuple[int, Metrics]:
    """Token offset by value: nearest training rows of a few inference rows propose offsets, and
    each proposal is scored on a spread of columns of the whole overlap (``exhaustive`` tries every
    offset instead); the chosen one is then scored in full (not with ``only_offset``)."""
    (ti, h), tt = extent(x), train.tokens
    cols = unique_ints(np.linspace(0, h - 1, num=min(h, _COLS_FOR_SEARCH)).astype(np.int64))
    key = tuple(cols.tolist())
    if columns is None or key not in columns:
        got = _columns_and_norms(x, cols)
        if columns is not None:
            columns[key] = got
    xc, xnorms = got if columns is None else columns[key]
    xs, ys = xc.astype(np.float64), train.columns(cols).astype(np.float64)
    with np.errstate(all="ignore"):
        ynorm = np.maximum(np.linalg.norm(ys, axis=1), _EPS)
    min_overlap = max(1, min(ti, tt, 8))
    offsets: Sequence[int]
    if exhaustive:
        offsets = range(-(ti - 1), tt)
        dist = (_cdist(xs, ys) / ynorm[None, :]).astype(np.float32)
    else:
        probe = _probe_rows(xnorms)
        dist_p = (_cdist(xs[probe], ys) / ynorm[None, :]).astype(np.float32)
        k = min(3, tt)
        near = _smallest(dist_p, k)
        offsets = sorted({0} | {int(j) - int(i) for i, row in zip(probe.tolist(), near) for j in row.tolist()})
        dist = None
    best: tuple[float, int] | None = None
    for o in offsets:
        i0, i1 = max(0, -o), min(ti, tt - o)
        if i1 - i0 < min_overlap:
            continue
        if dist is not None:
            d = np.diagonal(dist, offset=o)
        else:
            with np.errstate(all="ignore"):
                d = (np.linalg.norm(xs[i0:i1] - ys[i0 + o : i1 + o], axis=1) / ynorm[i0 + o : i1 + o]).astype(
                    np.float32
                )
        s = train.sinks[i0 + o : i1 + o]
        use = d[~s] if bool((~s).any()) else d
        use = use[np.isfinite(use)]
        if use.size == 0:
            continue
        v = lower_median(use)
        if best is None or v < best[0] - 1e-9 or (abs(v - best[0]) <= 1e-9 and abs(o) < abs(best[1])):
            best = (v, o)
    o = 0 if best is None else best[1]
    return o, Metrics.empty() if only_offset else score(train, x, o, stats)


def _cdist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Euclidean distances between the rows of ``a`` and of ``b`` (float64)."""
    with np.errstate(all="ignore"):
        d2 = (a * a).sum(axis=1)[:, None] - 2 * (a @ b.T) + (b * b).sum(axis=1)[None, :]
        return np.sqrt(np.maximum(d2, 0))


def _smallest(d: np.ndarray, k: int) -> np.ndarray:
    """Column indices of the ``k`` smallest values of each row of ``d`` (NaN last), in no order."""
    key = np.where(np.isnan(d), np.inf, d)
    if k >= key.shape[1]:
        return np.broadcast_to(np.arange(key.shape[1]), key.shape)
    return np.argpartition(key, k - 1, axis=1)[:, :k]


def _columns_and_norms(x: np.ndarray | Capture, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Columns ``cols`` and per-token norms of the inference tensor, in one chunked pass."""
    if isinstance(x, np.ndarray):
        with np.errstate(all="ignore"):
            return x[:, cols], row_norms(x)
    with np.errstate(all="ignore"):
        parts = [(c[:, cols], row_norms(c)) for c in chunks(x, 0, extent(x)[0])]
    if not parts:
        return np.zeros((0, len(cols)), dtype=np.float32), np.zeros(0, dtype=np.float32)
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _probe_rows(norms: np.ndarray, n: int = 8) -> np.ndarray:
    """Up to ``n`` ordinary (non-sink) rows spread over the inference tensor (given its token norms)."""
    ordinary = np.flatnonzero(~sink_mask(norms) & np.isfinite(norms))
    if ordinary.size == 0:
        ordinary = np.arange(norms.shape[0])
    pick = unique_ints(np.round(np.linspace(0, ordinary.size - 1, num=min(n, ordinary.size))).astype(np.int64))
    return ordinary[pick]


def _search_observation(train: TrainSlot, cap: Capture) -> tuple[int, Metrics]:
    """Where printed rows sit in a training sample: every placement is scored at once (the errors of
    every printed row against every training token are computed once). Rows counted from an unknown
    end (a summarised print without its shape) are placed after the first rows."""
    obs = cap.observation
    assert obs is not None
    oe = _ObsErrors.of(train, cap)
    if oe is None:
        return 0, Metrics.empty()
    resolved = _resolve_rows(cap, list(obs.rows))
    if resolved is None:
        return _place_unknown_end(train, oe, list(obs.rows), None)[:2]
    idx = list(range(len(resolved)))
    lo, hi = -min(resolved), train.tokens - max(resolved)
    if hi <= lo:
        return 0, _score_observation(train, cap, 0)
    offsets = np.arange(lo, hi)
    toks = np.asarray(resolved, dtype=np.int64)[None, :] + offsets[:, None]
    med, sink_only, nvals = _placement_scores(train, oe, idx, toks)
    key = np.where(sink_only, med * SINK_PENALTY, med)
    if not bool(np.isfinite(key).any()):
        return 0, _score_observation(train, cap, 0)
    best = _argbest(key, nvals, offsets)
    choice = best
    if obs.rows_known and lo <= 0 < hi:
        # positions were printed: prefer the alignment that keeps them unless another is clearly better
        z = -lo
        if bool(sink_only[z] == sink_only[best]) and float(med[z]) <= max(
            float(med[best]) * 1.05, float(med[best]) + 1e-4
        ):
            choice = z
    o = int(offsets[choice])
    return o, _metrics_at(train, oe, idx, [p + o for p in resolved])


def _placement_scores(
    train: TrainSlot, oe: _ObsErrors, idx: list[int], toks: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For placements ``toks`` [n, k] of printed rows ``idx``: median error (ordinary tokens, or the
    sinks if nothing else), whether only sinks were compared, and the number of values compared."""
    r = np.broadcast_to(np.asarray(idx, dtype=np.int64)[None, :], toks.shape)
    e = oe.err[r, toks].astype(np.float64)
    sinks = train.sinks[toks]
    fin = np.isfinite(e)
    ordinary = fin & ~sinks
    has_ordinary = ordinary.any(axis=1)
    use = np.where(has_ordinary[:, None], ordinary, fin)
    with warnings.catch_warnings():  # a placement with nothing to compare: its median is NaN, then inf
        warnings.simplefilter("ignore", RuntimeWarning)
        med = np.nanquantile(np.where(use, e, np.nan), 0.5, axis=1)
    med = np.where(np.isfinite(med), med, np.inf)
    nvals = (oe.counts[r] * use).sum(axis=1)
    return med, ~has_ordinary, nvals


def _argbest(key: np.ndarray, nvals: np.ndarray, offsets: np.ndarray) -> int:
    """Smallest error; among equal errors the most values, then the offset nearest 0."""
    m = float(key.min())
    tied = np.flatnonzero(key <= m + 1e-12)
    return int(min(tied.tolist(), key=lambda i: (-int(nvals[i]), abs(int(offsets[i])))))


def _place_unknown_end(
    train: TrainSlot, oe: _ObsErrors, rows: list[int], offset: int | None
) -> tuple[int, Metrics, list[int]]:
    """Place rows ``0..`` at ``offset`` (searched if None) and rows ``..-1`` (counted from an unknown
    end) where they fit best after them; the printed tensor's length is whatever that implies."""
    head = [i for i, r in enumerate(rows) if r >= 0]
    tail = [i for i, r in enumerate(rows) if r < 0]
    tt = train.tokens
    hmax = max((rows[i] for i in head), default=-1)
    tmin = min((rows[i] for i in tail), default=0)
    fail = (0, Metrics.empty(), [-1] * len(rows))
    # the tail's last row sits at token e: its rows r < 0 at e + 1 + r
    ends = np.arange(max(0, -1 - tmin), tt)
    if tail and ends.size == 0:
        return fail
    if tail:
        t_toks = ends[:, None] + 1 + np.asarray([rows[i] for i in tail], dtype=np.int64)[None, :]
        t_med, t_sink, t_n = _placement_scores(train, oe, tail, t_toks)
        t_key = np.where(t_sink, t_med * SINK_PENALTY, t_med)
    offsets = np.asarray([offset]) if offset is not None else np.arange(0, tt - hmax if head else 1)
    offsets = offsets[(offsets >= 0) & (offsets + max(hmax, 0) < tt)] if head else offsets
    if offsets.size == 0:
        return fail
    placements: list[tuple[int, list[int]]] = []
    if tail:
        # best tail end at or after each position (the latest end among equals: the whole sample printed)
        keys = t_key.tolist()
        best_from: list[int | None] = [None] * (len(keys) + 1)
        for i in range(len(keys) - 1, -1, -1):
            j = best_from[i + 1]
            best_from[i] = i if j is None or keys[i] < keys[j] - 1e-12 else j
        first_end = int(ends[0])
        for o in offsets.tolist():
            lo_e = max(0, o + hmax - tmin - first_end)  # ends e with e + 1 + tmin >= o + hmax + 1
            j = best_from[lo_e] if lo_e < len(keys) else None
            if j is None:
                continue
            e = int(ends[j])
            placements.append((o, [o + rows[i] for i in head] + [e + 1 + rows[i] for i in tail]))
    else:
        placements = [(o, [o + rows[i] for i in head]) for o in offsets.tolist()]
    if not placements:
        return fail
    med, sink_only, _ = _placement_scores(
        train, oe, head + tail, np.asarray([t for _, t in placements], dtype=np.int64)
    )
    key = np.where(sink_only, med * SINK_PENALTY, med)
    m = float(key.min())
    if not math.isfinite(m):
        return fail
    pick = min((i for i in range(len(placements)) if float(key[i]) <= m + 1e-12), key=lambda i: abs(placements[i][0]))
    o, toks = placements[pick]
    by_row = dict(zip(head + tail, toks))
    toks = [by_row[i] for i in range(len(rows))]
    return o, _metrics_at(train, oe, list(range(len(rows))), toks), toks
