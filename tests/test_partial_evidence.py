"""Printed values as evidence: matched against full training tensors, with the evidence size, the
attention sink and the norms in mind. Real SmolLM2 / seed hidden states throughout."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from hsdiff import align
from hsdiff.cli import cli
from hsdiff.comparison import Options, compare
from hsdiff.model import Capture, Observation, Origin
from hsdiff.readers import scan

from . import builders as B

LOGS = B.FIXTURES / "logs"
CASES = json.loads((LOGS / "cases.json").read_text())
HSDIFF = shutil.which("hsdiff", path=str(Path(sys.executable).parent)) or "hsdiff"
# the layers the training sides really hold, in each engine's convention
TRUTH = {
    ("seed/train", "sglang"): [2, 30, 58],
    ("logs/smollm2-train", "sglang"): [1, 14, 26],
    ("logs/smollm2-train", "vllm"): [2, 15, 27],
}


@cache
def train_dump(rel: str):
    return scan(B.FIXTURES / rel, "train")


@cache
def seed_states() -> torch.Tensor:
    return load_file(str(B.SEED / "states-sample-1.safetensors"))["bf16.boundaries"].float()


def g4(v: float) -> str:
    return f"{v:.4g}"


def write_log(tmp_path: Path, lines: list[str], name: str = "server.log") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


# ----------------------------------------------------------------------------- every log style
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_log_style_gives_the_right_ids_or_leaves_them_open(name):
    case = CASES[name]
    r = CliRunner().invoke(
        cli, ["compare", str(B.FIXTURES / case["train"]), str(LOGS / name), *case["args"], "--json", "-"]
    )
    doc = json.loads(r.output)
    assert r.exit_code == case["exit"], r.output
    assert doc["verdict"] == case["verdict"]
    ids = doc["recommended"]["eagle_aux_hidden_state_layer_ids"]
    assert ids == case["ids"]
    engine = "vllm" if "--engine=vllm" in case["args"] else "sglang"
    truth = TRUTH[(case["train"], engine)]
    assert all(i is None or i == t for i, t in zip(ids, truth)), "a recommended id is wrong"
    assert [s["evidence"] for s in doc["slots"]] == case["evidence"]
    if "status" in case:
        assert [s["status"] for s in doc["slots"]] == case["status"]
    for s in doc["slots"]:
        if s["evidence"] == "observed":
            assert s["metrics"]["rel_err"] < 0.05 and not s["metrics"]["sink_only"]
            assert s["matched"]["file"] == name and s["matched"]["line"] >= 1


def test_seed_story_through_the_console_script():
    """The acceptance command: recommends [2, 30, 58], marks observed/consistent/inferred, notes the norms, exits 1."""
    p = subprocess.run(
        [HSDIFF, "compare", str(B.SEED / "train"), str(LOGS / "seed-first5.log"), "--layer-ids", "-1,2,30"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 1, p.stderr
    out = p.stdout
    assert '"eagle_aux_hidden_state_layer_ids": [2, 30, 58]' in out
    table = out.split("\n\n")[0].splitlines()[2:]
    assert [row.split()[1:3] for row in table] == [["B3", "observed"], ["B31", "consistent"], ["B59", "inferred"]]
    assert "shifted by 1 slot" in out
    assert "printed norm 59.7" in out and "before the residual add" in out and "the match stands" in out
    assert "printed 0.3594, 2.594, -11, -3.906, 7.5 where training holds 0.3759, 2.593, -11.03, -3.868, 7.547" in out
    assert "its label says B31" in out and "token 0 left out (attention sink" in out


def test_seed_story_evidence_per_slot():
    r = CliRunner().invoke(
        cli, ["compare", str(B.SEED / "train"), str(LOGS / "seed-first5.log"), "--layer-ids=-1,2,30", "--json", "-"]
    )
    doc = json.loads(r.output)
    s0, s1, s2 = doc["slots"]
    assert (s0["matched"]["line"], s0["matched"]["key"]) == (10, "[eagle3] aux_hidden_states[1] layer=3")
    assert s0["matched"]["capture_boundary_index"] == 3 and s0["matched"]["label_source"] == "log"
    assert s0["matched"]["sample"] == "data_1" and s0["matched"]["token_offset"] == 0
    assert s0["metrics"]["rel_err"] < 0.01 and s0["status"] == "mismatch" and s0["configured_boundary_index"] == 0
    assert (s1["matched"]["line"], s1["matched"]["capture_boundary_index"]) == (12, 31)
    assert s1["metrics"]["rel_err"] < 0.02 and s1["metrics"]["tokens"] == 1 and s1["metrics"]["values"] == 576
    assert s2["matched"] is None and s2["boundary_index"] == 59 and "inferred B59" in s2["note"]
    norm_warnings = [w for w in doc["warnings"] if "printed norm" in w]
    assert len(norm_warnings) == 2 and all("smaller than the norm of every training token" in w for w in norm_warnings)
    lacked = doc["explanation"][-1]
    assert lacked.startswith(
        "What the log lacked: slot 1 matched within noise (1.4%) but not clearly enough to rule out"
    )
    assert "slot 2 matched no printed capture (B59 was not in the log)" in lacked


def test_real_sglang_dumper_log_against_real_modelopt_dump():
    r = CliRunner().invoke(cli, ["compare", str(B.REAL / "modelopt"), str(B.REAL / "sglang-dumper.log"), "--json", "-"])
    doc = json.loads(r.output)
    assert r.exit_code == 0, r.output
    assert doc["recommended"]["eagle_aux_hidden_state_layer_ids"] == [1, 14, 26]
    assert [s["matched"]["capture_boundary_index"] for s in doc["slots"]] == [2, 15, 27]
    # the printed rows are the chat template's first tokens, shared by both conversations
    assert all(s["matched"]["samples_tied"] == 2 for s in doc["slots"])


# ----------------------------------------------------------------------------- alignment of printed rows
def test_prefill_that_skipped_the_first_token_aligns_at_offset_1():
    doc = json.loads(
        CliRunner()
        .invoke(
            cli,
            [
                "compare",
                str(LOGS / "smollm2-train"),
                str(LOGS / "smollm2-skip-first.log"),
                "--layer-ids=1,14,26",
                "--json",
                "-",
            ],
        )
        .output
    )
    s0 = doc["slots"][0]
    assert s0["matched"]["sample"] == "data_1" and s0["matched"]["token_offset"] == 1


def test_decode_steps_are_found_in_the_middle_of_the_sample():
    doc = json.loads(
        CliRunner()
        .invoke(
            cli,
            [
                "compare",
                str(LOGS / "smollm2-train"),
                str(LOGS / "smollm2-decode.log"),
                "--layer-ids=1,14,26",
                "--json",
                "-",
            ],
        )
        .output
    )
    for s in doc["slots"]:
        assert s["matched"]["sample"] == "data_2" and s["matched"]["token_offset"] in (18, 19, 20)
        # eight printed values of a token cannot rule out a neighbouring layer: the labels answer
        assert s["evidence"] == "consistent" and s["confidence"] < 0.9 and "8 printed values" in s["note"]


def test_summarised_print_without_shape_finds_the_length():
    doc = json.loads(
        CliRunner()
        .invoke(
            cli,
            [
                "compare",
                str(LOGS / "smollm2-train"),
                str(LOGS / "smollm2-summarised.log"),
                "--engine=vllm",
                "--layer-ids=2,15,27",
                "--json",
                "-",
            ],
        )
        .output
    )
    assert "sit at tokens 0–2, 21–23 of sample data_0" in doc["explanation"][2]


def test_unknown_end_rows_are_placed_after_the_first_rows():
    dump = train_dump("logs/smollm2-train")
    slot = next(c for c in dump.captures if c.group == "data_1").split(576)[1]  # B15 of sample 1
    ts = align.TrainSlot.load(slot)
    h = B.states(1)["bf16"][15].float()
    obs = Observation(h[[0, 1, 2, 21, 22, 23]][:, :6].numpy().astype(float), (0, 1, 2, -3, -2, -1), tuple(range(6)))
    cap = Capture("infer", Origin("x.log"), None, "bfloat16", None, observation=obs)
    off, m = align.best_alignment(ts, cap, None, None)
    assert off == 0 and m.rel_err < 0.05 and m.tokens == 5  # token 0 is an attention sink at B15
    assert align.observation_tokens(ts, cap, off) == [0, 1, 2, 21, 22, 23]


# ----------------------------------------------------------------------------- noise model, evidence size
def test_values_rounded_to_four_significant_digits_still_match(tmp_path):
    h = B.states(1)["bf16"][15].float()
    exact = [f"aux_hidden_states[1] h[{t}, :16]=" + str([float(v) for v in h[t, :16]]) for t in (3, 7, 11)]
    rounded = [f"aux_hidden_states[1] h[{t}, :16]=[" + ", ".join(g4(v) for v in h[t, :16]) + "]" for t in (3, 7, 11)]
    errs = []
    for lines, name in ((exact, "exact.log"), (rounded, "rounded.log")):
        rep = compare(
            train_dump("logs/smollm2-train"), write_log(tmp_path, lines, name), Options(layer_ids=[1, 14, 26])
        )
        s1 = rep.slots[1]
        assert s1.match is not None and s1.match.capture.slot == 1
        errs.append(s1.match.metrics.rel_err)
    assert errs[1] < 0.05 and abs(errs[1] - errs[0]) < 0.002


def test_confidence_grows_with_the_evidence(tmp_path):
    h = B.states(1)["bf16"][2].float()
    shapes = [(1, 5), (3, 8), (4, 64), (23, 576)]
    confs, evidence = [], []
    for n_tok, n_col in shapes:
        rows = h[1 : 1 + n_tok, :n_col]
        line = f"aux_hidden_states[0] layer=2 h[1:{1 + n_tok}, :{n_col}]=" + str([[float(v) for v in r] for r in rows])
        rep = compare(
            train_dump("logs/smollm2-train"),
            write_log(tmp_path, [line], f"e{n_tok}x{n_col}.log"),
            Options(num_layers=B.L),
        )
        s0 = rep.slots[0]
        assert s0.boundary_index == 2 and s0.match.metrics.values == n_tok * n_col
        confs.append(s0.confidence)
        evidence.append(s0.evidence)
    # five values cannot rule out a neighbour (value confidence capped at 5/15): the labels answer
    assert evidence == ["consistent", "observed", "observed", "observed"]
    assert confs[1:] == sorted(confs[1:]) and confs[1] <= 24 / 34 + 1e-9
    # one capture: the neighbours' separation is the depth's (30 layers given, 7.3 %)
    assert confs[-1] > 0.8


def test_unknown_depth_assumes_the_deepest_plausible_target(tmp_path):
    h = B.states(1)["bf16"][2].float()
    line = "aux_hidden_states[0] layer=2 h[1:24, :576]=" + str([[float(v) for v in r] for r in h[1:24]])
    log = write_log(tmp_path, [line])
    unknown = compare(train_dump("logs/smollm2-train"), log, Options()).slots[0]
    known = compare(train_dump("logs/smollm2-train"), log, Options(num_layers=B.L)).slots[0]
    assert "126 layers assumed, the deepest plausible" in unknown.note
    assert unknown.boundary_index == known.boundary_index == 2 and unknown.confidence < known.confidence


def test_printed_nan_cells_do_not_count():
    dump = train_dump("logs/smollm2-train")
    ts = align.TrainSlot.load(next(c for c in dump.captures if c.group == "data_0").split(576)[0])
    h = B.states(0)["bf16"][2].float()[3:6, :8].numpy().astype(float)
    holed = h.copy()
    holed[:, 4:] = np.nan
    full = Capture(
        "infer", Origin("a"), None, "bf16", None, observation=Observation(h[:, :4], (3, 4, 5), tuple(range(4)))
    )
    part = Capture("infer", Origin("b"), None, "bf16", None, observation=Observation(holed, (3, 4, 5), tuple(range(8))))
    a, b = align.score(ts, full, 0), align.score(ts, part, 0)
    assert a.values == b.values == 12
    assert math.isclose(a.rel_err, b.rel_err, rel_tol=1e-6) and math.isclose(a.cosine, b.cosine, rel_tol=1e-6)


def test_two_printed_tokens_cannot_hide_one_that_does_not_match():
    dump = train_dump("logs/smollm2-train")
    ts = align.TrainSlot.load(next(c for c in dump.captures if c.group == "data_0").split(576)[0])
    h = B.states(0)["bf16"][2].float()
    rows = torch.stack([h[3, :8], -h[9, :8]]).numpy().astype(float)  # the second token is wrong
    cap = Capture("infer", Origin("a"), None, "bf16", None, observation=Observation(rows, (3, 9), tuple(range(8))))
    assert align.score(ts, cap, 0).rel_err > 0.5


# ----------------------------------------------------------------------------- what cannot be concluded
def test_sink_tokens_alone_never_decide():
    doc = json.loads(
        CliRunner()
        .invoke(
            cli,
            [
                "compare",
                str(LOGS / "smollm2-train"),
                str(LOGS / "smollm2-sinks.log"),
                "--layer-ids=2,15,27",
                "--json",
                "-",
            ],
        )
        .output
    )
    for s in doc["slots"][1:]:
        assert s["metrics"]["sink_only"] and s["evidence"] != "observed"
        assert "attention-sink" in s["note"] and "print ordinary tokens" in s["note"]
    # slot 1's sink matches the engine's B16, its training label says B15: the labels answer, at low confidence
    s1, s2 = doc["slots"][1:]
    assert s1["boundary_index"] == 15 and s1["evidence"] == "inferred" and s1["confidence"] <= 0.4
    assert s2["boundary_index"] is None and s2["status"] == "ambiguous"
    assert doc["recommended"]["eagle_aux_hidden_state_layer_ids"] == [1, 14, None]
    assert "seen on the first token only (the attention sink)" in doc["explanation"][-1]


def test_sink_evidence_does_not_hide_ordinary_evidence_of_the_same_layer(tmp_path):
    h = B.states(1)["bf16"][15].float()
    lines = [
        "aux_hidden_states[1] layer=15 first5=[" + ", ".join(g4(v) for v in h[0, :5]) + "]",
        "Decode batch. #running-req: 1",
        "aux_hidden_states[1] layer=15 h[9, :32]=[" + ", ".join(g4(v) for v in h[9, :32]) + "]",
    ]
    rep = compare(train_dump("logs/smollm2-train"), write_log(tmp_path, lines), Options(num_layers=B.L))
    s1 = rep.slots[1]
    assert s1.status == "identified" and s1.boundary_index == 15 and not s1.match.metrics.sink_only


def test_shared_chat_template_tokens_tie_across_samples_without_ambiguity(tmp_path):
    h = B.states(2)["bf16"][27].float()
    line = "aux_hidden_states[2] layer=27 h[1:6, :48]=" + str([[float(v) for v in r] for r in h[1:6, :48]])
    rep = compare(train_dump("logs/smollm2-train"), write_log(tmp_path, [line]), Options(num_layers=B.L))
    s2 = rep.slots[2]
    assert s2.status == "identified" and s2.boundary_index == 27
    assert s2.match.samples_tied == 3  # tokens 1-5 are the chat template in every sample


@pytest.mark.parametrize("neighbour", [30, 32])
@pytest.mark.parametrize("n_tok, n_col", [(1, 5), (4, 8), (24, 5), (2, 576)])
def test_a_close_neighbour_is_never_identified_as_the_training_layer(tmp_path, neighbour, n_tok, n_col):
    """The seed target's B30/B32 differ from B31 by only 8-10 %: printed neighbour values must not
    be read as B31, whatever the evidence size."""
    h = seed_states()[neighbour]
    line = f"aux_hidden_states[1] layer={neighbour} h[1:{1 + n_tok}, :{n_col}]=" + str(
        [[float(g4(v)) for v in r] for r in h[1 : 1 + n_tok, :n_col]]
    )
    rep = compare(train_dump("seed/train"), write_log(tmp_path, [line]), Options())
    s1 = rep.slots[1]
    assert s1.boundary_index in (None, 31)  # open, or B31 inferred from the labels; never B30/B32
    assert s1.status != "identified"


def test_no_printed_capture_equal_to_training_is_a_mismatch_not_ok():
    r = CliRunner().invoke(
        cli, ["compare", str(LOGS / "smollm2-train"), str(LOGS / "smollm2-no-match.log"), "--json", "-"]
    )
    doc = json.loads(r.output)
    assert r.exit_code == 1 and doc["verdict"] == "mismatch"
    assert doc["cause"].startswith("No inference capture equals any training slot")


def test_walkthrough_names_what_to_print_next_time():
    doc = json.loads(
        CliRunner()
        .invoke(
            cli,
            [
                "compare",
                str(B.SEED / "train"),
                str(LOGS / "seed-torch-print.log"),
                "--layer-ids=-1,2,30",
                "--json",
                "-",
            ],
        )
        .output
    )
    last = doc["explanation"][-1]
    assert "slot 1 matched within noise" in last and "h[1:5, :64]" in last
    assert "run with the recommended ids [2, 30, 58]" in last
