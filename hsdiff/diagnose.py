"""What the slots, once decided, come to as one finding (:class:`~hsdiff.model.diagnosis.Diagnosis`):
every slot a layer off, the configured ids a slot off, some slots different, nothing matched, the
evidence open. Records in, a record out: :mod:`hsdiff.explain` puts it into words, the JSON report
carries it.

    >>> from hsdiff.model import Configured, Evidence, Recommendation, SlotResult, Status, Verdict
    >>> cfg = Configured("sglang", (2, 15, 27), (3, 16, 28))
    >>> slots = [SlotResult(s, b, b - 1, Evidence.INFERRED, 0.4, None, None, configured_boundary=c,
    ...                     status=Status.MISMATCH) for s, (b, c) in enumerate(zip((2, 15, 27), (3, 16, 28)))]
    >>> rec = Recommendation("sglang", "llama", (1, 14, 26), (2, 15, 27), {})
    >>> d = diagnose(Verdict.MISMATCH, slots, cfg, rec)  # no capture matched: the labels give the shift
    >>> d.kind, d.offset
    ('no-match', 1)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from . import conventions as conv
from .errors import InputError
from .model import Candidate, Configured, Evidence, Recommendation, SlotResult, Status, Verdict
from .model.diagnosis import Diagnosis, Finding, Miss
from .separation import miss_direction

__all__ = ["diagnose", "miss", "with_miss", "MISS_CONFIDENCE", "label_shift", "position_shift"]

#: Confidence of a slot inferred from the way its capture misses it (norms, not a match).
MISS_CONFIDENCE = 0.3


def diagnose(verdict: Verdict, results: Sequence[SlotResult], configured: Configured | None,
             recommended: Recommendation, found_miss: Miss | None = None) -> Diagnosis:
    """The finding the slot results and the verdict they give come to (``found_miss``: which way the
    configured captures miss, when nothing matched: :func:`miss`)."""
    if not any(r.match is not None for r in results):
        if found_miss is not None:
            offset = None if found_miss.layers is None else found_miss.direction * found_miss.layers
            return Diagnosis(Finding.NO_MATCH, offset=offset, slots=tuple(r.slot for r in results), miss=found_miss)
        return Diagnosis(Finding.NO_MATCH, offset=label_shift(results, configured) or None)
    if recommended.unservable:
        return Diagnosis(Finding.UNSERVABLE)
    if configured is not None:
        cfg = list(configured.boundary_indices)
        if verdict == Verdict.OK:
            return Diagnosis(Finding.MATCH)
        pairs = [(r.slot, r.boundary_index, cfg[r.slot]) for r in results
                 if r.boundary_index is not None and r.slot < len(cfg)]
        diffs = {c - b for _, b, c in pairs}
        if pairs and len(diffs) == 1 and 0 not in diffs:
            return Diagnosis(Finding.LAYER_SHIFT, offset=diffs.pop(), slots=tuple(s for s, _, _ in pairs))
        shift = position_shift(pairs, cfg)
        if shift:
            missing = tuple(b for b in (r.boundary_index for r in results) if b is not None and b not in cfg)
            return Diagnosis(Finding.SLOT_SHIFT, offset=shift, slots=tuple(s for s, _, _ in pairs), missing=missing)
        if verdict == Verdict.MISMATCH:
            return Diagnosis(Finding.SLOTS_DIFFER, slots=tuple(r.slot for r in results if r.status == Status.MISMATCH))
        return Diagnosis(Finding.OPEN, slots=tuple(r.slot for r in results if r.status != Status.OK))
    if verdict == Verdict.OK:
        return Diagnosis(Finding.IDENTIFIED)
    return Diagnosis(Finding.OPEN, slots=tuple(r.slot for r in results if r.evidence != Evidence.OBSERVED
                                              or r.boundary_index is None))


def label_shift(results: Sequence[SlotResult], configured: Configured | None) -> int:
    """The one offset between the configured layers and the layers the slots were given, or 0."""
    pairs = [(r.configured_boundary, r.boundary_index) for r in results]
    known = [(c, b) for c, b in pairs if c is not None and b is not None]
    if configured is None or not results or len(known) < len(pairs):
        return 0
    diffs = {c - b for c, b in known}
    return diffs.pop() if len(diffs) == 1 else 0


def position_shift(pairs: Sequence[tuple[int, int, int]], cfg: list[int]) -> int:
    """How many slots late the configured layers hold the training layers (slot, trained, configured)."""
    for p in range(1, len(cfg)):
        if pairs and all(s + p < len(cfg) and cfg[s + p] == b for s, b, _ in pairs if s + p < len(cfg)) and any(
            s + p < len(cfg) for s, _, _ in pairs
        ):
            return p
    return 0


def miss(results: Sequence[SlotResult], configured: Configured | None, candidates: dict[int, list[Candidate]],
         num_layers: int | None, model_family: str | None) -> Miss | None:
    """Which way the configured captures miss their training slots when no capture matched and no
    training label names the slots: each slot against the capture configured for it, on the same
    tokens (:func:`hsdiff.separation.miss_direction`). The distance is one layer when another
    engine's reading of the configured ids captures exactly the layers one step that way."""
    if configured is None or any(r.match is not None or r.boundary_index is not None for r in results):
        return None
    cfg = list(configured.boundary_indices)
    pairs = []
    for r in results:
        own = [c for c in candidates.get(r.slot, []) if r.slot < len(cfg) and c.boundary == cfg[r.slot]]
        if not own:
            return None
        pairs.append(min(own, key=lambda c: c.metrics.rel_err).metrics)
    direction = miss_direction(pairs)
    if direction is None:
        return None
    trained = [cfg[r.slot] - direction for r in results]
    by = tuple(conv.rule(e).title for e in conv.ENGINES if _reads_as(configured.ids, e, trained, num_layers, model_family))
    ratios, errors, cosines = ([getattr(m, k) for m in pairs] for k in ("norm_ratio", "rel_err", "cosine"))
    return Miss(direction, 1 if by else None, by, (min(ratios), max(ratios)), (min(errors), max(errors)),
                (min(cosines), max(cosines)))


def _reads_as(ids: Sequence[int], engine: str, boundaries: list[int], num_layers: int | None,
              family: str | None) -> bool:
    """Whether ``engine``'s rule (its newest version) reads ``ids`` as exactly ``boundaries``."""
    try:
        return conv.to_boundary(list(ids), engine, num_layers=num_layers, model_family=family) == sorted(boundaries)
    except InputError:  # a rule that needs the layer count, or ids it refuses
        return False


def with_miss(results: Sequence[SlotResult], found: Miss, configured: Configured, engine: str, family: str,
              num_layers: int | None, version: str | None) -> tuple[SlotResult, ...]:
    """The slots inferred from a miss one layer away: each training slot is the layer its configured
    capture sits next to, said as inferred (the values matched nothing), at :data:`MISS_CONFIDENCE`."""
    if found.layers is None:
        return tuple(results)
    out = []
    for r in results:
        b = configured.boundary_indices[r.slot] - found.direction * found.layers
        try:
            layer_id = conv.from_boundary([b], engine, num_layers=num_layers, model_family=family, version=version)[0]
        except InputError:  # not a layer this engine can capture: the recommendation says so
            layer_id = None
        way = "shallower" if found.direction < 0 else "deeper"
        out.append(replace(r, boundary_index=b, layer_id=layer_id, evidence=Evidence.INFERRED, confidence=MISS_CONFIDENCE,
                           status=Status.MISMATCH,
                           note=f"{r.note}; inferred B{b}: the capture configured for it (B{configured.boundary_indices[r.slot]}) "
                                f"sits one layer {way} (norms on the same tokens), as every slot's does"))
    return tuple(out)
