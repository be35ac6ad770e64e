"""The aligner's decisions on real hidden states: SmolLM2-135M, fp32 training vs bf16 inference.

Training slots are B 2, 15, 27 (SGLang ids [1, 14, 26]); the inference side is what an SGLang
server captures, dumped with SGLang's dumper format.
"""

from __future__ import annotations

import json

import pytest

from hsdiff.comparison import compare

from . import builders as B

TRAIN_B = [2, 15, 27]


@pytest.fixture(scope="module")
def train(tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    return B.specforge(root, [0, 1, 2], TRAIN_B)


@pytest.fixture(scope="module")
def all_layers(tmp_path_factory):
    """An SGLang dumper run that dumped the input of every layer (layer_id tags, B 0..29) for sample 1."""
    return B.sglang_dump(tmp_path_factory.mktemp("all"), 1, list(range(30)), concat_slots=False, tag_layers=True)


def test_correct_configuration_passes(train, all_layers):
    r = compare(train, all_layers, layer_ids=[1, 14, 26])
    assert r.verdict == "ok" and r.exit_code == 0
    assert r.recommended.ids == (1, 14, 26)
    assert [s.boundary_index for s in r.slots] == TRAIN_B
    assert all(s.evidence == "observed" and s.status == "ok" and s.confidence > 0.8 for s in r.slots)
    assert {s.match.sample for s in r.slots} == {"data_1"}  # found by token ids among 3 samples


def test_off_by_one_late(train, all_layers):
    # the ids were written as boundary indices; SGLang adds 1 and captures B 3, 16, 28
    r = compare(train, all_layers, layer_ids=[2, 15, 27])
    assert r.verdict == "mismatch" and r.exit_code == 1
    assert r.recommended.ids == (1, 14, 26)
    assert r.recommended.by_engine["vllm"].ids == (2, 15, 27)
    assert "one layer too late" in r.cause and "adds 1" in r.cause
    assert [s.configured_boundary for s in r.slots] == [3, 16, 28]


def test_off_by_one_early(train, all_layers):
    r = compare(train, all_layers, layer_ids=[0, 13, 25])
    assert r.verdict == "mismatch"
    assert r.recommended.ids == (1, 14, 26)
    assert "one layer too early" in r.cause


def test_vllm_convention(train, all_layers):
    r = compare(train, all_layers, layer_ids=[2, 15, 27], engine="vllm")
    assert r.verdict == "ok" and r.recommended.ids == (2, 15, 27)
    r = compare(train, all_layers, layer_ids=[1, 14, 26], engine="vllm")
    assert r.verdict == "mismatch" and r.recommended.ids == (2, 15, 27)
    assert "layer-output indices" in r.cause


def test_without_configuration_every_slot_is_identified(train, all_layers):
    r = compare(train, all_layers)
    assert r.verdict == "ok" and r.configured is None
    assert [s.boundary_index for s in r.slots] == TRAIN_B
    for s in r.slots:  # the neighbours were captured, so they were ruled out directly
        assert s.runner_up is not None and abs(s.runner_up.boundary - s.boundary_index) == 1
        assert s.runner_up.metrics.rel_err > 0.15 > 0.03 > s.match.metrics.rel_err


def test_unobserved_slot_is_inferred_from_training_labels(tmp_path, train):
    infer = B.sglang_dump(tmp_path / "infer", 1, list(range(21)), concat_slots=False, tag_layers=True)
    B.draft_config(train / "config.json", [1, 14, 26])
    try:
        r = compare(train, infer, layer_ids=[1, 14, 26])
    finally:
        (train / "config.json").unlink()
    assert [s.evidence for s in r.slots] == ["observed", "observed", "inferred"]
    assert r.recommended.ids == (1, 14, 26)
    assert r.slots[2].status == "unverified" and r.verdict == "inconclusive"


def test_unobserved_slot_without_labels_stays_open(tmp_path, train):
    infer = B.sglang_dump(tmp_path / "infer", 1, list(range(21)), concat_slots=False, tag_layers=True)
    r = compare(train, infer)
    assert r.recommended.ids == (1, 14, None)
    assert r.slots[2].evidence == "none" and r.verdict == "inconclusive"


def test_many_samples_found_by_value_without_token_ids(tmp_path, train):
    infer = B.sglang_dump(tmp_path / "infer", 2, [2, 15, 27], concat_slots=True, with_ids=False)
    r = compare(train, infer, layer_ids=[1, 14, 26])
    assert r.verdict == "ok"
    assert {s.match.sample for s in r.slots} == {"data_2"}


def test_decode_tokens_from_the_middle(tmp_path, train):
    infer = B.sglang_dump(tmp_path / "infer", 0, [2, 15, 27], tokens=slice(9, 13))
    r = compare(train, infer, layer_ids=[1, 14, 26])
    assert r.verdict == "ok"
    assert all(s.match.offset == 9 and s.match.metrics.tokens == 4 for s in r.slots)


def test_prefill_that_skipped_the_first_token_aligns_by_value(tmp_path, train):
    infer = B.sglang_dump(tmp_path / "infer", 0, [2, 15, 27], tokens=slice(1, None), with_ids=False)
    r = compare(train, infer, layer_ids=[1, 14, 26])
    assert r.verdict == "ok"
    assert {s.match.offset for s in r.slots} == {1}


def test_concatenated_capture_off_by_one_is_a_mismatch_that_says_which_way(tmp_path, train):
    # only the three wrong layers were captured: nothing equals a training slot, but every capture has
    # higher norms on the same tokens at a neighbour's distance, and vLLM's reading of [2, 15, 27] names
    # exactly the training layers: one layer deeper, the ids inferred (not observed)
    infer = B.sglang_dump(tmp_path / "infer", 1, [3, 16, 28])
    r = compare(train, infer, layer_ids=[2, 15, 27])
    assert r.verdict == "mismatch" and r.exit_code == 1
    assert r.recommended.ids == (1, 14, 26)
    assert [s.evidence for s in r.slots] == ["inferred"] * 3 and all(s.confidence < 0.5 for s in r.slots)
    assert "about one layer deeper" in r.cause and "vLLM" in r.cause and "B2, B15 and B27" in r.cause
    d = r.to_dict()["diagnosis"]
    assert d["kind"] == "no-match" and d["offset"] == 1 and d["miss"]["direction"] == "deeper"


def test_sink_token_only_is_ambiguous_not_a_guess(tmp_path, train):
    # token 0 (the attention sink) of every middle layer looks alike
    infer = B.sglang_dump(
        tmp_path / "infer", 1, list(range(10, 20)), concat_slots=False, tag_layers=True, tokens=slice(0, 1)
    )
    r = compare(train, infer)
    assert r.slots[1].status == "ambiguous" and r.slots[1].boundary_index is None
    assert r.recommended.ids[1] is None
    assert r.verdict == "inconclusive"


def test_real_peer_dumps_modelopt_vs_sglang_dumper():
    """Files written by ModelOpt and by SGLang's own dumper: ground truth SGLang ids [1, 14, 26]."""
    r = compare(B.REAL / "modelopt", B.REAL / "sglang-dumper")
    assert r.verdict == "ok"
    assert r.recommended.ids == (1, 14, 26)
    assert r.recommended.by_engine["vllm"].ids == (2, 15, 27)
    assert {s.match.sample for s in r.slots} == {"example-0"}
    doc = json.loads(r.to_json())
    assert doc["schema_version"] == 3 and doc["verdict"] == "ok"
