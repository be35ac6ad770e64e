"""The speculators reader: ``hs_{idx}.safetensors`` as data_generation_offline.py leaves them, with and
without the ``vllm_command.txt`` that launch_vllm.py writes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import hsdiff
from hsdiff.arrays import as_f32
from hsdiff.readers import scan

from .. import builders as B
from .cli import all_layers, refusal

IDS = [2, 15, 27, 30]  # vLLM B-indices: launch_vllm.py's default for L = 30, the last appended


@pytest.fixture(scope="module")
def infer(tmp_path_factory):
    return all_layers(tmp_path_factory.mktemp("all"))


def test_the_trainer_s_split_is_read_and_the_provenance_labels_the_slots(tmp_path, infer):
    train = B.speculators_dir(tmp_path / "train", [0, 1, 2], IDS)
    dump = scan(train, "train")
    assert not dump.warnings  # vllm_command.txt is provenance, not a file that held nothing
    assert [c.origin.format for c in dump.captures] == ["speculators"] * 3
    cap = dump.captures[1]
    assert cap.concat and cap.width == 3 * B.H and cap.final_width == B.H and cap.final_pre_norm
    assert [x.boundary for x in cap.slot_layers] == [2, 15, 27] and cap.slot_layers[0].source == "claimed"
    np.testing.assert_array_equal(cap.array()[:, B.H : 2 * B.H], B.states(1)["fp32"][15].numpy())
    np.testing.assert_array_equal(as_f32(cap.read_rows(3, 7))[:, : B.H], B.states(1)["fp32"][2][3:7].numpy())
    np.testing.assert_array_equal(cap.final_loader(), B.states(1)["fp32"][30].numpy())  # B = L, pre-norm
    r = hsdiff.compare(train, infer, layer_ids=[1, 14, 26])
    assert r.verdict == "ok" and r.exit_code == 0 and r.recommended.ids == (1, 14, 26)
    assert [s.boundary_index for s in r.slots] == [2, 15, 27]
    assert all(s.evidence == "observed" for s in r.slots)


def test_without_provenance_the_layers_are_found_by_value(tmp_path, infer):
    train = B.speculators_dir(tmp_path / "train", [1], IDS, provenance=False)
    (cap,) = scan(train, "train").captures
    assert cap.origin.format == "speculators" and cap.slot_layers == ()
    r = hsdiff.compare(train, infer, layer_ids=[2, 15, 27])
    assert r.verdict == "mismatch" and r.exit_code == 1
    assert [s.boundary_index for s in r.slots] == [2, 15, 27] and r.recommended.ids == (1, 14, 26)


def test_provenance_that_does_not_fit_the_file_is_not_used(tmp_path):
    train = B.speculators_dir(tmp_path / "train", [0], IDS)
    B.speculators_dir(tmp_path / "other", [], [2, 15, 27])  # a command with 3 ids for files of 4 entries
    (train / "vllm_command.txt").write_text((tmp_path / "other" / "vllm_command.txt").read_text())
    dump = scan(train, "train")
    assert dump.captures[0].slot_layers == ()
    assert any("records ids [2, 15, 27]" in w and "4 entries" in w for w in dump.warnings)


def test_inspect_names_the_format_the_split_and_the_provenance(tmp_path):
    info = hsdiff.inspect(B.speculators_dir(tmp_path / "train", [0, 2], IDS))
    (fmt,) = info.formats
    assert fmt["format"] == "speculators" and "hs_{idx}" in fmt["why"]
    assert "hidden_states[:, -1]" in fmt["why"] and "records ids [2, 15, 27, 30] (vllm 0.33.0)" in fmt["why"]
    assert info.summary[0].startswith("speculators: 2 samples") and "labelled B[2, 15, 27]" in info.summary[0]


def test_a_connector_file_of_another_name_stays_vllm(tmp_path):
    B.vllm_file(tmp_path, 1, [2, 15, 27])
    assert {c.origin.format for c in scan(tmp_path, "infer").captures} == {"vllm"}


@pytest.mark.parametrize("shape", [(24, 576), (24, 1, 576)])
def test_another_layout_is_one_line_naming_the_file_and_the_layout(tmp_path, shape):
    save_file({"hidden_states": torch.zeros(shape), "token_ids": torch.arange(24)}, str(tmp_path / "hs_7.safetensors"))
    line = refusal(["inspect", str(tmp_path)])
    assert "hs_7.safetensors" in line and "[T, k, H] with k >= 2" in line and f"{list(shape)}" in line


def test_the_prediction_takes_the_verifier_state_as_pre_norm(tmp_path):
    from hsdiff.draft.predict import _samples

    dump = scan(B.speculators_dir(tmp_path / "s", [1], IDS), "train")
    (s,) = _samples(dump, 3 * B.H, B.H, B.L).values()
    assert s.final is None and s.last is not None and not s.last.post_norm  # the head applies the norm to it
    np.testing.assert_array_equal(s.last.array(), B.states(1)["fp32"][30].numpy())
    (m,) = list(_samples(scan(B.REAL / "modelopt", "train"), 3 * B.H, B.H, B.L).values())[:1]
    assert m.final is not None and m.final.post_norm and m.last is None  # ModelOpt's HF dump: after the norm
