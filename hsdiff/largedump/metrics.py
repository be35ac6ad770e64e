"""Per-token metrics of inference rows against training rows, from the norms a walk computed, and
their summary over the compared tokens (attention sinks left out when ordinary tokens are there)."""

from __future__ import annotations

import numpy as np

from ..arrays import lower_median, quantile
from ..model import Metrics

__all__ = ["summarise", "token_metrics", "upper_median"]

_EPS = 1e-12


def token_metrics(nx: np.ndarray, ny: np.ndarray, diff: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-token relative error, cosine and norm ratio of inference rows ``x`` against training rows
    ``y``, from the float32 norms of ``x``, ``y`` and ``x - y``."""
    with np.errstate(all="ignore"):
        nyc = np.maximum(ny, np.float32(_EPS))
        err = diff / nyc
        # x.y = (|x|^2 + |y|^2 - |x - y|^2) / 2 from the norms already at hand: one pass over the rows
        # fewer, and as exact as a float32 dot product
        n_x, n_y, d = nx.astype(np.float64), ny.astype(np.float64), diff.astype(np.float64)
        cos = ((n_x * n_x + n_y * n_y - d * d) / np.maximum(2 * n_x * n_y, 2 * _EPS)).astype(np.float32)
        ratio = nx / nyc
    return err, cos, ratio


def summarise(err: np.ndarray, cos: np.ndarray, ratio: np.ndarray, sinks: np.ndarray, values_per_token: int) -> Metrics:
    ordinary = ~sinks
    finite = np.isfinite(err)
    use = ordinary & finite
    sink_only = False
    if not bool(use.any()):
        use = finite
        sink_only = True
    if not bool(use.any()):
        return Metrics.empty(sink_only)
    e = err[use]
    return Metrics(
        rel_err=upper_median(e),
        cosine=-upper_median(-cos[use]),
        p90_err=quantile(e, 0.9) if e.size > 1 else float(e[0]),
        norm_ratio=lower_median(ratio[use]),
        tokens=int(use.sum()),
        values=int(use.sum()) * values_per_token,
        sink_only=sink_only,
    )


def upper_median(v: np.ndarray) -> float:
    """The middle value, the upper one of an even count: more than half the values are at or below it,
    so a minority of tokens cannot carry it (``torch.median`` takes the lower one: with two tokens,
    one match and one miss would read as a match)."""
    return float(np.partition(v.ravel(), v.size // 2)[v.size // 2])
