"""Which stored boundary a capture is: the nearest by median error, and a paired per-token test against
every other boundary (its neighbours above all).

For one capture compared on ``n`` ordinary tokens (attention sinks left out, :mod:`hsdiff.sinks`), the
errors ``e[b, t]`` against every boundary ``b`` give the nearest boundary ``b*`` (the lowest upper median).
A neighbour ``b'`` is ruled out when the share of tokens nearer ``b*`` than ``b'`` is above one half
beyond chance: ``k`` of ``n`` tokens nearer ``b*`` has a one-sided sign-test p-value
``P(X ≥ k | n, ½)`` of at most :data:`ALPHA`. The identification is *decisive* when every other
boundary is ruled out; the confidence is the 95 % lower bound (Clopper–Pearson) of the smallest share.

Why a paired test and not a ratio of medians: on a deep target the same capture is 2–4 % from its own
boundary and 3–5 % from a neighbour, so the medians are close, but the *same tokens* are nearer their own
boundary far more often than not; engine noise adds to the layer gap in quadrature, token by token.

>>> import numpy as np
>>> e = np.array([[0.30] * 40, [0.01] * 40, [0.05] * 40])   # 3 boundaries x 40 tokens
>>> found = identify(e)
>>> found.boundary, found.decisive, found.share
(1, True, 1.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "ALPHA",
    "CONFIDENCE_LEVEL",
    "MIN_TOKENS",
    "Identity",
    "identify",
    "sign_p",
    "lower_bound",
    "upper_median",
]

#: A boundary is ruled out when the sign test puts the share of tokens nearer the chosen one above one
#: half at this level (one-sided). Tokens of one sequence are not independent draws, so the level is
#: kept far below the usual 5 %: 20 of 23 tokens nearer, or 35 of 50, or 80 of 128.
ALPHA = 1e-3
#: The confidence reported is the lower bound of the smallest share at this level.
CONFIDENCE_LEVEL = 0.95
#: Fewer ordinary tokens than this decide nothing (the sign test cannot reach :data:`ALPHA` below 10).
MIN_TOKENS = 10


def upper_median(v: np.ndarray) -> float:
    """The upper median (more than half the values lie at or below it); inf when ``v`` is empty."""
    if v.size == 0:
        return math.inf
    k = v.size // 2
    return float(np.partition(v, k)[k])


def sign_p(k: int, n: int) -> float:
    """``P(X ≥ k)`` for ``X ~ Binomial(n, ½)``: the one-sided p-value of ``k`` of ``n`` tokens nearer."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    logs = [_log_comb(n, i) for i in range(k, n + 1)]
    top = max(logs)
    return min(1.0, math.exp(top - n * math.log(2)) * sum(math.exp(x - top) for x in logs))


def lower_bound(k: int, n: int, level: float = CONFIDENCE_LEVEL) -> float:
    """The one-sided Clopper–Pearson lower bound of a share ``k / n`` at ``level``: the smallest ``p``
    with ``P(X ≥ k | n, p) ≥ 1 − level``; 0 for ``k = 0``."""
    if n <= 0 or k <= 0:
        return 0.0
    alpha = 1.0 - level
    if k == n:
        return float(alpha ** (1.0 / n))
    lo, hi = 0.0, k / n
    for _ in range(50):
        mid = (lo + hi) / 2
        if _tail(k, n, mid) < alpha:
            lo = mid
        else:
            hi = mid
    return lo


def _log_comb(n: int, i: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)


def _tail(k: int, n: int, p: float) -> float:
    """``P(X ≥ k)`` for ``X ~ Binomial(n, p)``, 0 < p < 1."""
    lp, lq = math.log(p), math.log1p(-p)
    logs = [_log_comb(n, i) + i * lp + (n - i) * lq for i in range(k, n + 1)]
    top = max(logs)
    return math.exp(top) * sum(math.exp(x - top) for x in logs)


@dataclass(frozen=True)
class Identity:
    """What the values say one capture is, against every stored boundary (row index = boundary).

    ``boundary``: the nearest (None when nothing was compared); ``error``: its upper median error;
    ``decisive``: every other boundary ruled out at :data:`ALPHA`; ``share``: the smallest share of tokens
    nearer ``boundary`` than another boundary, ``against`` that boundary and ``against_error`` its median
    error; ``p``: the sign test's p-value there; ``confidence``: the lower bound of ``share``;
    ``open``: the boundaries not ruled out; ``medians``: the upper median error against every boundary;
    ``nearer``: per boundary, the tokens nearer ``boundary`` than it."""

    boundary: int | None
    error: float
    tokens: int
    decisive: bool = False
    share: float = 0.0
    against: int | None = None
    against_error: float = math.inf
    p: float = 1.0
    confidence: float = 0.0
    open: tuple[int, ...] = ()
    medians: tuple[float, ...] = field(default=(), repr=False)
    nearer: tuple[int, ...] = field(default=(), repr=False)

    def rules_out(self, b: int) -> bool:
        """Whether the values rule out boundary ``b`` (it is neither the nearest nor left open)."""
        return self.boundary is not None and b != self.boundary and b not in self.open and self.tokens > 0

    def share_against(self, b: int) -> tuple[int, int]:
        """``(k, n)``: tokens nearer the identified boundary than ``b``, of the tokens compared."""
        return (self.nearer[b] if b < len(self.nearer) else 0), self.tokens


def identify(errors: np.ndarray, alpha: float = ALPHA, candidates: np.ndarray | None = None) -> Identity:
    """The identity of a capture from its per-token errors ``errors`` [B, n] against every boundary
    (rows of boundaries that were not stored hold inf). ``candidates`` (bool [B]): the rows that may be
    chosen (default: every finite row)."""
    b_count, n = errors.shape
    if n == 0:
        return Identity(None, math.inf, 0)
    medians = np.array([upper_median(errors[b][np.isfinite(errors[b])]) for b in range(b_count)])
    if candidates is not None:
        medians = np.where(candidates, medians, np.inf)
    if not np.isfinite(medians).any():
        return Identity(None, math.inf, n, medians=tuple(float(x) for x in medians))
    best = int(np.argmin(medians))
    nearer = (errors[best][None, :] < errors).sum(axis=1)  # ties count against the chosen boundary
    nearer[best] = n
    others = [b for b in range(b_count) if b != best and np.isfinite(medians[b])]
    open_ = tuple(b for b in others if sign_p(int(nearer[b]), n) > alpha)
    if others:
        weakest = min(others, key=lambda b: (int(nearer[b]), medians[b]))
        k = int(nearer[weakest])
    else:
        weakest, k = None, n
    p = sign_p(k, n) if weakest is not None else 0.0
    return Identity(
        boundary=best,
        error=float(medians[best]),
        tokens=n,
        decisive=n >= MIN_TOKENS and not open_,
        share=k / n,
        against=weakest,
        against_error=float(medians[weakest]) if weakest is not None else math.inf,
        p=p,
        confidence=lower_bound(k, n) if n >= MIN_TOKENS else 0.0,
        open=open_,
        medians=tuple(float(x) for x in medians),
        nearer=tuple(int(x) for x in nearer),
    )
