"""Per-token norms as weak evidence: a log that prints only the norms of its captures cannot prove a
layer, but it can rule one out. For each tensor ``a_t`` and training token ``b_t``,
``|‖a_t‖ - ‖b_t‖| ≤ ‖a_t - b_t‖``, so a median relative norm difference over the tolerance means a
median relative error over it too: by the definition every match uses, that training layer is not
what the engine captured. Norms within the tolerance prove nothing (neighbouring layers can share them).

A list of norms is placed like a list of values: the norms of one forward pass (the same tokens, every
layer) in the training sample and at the token offset where they fit best (each print against the
training slot it is closest to, a print that fits none counting the same everywhere), the positions the
log printed (``h[1:25]``, ``token=1``) kept unless another offset fits clearly better. When the pass
fits nowhere (no print within the tolerance of any training slot there), each training slot is held
against a print at the placement that favours it most: a slot is ruled out only if it fits at none.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from ..arrays import as_f32
from ..model import Capture, NormFinding, NormPrint
from .slots import Slots

#: A placement at the printed positions is kept unless another fits this much better (relative).
KEEP_PRINTED = 1.05
#: Differences above this count as this in a placement's score (a wrong layer's 500% would swamp it).
_CAP = 1.0


def findings(train_slots: Slots, prints: Sequence[NormPrint], tolerance: float = 0.10) -> list[NormFinding]:
    """Each printed norm series (with a slot: labelled, or by order in the log) against every training
    slot: the median relative difference where its forward pass is placed (a training sample and a
    token offset), or the smallest over every placement when the pass fits nowhere."""
    labelled = [p for p in prints if p.slot is not None]
    if not labelled:
        return []
    samples = _samples(train_slots)
    by_pass: dict[str | None, list[NormPrint]] = defaultdict(list)
    for p in labelled:
        by_pass[p.group if p.group is not None else p.origin.path].append(p)
    out = []
    for group in by_pass.values():
        placements = [pl for norms in samples if (pl := _placements(group, norms)) is not None]
        for p, diffs in zip(group, _placed(placements, tolerance, len(group))):
            if diffs and p.slot is not None:
                out.append(NormFinding(p.slot, p, diffs))
    return out


def _samples(train_slots: Slots) -> list[dict[int, np.ndarray]]:
    """Per training sample, each slot's per-token norms."""
    by_sample: dict[object, dict[int, np.ndarray]] = defaultdict(dict)
    for s, caps in sorted(train_slots.items()):
        for i, c in enumerate(caps):
            by_sample[c.group if c.group is not None else i][s] = _norms(c)
    return list(by_sample.values())


def _norms(c: Capture) -> np.ndarray:
    return np.linalg.norm(as_f32(c.array()), axis=-1)


class _Placements:
    """The prints of one forward pass against one training sample at every token offset they fit in."""

    def __init__(self, offsets: np.ndarray, d: list[dict[int, np.ndarray]]):
        self.offsets = offsets
        self.d = d  # per print, per training slot: [offsets] median relative norm difference
        best = np.stack([np.min(np.stack(list(dp.values())), axis=0) for dp in d])  # [prints, offsets]
        self.fits = best  # each print's difference from the training slot it fits best, per offset
        self.key = np.minimum(best, _CAP).sum(axis=0)  # [offsets] how well the pass fits there

    def at(self, i: int) -> list[dict[int, float]]:
        return [{s: float(v[i]) for s, v in dp.items()} for dp in self.d]


def _placements(group: Sequence[NormPrint], norms: dict[int, np.ndarray]) -> _Placements | None:
    """Every offset of one training sample that holds the printed positions of all of ``group``."""
    tokens = min(n.size for n in norms.values())
    rows = [np.asarray(p.rows, dtype=np.int64) for p in group]
    if any(r.size == 0 for r in rows):
        return None
    lo = max(-int(r.min()) for r in rows)
    hi = min(tokens - int(r.max()) for r in rows)
    if hi <= lo:
        return None
    offsets = np.arange(lo, hi)
    return _Placements(
        offsets,
        [
            {s: _differences(np.asarray(p.norms), n, r, offsets) for s, n in sorted(norms.items())}
            for p, r in zip(group, rows)
        ],
    )


def _placed(placements: list[_Placements], tolerance: float, n: int) -> list[dict[int, float]]:
    """Per print, each training slot's difference at the placement where the pass fits best (the printed
    positions kept unless another fits clearly better), or, fitting nowhere, the smallest over placements."""
    if not placements:
        return [{} for _ in range(n)]
    best = min(((pl, int(np.argmin(pl.key))) for pl in placements), key=lambda x: float(x[0].key[x[1]]))
    printed = [(pl, int(np.flatnonzero(pl.offsets == 0)[0])) for pl in placements if (pl.offsets == 0).any()]
    if printed:
        z = min(printed, key=lambda x: float(x[0].key[x[1]]))
        if float(z[0].key[z[1]]) <= float(best[0].key[best[1]]) * KEEP_PRINTED + 1e-9:
            best = z
    pl, i = best
    if bool((pl.fits[:, i] <= tolerance).any()):
        return pl.at(i)
    # the pass fits nowhere: a training slot is ruled out only if no placement fits it
    out: list[dict[int, float]] = [{} for _ in range(n)]
    for pl in placements:
        for k, dp in enumerate(pl.d):
            for s, v in dp.items():
                out[k][s] = min(out[k].get(s, np.inf), float(v.min()))
    return out


def _differences(printed: np.ndarray, train: np.ndarray, rows: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """[offsets] the lower median over the printed tokens of ``|printed - train| / train`` at each offset."""
    ref = train[rows[None, :] + offsets[:, None]].astype(np.float64)
    with np.errstate(all="ignore"):
        d = np.abs(printed[None, :] - ref) / ref
    d = np.where(np.isfinite(d), d, np.inf)
    k = (d.shape[1] - 1) // 2
    return np.partition(d, k, axis=1)[:, k]
