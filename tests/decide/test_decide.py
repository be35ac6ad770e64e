"""The decision functions on small records, no files: what each rule decides and why."""

from __future__ import annotations

import math

import pytest

from hsdiff import decide
from hsdiff.align import separation
from hsdiff.model import (
    Candidate,
    Capture,
    Configured,
    Evidence,
    Layer,
    Metrics,
    Observation,
    Origin,
    SlotDecision,
    Status,
    Verdict,
    pct,
)
from hsdiff.rules.settings import settings_for

pytestmark = pytest.mark.core

TOL = decide.NOISE_TOLERANCE


def cand(
    b: int | None,
    err: float,
    *,
    sink_only: bool = False,
    printed: int | None = None,
    source: str = "tag",
    tokens: int = 8,
) -> Candidate:
    obs = None
    if printed is not None:
        import numpy as np

        obs = Observation(np.zeros((1, printed)), (0,), tuple(range(printed)))
    layer = None if b is None else Layer(b, "boundary", source)
    cap = Capture("infer", Origin(f"b{b}.pt"), (8, 16), "bfloat16", 16, layer=layer, observation=obs)
    values = printed if printed is not None else tokens * 16
    cosine = math.sqrt(1 - err * err) if err < 1 else 0.0  # the cosine a per-token error allows
    return Candidate(cap, "s0", 0, Metrics(err, cosine, err * 2, 1.0, tokens, values, sink_only))


def test_no_candidate_is_unobserved() -> None:
    d = decide.decide_slot(0, [], TOL)
    assert d.status == Status.UNOBSERVED and d.boundary is None and d.confidence == 0.0


def test_nothing_within_tolerance_is_unmatched_and_names_the_closest() -> None:
    d = decide.decide_slot(0, [cand(5, 0.3), cand(6, 0.4)], TOL)
    assert d.status == Status.UNMATCHED and d.boundary is None
    assert d.runner_up is not None and d.runner_up.boundary == 5 and "closest" in d.note


def test_captured_neighbours_ruled_out_give_full_confidence() -> None:
    d = decide.decide_slot(0, [cand(5, 0.005), cand(4, 0.25), cand(6, 0.3)], TOL)
    assert d.status == Status.IDENTIFIED and d.boundary == 5 and d.confidence == 1.0
    assert d.runner_up is not None and d.runner_up.boundary == 4


def test_uncaptured_neighbours_are_bounded_by_a_farther_capture() -> None:
    # B20 differs by 90 %: over 15 layers the neighbours of B5 are on average at least 6 % apart
    d = decide.decide_slot(0, [cand(5, 0.01), cand(20, 0.9)], TOL)
    assert d.status == Status.IDENTIFIED and d.boundary == 5
    assert abs(d.confidence - 0.778) < 1e-3  # log10(0.06 / 0.01); the far capture's own error would give 1.0
    assert "B20, 15 layers away: at least 6% a layer" in d.note


def test_a_far_capture_with_a_larger_norm_bounds_against_that_norm() -> None:
    far = cand(20, 0.9)
    far = Candidate(far.capture, "s0", 0, Metrics(0.9, 0.5, 0.9, 3.0, 8, 128))  # 3x the norm
    sep = separation.neighbour_separation(cand(5, 0.01), [cand(5, 0.01), far], 30)
    assert abs(sep.value - 0.9 / 3 / 15) < 1e-9 and not sep.measured


def test_one_captured_neighbour_speaks_for_the_other_side_only_divided_by_the_spread() -> None:
    sep = separation.neighbour_separation(cand(5, 0.01), [cand(5, 0.01), cand(4, 0.4)], 30)
    assert abs(sep.value - 0.4 / separation.SIDE_SPREAD) < 1e-9


def test_with_no_other_capture_the_model_depth_sets_the_separation() -> None:
    top = cand(31, 0.02)
    assert abs(separation.neighbour_separation(top, [top], 61).value - separation.DEPTH_SPAN / 61) < 1e-9
    d = decide.decide_slot(0, [top], TOL, 61)  # 3.6 % against 2 %: cannot rule out a neighbour
    assert d.status == Status.AMBIGUOUS and d.candidate_boundary == 31 and "model depth (61 layers)" in d.note


def test_close_runner_up_is_ambiguous_and_keeps_the_candidate() -> None:
    d = decide.decide_slot(0, [cand(5, 0.02), cand(6, 0.024), cand(4, 0.5)], TOL)
    assert d.status == Status.AMBIGUOUS and d.boundary is None and d.candidate_boundary == 5
    assert d.confidence <= decide.AMBIGUOUS_CONFIDENCE and "cannot separate" in d.note


def test_over_few_tokens_the_best_of_neighbours_must_be_clearer() -> None:
    # 12 tokens of SmolLM2 up-scaled to 120 layers: bf16 B36 at 4.78 %, B35 (the training layer) at
    # 6.32 %: 1.32 times, within what a median over 12 tokens moves; over 24 tokens it would decide
    few = [cand(36, 0.0478, tokens=12), cand(35, 0.0632, tokens=12), cand(37, 0.09, tokens=12)]
    d = decide.decide_slot(0, few, TOL, 120)
    assert d.status == Status.AMBIGUOUS and d.boundary is None and "more tokens" in d.note
    many = [cand(36, 0.0478, tokens=24), cand(35, 0.0632, tokens=24), cand(37, 0.09, tokens=24)]
    assert decide.decide_slot(0, many, TOL, 120).boundary == 36


def test_with_both_neighbours_captured_a_clear_best_decides() -> None:
    d = decide.decide_slot(
        0, [cand(63, 0.026, tokens=24), cand(62, 0.05, tokens=24), cand(64, 0.071, tokens=24)], TOL, 126
    )
    assert d.status == Status.IDENTIFIED and d.boundary == 63 and d.measured
    assert d.confidence < decide.AMBIGUOUS_CONFIDENCE and "the best of B63" in d.note
    d = decide.decide_slot(0, [cand(63, 0.026), cand(64, 0.071)], TOL, 126)  # B62 not captured: no say
    assert d.status == Status.AMBIGUOUS and d.candidate_boundary == 63 and "B62 and B64" in d.note


def test_a_separation_not_clearly_above_the_noise_floor_of_the_other_slots_is_open() -> None:
    # slot 1 clears its own 1 % error 3x (4 %, estimated), but slot 0 shows the engine's noise at 2 %
    far = cand(40, 0.9)
    d0 = decide.decide_slot(0, [cand(5, 0.02), cand(4, 0.5), cand(6, 0.5)], TOL, 126)
    d1 = decide.decide_slot(1, [cand(20, 0.01), far], TOL, 126)
    assert d0.identified and d1.identified and not d1.measured
    out = decide.at_noise_floor([d0, d1])
    assert out[0] is d0 and out[1].status == Status.AMBIGUOUS and out[1].candidate_boundary == 20
    assert "2%" in out[1].note and pct(d1.separation) in out[1].note and "B19 and B21" in out[1].note


def test_the_noise_floor_comes_from_slots_no_deeper_than_the_one_judged() -> None:
    # bf16 noise grows with depth: slot 1 (B40, 2.4 %) says nothing of the noise at slot 0 (B3, 0.6 %),
    # whose estimated separation (3 %) clears its own error 5x; judged the other way round it is open
    d0 = decide.decide_slot(0, [cand(3, 0.006), cand(30, 0.9)], TOL, 61)
    d1 = decide.decide_slot(1, [cand(40, 0.024), cand(39, 0.08), cand(41, 0.09)], TOL, 61)
    assert d0.identified and not d0.measured and d1.identified and d1.measured
    assert decide.at_noise_floor([d0, d1]) == [d0, d1]
    d1 = decide.decide_slot(1, [cand(2, 0.024), cand(1, 0.3), cand(3, 0.3)], TOL, 61)  # the noisy slot shallower
    assert d1.identified and decide.at_noise_floor([d0, d1])[0].status == Status.AMBIGUOUS


def test_a_slot_the_labels_name_but_the_values_leave_open_is_never_ok() -> None:
    # the training labels agree with the configured capture, the values cannot rule out its neighbours:
    # consistent, recommended, and not passed (labels can be wrong the same way as the configuration)
    c = cand(101, 0.03, source="configured")
    d = decide.decide_slot(0, [c], TOL, 126)
    res = decide.resolve(
        [d], [101], "config.json", Configured("sglang", (100,), (101,)), {0: [c]}, TOL, "sglang", "llama", 126
    )
    s = res.slots[0]
    assert s.evidence == Evidence.CONSISTENT and s.boundary_index == 101 and s.status == Status.UNVERIFIED
    assert decide.verdict(res.slots, Configured("sglang", (100,), (101,))) == "inconclusive"


def test_the_configured_ids_are_not_evidence_for_themselves() -> None:
    c = cand(101, 0.05, source="configured")
    d = decide.decide_slot(0, [c], TOL, 126)
    res = decide.resolve(
        [d], [None], "none", Configured("sglang", (100,), (101,)), {0: [c]}, TOL, "sglang", "llama", 126
    )
    s = res.slots[0]
    assert s.evidence == Evidence.NONE and s.boundary_index is None and s.status != Status.OK
    assert "not evidence for itself" in s.note and "B100 and B102" in s.note


def test_sink_tokens_alone_never_identify() -> None:
    d = decide.decide_slot(0, [cand(5, 0.001, sink_only=True), cand(9, 0.5)], TOL)
    assert d.status == Status.AMBIGUOUS and d.boundary is None
    assert d.confidence <= decide.SINK_CONFIDENCE and "attention-sink" in d.note


def test_ordinary_tokens_decide_over_a_closer_sink_only_match_of_the_same_layer() -> None:
    d = decide.decide_slot(0, [cand(5, 0.001, sink_only=True), cand(5, 0.01), cand(4, 0.3), cand(6, 0.3)], TOL)
    assert d.status == Status.IDENTIFIED and d.boundary == 5 and not d.match.metrics.sink_only  # type: ignore[union-attr]


def test_a_sink_only_match_of_another_layer_keeps_an_ordinary_match_open() -> None:
    # the sink cannot tell layers apart, so a near-perfect sink match elsewhere leaves doubt
    d = decide.decide_slot(0, [cand(7, 0.001, sink_only=True), cand(5, 0.01), cand(4, 0.3), cand(6, 0.3)], TOL)
    assert d.status == Status.AMBIGUOUS and d.candidate_boundary == 5


def test_printed_values_cap_the_confidence_by_their_number() -> None:
    d = decide.decide_slot(0, [cand(5, 0.005, printed=20), cand(4, 0.3), cand(6, 0.3)], TOL)
    assert d.status == Status.IDENTIFIED and d.confidence == decide.evidence_cap(20)
    assert "only 20 printed values" in d.note


def test_too_few_printed_values_do_not_rule_out_a_neighbour() -> None:
    d = decide.decide_slot(0, [cand(5, 0.005, printed=5), cand(4, 0.3), cand(6, 0.3)], TOL)
    assert d.status == Status.AMBIGUOUS and d.candidate_boundary == 5 and d.confidence == decide.evidence_cap(5)
    assert "too few" in d.note


def test_unlabelled_capture_is_matched_but_not_identified() -> None:
    d = decide.decide_slot(0, [cand(None, 0.005), cand(None, 0.3)], TOL)
    assert d.status == Status.UNLABELLED and d.boundary is None and "--layer-ids" in d.note


def _decided(b: int, err: float = 0.005) -> list[Candidate]:
    return [cand(b, err), cand(b - 1, 0.3), cand(b + 1, 0.3)]


def test_resolve_infers_an_unobserved_slot_from_labels_shifted_like_the_observed_ones() -> None:
    cands = {0: _decided(3), 1: _decided(31)}
    ds = [decide.decide_slot(0, cands[0], TOL), decide.decide_slot(1, cands[1], TOL), decide.decide_slot(2, [], TOL)]
    res = decide.resolve(ds, [2, 30, 58], "config.json", None, cands, TOL, "sglang", "llama", 61)
    assert res.label_offset == 1
    assert [r.boundary_index for r in res.slots] == [3, 31, 59]
    assert [r.evidence for r in res.slots] == [Evidence.OBSERVED, Evidence.OBSERVED, Evidence.INFERRED]
    assert res.slots[2].confidence < min(res.slots[0].confidence, res.slots[1].confidence)
    assert "labels shifted by +1" in res.slots[2].note
    # the capture tags and the training labels disagree by one layer: said, capped, and no pass
    assert any("one layer" in w and "labels" in w for w in res.warnings)
    assert max(r.confidence for r in res.slots) <= decide.CONFLICT_CONFIDENCE
    assert decide.verdict(res.slots, None) == Verdict.INCONCLUSIVE


def test_labels_agreeing_with_a_match_that_cannot_rule_out_a_neighbour_are_consistent() -> None:
    cands = {0: [cand(15, 0.03), cand(2, 0.7)]}  # neighbours of B15 not captured
    ds = [decide.decide_slot(0, cands[0], TOL, 30)]
    assert ds[0].status == Status.AMBIGUOUS
    res = decide.resolve(ds, [15], "config.json", None, cands, TOL, "sglang", "llama", 30)
    r = res.slots[0]
    assert r.boundary_index == 15 and r.evidence == Evidence.CONSISTENT
    assert r.confidence == decide.CONSISTENT_CONFIDENCE < 0.9 and "comes from the labels" in r.note
    assert decide.verdict(res.slots, None) == Verdict.INCONCLUSIVE  # no configuration: consistent is not a pass
    res = decide.resolve(ds, [16], "config.json", None, cands, TOL, "sglang", "llama", 30)
    assert res.slots[0].evidence == Evidence.INFERRED and res.slots[0].boundary_index == 16  # labels disagree


def test_consistent_on_sink_tokens_never_passes_a_gate() -> None:
    cands = {0: [cand(15, 0.003, sink_only=True)]}
    ds = [decide.decide_slot(0, cands[0], TOL, 30)]
    cfg = Configured("sglang", (14,), (15,))
    res = decide.resolve(ds, [15], "config.json", cfg, cands, TOL, "sglang", "llama", 30)
    assert res.slots[0].evidence == Evidence.CONSISTENT and res.slots[0].status == Status.UNVERIFIED
    assert res.slots[0].confidence <= decide.SINK_CONFIDENCE
    assert decide.verdict(res.slots, cfg) == Verdict.INCONCLUSIVE


def test_nothing_matched_infers_every_slot_from_the_training_labels() -> None:
    cands = {s: [cand(b + 1, 0.25)] for s, b in enumerate((2, 15, 27))}
    ds = [decide.decide_slot(s, cands[s], TOL, 30) for s in range(3)]
    cfg = Configured("sglang", (2, 15, 27), (3, 16, 28))
    res = decide.resolve(ds, [2, 15, 27], "config.json", cfg, cands, TOL, "sglang", "llama", 30)
    assert [r.boundary_index for r in res.slots] == [2, 15, 27]
    assert all(r.evidence == Evidence.INFERRED and r.confidence == decide.LABELS_ONLY_CONFIDENCE for r in res.slots)
    assert decide.verdict(res.slots, cfg) == Verdict.MISMATCH


def test_resolve_judges_slots_against_the_configuration() -> None:
    cands = {0: _decided(3), 1: _decided(31), 2: _decided(59)}
    ds = [decide.decide_slot(s, cands[s], TOL) for s in range(3)]
    cfg = Configured("sglang", (-1, 2, 30), (0, 3, 31))
    res = decide.resolve(ds, [None] * 3, "", cfg, cands, TOL, "sglang", "llama", 61)
    assert [r.status for r in res.slots] == [Status.MISMATCH] * 3
    assert decide.verdict(res.slots, cfg) == Verdict.MISMATCH
    good = Configured("sglang", (2, 30, 58), (3, 31, 59))
    res = decide.resolve(ds, [None] * 3, "", good, cands, TOL, "sglang", "llama", 61)
    assert [r.status for r in res.slots] == [Status.OK] * 3
    assert decide.verdict(res.slots, good) == Verdict.OK


def test_unverified_slot_makes_the_verdict_inconclusive_not_ok() -> None:
    cands = {0: _decided(3)}
    ds = [decide.decide_slot(0, cands[0], TOL), decide.decide_slot(1, [], TOL)]
    cfg = Configured("sglang", (2, 30), (3, 31))
    res = decide.resolve(ds, [3, 31], "labels", cfg, cands, TOL, "sglang", "llama", 61)
    assert res.slots[1].status == Status.UNVERIFIED
    assert decide.verdict(res.slots, cfg) == Verdict.INCONCLUSIVE


def test_nothing_matched_is_a_mismatch() -> None:
    d = SlotDecision(0, Status.UNMATCHED, None, 0.0, None, None, cand(5, 0.5), "no match")
    res = decide.resolve([d], [None], "", None, {}, TOL, "sglang", "llama", 30)
    assert decide.verdict(res.slots, None) == Verdict.MISMATCH


def test_recommend_refuses_a_boundary_the_engine_cannot_capture() -> None:
    rec, _ = decide.recommend(settings_for("sglang", None, "llama", "test", num_layers=30), [2, 15, 30])
    assert rec.ids == (1, 14, None)
    assert rec.by_engine["vllm"].ids == (2, 15, 30) and rec.by_engine["vllm"].at.version == "0.33"
    assert rec.by_engine["sglang"].ids == rec.ids and rec.version == rec.by_engine["sglang"].at.version == "0.5.23"
    assert any("cannot capture B30" in w for w in rec.unservable)  # the cause, and the verdict a mismatch


def test_recommend_says_when_no_engine_reproduces_the_order() -> None:
    rec, _ = decide.recommend(settings_for("vllm", None, "llama", "test", num_layers=30), [15, 2, 27])
    assert rec.ids == (None, None, None)
    assert any("no id list reproduces the training order" in w for w in rec.unservable)


def test_a_slot_count_other_than_the_training_sides_is_a_mismatch() -> None:
    from hsdiff.model.diagnosis import Diagnosis, Finding, Override
    from hsdiff.overrides import Found, slot_count

    ok = Found(Verdict.OK, Diagnosis(Finding.MATCH))
    two = slot_count(ok, Configured("sglang", (1, 2), (2, 3)), 3)
    assert two.verdict == Verdict.MISMATCH and two.diagnosis.overrides == (Override.SLOT_COUNT,)
    assert slot_count(ok, Configured("sglang", (1, 2, 3), (2, 3, 4)), 3) is ok
    assert slot_count(ok, None, 3) is ok
