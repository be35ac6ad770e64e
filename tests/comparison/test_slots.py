"""``hsdiff.comparison.slots`` on its own: training tensors cut into slots, inference captures
labelled, the training side's claim, and the dumper runs kept apart, on real SmolLM2 states."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import hsdiff
from hsdiff.comparison import slots
from hsdiff.errors import AlignmentError, InputError
from hsdiff.model import INFER, TRAIN, Dump
from hsdiff.readers import scan

from .. import builders as B

H = B.H
TRAIN_B = (3, 16, 28)  # the SGLang ids 2, 15, 27 of a llama draft
SGL = (2, 15, 27)


def cfg(ids=SGL, engine: str = "sglang"):
    return slots.configured(ids, engine, "llama", "the test", B.L)


def rows(c) -> np.ndarray:
    return c.read_rows(0, c.tokens)


def test_configured_ids_are_read_as_the_engine_reads_them() -> None:
    sgl = cfg()
    assert (sgl.engine, sgl.ids, sgl.boundary_indices, sgl.source) == ("sglang", SGL, TRAIN_B, "the test")
    assert "+1" in sgl.rule and "SGLang" in sgl.rule
    assert cfg(engine="vllm").boundary_indices == SGL  # vLLM takes boundary indices as they are
    assert slots.configured(None, "sglang", "llama", "the test", B.L) is None
    with pytest.raises(InputError, match="boundary 31"):  # SGLang's +1 takes 30 past a 30-layer model
        cfg((2, 15, 30))


def test_a_concatenated_training_tensor_is_cut_into_slots_one_capture_per_sample(tmp_path: Path) -> None:
    train = scan(B.specforge(tmp_path, [0, 1], TRAIN_B), TRAIN)
    got = slots.split_train(train, H)
    assert sorted(got) == [0, 1, 2] and all(len(caps) == 2 for caps in got.values())
    for s, b in enumerate(TRAIN_B):
        for c in got[s]:
            assert c.slot == s and c.width == H
            i = int(Path(c.origin.path).stem.split("_")[1])
            np.testing.assert_array_equal(rows(c), B.states(i)["fp32"][b].numpy())


def test_per_layer_training_tensors_of_one_sample_are_ordered_by_their_labels(tmp_path: Path) -> None:
    # one file per layer, written deepest first: the slots follow the layer labels, not the files
    train = scan(B.sglang_dump(tmp_path, 0, (28, 3, 16), concat_slots=False, tag_layers=True), TRAIN)
    got = slots.split_train(train, H)
    assert [got[s][0].boundary for s in range(3)] == list(TRAIN_B)
    np.testing.assert_array_equal(rows(got[0][0]), B.states(0)["bf16"][3].float().numpy())


def test_training_tensors_that_cannot_be_hidden_states_are_refused(tmp_path: Path) -> None:
    train = scan(B.specforge(tmp_path, [0], TRAIN_B), TRAIN)
    with pytest.raises(AlignmentError, match="not a multiple of the hidden size 500"):
        slots.split_train(train, 500)
    printed = scan(B.SEED.parent / "logs" / "seed-first5.log", TRAIN)
    with pytest.raises(InputError, match="printed values"):
        slots.split_train(printed, H)
    ids = train.captures[0].replace(dtype="int64")
    with pytest.raises(InputError, match="int64 values"):
        slots.split_train(Dump((ids,)), H)


def test_an_aux_tensor_takes_the_configured_boundaries_in_slot_order(tmp_path: Path) -> None:
    infer = scan(B.sglang_dump(tmp_path, 0, (2, 15, 27)), INFER)
    out, warnings = slots.label_infer(infer, H, cfg())
    assert warnings == []
    assert [(c.slot, c.boundary, c.layer.source) for c in out] == [
        (0, 3, "configured"),
        (1, 16, "configured"),
        (2, 28, "configured"),
    ]
    # the labels are the configuration's; the values are what was captured
    np.testing.assert_array_equal(rows(out[1]), B.states(0)["bf16"][15].float().numpy())


def test_an_aux_tensor_with_another_number_of_slots_stays_unlabelled(tmp_path: Path) -> None:
    infer = scan(B.sglang_dump(tmp_path, 0, (2, 15)), INFER)
    out, warnings = slots.label_infer(infer, H, cfg())
    assert [c.boundary for c in out] == [None, None]
    assert len(warnings) == 1 and "holds 2 slots but 3 ids are configured" in warnings[0]
    bare, none = slots.label_infer(infer, H, None)
    assert [c.slot for c in bare] == [0, 1] and none == []


def test_unlabelled_per_slot_captures_take_the_id_of_their_slot(tmp_path: Path) -> None:
    infer = scan(B.sglang_dump(tmp_path, 0, (2, 15, 27), concat_slots=False), INFER)
    out, _ = slots.label_infer(infer, H, cfg())
    assert sorted((c.slot, c.boundary) for c in out) == [(0, 3), (1, 16), (2, 28)]


def test_captures_labelled_by_their_own_tags_keep_them(tmp_path: Path) -> None:
    infer = scan(B.sglang_dump(tmp_path, 0, (2, 15, 27), concat_slots=False, tag_layers=True), INFER)
    out, _ = slots.label_infer(infer, H, cfg())
    assert sorted(c.boundary for c in out) == [2, 15, 27]  # the tags, not the configured 3, 16, 28
    assert {c.layer.source for c in out} != {"configured"}


def test_a_capture_whose_width_fits_no_hidden_size_is_skipped_with_a_warning(tmp_path: Path) -> None:
    infer = scan(B.sglang_dump(tmp_path, 0, (2, 15, 27)), INFER)
    odd = infer.captures[0].replace(width=H * 3 + 1, shape=(infer.captures[0].tokens, H * 3 + 1))
    out, warnings = slots.label_infer(Dump((odd,)), H, cfg())
    assert out == [] and "not a multiple of hidden size 576; skipped" in warnings[0]


def test_the_training_claim_comes_from_the_ids_given_then_labels_then_a_config_beside(tmp_path: Path) -> None:
    train = scan(B.specforge(tmp_path / "plain", [0], TRAIN_B), TRAIN)
    got = slots.split_train(train, H)
    claim, src = slots.claims(3, got, train, SGL, "specforge", B.L)
    assert claim == list(TRAIN_B) and "specforge" in src
    assert slots.claims(4, got, train, SGL, "specforge", B.L)[0] == [*TRAIN_B, None]  # padded to the slots
    assert slots.claims(3, got, train, None, "specforge", B.L) == ([None, None, None], "")

    B.draft_config(tmp_path / "plain" / "config.json", SGL)
    beside = scan(tmp_path / "plain", TRAIN)
    claim, src = slots.claims(3, slots.split_train(beside, H), beside, None, "specforge", B.L)
    assert claim == list(TRAIN_B) and src.startswith("config.json beside the training dump")

    tagged = scan(B.sglang_dump(tmp_path / "tagged", 0, (28, 3, 16), concat_slots=False, tag_layers=True), TRAIN)
    claim, src = slots.claims(3, slots.split_train(tagged, H), tagged, None, "specforge", B.L)
    assert (claim, src) == (list(TRAIN_B), "labels in the training dump")


def _two_runs(root: Path) -> Path:
    B.sglang_dump(root / "a", 0, TRAIN_B)  # as configured
    B.sglang_dump(root / "b", 0, (2, 16, 28))  # after a restart: slot 0 one layer short
    for name, sub in (("dump_20261201_000000_000001", "a"), ("dump_20261201_090000_000002", "b")):
        (root / sub / "dump_20261130_000000_000001").rename(root / name)
    return root


def test_dumper_runs_are_kept_apart_and_the_run_that_matches_is_picked(tmp_path: Path) -> None:
    infer = scan(_two_runs(tmp_path / "infer"), INFER)
    by_run = slots.runs(infer)
    assert sorted(by_run) == ["dump_20261201_000000_000001", "dump_20261201_090000_000002"]
    assert all({Path(c.origin.path).parent.name for c in d.captures} == {n} for n, d in by_run.items())
    assert slots.runs(scan(B.sglang_dump(tmp_path / "one", 0, SGL), INFER)) == {}

    train = scan(B.specforge(tmp_path / "train", [0], TRAIN_B), TRAIN)
    reports = {n: hsdiff.compare(train, d, layer_ids=list(SGL)) for n, d in by_run.items()}
    best, warning = slots.pick_run(reports)
    assert best == "dump_20261201_000000_000001"
    assert "2 dumper runs" in warning and "dump_20261201_090000_000002: mismatch" in warning
    # the runs disagree (another verdict), and every slot's layer rests on the configured ids alone
    assert slots.unsettled_by_runs(reports, best) == [0, 1, 2]
    assert slots.unsettled_by_runs({best: reports[best]}, best) == []  # one run: nothing to disagree with
    # the training side's own claim settles the slots it agrees with, whatever the other runs say
    B.draft_config(tmp_path / "train" / "config.json", SGL)
    labelled = scan(tmp_path / "train", TRAIN)
    reports = {n: hsdiff.compare(labelled, d, layer_ids=list(SGL)) for n, d in by_run.items()}
    assert slots.unsettled_by_runs(reports, best) == []


def test_captures_no_dumper_wrote_belong_to_every_run(tmp_path: Path) -> None:
    runs = scan(_two_runs(tmp_path / "infer"), INFER)
    other = scan(B.vllm_file(tmp_path / "vllm", 0, TRAIN_B), INFER).captures
    by_run = slots.runs(Dump(runs.captures + other))
    assert len(by_run) == 2 and all(other[0] in d.captures for d in by_run.values())
    assert slots.runs(Dump(other)) == {}
