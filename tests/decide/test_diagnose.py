"""The finding a comparison comes to (``hsdiff.diagnose``), from slot records alone, and the cause
``hsdiff.explain`` writes from it: the record decides, the words follow."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hsdiff import diagnose as dg
from hsdiff import explain
from hsdiff.model import (
    Candidate,
    Capture,
    Configured,
    Diagnosis,
    Evidence,
    Finding,
    LabelSource,
    Layer,
    Metrics,
    Origin,
    Override,
    Recommendation,
    SlotResult,
    Status,
    Verdict,
)

pytestmark = pytest.mark.core


def cand(b: int, err: float) -> Candidate:
    cap = Capture("infer", Origin(f"{b}.pt"), (8, 16), "bfloat16", 16, layer=Layer(b, source=LabelSource.CONFIGURED))
    return Candidate(cap, None, 0, Metrics(err, 0.99, err, 1.0, 8, 128))


def slot(s: int, b: int | None, cfg: int | None, status: Status, matched: bool = True) -> SlotResult:
    return SlotResult(
        s,
        b,
        None if b is None else b - 1,
        Evidence.OBSERVED if matched else Evidence.INFERRED,
        0.9 if matched else 0.4,
        None,
        cand(b or 0, 0.01) if matched else None,
        None,
        configured_boundary=cfg,
        status=status,
    )


def rec(bs: tuple[int | None, ...], unservable: tuple[str, ...] = ()) -> Recommendation:
    return Recommendation("sglang", "llama", tuple(None if b is None else b - 1 for b in bs), bs, {}, unservable)


def configured(bs: tuple[int, ...]) -> Configured:
    return Configured("sglang", tuple(b - 1 for b in bs), bs)


def test_every_slot_one_layer_deep_is_a_layer_shift_of_plus_one_and_the_cause_says_late() -> None:
    cfg = configured((3, 16, 28))
    results = [slot(i, b, c, Status.MISMATCH) for i, (b, c) in enumerate(zip((2, 15, 27), (3, 16, 28)))]
    d = dg.diagnose(Verdict.MISMATCH, results, cfg, rec((2, 15, 27)))
    assert (d.kind, d.offset, d.slots) == (Finding.LAYER_SHIFT, 1, (0, 1, 2))
    words = explain.explain(results, Verdict.MISMATCH, d, cfg, [None] * 3, "none", None, rec((2, 15, 27)), 30, False)
    assert words.cause.startswith("Every slot is captured one layer too late")
    shallow = dg.diagnose(Verdict.MISMATCH, [slot(0, 4, 3, Status.MISMATCH)], configured((3,)), rec((4,)))
    assert (shallow.kind, shallow.offset) == (Finding.LAYER_SHIFT, -1)


def test_the_seed_story_is_a_slot_shift_with_the_last_layer_never_captured() -> None:
    cfg = configured((0, 3, 31))
    results = [
        slot(0, 3, 0, Status.MISMATCH),
        slot(1, 31, 3, Status.MISMATCH),
        slot(2, 59, 31, Status.MISMATCH, matched=False),
    ]
    d = dg.diagnose(Verdict.MISMATCH, results, cfg, rec((3, 31, 59)))
    assert (d.kind, d.offset, d.missing) == (Finding.SLOT_SHIFT, 1, (59,))
    words = explain.explain(results, Verdict.MISMATCH, d, cfg, [None] * 3, "none", None, rec((3, 31, 59)), 61, False)
    assert "shifted by 1 slot" in words.cause and "B[59] is never captured" in words.cause


def test_two_slots_off_by_different_amounts_differ_without_one_shift() -> None:
    cfg = configured((3, 20, 27))
    results = [slot(0, 3, 3, Status.OK), slot(1, 15, 20, Status.MISMATCH), slot(2, 28, 27, Status.MISMATCH)]
    d = dg.diagnose(Verdict.MISMATCH, results, cfg, rec((3, 15, 28)))
    assert (d.kind, d.offset, d.slots) == (Finding.SLOTS_DIFFER, None, (1, 2))


def test_match_open_identified_no_match_and_unservable() -> None:
    cfg = configured((3, 16))
    ok = [slot(0, 3, 3, Status.OK), slot(1, 16, 16, Status.OK)]
    assert dg.diagnose(Verdict.OK, ok, cfg, rec((3, 16))).kind == Finding.MATCH
    open_ = [slot(0, 3, 3, Status.OK), slot(1, 16, 16, Status.UNVERIFIED)]
    assert dg.diagnose(Verdict.INCONCLUSIVE, open_, cfg, rec((3, 16))) == Diagnosis(Finding.OPEN, slots=(1,))
    free = [slot(0, 3, None, Status.IDENTIFIED), slot(1, 16, None, Status.IDENTIFIED)]
    assert dg.diagnose(Verdict.OK, free, None, rec((3, 16))).kind == Finding.IDENTIFIED
    labels = [slot(0, 2, 3, Status.MISMATCH, matched=False), slot(1, 15, 16, Status.MISMATCH, matched=False)]
    assert dg.diagnose(Verdict.MISMATCH, labels, cfg, rec((2, 15))) == Diagnosis(Finding.NO_MATCH, offset=1)
    unservable = dg.diagnose(Verdict.MISMATCH, ok, cfg, rec((3, 16), ("SGLang cannot capture B30",)))
    assert unservable.kind == Finding.UNSERVABLE


def test_the_diagnosis_is_in_the_json_report() -> None:
    d = Diagnosis(Finding.SLOT_SHIFT, offset=1, slots=(0, 1, 2), missing=(59,), run="dump_1")
    assert d.to_dict() == {
        "kind": "slot-shift",
        "offset": 1,
        "slots": [0, 1, 2],
        "missing_boundaries": [59],
        "overrides": [],
        "run": "dump_1",
        "miss": None,
        "torn_slots": [],
        "rank_conflicts": [],
        "norm_findings": [],
    }


def test_overrides_are_records_first_and_lead_the_words() -> None:
    """Torn tokens and a rank conflict change the verdict on the records (the diagnosis names them and
    what they concern); the cause is then written from those records, the slots' own words last."""
    from hsdiff import overrides

    cfg = configured((2, 15, 27))
    torn = Candidate(cand(15, 0.01).capture, None, 0, Metrics(0.01, 0.99, 0.45, 1.0, 40, 128))
    results = [slot(0, 2, 2, Status.OK), replace(slot(1, 15, 15, Status.OK), match=torn), slot(2, 27, 27, Status.OK)]
    d = dg.diagnose(Verdict.OK, results, cfg, rec((2, 15, 27)))
    found = overrides.torn_tokens(overrides.Found(Verdict.OK, d), results, 0.10)
    found = overrides.rank_conflict(found, ["rank 1 differs by 71% on hidden_states"])
    assert found.verdict == Verdict.MISMATCH
    assert found.diagnosis.overrides == (Override.TORN_TOKENS, Override.RANK_CONFLICT)
    assert found.diagnosis.torn == (1,) and found.diagnosis.conflicts == ("rank 1 differs by 71% on hidden_states",)
    assert found.diagnosis.to_dict()["torn_slots"] == [1]
    words = explain.explain(
        results, Verdict.OK, found.diagnosis, cfg, [None] * 3, "none", None, rec((2, 15, 27)), 30, False, tolerance=0.10
    )
    assert words.cause.startswith("Tensor-parallel ranks disagree: rank 1 differs by 71%")
    assert "Part of the sequence differs: slot 1: median error 1%, but the worst tenth of its 40" in words.cause
    assert (
        words.cause.index("Tensor-parallel")
        < words.cause.index("Part of the sequence")
        < words.cause.index(
            explain.explain(results, Verdict.OK, d, cfg, [None] * 3, "none", None, rec((2, 15, 27)), 30, False).cause
        )
    )
