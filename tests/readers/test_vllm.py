"""The vLLM extract_hidden_states connector reader."""

from __future__ import annotations

import torch

from hsdiff.readers import scan

from .. import builders as B


def test_vllm_connector_file(tmp_path):
    B.vllm_file(tmp_path, 1, [2, 15, 27])
    caps = scan(tmp_path, "infer").captures
    assert [c.slot for c in caps] == [0, 1, 2]
    assert all(c.origin.format == "vllm" and c.layer is None for c in caps)
    assert torch.equal(caps[1].load(), B.states(1)["bf16"][15])
