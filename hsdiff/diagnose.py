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

from .align.separation import miss_direction, one_layer_apart, one_layer_floor, separation_at
from .errors import InputError
from .model import Candidate, Configured, Evidence, Recommendation, SlotResult, Status, Verdict
from .model.diagnosis import Diagnosis, Finding, Miss
from .rules import conventions as conv

__all__ = [
    "diagnose",
    "miss",
    "with_miss",
    "MISS_CONFIDENCE",
    "label_shift",
    "position_shift",
    "slot_shift",
    "with_slot_shift",
]

#: Confidence of a slot inferred from the way its capture misses it (norms, not a match).
MISS_CONFIDENCE = 0.3
#: Confidence of a slot placed by a slot shift the other slots show (its own values match within noise but
#: do not rule out a neighbour): labels and values agree, as weakly as an inference from a miss.
SHIFT_CONFIDENCE = MISS_CONFIDENCE


def diagnose(
    verdict: Verdict,
    results: Sequence[SlotResult],
    configured: Configured | None,
    recommended: Recommendation,
    found_miss: Miss | None = None,
) -> Diagnosis:
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
        pairs = _decided(results, cfg)
        diffs = {c - b for _, b, c in pairs}
        shift = slot_shift(results, cfg)
        if pairs and len(diffs) == 1 and 0 not in diffs and not shift:
            return Diagnosis(Finding.LAYER_SHIFT, offset=diffs.pop(), slots=tuple(s for s, _, _ in pairs))
        if shift:
            missing = tuple(b for b in (r.boundary_index for r in results) if b is not None and b not in cfg)
            return Diagnosis(Finding.SLOT_SHIFT, offset=shift, slots=tuple(s for s, _, _ in pairs), missing=missing)
        if verdict == Verdict.MISMATCH:
            return Diagnosis(Finding.SLOTS_DIFFER, slots=tuple(r.slot for r in results if r.status == Status.MISMATCH))
        return Diagnosis(Finding.OPEN, slots=tuple(r.slot for r in results if r.status != Status.OK))
    if verdict == Verdict.OK:
        return Diagnosis(Finding.IDENTIFIED)
    return Diagnosis(
        Finding.OPEN,
        slots=tuple(r.slot for r in results if r.evidence != Evidence.OBSERVED or r.boundary_index is None),
    )


def _decided(results: Sequence[SlotResult], cfg: list[int]) -> list[tuple[int, int, int]]:
    """(slot, layer, configured layer) of every slot whose layer was decided (not one whose labels disagree
    where the values cannot tell which is right: unverified)."""
    return [
        (r.slot, r.boundary_index, cfg[r.slot])
        for r in results
        if r.boundary_index is not None and r.slot < len(cfg) and r.status != Status.UNVERIFIED
    ]


def slot_shift(results: Sequence[SlotResult], cfg: list[int]) -> int:
    """How many slots late the configured ids hold the training layers, as the matched captures place them:
    the decided slots, and a slot with a match but no layer (it matched a capture within noise without
    ruling out its neighbours: that capture sits in an engine slot all the same). A shift seen on two
    slots or more, or on one whose layer differs from the configured one by more than one layer, is a
    slot shift rather than the engine counting layers one off (which :func:`diagnose` calls a layer
    shift)."""
    pairs = _decided(results, cfg)
    placed = pairs + [
        (r.slot, r.match.capture.boundary, cfg[r.slot])
        for r in results
        if r.boundary_index is None
        and r.match is not None
        and r.match.capture.boundary is not None
        and r.slot < len(cfg)
    ]
    shift = position_shift(placed, cfg)
    if not shift:
        return 0
    one_layer = len(pairs) == 1 and abs(pairs[0][2] - pairs[0][1]) <= 1
    return shift if len(placed) > 1 or not one_layer else 0


def with_slot_shift(results: Sequence[SlotResult], configured: Configured | None) -> tuple[SlotResult, ...]:
    """Under a slot shift (:func:`slot_shift`), a slot whose match could not rule out a neighbouring layer
    takes the layer of the capture the shift places in it, said as consistent at its own (low) confidence:
    the labels and the shift agree on it, the values do not rule out a neighbour."""
    if configured is None:
        return tuple(results)
    cfg = list(configured.boundary_indices)
    shift = slot_shift(results, cfg)
    if not shift:
        return tuple(results)
    out = []
    for r in results:
        b = None if r.match is None else r.match.capture.boundary
        if r.boundary_index is None and b is not None and r.slot + shift < len(cfg) and cfg[r.slot + shift] == b:
            r = replace(
                r,
                boundary_index=b,
                evidence=Evidence.CONSISTENT,
                confidence=max(r.confidence, SHIFT_CONFIDENCE),
                status=Status.MISMATCH,
                note=f"{r.note}; consistent with B{b}: the configured ids hold every matched training slot {shift} "
                f"slot{'s' if shift > 1 else ''} late, and B{b} is what they place in this slot's capture",
            )
        out.append(r)
    return tuple(out)


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
        if (
            pairs
            and all(s + p < len(cfg) and cfg[s + p] == b for s, b, _ in pairs if s + p < len(cfg))
            and any(s + p < len(cfg) for s, _, _ in pairs)
        ):
            return p
    return 0


def miss(
    results: Sequence[SlotResult],
    configured: Configured | None,
    candidates: dict[int, list[Candidate]],
    num_layers: int | None,
    model_family: str | None,
) -> Miss | None:
    """Which way the configured captures miss their training slots when no capture matched and no
    training label names the slots: each slot against the capture configured for it, on the same
    tokens (:func:`hsdiff.align.separation.miss_direction`). The distance is one layer when another
    engine's reading of the configured ids captures exactly the layers one step that way, or when no
    capture but a neighbour of where the miss places each slot is nearer to it than its own, and every
    miss is what one layer moves the states by there (:func:`hsdiff.align.separation.one_layer_apart`)."""
    if configured is None or any(r.match is not None or r.boundary_index is not None for r in results):
        return None
    cfg = list(configured.boundary_indices)
    own = []
    for r in results:
        mine = [c for c in candidates.get(r.slot, []) if r.slot < len(cfg) and c.boundary == cfg[r.slot]]
        if not mine:
            return None
        own.append(min(mine, key=lambda c: c.metrics.rel_err))
    seen = miss_direction([c.metrics for c in own])
    if seen is None:
        return None
    trained = [cfg[r.slot] - seen.sign for r in results]
    by = tuple(
        conv.rule(e).title for e in conv.ENGINES if _reads_as(configured.ids, e, trained, num_layers, model_family)
    )
    seps = [
        separation_at(b, [c for c in candidates[r.slot] if c is not mine], num_layers)
        for b, mine, r in zip(trained, own, results)
    ]
    near = bool(by) or (
        all(_nearest(c, candidates[r.slot], b) for c, r, b in zip(own, results, trained))
        and one_layer_apart([c.metrics.rel_err for c in own], seps)
    )
    return Miss(seen, 1 if near else None, by, max(one_layer_floor(s) for s in seps))


def _nearest(own: Candidate, cands: Sequence[Candidate], b: int) -> bool:
    """Whether no capture but ``own`` and the other neighbour of ``b`` (one layer's update can be far
    smaller than the next: SmolLM2 up-scaled to 126 layers, B4 is 26 % from B5, B6 115 %) is nearer to
    the slot a miss places at ``b``; one there or farther off would contradict the placement."""
    return all(
        o.metrics.rel_err >= own.metrics.rel_err
        for o in cands
        if o is not own and o.boundary is not None and abs(o.boundary - b) != 1
    )


def _reads_as(
    ids: Sequence[int], engine: str, boundaries: list[int], num_layers: int | None, family: str | None
) -> bool:
    """Whether ``engine``'s rule (its newest version) reads ``ids`` as exactly ``boundaries`` (never an engine
    that reads no ids: its layers explain nothing about how ids were written)."""
    if conv.applied(engine, conv.rule(engine).family_for(family)).fixed:
        return False
    try:
        return conv.to_boundary(list(ids), engine, num_layers=num_layers, model_family=family) == sorted(boundaries)
    except InputError:  # a rule that needs the layer count, or ids it refuses
        return False


def with_miss(
    results: Sequence[SlotResult],
    found: Miss,
    configured: Configured,
    engine: str,
    family: str,
    num_layers: int | None,
    version: str | None,
) -> tuple[SlotResult, ...]:
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
        out.append(
            replace(
                r,
                boundary_index=b,
                layer_id=layer_id,
                evidence=Evidence.INFERRED,
                confidence=MISS_CONFIDENCE,
                status=Status.MISMATCH,
                note=f"{r.note}; inferred B{b}: the capture configured for it (B{configured.boundary_indices[r.slot]}) "
                f"sits one layer {found.seen.way} (norms on the same tokens), as every slot's does",
            )
        )
    return tuple(out)
