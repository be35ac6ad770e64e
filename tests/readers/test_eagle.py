"""The EAGLE-1/2 ge_data reader."""

from __future__ import annotations

import torch

from hsdiff.readers import scan

from .. import builders as B


def test_eagle_ge_data(tmp_path):
    s = B.states(0)
    torch.save(
        {"input_ids": s["input_ids"], "hidden_state": s["fp32"][B.L][None], "loss_mask": torch.ones(3)},
        tmp_path / "data_0.ckpt",
    )
    (cap,) = scan(tmp_path, "train").captures
    assert cap.origin.format == "eagle" and cap.post_norm and cap.width == B.H
