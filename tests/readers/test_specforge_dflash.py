"""The SpecForge DFlash-family reader: DFlash/Domino records (aux only) and DSpark records (aux and final)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hsdiff
from hsdiff.readers import scan

from .. import builders as B
from .cli import all_layers, refusal

FIVE = [2, 9, 15, 21, 28]  # five target layers, as a DFlash draft config selects more than three


@pytest.mark.parametrize("gz", [False, True])
def test_dflash_records_have_their_five_layers_identified(tmp_path, gz):
    train = B.specforge_dflash(tmp_path / "train", [0, 1], FIVE, gz=gz)
    dump = scan(train, "train")
    assert [c.origin.format for c in dump.captures] == ["specforge_dflash"] * 2
    cap = dump.captures[1]
    assert cap.concat and cap.width == 5 * B.H and cap.final_width is None and cap.mask_loader is not None
    assert "DFlash or Domino" in cap.variant
    np.testing.assert_array_equal(cap.array()[:, 2 * B.H : 3 * B.H], B.states(1)["fp32"][15].numpy())
    r = hsdiff.compare(train, all_layers(tmp_path / "all"), hidden_size=B.H)
    assert [s.boundary_index for s in r.slots] == FIVE
    assert all(s.evidence == "observed" for s in r.slots)


def test_dspark_records_carry_the_final_state_and_match_the_real_dumper(tmp_path):
    train = B.specforge_dspark(tmp_path / "train")
    caps = scan(train, "train").captures
    assert [c.final_width for c in caps] == [576, 576] and not caps[0].final_pre_norm
    assert caps[0].variant.startswith("DSpark record")
    r = hsdiff.compare(train, B.REAL / "sglang-dumper", layer_ids=[1, 14, 26])
    assert r.verdict == "ok" and r.exit_code == 0 and [s.boundary_index for s in r.slots] == [2, 15, 27]


def test_inspect_names_the_format_and_the_strategy(tmp_path):
    info = hsdiff.inspect(B.specforge_dspark(tmp_path))
    (fmt,) = info.formats
    assert (
        fmt["format"] == "specforge_dflash" and "DFlash/Domino/DSpark" in fmt["why"] and "DSpark record" in fmt["why"]
    )
    assert info.summary[0].startswith("SpecForge DFlash family: 2 samples, 52–61 tokens; 3 slots × 576")


def test_a_record_of_another_layout_is_one_line_naming_the_file(tmp_path):
    s = B.states(0)
    torch.save(
        {"input_ids": s["input_ids"], "loss_mask": torch.ones(24), "hidden_states": B.concat(0, [2, 15, 27])},
        tmp_path / "data_0.ckpt",
    )
    line = refusal(["inspect", str(tmp_path)])
    assert "data_0.ckpt" in line and "[24, 1728]" in line and "hidden_states [1, T, k·H]" in line
