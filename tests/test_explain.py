"""``hsdiff.explain`` writes words from records: the cause follows the :class:`~hsdiff.model.Diagnosis`
it is given (not its own reading of the slots), names the layers, ids and slots the records hold, and
says what to do next."""

from __future__ import annotations

import pytest

from hsdiff import explain
from hsdiff.model import (
    Candidate,
    Capture,
    Configured,
    Diagnosis,
    Direction,
    Evidence,
    Finding,
    Layer,
    Metrics,
    Miss,
    Origin,
    Recommendation,
    SlotResult,
    Status,
    Verdict,
)

pytestmark = pytest.mark.core

L = 30


def cand(b: int, err: float = 0.01, ratio: float = 1.0) -> Candidate:
    cap = Capture("infer", Origin(f"dump/b{b}.pt"), (8, 576), "bfloat16", 576, layer=Layer(b, "boundary", "tag"))
    return Candidate(cap, None, 0, Metrics(err, 0.99, err, ratio, 8, 8 * 576))


def slot(
    s: int,
    b: int | None,
    cfg: int | None,
    status: Status,
    *,
    matched: bool = True,
    note: str = "",
    against: str = "",
    evidence: Evidence | None = None,
) -> SlotResult:
    ev = evidence or (Evidence.OBSERVED if matched else Evidence.INFERRED)
    return SlotResult(
        s,
        b,
        None if b is None else b - 1,
        ev,
        0.9 if matched else 0.4,
        None,
        cand(b) if matched and b is not None else None,
        None,
        configured_boundary=cfg,
        status=status,
        note=note,
        against_config=against,
    )


def rec(engine: str, bs: tuple[int | None, ...], unservable: tuple[str, ...] = ()) -> Recommendation:
    shift = 1 if engine == "sglang" else 0
    return Recommendation(engine, "llama", tuple(None if b is None else b - shift for b in bs), bs, {}, unservable)


def cfg(engine: str, bs: tuple[int, ...]) -> Configured:
    shift = 1 if engine == "sglang" else 0
    return Configured(engine, tuple(b - shift for b in bs), bs, "the test")


def words(
    results,
    verdict,
    d,
    configured,
    recommended,
    *,
    claims=None,
    claim_src="config.json",
    label_offset=None,
    printed=False,
) -> explain.Words:
    claims = claims if claims is not None else [None] * len(results)
    return explain.explain(results, verdict, d, configured, claims, claim_src, label_offset, recommended, L, printed)


def test_one_layer_late_on_sglang_names_its_plus_one() -> None:
    c = cfg("sglang", (4, 17, 29))
    results = [slot(i, b, k, Status.MISMATCH) for i, (b, k) in enumerate(zip((3, 16, 28), (4, 17, 29)))]
    cause = words(
        results, Verdict.MISMATCH, Diagnosis(Finding.LAYER_SHIFT, 1, (0, 1, 2)), c, rec("sglang", (3, 16, 28))
    ).cause
    assert cause.startswith(
        "Every slot is captured one layer too late: SGLang takes B[4, 17, 29] where training used B[3, 16, 28]"
    )
    assert "reads them as layer outputs and adds 1" in cause


def test_one_layer_early_on_vllm_names_ids_written_as_layer_outputs() -> None:
    c = cfg("vllm", (2, 15, 27))
    results = [slot(i, b, k, Status.MISMATCH) for i, (b, k) in enumerate(zip((3, 16, 28), (2, 15, 27)))]
    cause = words(
        results, Verdict.MISMATCH, Diagnosis(Finding.LAYER_SHIFT, -1, (0, 1, 2)), c, rec("vllm", (3, 16, 28))
    ).cause
    assert cause.startswith("Every slot is captured one layer too early: vLLM takes")
    assert "written as layer-output indices" in cause


def test_the_words_follow_the_record_not_the_slots() -> None:
    c = cfg("sglang", (3, 16, 28))
    results = [slot(i, b, b, Status.OK) for i, b in enumerate((3, 16, 28))]
    ok = words(results, Verdict.OK, Diagnosis(Finding.MATCH), c, rec("sglang", (3, 16, 28))).cause
    assert ok.startswith("The configured ids [2, 15, 27] make SGLang capture") and "exactly the training slots" in ok
    # the same slots, another finding: the words say the finding
    shifted = words(
        results, Verdict.MISMATCH, Diagnosis(Finding.LAYER_SHIFT, 2, (0, 1, 2)), c, rec("sglang", (3, 16, 28))
    ).cause
    assert shifted.startswith("Every slot is captured two layers too late") and "adds 1" not in shifted


def test_a_slot_shift_names_the_slots_and_the_layer_never_captured() -> None:
    c = cfg("sglang", (0, 3, 16))
    results = [
        slot(0, 3, 0, Status.MISMATCH),
        slot(1, 16, 3, Status.MISMATCH),
        slot(2, 28, 16, Status.MISMATCH, matched=False),
    ]
    cause = words(
        results,
        Verdict.MISMATCH,
        Diagnosis(Finding.SLOT_SHIFT, 1, (0, 1), missing=(28,)),
        c,
        rec("sglang", (3, 16, 28)),
    ).cause
    assert cause.startswith("The configured ids [-1, 2, 15] are shifted by 1 slot: SGLang captures")
    assert "slot 0 receives B0 (the embeddings) while training slot 0 was B3" in cause
    assert cause.endswith("and B[28] is never captured.")
    two = words(results, Verdict.MISMATCH, Diagnosis(Finding.SLOT_SHIFT, 2, (0,)), c, rec("sglang", (3, 16, 28)))
    assert "shifted by 2 slots" in two.cause and "never captured" not in two.cause


def test_slots_that_differ_are_named_with_the_reason_they_stand_against_the_config() -> None:
    c = cfg("sglang", (3, 20, 27))
    results = [
        slot(0, 3, 3, Status.OK),
        slot(1, 15, 20, Status.MISMATCH, note="matched B15; configured B20", against="configured B20"),
        slot(
            2,
            None,
            27,
            Status.MISMATCH,
            matched=False,
            note="no capture; B27 differs by 9%",
            against="B27 differs by 9%",
        ),
    ]
    cause = words(
        results, Verdict.MISMATCH, Diagnosis(Finding.SLOTS_DIFFER, slots=(1, 2)), c, rec("sglang", (3, 15, None))
    ).cause
    assert cause.startswith(
        "Training slots 1 (B15), 2 (not identified) are not what SGLang captures with ids [2, 19, 26]"
    )
    assert cause.endswith(": configured B20.")  # the first slot's record of how it stands against the config


def test_nothing_matched_by_labels_says_which_way_and_the_closest_error() -> None:
    c = cfg("sglang", (4, 17, 29))
    results = [
        SlotResult(
            i,
            b,
            b - 1,
            Evidence.INFERRED,
            0.4,
            None,
            None,
            cand(b + 1, err=0.12),
            configured_boundary=b + 1,
            status=Status.MISMATCH,
        )
        for i, b in enumerate((3, 16, 28))
    ]
    cause = words(
        results,
        Verdict.MISMATCH,
        Diagnosis(Finding.NO_MATCH, offset=1),
        c,
        rec("sglang", (3, 16, 28)),
        claim_src="config.json beside the training dump",
    ).cause
    assert cause.startswith("Every slot is captured one layer too deep: the configured ids [3, 16, 28] make SGLang")
    assert "(config.json beside the training dump) say B[3, 16, 28]" in cause and "closest error 12%" in cause
    other = words(results, Verdict.MISMATCH, Diagnosis(Finding.NO_MATCH), c, rec("sglang", (3, 16, 28))).cause
    assert other.startswith("No inference capture equals any training slot (closest error 12%")
    assert "post-norm vs pre-norm" in other and "different tensors" in other


def test_a_miss_one_layer_away_names_the_engine_that_explains_it_and_what_to_dump() -> None:
    c = cfg("vllm", (2, 15, 27))
    results = [slot(i, None, k, Status.MISMATCH, matched=False) for i, k in enumerate((2, 15, 27))]
    m = Miss(Direction(-1, (0.9, 0.95), (0.2, 0.3), (0.96, 0.98)), 1, ("SGLang",))
    cause = words(
        results, Verdict.MISMATCH, Diagnosis(Finding.NO_MATCH, -1, (0, 1, 2), miss=m), c, rec("vllm", (3, 16, 28))
    ).cause
    assert "every capture sits about one layer shallower than its training slot" in cause
    assert "SGLang read [2, 15, 27] as exactly the training layers" in cause
    assert "dump the layers B3, B16 and B28 once to confirm" in cause
    unknown = Miss(Direction(1, (1.1, 1.2), (0.2, 0.3), (0.96, 0.98)), None, ())
    far = words(
        results,
        Verdict.MISMATCH,
        Diagnosis(Finding.NO_MATCH, None, (0, 1, 2), miss=unknown),
        c,
        rec("vllm", (None, None, None)),
    ).cause
    assert "sits deeper than its training slot" in far and "the distance is not known" in far


def test_unservable_identified_and_open() -> None:
    c = cfg("sglang", (3, 16))
    ok = [slot(0, 3, 3, Status.OK), slot(1, 16, 16, Status.OK)]
    why = ("SGLang cannot capture B30.", "Use vLLM.")
    assert (
        words(ok, Verdict.MISMATCH, Diagnosis(Finding.UNSERVABLE), c, rec("sglang", (3, 16), why)).cause
        == "SGLang cannot capture B30. Use vLLM."
    )
    free = [slot(0, 3, None, Status.IDENTIFIED), slot(1, 16, None, Status.IDENTIFIED)]
    assert (
        words(free, Verdict.OK, Diagnosis(Finding.IDENTIFIED), None, rec("sglang", (3, 16))).cause
        == "Every training slot was identified by value: B[3, 16]."
    )
    open_ = [slot(0, 3, 3, Status.OK), slot(1, None, 16, Status.UNVERIFIED, matched=False, note="B16 or B17")]
    cause = words(open_, Verdict.INCONCLUSIVE, Diagnosis(Finding.OPEN, slots=(1,)), c, rec("sglang", (3, None))).cause
    assert cause == "The evidence does not settle slot 1: B16 or B17."


def test_training_labels_off_the_values_are_said_after_what_is_open() -> None:
    c = cfg("sglang", (3, 16))
    results = [
        SlotResult(
            s,
            b,
            b - 1,
            Evidence.OBSERVED,
            0.9,
            None,
            cand(b),
            None,
            claimed_boundary=b + 1,
            configured_boundary=b,
            status=Status.UNVERIFIED,
            note=f"B{b} or B{b + 1}",
        )
        for s, b in enumerate((3, 16))
    ]
    cause = words(
        results,
        Verdict.INCONCLUSIVE,
        Diagnosis(Finding.OPEN, slots=(0, 1)),
        c,
        rec("sglang", (3, 16)),
        label_offset=-1,
        claim_src="config.json",
    ).cause
    assert cause == (
        "The evidence does not settle slots 0, 1: B3 or B4; B16 or B17. The training side's own labels "
        "(config.json) are one layer off the values: what they call B4 matches the capture labelled B3."
    )
    # a match says the match, and nothing of labels
    ok = words(results, Verdict.OK, Diagnosis(Finding.MATCH), c, rec("sglang", (3, 16)), label_offset=-1).cause
    assert "exactly the training slots" in ok and "labels" not in ok


def test_the_walkthrough_says_the_claim_the_configuration_and_each_slot() -> None:
    c = cfg("sglang", (3, 16))
    results = [
        slot(0, 3, 3, Status.OK, note="as configured"),
        slot(1, None, 16, Status.UNOBSERVED, matched=False, note="no capture"),
    ]
    w = words(
        results,
        Verdict.INCONCLUSIVE,
        Diagnosis(Finding.OPEN, slots=(1,)),
        c,
        rec("sglang", (3, None)),
        claims=[3, None],
        claim_src="config.json",
    )
    assert w.walkthrough[0] == "The training side labels its slots B[3, ?] (config.json)."
    assert w.walkthrough[1].startswith("The engine is configured with ids [2, 15] (sglang, from the test)")
    assert w.walkthrough[2].startswith("Slot 0: the tensor at dump/b3.pt (labelled B3 (tag)) equals training")
    assert w.walkthrough[2].endswith("→ ok: as configured") and w.walkthrough[3] == "Slot 1: unobserved: no capture"
    assert len(w.walkthrough) == 4  # no "what the log lacked" for whole tensors
