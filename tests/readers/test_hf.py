"""All-layer stacks in Hugging Face order."""

from __future__ import annotations

import torch
from safetensors.torch import save_file

from hsdiff.readers import scan

from .. import builders as B


def test_hf_stack_and_tuple(tmp_path):
    s = B.states(0)
    save_file(
        {"hidden_states": s["fp32"].contiguous(), "input_ids": s["input_ids"]},
        str(tmp_path / "stack.safetensors"),
        metadata={"index": "boundary"},
    )
    caps = scan(tmp_path / "stack.safetensors", "train").captures
    assert [c.boundary for c in caps] == list(range(31))  # B30 pre-norm: metadata says boundary
    torch.save({"hidden_states": tuple(s["fp32"][i].clone() for i in range(31))}, tmp_path / "tuple.pt")
    caps = scan(tmp_path / "tuple.pt", "train").captures
    assert [c.boundary for c in caps][:30] == list(range(30))
    assert caps[30].post_norm and caps[30].boundary is None  # HF's last entry is post-norm
