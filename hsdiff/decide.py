"""Every decision about the training slots, as functions over records: no torch, no files.

In the order :func:`hsdiff.compare` calls them:

* :func:`decide_slot` — what the values alone say a slot is, with a confidence against the separation
  of its neighbouring layers, read from the data (:mod:`hsdiff.align.separation`;
  :class:`~hsdiff.model.SlotDecision`);
* :func:`resolve` — the labels weighed in: a match that cannot rule out a neighbour takes the layer
  its labels agree on (``consistent``; the training side's labels or a capture's own tag, never the
  configured ids alone: the configuration under test is not evidence for itself), unobserved slots
  are inferred from the training labels and the offset the values show, labels that contradict the
  training side are said and never pass; then each slot against the configured ids
  (:class:`~hsdiff.model.SlotResult`);
* :func:`verdict` and :func:`recommend` — the outcome, and the ids for every engine (what can
  override the verdict afterwards: :mod:`hsdiff.overrides`).

Example, on records alone::

    >>> from hsdiff.model import Candidate, Capture, Layer, Metrics, Origin
    >>> cap = Capture("infer", Origin("dump.pt"), (8, 16), "bfloat16", 16, layer=Layer(3))
    >>> d = decide_slot(0, [Candidate(cap, None, 0, Metrics(0.01, 1.0, 0.02, 1.0, 8, 128))], 0.10, 30)
    >>> d.status, d.boundary  # 1 % against the neighbour separation of a 30-layer target (2.2 / 30)
    ('identified', 3)
    >>> candidates = [Candidate(cap, None, 0, Metrics(0.01, 1.0, 0.02, 1.0, 8, 128))]
    >>> decide_slot(0, candidates, 0.10).status  # depth unknown: 126 assumed
    'ambiguous'
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

from . import labels
from .align.separation import Separation, best_of_neighbours, clears_noise_floor, neighbour_separation, what_to_dump
from .errors import InputError
from .labels import CONFLICT_CONFIDENCE, MAX_LABEL_OFFSET, UNCHECKED_LABEL_CONFIDENCE
from .model import (
    Candidate,
    Configured,
    EngineIds,
    Evidence,
    Metrics,
    Recommendation,
    Settings,
    SlotDecision,
    SlotResult,
    Status,
    Verdict,
    layers_in_words,
    pct,
)
from .rules import conventions as conv
from .rules.serving import serve

__all__ = [
    "NOISE_TOLERANCE",
    "AMBIGUOUS_RATIO",
    "SINK_CONFIDENCE",
    "CONSISTENT_CONFIDENCE",
    "coherent",
    "decide_slot",
    "evidence_cap",
    "at_noise_floor",
    "Resolution",
    "resolve",
    "verdict",
    "recommend",
]

#: Largest median per-token relative error still read as "the same tensor" (bf16/fp16/fp8 noise).
NOISE_TOLERANCE = 0.10
#: A match whose runner-up error is less than this multiple of its own cannot be told from it.
AMBIGUOUS_RATIO = 3.0
#: Highest confidence a comparison of attention-sink tokens alone can carry.
SINK_CONFIDENCE = 0.25
#: How far a summary's cosine may fall below what its error allows (statistics over a few tokens).
COHERENCE_SLACK = 0.005
#: Highest confidence of an ambiguous match.
AMBIGUOUS_CONFIDENCE = 0.4
#: Confidence of a slot whose values agree with its labelled layer within noise but cannot rule out
#: a neighbour (``consistent``): the answer is the labels'. Chosen on 200 calibration scenarios of the
#: fitted seeds (100 % of such slots right); on the held-out seeds 100000..100999 (``make calibrate``)
#: 174 of 175 were right (the other: five printed values of a capture labelled one layer off). Kept well
#: under 0.9 because labels can be wrong the same way as the configuration under test.
CONSISTENT_CONFIDENCE = 0.6
#: Confidence of an inferred slot, relative to the least confident observed one.
INFERRED_FACTOR = 0.8
#: Confidence of a slot inferred from the training labels alone, with no offset learned from values.
LABELS_ONLY_CONFIDENCE = 0.4
_RULE_OUT = math.log10(AMBIGUOUS_RATIO)


def evidence_cap(values: int) -> float:
    """Highest confidence a match on ``values`` printed numbers can carry: 5 values 0.33, 20 values
    0.67, 100 values 0.91, a whole tensor ~1 (measured on SmolLM2: the spread of the per-token error
    over 5 columns of one token is several times that over a full row)."""
    return values / (values + 10.0) if values > 0 else 0.0


def coherent(m: Metrics) -> bool:
    """Whether a comparison's cosine is possible at its error: a relative error e forces every token's
    cosine to at least sqrt(1 - e^2); a summary breaking that mixes tokens that disagree."""
    return not (m.rel_err < 1 and m.cosine < math.sqrt(1 - m.rel_err**2) - COHERENCE_SLACK)


def decide_slot(slot: int, cands: Sequence[Candidate], tolerance: float, num_layers: int | None = None) -> SlotDecision:
    """What the values say training slot ``slot`` is, from its candidates (best first)."""
    if not cands:
        return SlotDecision(
            slot,
            Status.UNOBSERVED,
            None,
            0.0,
            None,
            None,
            None,
            "no inference capture could be compared with this slot",
        )
    first = next((c for c in cands if coherent(c.metrics)), None)
    if first is not None and first is not cands[0]:  # an incoherent summary cannot be the match, only a runner-up
        cands = [first] + [c for c in cands if c is not first]
    ordinary = [c for c in cands if not c.metrics.sink_only and c.metrics.rel_err <= tolerance and coherent(c.metrics)]
    if cands[0].metrics.sink_only and ordinary:  # ordinary tokens separate layers, sinks cannot
        cands = ordinary + [c for c in cands if all(c is not o for o in ordinary)]
    top = cands[0]
    m = top.metrics
    runner = next((c for c in cands[1:] if c.boundary != top.boundary or top.boundary is None), None)
    margin = None if runner is None else runner.metrics.rel_err - m.rel_err
    if not m.rel_err <= tolerance or not coherent(m):
        why = "" if coherent(m) else f", but cosine {m.cosine:.3f}, which that error rules out: the tokens disagree"
        return SlotDecision(
            slot,
            Status.UNMATCHED,
            None,
            0.0,
            margin,
            None,
            top,
            f"no inference capture equals this slot (closest: {top.capture.label()}, error {pct(m.rel_err)}{why})",
        )
    b = top.boundary
    sep = neighbour_separation(top, cands, num_layers)
    if runner is not None and runner.metrics.sink_only and runner.metrics.rel_err <= tolerance and b is not None:
        sep = Separation(min(sep.value, runner.metrics.rel_err), sep.basis)  # a sink match elsewhere leaves doubt
    ratio = sep.value / max(m.rel_err, 1e-3)
    conf = max(0.0, min(1.0, math.log(ratio) / math.log(10))) if ratio > 1 else 0.0
    note = ""
    if b is not None and not sep.measured:
        note = f" (neighbouring layers not captured: separation estimated at {pct(sep.value)}, from {sep.basis})"
    few = False
    if top.capture.is_partial:
        # a few printed numbers estimate the error roughly: confidence grows with the evidence
        cap = evidence_cap(m.values)
        if conf > cap:
            conf, few = cap, True
            if cap < 0.9:
                note += f" (confidence capped at {cap:.2f}: only {m.values} printed values)"
    if m.sink_only:
        return SlotDecision(
            slot,
            Status.AMBIGUOUS,
            None,
            min(conf, SINK_CONFIDENCE),
            margin,
            top,
            runner,
            f"only attention-sink tokens were compared (closest: {top.capture.label()} at "
            f"{pct(m.rel_err)}); the sink barely changes across middle layers, so it cannot tell B{b} from "
            f"B{b - 1 if b else 0} or B{(b or 0) + 1}: print ordinary tokens (position ≥ 1)",
            candidate_boundary=b,
        )
    if ratio < AMBIGUOUS_RATIO and runner is not None and not few and best_of_neighbours(top, sep, runner):
        next_best = runner
        note = (
            f"matches {top.capture.label()} at {pct(m.rel_err)} error, the best of B{b} and its captured "
            f"neighbours (next best {next_best.capture.label()} at {pct(next_best.metrics.rel_err)}): "
            "the values decide between neighbouring layers"
        )
        return SlotDecision(
            slot, Status.IDENTIFIED, b, conf, margin, top, runner, note, separation=sep.value, measured=True
        )
    if ratio < AMBIGUOUS_RATIO:
        who = (
            runner.capture.label()
            if runner is not None and sep.value == runner.metrics.rel_err
            else "an uncaptured neighbour"
        )
        return SlotDecision(
            slot,
            Status.AMBIGUOUS,
            None,
            min(conf, AMBIGUOUS_CONFIDENCE),
            margin,
            top,
            runner,
            f"matches {top.capture.label()} at {pct(m.rel_err)} but {who} may be nearly as close "
            f"({pct(sep.value)}{'' if sep.measured else ', estimated from ' + sep.basis}): the evidence cannot "
            f"separate neighbouring layers ({what_to_dump(b, sep.measured)})" + _depth_words(sep, m.rel_err),
            candidate_boundary=b,
            separation=sep.value,
            measured=sep.measured,
        )
    if few and conf < _RULE_OUT:
        return SlotDecision(
            slot,
            Status.AMBIGUOUS,
            None,
            conf,
            margin,
            top,
            runner,
            f"matches {top.capture.label()} at {pct(m.rel_err)}, but {m.values} printed values are too few to rule "
            "out a neighbouring layer",
            candidate_boundary=b,
        )
    note = f"matches {top.capture.label()} at {pct(m.rel_err)} error" + note
    if b is None:
        note += "; that capture carries no layer number (pass --layer-ids to label it)"
        return SlotDecision(slot, Status.UNLABELLED, None, conf, margin, top, runner, note)
    return SlotDecision(
        slot, Status.IDENTIFIED, b, conf, margin, top, runner, note, separation=sep.value, measured=sep.measured
    )


def _depth_words(sep: Separation, err: float) -> str:
    """For a slot left open by the assumed depth: the layer counts that would settle it, and the flag."""
    upto = sep.settled_up_to(err, AMBIGUOUS_RATIO) if sep.depth_assumed else 0
    if upto < 1:
        return ""
    return (
        f"; it is the unknown depth that keeps it open: on a target of up to {upto} layers this error settles it, "
        "so pass --num-layers or --model-config"
    )


@dataclass(frozen=True)
class Resolution:
    """Every slot weighed against the labels and the configuration, and what that raised."""

    slots: tuple[SlotResult, ...]
    label_offset: int | None
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class _Answer:
    boundary: int | None
    evidence: Evidence
    confidence: float
    note: str


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
    finals: Collection[int] = (),
) -> Resolution:
    """Weigh the labels in: a slot the values match within noise without ruling out a neighbour takes
    the layer its labels agree on (``consistent``); a slot with no value evidence is inferred from the
    training labels shifted by the offset the values show (as labelled when nothing was matched at
    all; ``finals``, the slots that hold the training file's final post-norm state, as labelled: that
    state is no count of layers that could be off); then each slot is judged against the configured ids."""
    decisions = at_noise_floor(decisions)
    label_offset, warnings = labels.label_offset(decisions, claims, claim_src)
    cfg_b = list(configured.boundary_indices) if configured else None
    conflicts = [labels.conflict(d, c, candidates.get(d.slot, []), tolerance) for d, c in zip(decisions, claims)]
    observed_conf = [
        min(d.confidence, CONFLICT_CONFIDENCE) if x else d.confidence
        for d, x in zip(decisions, conflicts)
        if d.identified
    ]
    offset = label_offset if label_offset is not None else (0 if not observed_conf else None)
    if offset is not None and abs(offset) > MAX_LABEL_OFFSET:
        offset = None
    results = []
    for d in decisions:
        s = d.slot
        cfg = None if cfg_b is None or s >= len(cfg_b) else cfg_b[s]
        a = _answer(
            d,
            claims[s],
            claim_src,
            offset,
            label_offset is None,
            observed_conf,
            candidates.get(s, []),
            tolerance,
            s in finals,
            num_layers,
        )
        status, against = _against_config(d, a.boundary, a.evidence, cfg_b, candidates.get(s, []), tolerance)
        note = a.note + (f"; {against}" if against else "")
        if conflicts[s] and status == Status.OK:
            status = Status.UNVERIFIED
            note += "; a gate does not pass on labels that contradict the training side"
        elif conflicts[s] and status == Status.MISMATCH and cfg is not None and claims[s] == cfg:
            status = (
                Status.UNVERIFIED
            )  # the configured ids reproduce the training labels; only a capture's label differs
            note += (
                f"; the training labels say B{cfg}, as the configured ids capture: whether the engine feeds this slot "
                "what it was trained on turns on which label counts right, which the values cannot tell"
            )
        layer_id = None
        if a.boundary is not None:
            layer_id = conv.from_boundary(
                [a.boundary], engine, num_layers=num_layers, model_family=family, version=version
            )[0]
        results.append(
            SlotResult(
                slot=s,
                boundary_index=a.boundary,
                layer_id=layer_id,
                evidence=a.evidence,
                confidence=float(a.confidence),
                margin=d.margin,
                match=d.match,
                runner_up=d.runner_up,
                claimed_boundary=claims[s],
                configured_boundary=cfg,
                status=status,
                note=note,
                against_config=against,
                separation=d.separation,
                separation_measured=d.measured,
            )
        )
    warnings += labels.label_warnings(results, decisions, claim_src, label_offset)
    return Resolution(tuple(results), label_offset, tuple(warnings))


def at_noise_floor(decisions: Sequence[SlotDecision]) -> list[SlotDecision]:
    """Identified slots whose estimated separation does not clearly exceed the noise floor the other
    identified slots show at their depth or above (a neighbour's error is that noise plus one update;
    the noise of a lower-precision run grows with depth, so a deeper slot's error says nothing of the
    noise at a shallower one) become ambiguous."""
    out = list(decisions)
    for i, d in enumerate(decisions):
        if not d.identified or d.measured or d.separation is None or d.match is None or d.boundary is None:
            continue
        floor = max(
            (
                o.match.metrics.rel_err
                for o in decisions
                if o is not d
                and o.identified
                and o.match is not None
                and not o.match.capture.is_partial
                and o.boundary is not None
                and o.boundary <= d.boundary
            ),
            default=0.0,
        )
        if not clears_noise_floor(d.separation, d.match.metrics.rel_err, floor):
            out[i] = replace(
                d,
                status=Status.AMBIGUOUS,
                boundary=None,
                candidate_boundary=d.boundary,
                confidence=min(d.confidence, AMBIGUOUS_CONFIDENCE),
                note=(
                    f"matches {d.match.capture.label()} at {pct(d.match.metrics.rel_err)}, but the noise floor seen on "
                    f"the other slots ({pct(floor)}) is not clearly below the separation of its neighbouring layers "
                    f"({pct(d.separation)}, estimated): the evidence cannot separate neighbouring layers "
                    f"({what_to_dump(d.boundary, False)})"
                ),
            )
    return out


def _answer(
    d: SlotDecision,
    claim: int | None,
    claim_src: str,
    offset: int | None,
    offset_assumed: bool,
    observed_conf: list[float],
    cands: list[Candidate],
    tolerance: float,
    final: bool = False,
    num_layers: int | None = None,
) -> _Answer:
    """One slot's layer, what it rests on and how sure: values, then values and labels, then labels."""
    note = d.note
    guess = claim if final else None if claim is None or offset is None else claim + offset
    if d.identified:
        conf = d.confidence
        if (
            labels.conflict(d, claim, cands, tolerance)
            and d.match is not None
            and d.boundary is not None
            and claim is not None
        ):
            # two sets of labels disagree and the values cannot say which counts right
            conf = min(conf, CONFLICT_CONFIDENCE)
            whose = labels.label_words(d.match)
            note += (
                f"; the training side labels this slot B{claim} ({claim_src}): {whose} and the training label "
                f"differ by {layers_in_words(d.boundary - claim)}"
                " and the values cannot tell which counts right"
            )
        elif labels.unchecked(d, claim, cands, tolerance) and conf > UNCHECKED_LABEL_CONFIDENCE:
            conf = UNCHECKED_LABEL_CONFIDENCE
            note += (
                "; its layer is the capture's own label, whose counting (boundary or layer output) nothing "
                "confirmed: no training label agrees with it and the dump holds no embedding lookup to check it by"
            )
        return _Answer(d.boundary, Evidence.OBSERVED, conf, note)
    label = labels.consistent_label(d, guess, cands, tolerance)
    if label is not None:
        b, said_by = label
        sink = d.match is not None and d.match.metrics.sink_only
        why = "only on attention-sink tokens" if sink else "do not rule out a neighbouring layer"
        return _Answer(
            b,
            Evidence.CONSISTENT,
            max(d.confidence, CONSISTENT_CONFIDENCE if not sink else SINK_CONFIDENCE),
            note + f"; consistent with B{b}, as {said_by}: the values equal it within noise but {why}, "
            "so the answer comes from the labels",
        )
    if guess is not None and num_layers is not None and guess > num_layers and not final:
        note += f"; the training labels place it at B{guess}, past the target's last layer: not inferred"
        guess = None
    refuted = None if guess is None else labels.refuted(guess, cands, tolerance)
    if refuted is not None:  # the values contradict the label: the slot stays open rather than repeat it
        note += (
            f"; the training labels place it at B{guess}, but the capture labelled B{guess} "
            f"({refuted.capture.label()}) differs from it by {pct(refuted.metrics.rel_err)}: not inferred"
        )
        guess = None
    if guess is not None and (d.candidate_boundary is None or abs(d.candidate_boundary - guess) <= 1):
        if observed_conf:
            conf = round(INFERRED_FACTOR * min(observed_conf), 4)
        else:
            conf = LABELS_ONLY_CONFIDENCE
        if final:
            said = "the final post-norm state: the training file's final hidden state, bit for bit"
        else:
            how = "as labelled" if offset == 0 else f"labels shifted by {offset:+d}"
            src = "as on the observed slots" if not offset_assumed else "no slot was identified by value"
            said = f"B{guess} from the training labels ({claim_src}; {how}, {src})"
        return _Answer(guess, Evidence.INFERRED, conf, (note + "; " if note else "") + f"inferred {said}")
    if d.status in (Status.UNOBSERVED, Status.UNMATCHED):
        note += "; capture more layers to identify it (e.g. dump every layer's input once, see docs/capture.md)"
    return _Answer(None, Evidence.NONE, 0.0, note)


def _against_config(
    d: SlotDecision,
    b: int | None,
    evidence: Evidence,
    cfg_b: list[int] | None,
    cands: list[Candidate],
    tolerance: float,
) -> tuple[Status, str]:
    """The slot's status against the configured ids, and the words that say why ("" when its note says it)."""
    s = d.slot
    if cfg_b is None:
        if b is not None and evidence == Evidence.OBSERVED:
            return Status.IDENTIFIED, ""
        if b is not None and evidence == Evidence.INFERRED:
            return Status.INFERRED, ""
        if b is not None:
            return Status.UNVERIFIED, ""
        return d.status, ""
    if s >= len(cfg_b):
        return Status.MISMATCH, f"the engine is configured with only {len(cfg_b)} ids, so slot {s} gets nothing"
    cfg = cfg_b[s]
    if evidence == Evidence.OBSERVED:
        if b == cfg:
            return Status.OK, ""
        return Status.MISMATCH, f"the engine captures B{cfg} for this slot"
    if evidence == Evidence.CONSISTENT:
        if b != cfg:
            return Status.MISMATCH, f"the engine captures B{cfg} for this slot"
        if d.match is not None and d.match.metrics.sink_only:
            return Status.UNVERIFIED, "a gate passes only on ordinary (non-sink) tokens"
        # labels name the layer the values leave open, but a label can be wrong the same way as the
        # configuration (the same ids, the same rule): a gate passes on values alone
        return Status.UNVERIFIED, "a gate passes only when the values rule out the neighbouring layers"
    direct = next((c for c in cands if c.boundary == cfg), None)
    if direct is not None and not direct.metrics.sink_only and (b is None or b == cfg):
        e = direct.metrics.rel_err
        if e > tolerance:
            return Status.MISMATCH, f"the engine's slot {s} (B{cfg}) differs from it by {pct(e)}"
        open_ = Status.AMBIGUOUS if d.status == Status.AMBIGUOUS else Status.UNVERIFIED
        best = d.candidate_boundary
        if best is not None and best != cfg and d.match is not None:
            return open_, (
                f"the engine's slot {s} (B{cfg}) is within noise ({pct(e)}) but is not the best "
                f"match (B{best} is, at {pct(d.match.metrics.rel_err)}), so it is not passed"
            )
        return open_, (
            f"the engine's slot {s} equals it within noise ({pct(e)}), but only the configured ids say that capture "
            f"is B{cfg}, and the configuration under test is not evidence for itself: {what_to_dump(cfg, d.measured)} "
            "to tell them apart"
        )
    if b is not None:
        if b != cfg:
            return Status.MISMATCH, f"the engine captures B{cfg} for this slot"
        return Status.UNVERIFIED, "the configured id agrees but was not observed"
    return (Status.AMBIGUOUS if d.status == Status.AMBIGUOUS else Status.UNVERIFIED), ""


def verdict(
    results: Sequence[SlotResult], configured: Configured | None, recommended: Recommendation | None = None
) -> Verdict:
    """OK only when every slot equals what the engine captures, on ordinary tokens (or, with no
    configuration, every slot was identified by value and no training label contradicts it), and the
    engine can serve the slots (``recommended.unservable`` empty); MISMATCH when a slot differs, the
    engine cannot serve them, or nothing matched at all."""
    if not any(r.match is not None for r in results):
        return Verdict.MISMATCH
    if recommended is not None and recommended.unservable:
        return Verdict.MISMATCH
    if configured is not None:
        if any(r.status == Status.MISMATCH for r in results):
            return Verdict.MISMATCH
        return Verdict.OK if all(r.status == Status.OK for r in results) else Verdict.INCONCLUSIVE
    if all(r.evidence == Evidence.OBSERVED and r.boundary_index is not None for r in results) and not any(
        r.claimed_boundary is not None and r.claimed_boundary != r.boundary_index for r in results
    ):
        return Verdict.OK
    return Verdict.INCONCLUSIVE


def recommend(
    settings: Settings, boundaries: Sequence[int | None], finals: Collection[int] = ()
) -> tuple[Recommendation, list[str]]:
    """The ids that make the settings' engine, at its version, capture ``boundaries``; the same layers on
    every engine at the version ``settings`` assumes for it (the report's own engine: its own answer);
    warnings for what stands in the way of serving them (:func:`hsdiff.rules.serving.serve`; ``finals``: the
    slots that hold the final post-norm state)."""
    own, family, L, kind = settings.engine, settings.model_family, settings.num_layers, settings.draft_kind
    served = serve(
        list(boundaries), own.engine, num_layers=L, model_family=family, version=own.version, kind=kind, finals=finals
    )
    by_engine: dict[str, EngineIds] = {}
    for at in settings.versions:
        if at.engine == own.engine:
            by_engine[at.engine] = EngineIds(own, served.ids)
            continue
        try:
            ids = serve(
                list(boundaries), at.engine, num_layers=L, model_family=family, version=at.version, kind=kind
            ).ids
        except InputError:  # a rule that needs the layer count, which is not known, or no rows for the kind
            ids = tuple(None for _ in boundaries)
        by_engine[at.engine] = EngineIds(at, ids)
    try:
        key = conv.key_name(conv.write_key(own.engine, kind))
    except InputError:  # an engine that reads no draft config
        key = ""
    rec = Recommendation(
        own.engine, family, served.ids, tuple(boundaries), by_engine, tuple(served.sentences()), own.version, own.rule
    )
    return replace(rec, kind=kind, config_key=key, finals=tuple(sorted(finals))), list(served.notes)


def to_recommend(results: Sequence[SlotResult]) -> list[int | None]:
    """The boundary to recommend per slot: the one the values identified, else, for a slot that is
    OK because the configured boundary agrees with the values within noise, that configured one (a
    paste line with a null in it would break the config it goes into); none for a slot whose labels
    disagree with the training side's where the values cannot tell which is right."""
    return [
        None
        if r.status == Status.UNVERIFIED and r.claimed_boundary not in (None, r.boundary_index)
        else r.boundary_index
        if r.boundary_index is not None or r.status != Status.OK
        else r.configured_boundary
        for r in results
    ]
