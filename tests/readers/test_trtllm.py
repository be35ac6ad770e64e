"""The TensorRT-LLM SaveHiddenStates reader: lists of records as the drafter writes them."""

from __future__ import annotations

import pytest
import torch

import hsdiff
from hsdiff.readers import scan

from .. import builders as B
from .cli import refusal


@pytest.mark.parametrize("minus_one,old_key", [(False, False), (True, False), (False, True)])
def test_records_are_samples_and_their_layers_are_identified(tmp_path, minus_one, old_key):
    train = B.trtllm_file(tmp_path / "train", minus_one=minus_one, old_key=old_key)
    caps = scan(train, "train").captures
    assert [c.origin.format for c in caps] == ["trtllm", "trtllm"] and [c.group for c in caps] == [
        "data_2:1",
        "data_2:2",
    ]
    key = "hidden_state_features" if old_key else "aux_hidden_states"
    width = 2304 if minus_one else 1728  # with -1 listed, the final state is a fourth slot the draft is fed
    assert caps[0].origin.key == f"[0].{key}"
    assert all(c.width == width and c.final_width == 576 and not c.final_pre_norm for c in caps)
    assert caps[1].array().shape == (52, width) and caps[1].token_ids is not None and len(caps[1].token_ids) == 52
    assert (
        all(c.final_last is minus_one for c in caps)
        and ("the final post-norm state: a slot of its own" in caps[0].variant) is minus_one
    )
    r = hsdiff.compare(train, B.REAL / "sglang-dumper", layer_ids=[1, 14, 26])
    assert [s.boundary_index for s in r.slots][:3] == [2, 15, 27]
    assert {s.match.sample for s in r.slots[:3]} == {"data_2:1"}  # the dumper ran over example-0's tokens
    if minus_one:  # SGLang has no id for the final post-norm state, and three ids feed a four-slot fc
        assert r.verdict == "mismatch" and r.exit_code == 1 and len(r.slots) == 4
        assert "slot-count" in r.diagnosis.overrides and r.recommended.finals == (3,)
    else:
        assert r.verdict == "ok" and r.exit_code == 0


def test_a_record_without_aux_is_the_final_state(tmp_path):
    real = torch.load(B.REAL / "modelopt" / "example-0.pt", weights_only=True)
    torch.save(
        [{"id": 1, "input_ids": real["input_ids"], "hidden_state": real["hidden_states"]}], tmp_path / "data_1.pt"
    )
    (cap,) = scan(tmp_path, "train").captures
    assert cap.origin.format == "trtllm" and cap.post_norm and cap.width == 576


def test_inspect_names_the_format(tmp_path):
    info = hsdiff.inspect(B.trtllm_file(tmp_path, minus_one=True))
    assert info.formats[0]["format"] == "trtllm" and "SaveHiddenStates" in info.formats[0]["why"]
    assert "the final post-norm state: a slot of its own" in info.formats[0]["why"]
    assert info.summary[0].startswith("TensorRT-LLM SaveHiddenStates: 2 samples, 52–61 tokens; 4 slots × 576")


def test_a_record_of_another_shape_is_one_line_naming_the_file(tmp_path):
    real = torch.load(B.REAL / "modelopt" / "example-0.pt", weights_only=True)
    torch.save(
        [
            {
                "id": 1,
                "input_ids": real["input_ids"][:10],
                "hidden_state": real["hidden_states"],
                "aux_hidden_states": real["aux_hidden_states"],
            }
        ],
        tmp_path / "data_1.pt",
    )
    line = refusal(["inspect", str(tmp_path)])
    assert "data_1.pt" in line and "input_ids of 10 tokens" in line and "SaveHiddenStates writes" in line


def test_audit_says_a_file_of_several_records_is_not_one_sample(tmp_path):
    from hsdiff.audit import audit

    report = audit(B.trtllm_file(tmp_path / "d"), checkpoint=str(tmp_path / "ck.jsonl"), workers=0)
    (problem,) = report.problems
    assert problem.kind == "unreadable" and "holds 2 samples (a trtllm file packs several)" in problem.detail
