"""The TensorRT-LLM debug_mode reader: one tensor per file, decoder-layer output pairs summed."""

from __future__ import annotations

import numpy as np
import torch

import hsdiff
from hsdiff.readers import scan

from .. import builders as B
from .cli import inspected, refusal


def test_the_pairs_are_the_layers_outputs_and_the_layers_are_identified(tmp_path):
    infer = B.trtllm_debug_dump(tmp_path / "dbg", 1)
    dump = scan(infer, "infer")
    assert not dump.warnings  # the norms' files are recognised, not reported as skipped
    caps = {c.boundary: c for c in dump.captures}
    assert sorted(caps) == list(range(31)) and {c.origin.format for c in caps.values()} == {"trtllm_debug"}
    assert caps[15].layer.index == "output" and caps[15].layer.value == 14  # decoder layer 14 = call 16
    assert caps[15].origin.key == "1.LlamaModel-16.LlamaDecoderLayer-outputs summed"
    assert caps[0].token_ids == tuple(B.states(1)["input_ids"].tolist())
    want = B.states(1)["bf16"][15].float().numpy()
    np.testing.assert_allclose(caps[15].array(), want, rtol=0, atol=float(np.abs(want).max()) * 2**-7)
    train = B.specforge(tmp_path / "train", [0, 1, 2], [2, 15, 27])
    r = hsdiff.compare(train, infer, layer_ids=[1, 14, 26], engine="trtllm")
    assert r.verdict == "ok" and r.exit_code == 0 and [s.boundary_index for s in r.slots] == [2, 15, 27]
    r = hsdiff.compare(train, infer, layer_ids=[2, 15, 27], engine="trtllm")
    assert r.verdict == "mismatch" and r.recommended.ids == (1, 14, 26)


def test_ranks_collapse_and_inspect_names_the_format(tmp_path):
    infer = B.trtllm_debug_dump(tmp_path, 0, ranks=2)
    assert all(c.rank is None for c in scan(infer, "infer").captures)
    assert inspected(infer, "trtllm_debug", "debug_mode", "pairs summed") == (
        "TensorRT-LLM debug_mode dump: 1 forward pass, residual stream at B0..B30, 24 tokens"
    )


def test_a_decoder_layer_with_another_output_layout_is_one_line(tmp_path):
    d = tmp_path / "rank0"
    d.mkdir()
    for name in ("position_ids", "hidden_states", "attn_metadata"):
        torch.save(torch.zeros(24, 576), d / f"1.LlamaModel-2.LlamaDecoderLayer-output.{name}.pt")
    line = refusal(["inspect", str(tmp_path)])
    assert "LlamaDecoderLayer-output" in line and "(hidden_states, residual) pair" in line
