"""Per-layer labelled tensors in every container."""

from __future__ import annotations

import numpy as np
import torch
from safetensors.torch import save_file

from hsdiff.readers import scan

from .. import builders as B


def test_per_layer_tensors_in_every_container(tmp_path):
    s = B.states(0)["bf16"]
    save_file(
        {"hidden_states.layer_3": s[3].contiguous(), "hidden_states.layer_31": s[16].contiguous()},
        str(tmp_path / "caps.safetensors"),
    )
    np.save(tmp_path / "h59.npy", s[20].float().numpy())
    np.savez(tmp_path / "more.npz", **{"layers.7": s[7].float().numpy()})
    torch.save({"layers.9": s[9].clone()}, tmp_path / "more.pth")
    caps = scan(tmp_path, "infer").captures
    got = sorted((c.origin.path, c.boundary) for c in caps)
    assert got == [("caps.safetensors", 3), ("caps.safetensors", 31), ("h59.npy", 59), ("more.npz", 7), ("more.pth", 9)]
