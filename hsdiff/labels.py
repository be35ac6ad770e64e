"""How the labels weigh against the values and against each other: the one offset between the training
labels and the layers the values identify, a label the values refute, a capture's label the values
confirmed or not, and two labels that disagree. Used by :mod:`hsdiff.decide` while it resolves each slot.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .model import Candidate, LabelSource, SlotDecision, SlotResult, Status, layers_in_words

__all__ = [
    "CONFLICT_CONFIDENCE",
    "UNCHECKED_LABEL_CONFIDENCE",
    "MAX_LABEL_OFFSET",
    "label_offset",
    "refuted",
    "consistent_label",
    "label_words",
    "checked",
    "unchecked",
    "conflict",
    "from_config",
    "label_warnings",
]

#: Highest confidence of a match whose capture label contradicts the training side's label.
CONFLICT_CONFIDENCE = 0.5
#: The most a slot identified by a capture's own unchecked label (a dumper tag or a printed layer nothing
#: confirmed how it counts) is trusted: that counting is a convention a person chose, one layer off as
#: easily as an engine's ids; below the 0.9 the calibration holds a gate's answers to.
UNCHECKED_LABEL_CONFIDENCE = 0.8
#: Engines and trainers count layers at most one apart (a boundary index against an output index, SGLang's
#: +1): training labels further than this from the layers the values identify follow no counting
#: convention, so no unobserved slot is inferred from them shifted (one of the two labels is wrong).
MAX_LABEL_OFFSET = 1


def label_offset(
    decisions: Sequence[SlotDecision], claims: Sequence[int | None], claim_src: str
) -> tuple[int | None, list[str]]:
    """The one offset between the training labels and the identified layers, or None."""
    offsets = {
        d.boundary - c for d, c in zip(decisions, claims) if d.identified and d.boundary is not None and c is not None
    }
    if len(offsets) > 1:
        return None, [
            f"the training labels ({claim_src}) disagree with the values by different amounts on different slots "
            f"({', '.join(f'{o:+d}' for o in sorted(offsets))} layers): unobserved slots were not inferred from them"
        ]
    return next(iter(offsets), None), []


def refuted(b: int, cands: list[Candidate], tolerance: float) -> Candidate | None:
    """A whole capture labelled ``b`` that differs from the slot beyond the tolerance on ordinary tokens,
    when no capture labelled ``b`` equals it: the values refute that the slot is ``b``."""
    at = [c for c in cands if c.boundary == b and math.isfinite(c.metrics.rel_err)]
    if any(c.metrics.rel_err <= tolerance for c in at):
        return None
    whole = [c for c in at if not c.capture.is_partial and not c.metrics.sink_only]
    return min(whole, key=lambda c: c.metrics.rel_err) if whole else None


def consistent_label(
    d: SlotDecision, guess: int | None, cands: list[Candidate], tolerance: float
) -> tuple[int, str] | None:
    """The labelled layer the values match within noise without ruling out a neighbour, when labels
    other than the configuration under test agree on it: (boundary, which labels say so), or None: the
    training labels (shifted by the offset the values show), else a capture's own label (a dumper tag, a
    printed layer) when no other captured layer is as close."""
    within = [c for c in cands if c.boundary is not None and c.metrics.rel_err <= tolerance]
    ordinary = [c for c in within if not c.metrics.sink_only]
    pool = ordinary or within
    if d.status in (Status.UNMATCHED, Status.UNOBSERVED, Status.UNLABELLED) and guess is not None:
        direct = next((c for c in ordinary if c.boundary == guess), None)
        return None if direct is None else (guess, f"the training labels and {label_words(direct)} say")
    if d.status != Status.AMBIGUOUS or d.candidate_boundary is None or not pool:
        return None
    layers = {c.boundary for c in pool}
    if guess is not None:
        if guess in layers:
            return guess, f"the training labels and {label_words(next(c for c in pool if c.boundary == guess))} say"
        return None
    own = pool[0].boundary
    if len(layers) == 1 and own is not None and not from_config(pool[0]):  # none as close: its own label answers
        return own, "the capture's label says"
    return None


def label_words(c: Candidate) -> str:
    src = None if c.capture.layer is None else c.capture.layer.source
    return "the configured ids" if src == LabelSource.CONFIGURED else "the capture's label"


def checked(d: SlotDecision, cands: Sequence[Candidate], tolerance: float) -> bool:
    """Whether a capture at the slot's layer that matches it within the tolerance carries a label whose
    counting the values confirmed (:mod:`hsdiff.comparison.tags`): the same tensor, confirmed named."""
    return any(
        c.boundary == d.boundary and c.capture.layer is not None and c.capture.layer.checked
        for c in cands
        if c.metrics.rel_err <= tolerance
    )


def unchecked(d: SlotDecision, claim: int | None, cands: Sequence[Candidate], tolerance: float) -> bool:
    """A slot identified by a capture's own label that a person chose (a dumper's tag, a printed layer),
    whose counting neither the values confirmed nor a training label agreeing with it backs: the values
    place the slot, a prior names its layer."""
    layer = None if d.match is None else d.match.capture.layer
    return (
        layer is not None
        and layer.source in (LabelSource.TAG, LabelSource.LOG)
        and (claim is None or claim != d.boundary)
        and not checked(d, cands, tolerance)
    )


def conflict(d: SlotDecision, claim: int | None, cands: Sequence[Candidate], tolerance: float) -> bool:
    """An identified slot whose layer rests on a label that contradicts the training label: the capture's own
    label (a dumper tag, a key, a printed layer) or the configured ids (a capture labelled from the
    configuration under test). Two labels that disagree cannot both be right, and the values, which match
    the tensor whatever it is called, cannot say which is, unless they confirmed how a capture's label at
    that layer counts (:mod:`hsdiff.comparison.tags`)."""
    if not d.identified or claim is None or d.boundary == claim:
        return False
    return not checked(d, cands, tolerance)


def from_config(c: Candidate | None) -> bool:
    return c is not None and c.capture.layer is not None and c.capture.layer.source == LabelSource.CONFIGURED


def label_warnings(
    results: Sequence[SlotResult], decisions: Sequence[SlotDecision], claim_src: str, label_offset: int | None
) -> list[str]:
    """Training labels that disagree with the values, said with the offset in words."""
    if not label_offset:
        return []
    r = next(r for r, d in zip(results, decisions) if d.identified and r.claimed_boundary is not None)
    direction = "deeper" if label_offset < 0 else "shallower"
    words = layers_in_words(label_offset)
    if all(from_config(d.match) for d in decisions if d.identified):
        return [
            f"the inference dump carries no layer labels of its own, so its slots were labelled from the configured "
            f"ids; the training side's labels ({claim_src}) differ from those by {words} (every label {words} "
            f"{direction} than the configured layer). The values match slot for slot, so the draft receives what it "
            "was trained on if the dump was captured with the configuration under test; the gate does not pass on "
            "that assumption: re-capture with the configuration and a layer tag per capture (dumper layer_id), or "
            "correct the training labels"
        ]
    return [
        f"the training side's labels ({claim_src}) disagree with the values by {words}: what they call "
        f"B{r.claimed_boundary} matches the capture labelled B{r.boundary_index} (every label {words} {direction}); "
        "if the inference labels count layer outputs (forward-hook outputs), pass --infer-index output"
    ]
