"""Thin evidence and labels that lie, from real SmolLM2 states (fp32 training side, bf16 engine side): a
slot shift told as one when a slot stays open, dumper tags that count layer outputs, training labels one
layer deep beside ids that repeat them, and configured ids that cannot describe the dump."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

import hsdiff
from hsdiff.cli import cli

from . import builders as B
from .scenarios.write import dumper_records


# ----------------------------------------------------------------------------- a slot shift with one slot open
def test_the_seed_mistake_from_summarised_prints_is_a_slot_shift(tmp_path):
    """Training B3, 16, 28 (no labels), ids [-1, 2, 15]: SGLang feeds B[0, 3, 16]. One torch print per aux
    slot (bf16, summarised: 3 × 3 corners); slot 1 matches within noise but cannot rule out a neighbour."""
    train = B.specforge(tmp_path / "train", [0], [3, 16, 28])
    s = B.states(0)
    log = tmp_path / "server.log"
    log.write_text(
        "".join(f"[2026-12-01 00:00:05 TP0] aux_hidden_states[{j}]: {s['bf16'][b]}\n" for j, b in enumerate([0, 3, 16]))
    )
    assert "...," in log.read_text()  # torch's own summarised form
    r = hsdiff.compare(train, log, layer_ids=[-1, 2, 15])
    assert r.verdict == "mismatch" and r.exit_code == 1
    assert r.diagnosis.kind == "slot-shift" and r.diagnosis.offset == 1
    assert "shifted by 1 slot" in r.cause and "too early" not in r.cause
    assert [x.boundary_index for x in r.slots][:2] == [3, 16] and r.slots[1].confidence < 0.5
    assert list(r.recommended.ids)[:2] == [2, 15]


# ----------------------------------------------------------------------------- dumper tags that count outputs
def _after_each_layer(root, sample=0, positions=None):
    """A dumper called after each decoder layer, tagged with the loop index: tag i holds B(i+1)."""
    s = B.states(sample)
    idx = torch.arange(len(s["input_ids"])) if positions is None else torch.tensor(positions)
    recs = [("input_ids", s["input_ids"][idx], {})]
    recs += [("hidden_states", s["bf16"][i + 1][idx], {"layer_id": i}) for i in range(B.L)]
    return dumper_records(root / "dump_20261207_000000_000001", recs).parent


@pytest.fixture
def labelled_train(tmp_path):
    train = B.specforge(tmp_path / "train", [0], [2, 15, 27])
    B.draft_config(train / "config.json", [1, 14, 26])  # the training labels are right
    return train


def test_tags_that_count_outputs_are_told_by_the_embedding_lookup(tmp_path, labelled_train):
    infer = _after_each_layer(tmp_path / "infer")
    r = hsdiff.compare(labelled_train, infer, layer_ids=[1, 14, 26])
    assert r.verdict == "ok" and r.exit_code == 0 and [x.boundary_index for x in r.slots] == [2, 15, 27]
    assert any("tag 0 holds no embedding lookup" in w for w in r.warnings)


def test_tags_that_cannot_be_told_and_disagree_with_the_labels_settle_nothing(tmp_path, labelled_train):
    s = B.states(0)
    first = sorted({t: p for p, t in reversed(list(enumerate(s["input_ids"].tolist())))}.values())  # no repeats
    infer = _after_each_layer(tmp_path / "infer", positions=first)
    r = hsdiff.compare(labelled_train, infer, layer_ids=[1, 14, 26])
    assert r.verdict == "inconclusive" and r.exit_code == 1
    assert all(x.confidence <= 0.5 for x in r.slots)
    assert list(r.recommended.ids) == [None, None, None]  # never the ids one lower, which break it
    assert "too late" not in r.cause


def test_tags_the_embedding_lookup_confirms_outweigh_training_labels_one_off(tmp_path):
    train = B.specforge(tmp_path / "train", [0], [2, 15, 27])
    B.draft_config(train / "config.json", [2, 15, 27])  # claims B 3, 16, 28: wrong
    infer = B.sglang_dump(tmp_path / "all", 0, list(range(30)), concat_slots=False, tag_layers=True)  # tag i = Bi
    r = hsdiff.compare(train, infer, layer_ids=[1, 14, 26])
    assert r.verdict == "ok" and [x.confidence for x in r.slots] == [1.0, 1.0, 1.0]


# ----------------------------------------------------------------------------- a fix that repeats the refuted ids
def test_ids_the_values_refute_are_never_recommended(tmp_path):
    """Training files hold B2, 15, 27; the training config says one layer deeper, and the engine runs
    those ids: its captures (B3, 16, 28) differ by 27-39 %, one layer deeper by the norms."""
    train = B.specforge(tmp_path / "train", [0, 1], [2, 15, 27])
    B.draft_config(train / "config.json", [2, 15, 27])
    infer = B.sglang_dump(tmp_path / "infer", 0, [3, 16, 28])
    r = hsdiff.compare(train, infer, layer_ids=[2, 15, 27])
    assert r.verdict == "mismatch" and r.exit_code == 1
    assert list(r.recommended.ids) == [1, 14, 26] and all(x.confidence < 0.5 for x in r.slots)
    assert "one layer deeper" in r.cause and "refute" in r.cause and "post-norm" not in r.cause


# ----------------------------------------------------------------------------- ids that cannot describe the dump
def test_configured_ids_that_cannot_describe_the_dump_are_said_so(tmp_path):
    """The seed dump was made with ids [-1, 2, 30]; hsdiff is told [2, 30, 58], which would label the capture
    equal to training B3 as B31: 28 layers, no counting convention."""
    out = tmp_path / "r.json"
    res = CliRunner().invoke(
        cli,
        ["compare", str(B.SEED / "train"), str(B.SEED / "infer-wrong"), "--layer-ids", "2,30,58", "--json", str(out)],
    )
    assert res.exit_code == 1 and "cannot describe this dump" in res.output
    doc = json.loads(out.read_text())
    assert doc["verdict"] == "inconclusive" and "labels-disagree" in doc["diagnosis"]["overrides"]
    assert all(i is None or i < 61 for i in doc["recommended"]["eagle_aux_hidden_state_layer_ids"])
    assert all(b is None or b <= 61 for b in doc["recommended"]["boundary_indices"])
    # with the depth given, the same run is a verdict, not an error
    res = CliRunner().invoke(
        cli,
        [
            "compare",
            str(B.SEED / "train"),
            str(B.SEED / "infer-wrong"),
            "--layer-ids",
            "2,30,58",
            "--num-layers",
            "61",
            "-q",
        ],
    )
    assert res.exit_code == 1 and "cannot describe this dump" in res.output
