"""The verl-SpeCo feature-store reader: torch shards of samples, split by their hidden_states_layout."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hsdiff
from hsdiff.arrays import as_f32
from hsdiff.readers import scan

from .. import builders as B
from .cli import inspected, refusal


@pytest.mark.parametrize("layout,per_shard", [("eagle3_aux_plus_last", 1), ("dflash_aux", 2)])
def test_samples_are_split_as_their_layout_says_and_identified(tmp_path, layout, per_shard):
    store = B.verl_feature_store(tmp_path / "store", layout=layout, per_shard=per_shard)
    caps = scan(store, "train").captures
    assert [c.origin.format for c in caps] == ["verl_speco"] * 2 and caps[0].width == 1728
    assert [x.boundary for x in caps[0].slot_layers] == [2, 15, 27] and caps[0].slot_layers[0].source == "claimed"
    real = torch.load(B.REAL / "modelopt" / "example-0.pt", weights_only=True)
    assert caps[0].token_ids == tuple(real["input_ids"].tolist())
    if layout == "eagle3_aux_plus_last":
        assert caps[0].final_width == 576 and caps[0].read_rows(0, 2).shape == (2, 1728)
        np.testing.assert_array_equal(
            as_f32(np.asarray(caps[0].final_loader())), real["hidden_states"].bfloat16().float().numpy()
        )
    else:
        assert caps[0].final_width is None
    r = hsdiff.compare(store, B.REAL / "sglang-dumper", layer_ids=[1, 14, 26])
    assert r.verdict == "ok" and r.exit_code == 0 and [s.boundary_index for s in r.slots] == [2, 15, 27]


def test_a_rollout_window_is_placed_by_value(tmp_path):
    store = B.verl_feature_store(tmp_path / "store", window=5)
    cap = scan(store, "train").captures[0]
    assert cap.token_ids is None and "56 hidden rows for 61 input_ids" in cap.variant
    info = inspected(store, "verl_speco", "torch_shard", "hidden_states_layout eagle3_aux_plus_last")
    assert info.startswith("verl-SpeCo feature store: 2 samples")


def test_an_unknown_layout_is_one_line_naming_the_file(tmp_path):
    store = B.verl_feature_store(tmp_path, layout="eagle3_aux_plus_last_v9")
    line = refusal(["inspect", str(store)])
    assert "smoke_000000.pt" in line and "'eagle3_aux_plus_last_v9'" in line and "dflash_aux" in line
