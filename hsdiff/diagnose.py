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

from .model import Configured, Evidence, Recommendation, SlotResult, Status, Verdict
from .model.diagnosis import Diagnosis, Finding

__all__ = ["diagnose", "label_shift", "position_shift"]


def diagnose(verdict: Verdict, results: Sequence[SlotResult], configured: Configured | None,
             recommended: Recommendation) -> Diagnosis:
    """The finding the slot results and the verdict they give come to."""
    if not any(r.match is not None for r in results):
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
    if configured is None or not results or any(r.boundary_index is None or r.configured_boundary is None
                                                for r in results):
        return 0
    diffs = {r.configured_boundary - r.boundary_index for r in results}  # type: ignore[operator]
    return diffs.pop() if len(diffs) == 1 else 0


def position_shift(pairs: Sequence[tuple[int, int, int]], cfg: list[int]) -> int:
    """How many slots late the configured layers hold the training layers (slot, trained, configured)."""
    for p in range(1, len(cfg)):
        if pairs and all(s + p < len(cfg) and cfg[s + p] == b for s, b, _ in pairs if s + p < len(cfg)) and any(
            s + p < len(cfg) for s, _, _ in pairs
        ):
            return p
    return 0
