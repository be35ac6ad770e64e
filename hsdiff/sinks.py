"""The attention-sink rule, the one definition every part applies (aligner, readers, inspection, audit).

Real LLMs put massive activations on a few tokens (the first one above all): a token whose row norm
exceeds :data:`SINK_FACTOR` times the median token norm is an attention sink. The median is the lower
one of an even count (as ``torch.median``), over the finite norms, and a sink is only called among at
least :data:`MIN_TOKENS` of them. A sink's value barely changes across middle layers, so comparisons
leave sinks out whenever ordinary tokens are available.
"""

from __future__ import annotations

import numpy as np

from .arrays import lower_median

__all__ = ["MIN_TOKENS", "SINK_FACTOR", "median_norm", "ordinary_mask", "ordinary_median", "sink_mask", "usable"]

#: A token whose norm exceeds this multiple of the median token norm is an attention sink.
SINK_FACTOR = 8.0
#: Fewer finite norms than this: no token is called a sink (no median to speak of).
MIN_TOKENS = 3
_EPS = 1e-12


def median_norm(norms: np.ndarray) -> float | None:
    """The median the rule measures against: the lower median of the finite norms, None when fewer than
    :data:`MIN_TOKENS` are finite."""
    finite = norms[np.isfinite(norms)]
    return lower_median(finite) if finite.size >= MIN_TOKENS else None


def sink_mask(norms: np.ndarray) -> np.ndarray:
    """True where a token's norm is far above the median (attention-sink tokens; an infinite norm is
    above it too: callers that call such a row damage, not a sink, test ``np.isfinite`` themselves)."""
    med = median_norm(norms)
    if med is None:
        return np.zeros(norms.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        return norms > np.float32(SINK_FACTOR * max(med, _EPS))


def ordinary_mask(norms: np.ndarray) -> np.ndarray:
    """True where a token's norm is finite and no sink."""
    return np.isfinite(norms) & ~sink_mask(norms)


def ordinary_median(norms: np.ndarray) -> float:
    """The lower median norm of the ordinary tokens (NaN when there is none): the scale of a tensor
    that its sinks do not move."""
    return lower_median(norms[ordinary_mask(norms)])


def usable(norms: np.ndarray, ordinary_med: float | np.ndarray) -> np.ndarray:
    """True where a token of ``norms`` is ordinary against a known :func:`ordinary_median` (per column
    when an array): finite, non-zero, and not over :data:`SINK_FACTOR` times it (no bound when it is NaN)."""
    med = np.asarray(ordinary_med, dtype=np.float64)
    cap = np.where(np.isfinite(med), SINK_FACTOR * med, np.inf)
    with np.errstate(invalid="ignore"):
        return (norms > 0) & np.isfinite(norms) & (norms <= cap)
