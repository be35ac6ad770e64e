"""Matching by value: token alignment, per-token errors, attention-sink handling.

The metric is the *per-token* relative error ``||x_t - y_t|| / ||y_t||``, summarised by its median
over the compared tokens. Real LLMs put massive activations on the first token (the attention
sink): a whole-tensor error is dominated by that one token, whose value barely changes across
middle layers, so whole-tensor errors cannot tell neighbouring layers apart. Sink tokens are
therefore left out whenever ordinary tokens are available, and a comparison that saw only sink
tokens is flagged ``sink_only``.

Measured on SmolLM2-135M (fp32 training side, bf16 inference side, ``fixtures/README.md``): the
same boundary gives 0.5–7 % median error, adjacent boundaries 15–30 % on ordinary tokens, and on
the sink token alone adjacent middle boundaries differ by under 1 %.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from .model import Capture, Metrics

__all__ = [
    "NOISE_TOLERANCE",
    "ADJACENT_PRIOR",
    "SINK_FACTOR",
    "TrainSlot",
    "sink_mask",
    "id_offsets",
    "score",
    "best_alignment",
]

#: Largest median per-token relative error still read as "the same tensor" (bf16/fp16/fp8 noise).
NOISE_TOLERANCE = 0.10
#: The smallest median error expected between neighbouring boundaries on ordinary tokens, used
#: when the neighbours of a match were not captured and so could not be ruled out directly.
#: Conservative: SmolLM2's neighbours differ by 15-30 %, but the middle of the 61-layer seed
#: target (each layer applied twice, residual norm doubled) only by 7.9-10 %.
ADJACENT_PRIOR = 0.08
#: A token whose norm exceeds this multiple of the median token norm is an attention sink.
SINK_FACTOR = 8.0
_COLS_FOR_SEARCH = 64
_EPS = 1e-12


@dataclass
class TrainSlot:
    """One training slot of one sample, loaded as float32 ``[T, H]`` with its sink mask."""

    capture: Capture
    tensor: torch.Tensor
    sinks: torch.Tensor  # bool [T]
    norms: torch.Tensor  # float [T]

    @classmethod
    def load(cls, capture: Capture) -> "TrainSlot":
        t = capture.load().float()
        norms = t.norm(dim=1)
        return cls(capture, t, sink_mask(norms), norms)

    @property
    def tokens(self) -> int:
        return int(self.tensor.shape[0])


def sink_mask(norms: torch.Tensor) -> torch.Tensor:
    """True where a token's norm is far above the median (attention-sink tokens)."""
    finite = norms[torch.isfinite(norms)]
    if finite.numel() < 3:
        return torch.zeros_like(norms, dtype=torch.bool)
    med = finite.median()
    return norms > SINK_FACTOR * med.clamp_min(_EPS)


def id_offsets(infer_ids: Sequence[int], train_ids: Sequence[int]) -> list[int]:
    """Offsets ``o`` with ``infer_ids[i] == train_ids[i + o]`` over their whole overlap.

    The overlap must cover all of the shorter sequence (a prefill of the same prompt, a prompt
    that skipped its first token, a few decode tokens from the middle).
    """
    a = np.asarray(infer_ids, dtype=np.int64)
    b = np.asarray(train_ids, dtype=np.int64)
    if a.size == 0 or b.size == 0:
        return []
    out = []
    n = min(a.size, b.size)
    for o in range(-(a.size - 1), b.size):
        i0, i1 = max(0, -o), min(a.size, b.size - o)
        if i1 - i0 < n:
            continue
        if np.array_equal(a[i0:i1], b[i0 + o : i1 + o]):
            out.append(o)
    return out


def _per_token(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    diff = (x - y).norm(dim=1)
    ny = y.norm(dim=1)
    nx = x.norm(dim=1)
    err = diff / ny.clamp_min(_EPS)
    cos = (x * y).sum(dim=1) / (nx * ny).clamp_min(_EPS)
    ratio = nx / ny.clamp_min(_EPS)
    return err, cos, ratio


def _summarise(err, cos, ratio, sinks, values_per_token) -> Metrics:
    ordinary = ~sinks
    finite = torch.isfinite(err)
    use = ordinary & finite
    sink_only = False
    if not bool(use.any()):
        use = finite
        sink_only = True
    if not bool(use.any()):
        return Metrics(float("inf"), float("nan"), float("inf"), float("nan"), 0, 0, sink_only)
    e = err[use]
    return Metrics(
        rel_err=float(e.median()),
        cosine=float(cos[use].median()),
        p90_err=float(torch.quantile(e, 0.9)) if e.numel() > 1 else float(e[0]),
        norm_ratio=float(ratio[use].median()),
        tokens=int(use.sum()),
        values=int(use.sum()) * values_per_token,
        sink_only=sink_only,
    )


def score(train: TrainSlot, infer: torch.Tensor | Capture, offset: int) -> Metrics:
    """Metrics of an inference capture against a training slot with ``infer[i] ~ train[i + offset]``."""
    if isinstance(infer, Capture) and infer.observation is not None:
        return _score_observation(train, infer, offset)
    x = infer if isinstance(infer, torch.Tensor) else infer.load().float()
    ti, tt = x.shape[0], train.tokens
    i0, i1 = max(0, -offset), min(ti, tt - offset)
    if i1 <= i0:
        return Metrics(float("inf"), float("nan"), float("inf"), float("nan"), 0, 0)
    y = train.tensor[i0 + offset : i1 + offset]
    err, cos, ratio = _per_token(x[i0:i1], y)
    return _summarise(err, cos, ratio, train.sinks[i0 + offset : i1 + offset], x.shape[1])


def _obs_arrays(cap: Capture, width: int) -> tuple[torch.Tensor, list[int], list[int]]:
    obs = cap.observation
    assert obs is not None
    cols = [c if c >= 0 else width + c for c in obs.cols]
    keep_c = [i for i, c in enumerate(cols) if 0 <= c < width]
    vals = torch.as_tensor(np.asarray(obs.values, dtype=np.float64)[:, keep_c], dtype=torch.float32)
    return vals, list(obs.rows), [cols[i] for i in keep_c]


def _resolve_rows(cap: Capture, rows: list[int]) -> list[int] | None:
    if all(r >= 0 for r in rows):
        return rows
    t = cap.tokens
    if t is None:
        return None
    return [r if r >= 0 else t + r for r in rows]


def _score_observation(train: TrainSlot, cap: Capture, offset: int) -> Metrics:
    vals, rows, cols = _obs_arrays(cap, train.tensor.shape[1])
    rows_r = _resolve_rows(cap, rows)
    if rows_r is None or not cols:
        return Metrics(float("inf"), float("nan"), float("inf"), float("nan"), 0, 0)
    idx = [r + offset for r in rows_r]
    keep = [i for i, j in enumerate(idx) if 0 <= j < train.tokens]
    if not keep:
        return Metrics(float("inf"), float("nan"), float("inf"), float("nan"), 0, 0)
    j = torch.tensor([idx[i] for i in keep])
    y = train.tensor[j][:, cols]
    x = vals[keep]
    mask = torch.isfinite(x)
    x = torch.where(mask, x, y)  # missing printed values do not count
    err, cos, ratio = _per_token(x, y)
    return _summarise(err, cos, ratio, train.sinks[j], len(cols))


def best_alignment(
    train: TrainSlot, infer: Capture, x: torch.Tensor | None, offsets: Sequence[int] | None
) -> tuple[int, Metrics]:
    """The token offset with the smallest error (from ``offsets`` if the ids fixed them)."""
    if offsets:
        results = [(o, score(train, x if x is not None else infer, o)) for o in offsets]
        return min(results, key=lambda r: (r[1].rel_err, abs(r[0])))
    if infer.observation is not None:
        return _search_observation(train, infer)
    assert x is not None
    return _search_full(train, x)


def _search_full(train: TrainSlot, x: torch.Tensor, exhaustive: bool = False) -> tuple[int, Metrics]:
    """Token offset by value: nearest training rows of a few inference rows propose offsets, and
    each proposal is scored on the whole overlap (``exhaustive`` tries every offset instead)."""
    ti, tt, h = x.shape[0], train.tokens, x.shape[1]
    cols = torch.linspace(0, h - 1, steps=min(h, _COLS_FOR_SEARCH)).long().unique()
    xs, ys = x[:, cols].double(), train.tensor[:, cols].double()
    ynorm = ys.norm(dim=1).clamp_min(_EPS)
    min_overlap = max(1, min(ti, tt, 8))
    if exhaustive:
        offsets = range(-(ti - 1), tt)
        dist = (torch.cdist(xs, ys) / ynorm[None, :]).float()
    else:
        probe = _probe_rows(x)
        dist_p = (torch.cdist(xs[probe], ys) / ynorm[None, :]).float()
        k = min(3, tt)
        near = dist_p.topk(k, dim=1, largest=False).indices
        offsets = sorted({0} | {int(j) - int(i) for i, row in zip(probe.tolist(), near) for j in row.tolist()})
        dist = None
    best: tuple[float, int] | None = None
    for o in offsets:
        i0, i1 = max(0, -o), min(ti, tt - o)
        if i1 - i0 < min_overlap:
            continue
        if dist is not None:
            d = torch.diagonal(dist, offset=o)
        else:
            d = ((xs[i0:i1] - ys[i0 + o : i1 + o]).norm(dim=1) / ynorm[i0 + o : i1 + o]).float()
        s = train.sinks[i0 + o : i1 + o]
        use = d[~s] if bool((~s).any()) else d
        use = use[torch.isfinite(use)]
        if use.numel() == 0:
            continue
        v = float(use.median())
        if best is None or v < best[0] - 1e-9 or (abs(v - best[0]) <= 1e-9 and abs(o) < abs(best[1])):
            best = (v, o)
    if best is None:
        return 0, score(train, x, 0)
    return best[1], score(train, x, best[1])


def _probe_rows(x: torch.Tensor, n: int = 8) -> torch.Tensor:
    """Up to ``n`` ordinary (non-sink) rows spread over the inference tensor."""
    norms = x.norm(dim=1)
    ordinary = torch.nonzero(~sink_mask(norms) & torch.isfinite(norms)).flatten()
    if ordinary.numel() == 0:
        ordinary = torch.arange(x.shape[0])
    pick = torch.linspace(0, ordinary.numel() - 1, steps=min(n, ordinary.numel())).round().long().unique()
    return ordinary[pick]


def _search_observation(train: TrainSlot, cap: Capture) -> tuple[int, Metrics]:
    obs = cap.observation
    assert obs is not None
    rows = _resolve_rows(cap, list(obs.rows))
    if rows is None:  # rows counted from an unknown end: try them as consecutive from 0
        rows = list(range(len(obs.rows)))
    lo, hi = -min(rows), train.tokens - max(rows)
    results = [(o, _score_observation(train, cap, o)) for o in range(lo, hi)]
    results = [r for r in results if r[1].tokens > 0]
    if not results:
        return 0, _score_observation(train, cap, 0)
    if obs.rows_known:
        # positions were printed: prefer the alignment that keeps them unless another is clearly better
        zero = next((r for r in results if r[0] == 0), None)
        best = min(results, key=lambda r: r[1].rel_err)
        if zero is not None and zero[1].rel_err <= max(best[1].rel_err * 1.05, best[1].rel_err + 1e-4):
            return zero
        return best
    return min(results, key=lambda r: (r[1].rel_err, abs(r[0])))
