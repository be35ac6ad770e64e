"""`hsdiff inspect`: what a dump holds, without comparing it."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from hsdiff.cli import cli
from hsdiff.inspection import _rows, inspect
from hsdiff.schemas import validate

from . import builders as B

SEED = B.SEED


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_two_rank_sglang_dumper_folder_reports_both_ranks_replicated(tmp_path):
    out = tmp_path / "inspect.json"
    r = run("inspect", str(SEED / "infer-wrong"), "--json", str(out))
    assert r.exit_code == 0, r.output
    assert "SGLang dumper: 1 run, 1 step; 2 ranks, replicated" in r.output
    assert "ranks: [0, 1] — replicated" in r.output
    doc = json.loads(out.read_text())
    validate(doc, "inspect")
    assert doc["ranks"]["ranks"] == [0, 1] and doc["ranks"]["state"] == "replicated"
    assert [f["format"] for f in doc["formats"]] == ["sglang_dumper"]
    assert sorted(c["rank"] for c in doc["captures"]) == [0, 1]
    assert all(c["shape"] == [25, 1728] and c["dtype"] == "bfloat16" and c["token_ids"] == 25 for c in doc["captures"])
    assert all(c["norm"]["sink_tokens"] == [0] and c["nonfinite"] == 0 for c in doc["captures"])


def test_ranks_that_disagree_are_reported(tmp_path):
    root = B.sglang_dump(tmp_path / "dump", 0, [3, 16, 28], ranks=2)
    f = next(root.rglob("step=0___rank=1___dump_index=1___*.pt"))
    obj = torch.load(f, weights_only=True)
    obj["value"] = obj["value"] * 1.5
    torch.save(obj, f)
    info = inspect(root)
    assert info.ranks["state"] == "differ"
    assert "2 ranks, differ" in info.summary[0]
    assert "differs by 50% (median over" in info.ranks["detail"][0]["why"]


def test_specforge_folder_names_its_slots_and_their_labels():
    r = run("inspect", str(SEED / "train"))
    assert r.exit_code == 0, r.output
    info = inspect(SEED / "train")
    assert info.summary[0] == (
        "SpecForge: 2 samples, 25–31 tokens; 3 slots × 576, labelled B[3, 31, 59] by config.json "
        "(ids [2, 30, 58], SpecForge convention)"
    )
    assert info.summary[0] in r.output
    assert info.hidden_size == 576
    caps = info.to_dict()["captures"]
    assert [c["concatenated_slots"] for c in caps] == [3, 3]
    # per-slot norms grow with depth (B3 < B31 < B59), the fingerprint of a real residual stream
    med = [s["median"] for s in caps[0]["slot_norms"]]
    assert med == sorted(med) and med[2] > 5 * med[0]
    validate(json.loads(info.to_json()), "inspect")


def test_a_specforge_folder_without_config_takes_its_hidden_size_from_the_final_state(tmp_path):
    B.specforge(tmp_path / "train", [0], [2, 9, 15, 27])  # no config.json beside it
    info = inspect(tmp_path / "train")
    assert info.hidden_size == 576
    assert "4 slots × 576" in info.summary[0]
    assert "hidden size 576 (the width of the training files' final hidden_state; no config.json)" in info.summary


def test_all_layer_stack_and_a_debug_log():
    stack = inspect(B.SMOLLM2 / "states" / "sample-0.safetensors")
    assert stack.summary[0].startswith("all-layer stack B0..B30; 2 stacks, 24 tokens")
    log = inspect(B.REAL / "sglang-dumper.log")
    assert log.summary[0] == "debug log: 30 printed captures, 750 values"
    for info in (stack, log):
        validate(json.loads(info.to_json()), "inspect")


def test_nan_values_are_counted(tmp_path):
    x = B.concat(0, [2, 15, 27]).clone()
    x[3, 5] = float("nan")
    x[7, 1] = float("inf")
    torch.save({"aux_hidden_state": x.unsqueeze(0), "input_ids": B.states(0)["input_ids"]}, tmp_path / "data_0.ckpt")
    info = inspect(tmp_path)
    assert info.captures[0]["nonfinite"] == 2
    assert "2 NaN/Inf values in the sampled rows" in info.summary


def test_only_sampled_rows_are_read():
    assert _rows(10, 256) == list(range(10))
    rows = _rows(1_000_000, 256)
    assert len(rows) <= 256 and rows[:4] == [0, 1, 2, 3] and rows[-1] == 999_999


def test_missing_path_is_a_user_error(tmp_path):
    r = run("inspect", str(tmp_path / "nope"))
    assert r.exit_code == 2 and "no such file or directory" in r.output


@pytest.mark.parametrize("fixture", ["seed/infer-fixed", "real-dumps/modelopt", "real-dumps/sglang-dumper"])
def test_json_follows_the_schema(fixture):
    validate(json.loads(inspect(B.FIXTURES / fixture).to_json()), "inspect")
