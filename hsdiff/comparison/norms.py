"""Per-token norms as weak evidence: a log that prints only the norms of its captures cannot prove a
layer, but it can rule one out. For each tensor ``a_t`` and training token ``b_t``,
``|‖a_t‖ - ‖b_t‖| ≤ ‖a_t - b_t‖``, so a median relative norm difference over the tolerance means a
median relative error over it too: by the definition every match uses, that training layer is not
what the engine captured. Norms within the tolerance prove nothing (neighbouring layers can share them).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..arrays import as_f32, lower_median
from ..model import Capture, NormFinding, NormPrint
from .slots import Slots


def findings(train_slots: Slots, prints: Sequence[NormPrint]) -> list[NormFinding]:
    """Each printed norm series (with a slot: labelled, or by order in the log) against every training slot."""
    out = []
    norms: dict[int, np.ndarray] = {}
    for p in prints:
        if p.slot is None:
            continue
        diffs = {}
        for s, caps in sorted(train_slots.items()):
            best = [d for c in caps if (d := _difference(p, _norms(c, norms))) is not None]
            if best:
                diffs[s] = min(best)  # the closest sample: a print of another prompt is not held against a layer
        if diffs:
            out.append(NormFinding(p.slot, p, diffs))
    return out


def _norms(c: Capture, cache: dict[int, np.ndarray]) -> np.ndarray:
    if id(c) not in cache:
        cache[id(c)] = np.linalg.norm(as_f32(c.array()), axis=-1)
    return cache[id(c)]


def _difference(p: NormPrint, train: np.ndarray) -> float | None:
    rows = np.asarray(p.rows)
    if rows.size == 0 or rows.min() < 0 or rows.max() >= train.size:
        return None
    ref = train[rows]
    with np.errstate(all="ignore"):
        d = np.abs(np.asarray(p.norms) - ref) / ref
    d = d[np.isfinite(d)]
    return float(lower_median(d)) if d.size else None
