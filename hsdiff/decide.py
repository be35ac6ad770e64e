"""Every decision about the training slots, as functions over records: no torch, no files.

In the order :func:`hsdiff.compare` calls them:

* :func:`decide_slot` — what the values alone say a slot is, with a confidence that accounts for
  neighbouring layers that were not captured (:class:`~hsdiff.model.SlotDecision`);
* :func:`resolve` — the training side's labels weighed in (unobserved slots inferred from them and
  the offset the values show), then each slot against the configured ids
  (:class:`~hsdiff.model.SlotResult`);
* :func:`verdict` and :func:`recommend` — the outcome, and the ids for every engine.

Example, on records alone::

    >>> from hsdiff.model import Candidate, Capture, Layer, Metrics, Origin
    >>> cap = Capture("infer", Origin("dump.pt"), (8, 16), "bfloat16", 16, layer=Layer(3))
    >>> d = decide_slot(0, [Candidate(cap, None, 0, Metrics(0.01, 1.0, 0.02, 1.0, 8, 128))], 0.10)
    >>> d.status, d.boundary
    ('identified', 3)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from . import conventions as conv
from .errors import InputError
from .model import (
    Candidate,
    Configured,
    Evidence,
    Recommendation,
    SlotDecision,
    SlotResult,
    Status,
    Verdict,
    pct,
)
from .serving import serve

__all__ = [
    "NOISE_TOLERANCE",
    "ADJACENT_PRIOR",
    "AMBIGUOUS_RATIO",
    "SINK_CONFIDENCE",
    "decide_slot",
    "evidence_cap",
    "Resolution",
    "resolve",
    "verdict",
    "recommend",
    "count_warning",
]

#: Largest median per-token relative error still read as "the same tensor" (bf16/fp16/fp8 noise).
NOISE_TOLERANCE = 0.10
#: The smallest median error expected between neighbouring boundaries on ordinary tokens, used
#: when the neighbours of a match were not captured and so could not be ruled out directly.
#: Conservative: SmolLM2's neighbours differ by 15-30 %, but the middle of the 61-layer seed
#: target (each layer applied twice, residual norm doubled) only by 7.9-10 %.
ADJACENT_PRIOR = 0.08
#: A match whose runner-up error is less than this multiple of its own cannot be told from it.
AMBIGUOUS_RATIO = 3.0
#: Highest confidence a comparison of attention-sink tokens alone can carry.
SINK_CONFIDENCE = 0.25
#: Highest confidence of an ambiguous match.
AMBIGUOUS_CONFIDENCE = 0.4
#: Confidence of an inferred slot, relative to the least confident observed one.
INFERRED_FACTOR = 0.8


def evidence_cap(values: int) -> float:
    """Highest confidence a match on ``values`` printed numbers can carry: 5 values 0.33, 20 values
    0.67, 100 values 0.91, a whole tensor ~1 (measured on SmolLM2: the spread of the per-token error
    over 5 columns of one token is several times that over a full row)."""
    return values / (values + 10.0) if values > 0 else 0.0


def decide_slot(slot: int, cands: Sequence[Candidate], tolerance: float) -> SlotDecision:
    """What the values say training slot ``slot`` is, from its candidates (best first)."""
    if not cands:
        return SlotDecision(slot, Status.UNOBSERVED, None, 0.0, None, None, None,
                            "no inference capture could be compared with this slot")
    ordinary = [c for c in cands if not c.metrics.sink_only and c.metrics.rel_err <= tolerance]
    if cands[0].metrics.sink_only and ordinary:  # ordinary tokens separate layers, sinks cannot
        cands = ordinary + [c for c in cands if all(c is not o for o in ordinary)]
    top = cands[0]
    m = top.metrics
    runner = next((c for c in cands[1:] if c.boundary != top.boundary or top.boundary is None), None)
    margin = None if runner is None else runner.metrics.rel_err - m.rel_err
    if not m.rel_err <= tolerance:
        return SlotDecision(slot, Status.UNMATCHED, None, 0.0, margin, None, top,
                            f"no inference capture equals this slot (closest: {top.capture.label()}, "
                            f"error {pct(m.rel_err)})")
    b = top.boundary
    neighbours = {c.boundary for c in cands} & ({b - 1, b + 1} if b is not None else set())
    sep = runner.metrics.rel_err if runner is not None else math.inf
    neighbour_note = ""
    if b is not None and len(neighbours) < 2 and sep > ADJACENT_PRIOR:
        sep = ADJACENT_PRIOR
        neighbour_note = " (neighbouring layers not captured: separation taken from the adjacent-layer prior)"
    ratio = sep / max(m.rel_err, 1e-3)
    conf = max(0.0, min(1.0, math.log(ratio) / math.log(10))) if ratio > 1 else 0.0
    if top.capture.is_partial:
        # a few printed numbers estimate the error roughly: confidence grows with the evidence
        cap = evidence_cap(m.values)
        if conf > cap:
            conf = cap
            if cap < 0.9:
                neighbour_note += f" (confidence capped at {cap:.2f}: only {m.values} printed values)"
    if m.sink_only:
        return SlotDecision(
            slot, Status.AMBIGUOUS, None, min(conf, SINK_CONFIDENCE), margin, top, runner,
            f"only attention-sink tokens were compared (closest: {top.capture.label()} at "
            f"{pct(m.rel_err)}); the sink barely changes across middle layers, so it cannot tell B{b} from "
            f"B{b - 1 if b else 0} or B{(b or 0) + 1}: print ordinary tokens (position ≥ 1)",
            candidate_boundary=b,
        )
    if ratio < AMBIGUOUS_RATIO:
        who = runner.capture.label() if runner is not None and sep == runner.metrics.rel_err else "an uncaptured neighbour"
        return SlotDecision(
            slot, Status.AMBIGUOUS, None, min(conf, AMBIGUOUS_CONFIDENCE), margin, top, runner,
            f"matches {top.capture.label()} at {pct(m.rel_err)} but {who} is nearly as close "
            f"({pct(sep)}): the evidence cannot separate neighbouring layers",
            candidate_boundary=b,
        )
    note = f"matches {top.capture.label()} at {pct(m.rel_err)} error" + neighbour_note
    if b is None:
        note += "; that capture carries no layer number (pass --layer-ids to label it)"
        return SlotDecision(slot, Status.UNLABELLED, None, conf, margin, top, runner, note)
    return SlotDecision(slot, Status.IDENTIFIED, b, conf, margin, top, runner, note)


@dataclass(frozen=True)
class Resolution:
    """Every slot weighed against the labels and the configuration, and what that raised."""

    slots: tuple[SlotResult, ...]
    label_offset: int | None
    warnings: tuple[str, ...]


def resolve(
    decisions: Sequence[SlotDecision],
    claims: Sequence[int | None],
    claim_src: str,
    configured: Configured | None,
    candidates: dict[int, list[Candidate]],
    tolerance: float,
    engine: str,
    family: str,
    num_layers: int | None,
    version: str | None = None,
) -> Resolution:
    """Infer unobserved slots from the training labels (shifted by the offset the values show), then
    judge each slot against the configured ids."""
    warnings: list[str] = []
    offsets = {d.boundary - c for d, c in zip(decisions, claims) if d.identified and d.boundary is not None and c is not None}
    label_offset = next(iter(offsets)) if len(offsets) == 1 else None
    if len(offsets) > 1:
        warnings.append(
            f"the training labels ({claim_src}) are off by different amounts on different slots "
            f"({sorted(offsets)}): unobserved slots were not inferred from them"
        )
    identified_conf = [d.confidence for d in decisions if d.identified]
    from_config = [d.match.capture.layer is not None and d.match.capture.layer.source == "configured"
                   for d in decisions if d.identified and d.match is not None]
    if label_offset and from_config and all(from_config):
        warnings.append(
            f"the inference dump carries no layer labels of its own, so its slots were labelled from the configured ids; "
            f"the training side's labels ({claim_src}) differ from those by {label_offset:+d} layer(s). The values "
            "match slot for slot, so the draft receives what it was trained on — provided the dump was captured with "
            "the configuration under test; if not, re-capture with it"
        )
    cfg_b = list(configured.boundary_indices) if configured else None
    results = []
    for d in decisions:
        s = d.slot
        b = d.boundary if d.identified else None
        evidence = Evidence.OBSERVED if b is not None else Evidence.NONE
        conf = d.confidence if b is not None else 0.0
        note = d.note
        if b is None and label_offset is not None and claims[s] is not None:
            guess = claims[s] + label_offset  # type: ignore[operator]
            if d.candidate_boundary is None or abs(d.candidate_boundary - guess) <= 1:
                b, evidence = guess, Evidence.INFERRED
                conf = round(INFERRED_FACTOR * min(identified_conf), 4) if identified_conf else 0.5
                how = "as labelled" if label_offset == 0 else f"labels shifted by {label_offset:+d}"
                note = (note + "; " if note else "") + (
                    f"inferred B{b} from the training labels ({claim_src}; {how}, as on the observed slots)"
                )
        elif b is None and d.status in (Status.UNOBSERVED, Status.UNMATCHED):
            note += "; capture more layers to identify it (e.g. dump every layer's input once, see docs/capture.md)"
        status, note = _against_config(d, b, evidence, cfg_b, candidates.get(s, []), tolerance, note)
        layer_id = None
        if b is not None:
            layer_id = conv.from_boundary([b], engine, num_layers=num_layers, model_family=family, version=version)[0]
        results.append(
            SlotResult(
                slot=s, boundary_index=b, layer_id=layer_id, evidence=evidence, confidence=float(conf),
                margin=d.margin, match=d.match, runner_up=d.runner_up, claimed_boundary=claims[s],
                configured_boundary=None if cfg_b is None or s >= len(cfg_b) else cfg_b[s], status=status, note=note,
            )
        )
    return Resolution(tuple(results), label_offset, tuple(warnings))


def _against_config(d: SlotDecision, b: int | None, evidence: Evidence, cfg_b: list[int] | None,
                    cands: list[Candidate], tolerance: float, note: str) -> tuple[Status, str]:
    s = d.slot
    if cfg_b is None:
        if b is not None and evidence == Evidence.OBSERVED:
            return Status.IDENTIFIED, note
        if b is not None:
            return Status.INFERRED, note
        return d.status, note
    if s >= len(cfg_b):
        return Status.MISMATCH, note + f"; the engine is configured with only {len(cfg_b)} ids, so slot {s} gets nothing"
    cfg = cfg_b[s]
    if evidence == Evidence.OBSERVED:
        if b == cfg:
            return Status.OK, note
        return Status.MISMATCH, note + f"; the engine captures B{cfg} for this slot"
    direct = next((c for c in cands if c.boundary == cfg), None)
    if direct is not None and not direct.metrics.sink_only:
        e = direct.metrics.rel_err
        if e <= tolerance:
            return Status.OK, note + f"; equals the engine's slot {s} (B{cfg}) within noise ({pct(e)})"
        return Status.MISMATCH, note + f"; the engine's slot {s} (B{cfg}) differs from it by {pct(e)}"
    if b is not None:
        if b != cfg:
            return Status.MISMATCH, note + f"; the engine captures B{cfg} for this slot"
        return Status.UNVERIFIED, note + "; the configured id agrees but was not observed"
    return (Status.AMBIGUOUS if d.status == Status.AMBIGUOUS else Status.UNVERIFIED), note


def verdict(results: Sequence[SlotResult], configured: Configured | None,
            recommended: Recommendation | None = None) -> Verdict:
    """OK only when every slot equals what the engine captures (or, with no configuration, every slot
    was identified by value) and the engine can serve the slots (``recommended.unservable`` empty);
    MISMATCH when a slot differs, the engine cannot serve them, or nothing matched at all."""
    if not any(r.match is not None for r in results):
        return Verdict.MISMATCH
    if recommended is not None and recommended.unservable:
        return Verdict.MISMATCH
    if configured is not None:
        if any(r.status == Status.MISMATCH for r in results):
            return Verdict.MISMATCH
        return Verdict.OK if all(r.status == Status.OK for r in results) else Verdict.INCONCLUSIVE
    if all(r.evidence == Evidence.OBSERVED and r.boundary_index is not None for r in results):
        return Verdict.OK
    return Verdict.INCONCLUSIVE


def recommend(engine: str, family: str, boundaries: Sequence[int | None],
              num_layers: int | None, version: str | None = None) -> tuple[Recommendation, list[str]]:
    """The ids that make ``engine`` capture ``boundaries``, the same layers on every engine, and
    warnings for what stands in the way of serving them (:func:`hsdiff.serving.serve`)."""
    served = serve(list(boundaries), engine, num_layers=num_layers, model_family=family, version=version)
    by_engine: dict[str, list[int | None]] = {}
    for e in conv.ENGINES:
        try:
            by_engine[e] = list(serve(list(boundaries), e, num_layers=num_layers,
                                      model_family=family if e in ("sglang", "specforge") else None).ids)
        except InputError:  # a rule that needs the layer count, which is not known
            by_engine[e] = [None] * len(boundaries)
    return Recommendation(engine, family, served.ids, tuple(boundaries), by_engine, tuple(served.sentences())), \
        list(served.notes)


def count_warning(configured: Configured | None, k: int) -> list[str]:
    """A warning when the number of configured ids differs from the number of training slots."""
    if configured is not None and len(configured.boundary_indices) != k:
        return [f"{len(configured.boundary_indices)} ids are configured but the training side has {k} slots"]
    return []
