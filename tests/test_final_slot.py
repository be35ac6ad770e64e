"""A training slot that holds the final post-norm state is a slot like the others: read, scored, and
served or refused, never dropped. From real SmolLM2 states (fp32 training side, bf16 engine side):
the slot holds HF's ``hidden_states[-1]`` (after the final norm), as ModelOpt's HF script and
TensorRT-LLM's two-model path with -1 produce it."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

import hsdiff
from hsdiff.cli import cli

from . import builders as B

FINAL = B.L + 1  # the final post-norm state's boundary index on a 30-layer target


@pytest.fixture(scope="module")
def real():
    return load_file(str(B.SMOLLM2 / "states" / "sample-0.safetensors"))  # B 0..30 and the final post-norm state


def _modelopt_train(root, s):
    """ModelOpt's HF script with aux layers 1, 14 and the last entry: aux = B2 | B15 | final post-norm,
    ``hidden_states`` = the final post-norm state (the aux tensor's last columns, bit for bit)."""
    fp = s["fp32.boundaries"]
    root.mkdir(parents=True)
    torch.save(
        {
            "input_ids": s["input_ids"].clone(),
            "hidden_states": s["fp32.final"].clone(),
            "aux_hidden_states": torch.cat([fp[2], fp[15], s["fp32.final"]], dim=-1).clone(),
            "conversation_id": "conv-0",
        },
        root / "conv-0.pt",
    )
    return root


def _vllm_connector(root, s, boundaries):
    root.mkdir(parents=True)
    hs = torch.stack([s["bf16.boundaries"][b] for b in boundaries], dim=1).contiguous()
    save_file({"hidden_states": hs, "token_ids": s["input_ids"].clone()}, str(root / "req-0.safetensors"))
    return root


def _hf_stack(root, s):
    """Every boundary as HF's output_hidden_states returns them: [L] after the final norm."""
    root.mkdir(parents=True)
    stack = torch.cat([s["bf16.boundaries"][: B.L], s["bf16.final"][None]]).contiguous()
    save_file({"hidden_states": stack, "input_ids": s["input_ids"].clone()}, str(root / "hf.safetensors"))
    return root


def _compare(*args):
    return CliRunner().invoke(cli, ["compare", *map(str, args)])


# ----------------------------------------------------------------------------- vLLM: no post-norm capture
def test_vllm_cannot_serve_a_post_norm_slot_and_says_so(tmp_path, real):
    """speculators #313: ids [2, 15, 30] make vLLM capture B30 before the final norm where training slot 2
    holds it after: three slots scored, a mismatch (exit 1), never OK with two."""
    train = _modelopt_train(tmp_path / "train", real)
    infer = _vllm_connector(tmp_path / "infer", real, [2, 15, 30])
    r = hsdiff.compare(train, infer, engine="vllm", engine_version="0.33", layer_ids=[2, 15, 30])
    assert len(r.slots) == 3 and r.verdict == "mismatch" and r.exit_code == 1
    assert [s.status for s in r.slots] == ["ok", "ok", "mismatch"]
    assert len(r.recommended.ids) == 3 and r.recommended.finals == (2,)
    assert r.recommended.ids[2] is None and r.recommended.unservable
    assert "cannot capture it" in r.cause and "final hidden state after the final norm" in r.cause

    # with the depth known, the slot is named: the final post-norm state, which vLLM has no id for
    r = hsdiff.compare(train, infer, engine="vllm", engine_version="0.33", layer_ids=[2, 15, 30], num_layers=B.L)
    assert [s.boundary_index for s in r.slots] == [2, 15, FINAL] and r.verdict == "mismatch"
    assert list(r.recommended.boundary_indices) == [2, 15, FINAL] and r.recommended.ids[2] is None
    assert "vLLM (boundary index, sorted) cannot capture the final hidden state" in r.cause


def test_the_cli_offers_nothing_to_paste_and_fix_config_refuses(tmp_path, real):
    train = _modelopt_train(tmp_path / "train", real)
    infer = _vllm_connector(tmp_path / "infer", real, [2, 15, 30])
    out = _compare(
        train,
        infer,
        "--engine",
        "vllm",
        "--engine-version",
        "0.33",
        "--layer-ids",
        "2,15,30",
        "--json",
        tmp_path / "r.json",
    )
    assert out.exit_code == 1 and "null" not in out.output.split("paste into")[1].splitlines()[1]
    assert "nothing to paste" in out.output and "final post-norm state" in out.output
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["recommended"]["final_post_norm_slots"] == [2] and len(doc["slots"]) == 3
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"eagle_aux_hidden_state_layer_ids": [2, 15, 30]}))
    fix = CliRunner().invoke(cli, ["fix-config", str(cfg), "--from-report", str(tmp_path / "r.json")])
    assert fix.exit_code == 2 and json.loads(cfg.read_text())["eagle_aux_hidden_state_layer_ids"] == [2, 15, 30]


# ----------------------------------------------------------------------------- TensorRT-LLM: -1 is the slot
def test_trtllm_one_model_path_puts_minus_one_first_so_the_order_cannot_be_served(tmp_path, real):
    train = _modelopt_train(tmp_path / "train", real)
    infer = _hf_stack(tmp_path / "infer", real)
    out = _compare(train, infer, "--engine", "trtllm", "--engine-version", "main", "--layer-ids=-1,1,14")
    assert out.exit_code == 1
    assert "no id list reproduces the training order" in out.output and "(-1) first" in out.output
    r = hsdiff.compare(train, infer, engine="trtllm", engine_version="main", layer_ids=[-1, 1, 14])
    assert [s.boundary_index for s in r.slots] == [2, 15, FINAL] and r.slots[2].evidence == "observed"
    assert r.verdict == "mismatch" and r.recommended.unservable and len(r.recommended.ids) == 3


def test_trtllm_two_model_path_serves_minus_one_last(tmp_path, real):
    train = _modelopt_train(tmp_path / "train", real)
    infer = _hf_stack(tmp_path / "infer", real)
    r = hsdiff.compare(train, infer, engine="trtllm", engine_version="two-model", layer_ids=[1, 14, -1])
    assert r.verdict == "ok" and list(r.recommended.ids) == [1, 14, -1]
    assert r.slots[2].boundary_index == FINAL and r.slots[2].evidence == "observed"
    # the regression: two ids for a draft whose fc was trained on three slots
    r = hsdiff.compare(train, infer, engine="trtllm", engine_version="two-model", layer_ids=[1, 14])
    assert r.verdict == "mismatch" and r.exit_code == 1 and "slot-count" in r.diagnosis.overrides
    assert list(r.recommended.ids) == [1, 14, -1]


def test_the_three_ids_reach_the_json_and_fix_config_points_to_trtllms_own_config(tmp_path, real):
    train = _modelopt_train(tmp_path / "train", real)
    infer = _hf_stack(tmp_path / "infer", real)
    out = _compare(
        train,
        infer,
        "--engine",
        "trtllm",
        "--engine-version",
        "two-model",
        "--layer-ids",
        "1,14",
        "--json",
        tmp_path / "r.json",
    )
    assert out.exit_code == 1 and '"eagle_aux_hidden_state_layer_ids": [1, 14, -1]' in out.output
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"eagle_aux_hidden_state_layer_ids": [1, 14]}))
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["recommended"]["eagle_aux_hidden_state_layer_ids"] == [1, 14, -1]
    assert doc["recommended"]["final_post_norm_slots"] == [2]
    fix = CliRunner().invoke(cli, ["fix-config", str(cfg), "--from-report", str(tmp_path / "r.json")])
    assert fix.exit_code == 2 and "eagle3_layers_to_capture" in fix.output  # not a draft config.json key
    assert json.loads(cfg.read_text())["eagle_aux_hidden_state_layer_ids"] == [1, 14]


def test_trtllm_save_hidden_states_with_minus_one_reads_four_slots(tmp_path):
    """SaveHiddenStates with ids [1, 14, 26, -1]: the buffer keeps the final state as its last columns."""
    train = B.trtllm_file(tmp_path / "train", minus_one=True)
    dump = hsdiff.load(train, "train")
    assert {c.width for c in dump.captures} == {4 * B.H}
    from hsdiff.comparison.slots import final_slots, split_train

    slots = split_train(dump, B.H)
    assert len(slots) == 4 and final_slots(slots) == [3]


def test_a_pre_norm_final_state_in_the_last_columns_is_not_post_norm(tmp_path):
    """ModelOpt's vLLM dump with L among the aux ids: the last columns equal its final state, which is B=L
    *before* the norm (attention sinks in it): a slot, not the post-norm state."""
    d = B.modelopt_vllm_file(tmp_path / "train", 0, [2, 15, B.L])
    dump = hsdiff.load(d, "train")
    from hsdiff.comparison.slots import final_slots, split_train

    slots = split_train(dump, B.H)
    assert len(slots) == 3 and final_slots(slots) == []
