"""The ModelOpt reader, on files written by ModelOpt and in the layouts of its vLLM and TensorRT-LLM scripts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hsdiff
from hsdiff.readers import scan

from .. import builders as B
from .cli import all_layers, refusal


@pytest.fixture(scope="module")
def infer(tmp_path_factory):
    return all_layers(tmp_path_factory.mktemp("all"))


def test_modelopt_real_files_written_by_modelopt():
    dump = scan(B.REAL / "modelopt", "train")
    assert [c.origin.format for c in dump.captures] == ["modelopt", "modelopt"]
    first = dump.captures[0]
    assert first.concat and first.width == 1728 and first.group == "example-0"
    assert first.token_ids is not None and len(first.token_ids) == 61
    assert first.load().shape == (61, 1728)
    assert not first.final_pre_norm and "after the final norm" in first.variant  # Hugging Face's hidden_states[-1]


def test_the_vllm_dump_is_told_pre_norm_by_its_attention_sinks(tmp_path, infer):
    train = B.modelopt_vllm_file(tmp_path / "train", 1, [2, 15, 27])
    (cap,) = scan(train, "train").captures
    assert cap.final_pre_norm and cap.variant.startswith("vLLM dump") and "attention sinks" in cap.variant
    np.testing.assert_array_equal(cap.final_loader(), B.states(1)["fp32"][30].numpy())
    r = hsdiff.compare(train, infer, layer_ids=[1, 14, 26])
    assert r.verdict == "ok" and r.exit_code == 0 and [s.boundary_index for s in r.slots] == [2, 15, 27]


@pytest.mark.parametrize("flag", [True, False])
def test_the_hidden_states_prenorm_flag_is_what_the_file_says(tmp_path, flag):
    (cap,) = scan(B.modelopt_vllm_file(tmp_path, 0, [2, 15, 27], prenorm_flag=flag), "train").captures
    assert cap.final_pre_norm is flag and cap.variant.startswith(f"hidden_states_prenorm={flag}")


def test_tensorrt_llm_with_layer_minus_one_keeps_the_final_state_as_a_slot(tmp_path):
    train = B.modelopt_trtllm_file(tmp_path / "train", minus_one=True)
    (cap,) = scan(train, "train").captures
    assert cap.origin.key == "aux_hidden_states" and cap.width == 2304 and not cap.final_pre_norm
    assert cap.final_last and "a slot of its own" in cap.variant
    assert cap.array().shape == (61, 2304) and cap.read_rows(0, 4).shape == (4, 2304)
    r = hsdiff.compare(train, B.REAL / "sglang-dumper", layer_ids=[1, 14, 26])
    assert [s.boundary_index for s in r.slots][:3] == [2, 15, 27] and len(r.slots) == 4
    assert r.verdict == "mismatch" and r.recommended.finals == (3,)  # three ids for a four-slot fc


def test_tensorrt_llm_s_older_key_is_read(tmp_path):
    train = B.modelopt_trtllm_file(tmp_path / "train", minus_one=False, old_key=True)
    info = hsdiff.inspect(train)
    assert info.formats[0]["format"] == "modelopt" and "hidden_state_features, renamed by" in info.formats[0]["why"]
    r = hsdiff.compare(train, B.REAL / "sglang-dumper", layer_ids=[1, 14, 26])
    assert r.verdict == "ok" and [s.boundary_index for s in r.slots] == [2, 15, 27]


def test_an_empty_aux_tensor_is_one_line_naming_the_file(tmp_path):
    s = B.states(0)
    torch.save(
        {
            "input_ids": s["input_ids"],
            "hidden_states": s["fp32"][30].clone(),
            "aux_hidden_states": torch.empty(0),
            "loss_mask": torch.ones(24),
            "conversation_id": "c0",
        },
        tmp_path / "c0.pt",
    )
    line = refusal(["inspect", str(tmp_path)])
    assert "c0.pt" in line and "'aux_hidden_states' has shape [0]" in line and "captured no aux layer" in line
