"""The SGLang forward-hook reader: Pass*.pt files as --debug-tensor-dump-output-folder writes them."""

from __future__ import annotations

import numpy as np
import torch

import hsdiff
from hsdiff.readers import scan

from .. import builders as B
from .cli import inspected, refusal


def test_the_residual_halves_are_the_boundaries_and_the_layers_are_identified(tmp_path):
    infer = B.sglang_hook_dump(tmp_path / "hook", 1)
    caps = scan(infer, "infer").captures
    assert {c.origin.format for c in caps} == {"sglang_hook"}
    labelled = {c.boundary: c for c in caps if c.layer is not None}
    assert sorted(labelled) == list(range(31))  # embed_tokens, input_layernorm 1..29, model.norm's residual
    assert labelled[15].origin.key == "model.layers.15.input_layernorm.1"
    np.testing.assert_array_equal(labelled[15].load().float().numpy(), B.states(1)["bf16"][15].float().numpy())
    assert [c.origin.key for c in caps if c.post_norm] == ["model.norm.0"]
    train = B.specforge(tmp_path / "train", [0, 1, 2], [2, 15, 27])
    r = hsdiff.compare(train, infer, layer_ids=[1, 14, 26])
    assert r.verdict == "ok" and r.exit_code == 0 and [s.boundary_index for s in r.slots] == [2, 15, 27]
    r = hsdiff.compare(train, infer, layer_ids=[-1, 1, 14])
    assert r.verdict == "mismatch" and r.exit_code == 1 and r.recommended.ids == (1, 14, 26)


def test_ranks_collapse_and_the_previous_pass_s_output_is_left_out(tmp_path):
    infer = B.sglang_hook_dump(tmp_path, 0, ranks=2, passes=2, layers=[1, 2, 14, 15])
    caps = scan(infer, "infer").captures
    assert all(c.rank is None for c in caps) and {c.group for c in caps} == {
        f"{tmp_path.name}:Pass00000",
        f"{tmp_path.name}:Pass00001",
    }
    assert not any(c.origin.key in ("model", "logits_processor") for c in caps)
    # a subset of layers: model.norm's residual is B = L, but L is not in the dump, so it is not labelled
    assert sorted({c.boundary for c in caps if c.layer is not None}) == [0, 1, 2, 14, 15]
    assert inspected(infer, "sglang_hook", "--debug-tensor-dump-output-folder") == (
        "SGLang forward-hook dump: 2 forward passes, residual stream at B0..B2, B14..B15, 24 tokens"
    )


def test_a_pass_without_a_residual_stream_is_one_line_naming_the_file(tmp_path):
    d = tmp_path / "TP0_PP0_Rank0_pid1"
    d.mkdir()
    torch.save(
        {"model.layers.0.mlp.down_proj": torch.zeros(24, 576), "model.forward_batch_info.input_ids": torch.arange(24)},
        d / "Pass00000.pt",
    )
    line = refusal(["inspect", str(tmp_path)])
    assert "Pass00000.pt" in line and "model.layers.N.input_layernorm as [normed, residual]" in line
