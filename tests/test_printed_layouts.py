"""Printed evidence whose layout the print does not state, each from real SmolLM2 states: torch's
summarised print of the concatenated aux slots, lists of norms that start at another token, and
norm-only logs printed a token a line or as JSON lines."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

import hsdiff
from hsdiff.cli import cli

from . import builders as B

LOG_HEAD = "[2026-11-30 01:15:07 TP0] Prefill batch. #new-seq: 1, #new-token: 24\n"


def _compare(*args: object):
    return CliRunner().invoke(cli, ["compare", *map(str, args)])


def _torch_print(t: torch.Tensor) -> str:
    """``print(t)`` as torch writes it under its default print options (summarised past 1000 elements)."""
    torch.set_printoptions(profile="default")
    return str(t)


# ----------------------------------------------------------------------------- summarised print of torch.cat
def _concat_log(path, boundaries, tokens=slice(None), sample=0):
    """``print("aux:", torch.cat(aux_hidden_states, -1))`` of the bf16 captures at ``boundaries``."""
    aux = B.concat(sample, boundaries, "bf16")[tokens]
    path.write_text(LOG_HEAD + f"aux: {_torch_print(aux)}\n")
    return path


@pytest.mark.parametrize("boundaries", [[2, 15, 27], [3, 20]])
def test_a_summarised_print_of_the_concatenated_slots_on_a_right_deployment_is_no_mismatch(tmp_path, boundaries):
    train = B.specforge(tmp_path / "train", [0, 1], boundaries)
    log = _concat_log(tmp_path / "server.log", boundaries)
    assert "..." in log.read_text()  # torch summarised it: first/last 3 columns of the first/last 3 tokens
    ids = [b - 1 for b in boundaries]  # SGLang: B = id + 1
    report = hsdiff.compare(train, log, layer_ids=ids)
    assert report.verdict == "inconclusive" and report.exit_code == 1  # 18 values per end slot: weak evidence
    assert "different tensors" not in report.cause
    assert any(f"read as the {len(boundaries)} aux slots side by side" in w for w in report.warnings)
    assert any("slot 1 not printed" in w for w in report.warnings) == (len(boundaries) == 3)
    # slot 0 is read from the first columns, the last slot from the last ones: both match the trained layers
    first, last = report.slots[0], report.slots[-1]
    assert first.match is not None and first.match.capture.slot == 0 and first.match.metrics.rel_err < 0.05
    assert last.match is not None and last.match.capture.slot == len(boundaries) - 1
    assert last.match.metrics.rel_err < 0.05
    assert {s.boundary_index for s in report.slots} <= {None, *boundaries}
    assert [i for i in report.recommended.ids if i is not None] == [
        i for i, s in zip(ids, report.slots) if s.boundary_index
    ]
    r = _compare(train, log, "--layer-ids", ",".join(map(str, ids)))
    assert r.exit_code == 1 and "MISMATCH" not in r.output


def test_a_summarised_print_of_a_few_tokens_is_read_as_the_slots_too(tmp_path):
    train = B.specforge(tmp_path / "train", [1], [2, 15, 27])
    log = _concat_log(tmp_path / "server.log", [2, 15, 27], slice(4, 16), sample=1)  # tokens 4..15, placed by value
    report = hsdiff.compare(train, log, layer_ids=[1, 14, 26])
    assert report.verdict == "inconclusive"
    assert report.slots[0].match is not None and report.slots[0].match.metrics.rel_err < 0.05


@pytest.mark.parametrize(
    ("engine", "ids"),
    [([3, 16, 28], [2, 15, 27]), ([0, 2, 15], [-1, 1, 14])],  # one layer deeper; the embeddings in slot 0
)
def test_a_summarised_print_of_the_concatenated_slots_on_a_wrong_deployment_is_a_mismatch(tmp_path, engine, ids):
    train = B.specforge(tmp_path / "train", [0], [2, 15, 27])
    log = _concat_log(tmp_path / "server.log", engine)
    report = hsdiff.compare(train, log, layer_ids=ids)
    assert report.verdict == "mismatch" and report.exit_code == 1
    truth = [1, 14, 26]
    assert all(got in (None, want) for got, want in zip(report.recommended.ids, truth))


def test_one_layer_printed_summarised_without_a_label_is_still_one_slot(tmp_path):
    # print(hidden_states) at one layer: six columns of one tensor, which match training slot 1 as one slot
    train = B.specforge(tmp_path / "train", [0], [2, 15, 27])
    log = tmp_path / "server.log"
    log.write_text(LOG_HEAD + f"hidden: {_torch_print(B.states(0)['bf16'][15])}\n")
    report = hsdiff.compare(train, log, layer_ids=[1, 14, 26])
    assert not any("side by side" in w for w in report.warnings)
    assert report.slots[1].match is not None and report.slots[1].match.metrics.rel_err < 0.05
    assert report.verdict != "mismatch"


def test_a_summarised_print_after_its_shape_is_split_by_that_width(tmp_path):
    train = B.specforge(tmp_path / "train", [0], [2, 15, 27])
    aux = B.concat(0, [2, 15, 27], "bf16")
    log = tmp_path / "server.log"
    log.write_text(LOG_HEAD + f"aux {aux.shape}: {_torch_print(aux)}\n")
    report = hsdiff.compare(train, log, layer_ids=[1, 14, 26])
    assert not any("side by side" in w for w in report.warnings)  # its width was printed: nothing to infer
    assert report.verdict == "inconclusive" and report.slots[0].match.metrics.rel_err < 0.05


# ----------------------------------------------------------------------------- norm lists that start elsewhere
def _norm_lists(path, boundaries, start=0, tokens=20, label=lambda j, b, a, z: f"aux slot {j} norms: "):
    """One list of per-token norms per aux slot (bf16 states of sample 0, tokens ``start``..)."""
    hs = B.states(0)["bf16"].float()
    lines = [LOG_HEAD.rstrip("\n")]
    for j, b in enumerate(boundaries):
        norms = hs[b][start : start + tokens].norm(dim=-1).tolist()
        lines.append(f"[2026-11-30 01:15:07 TP0] {label(j, b, start, start + tokens)}{norms}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("start", [0, 1, 4])
def test_norm_lists_from_another_token_are_placed_where_they_fit(tmp_path, start):
    train = B.specforge(tmp_path / "train", [0, 1, 2], [2, 15, 27])
    log = _norm_lists(tmp_path / "norms.log", [2, 15, 27], start)  # positions not printed
    report = hsdiff.compare(train, log, layer_ids=[1, 14, 26])
    assert report.verdict == "inconclusive" and report.exit_code == 1
    assert "is not training slot" not in report.cause and "which norms cannot confirm" in report.cause
    found = report.to_dict()["diagnosis"]["norm_findings"]
    assert [max(f["differences"][str(f["slot"])], 0) < 0.01 for f in found] == [True] * 3


def test_norm_lists_with_their_positions_printed_are_read_there(tmp_path):
    train = B.specforge(tmp_path / "train", [0], [2, 15, 27])
    label = lambda j, b, a, z: f"layer {b - 1}: h[{a}:{z}].norm(dim=-1).tolist()="  # noqa: E731
    log = _norm_lists(tmp_path / "norms.log", [2, 15, 27], 1, 23, label)
    assert hsdiff.compare(train, log, layer_ids=[1, 14, 26]).verdict == "inconclusive"
    wrong = _norm_lists(tmp_path / "wrong.log", [3, 16, 28], 1, 23, label)
    report = hsdiff.compare(train, wrong, layer_ids=[1, 14, 26])
    assert report.verdict == "mismatch" and "is not training slot 2" in report.cause


@pytest.mark.parametrize("start", [0, 1, 3])
def test_norm_lists_of_a_wrong_deployment_from_another_token_are_still_a_mismatch(tmp_path, start):
    train = B.specforge(tmp_path / "train", [0, 1, 2], [2, 15, 27])
    for engine in ([3, 16, 28], [0, 2, 15]):  # one layer deeper; the embeddings in slot 0, the rest shifted
        log = _norm_lists(tmp_path / f"norms-{engine[0]}.log", engine, start)
        report = hsdiff.compare(train, log, layer_ids=[2, 15, 27])
        assert report.verdict == "mismatch" and report.exit_code == 1, (engine, report.cause)
        assert "is not training slot" in report.cause and "norms cannot prove a layer" in report.cause


# ----------------------------------------------------------------------------- norm-only logs in other shapes
def _norm_log(path, boundaries, shape, start=0, tokens=20):
    hs = B.states(0)["bf16"].float()
    lines = [LOG_HEAD.rstrip("\n")]
    for j, b in enumerate(boundaries):
        norms = hs[b][start : start + tokens].norm(dim=-1).tolist()
        if shape == "lines":
            lines += [
                f"[2026-11-30 01:15:07 TP0] layer={b - 1} token={start + t} norm={x:.2f}" for t, x in enumerate(norms)
            ]
        elif shape == "json-tokens":
            lines += [
                json.dumps({"layer": b - 1, "token": start + t, "norm": round(x, 2)}) for t, x in enumerate(norms)
            ]
        else:
            lines.append(json.dumps({"slot": j, "norms": [round(x, 3) for x in norms]}))
    path.write_text("\n".join(lines) + "\n")
    return path


SHAPES = ["lines", "json-tokens", "json-lists"]


@pytest.mark.parametrize("shape", SHAPES)
def test_norm_only_logs_of_every_shape_are_read_as_weak_evidence(tmp_path, shape):
    train = B.specforge(tmp_path / "train", [0], [2, 15, 27])
    log = _norm_log(tmp_path / "norms.log", [2, 15, 27], shape, start=1)
    r = _compare(train, log, "--layer-ids", "1,14,26")
    assert r.exit_code == 1 and "holds no printed tensor" not in r.output, r.output
    report = hsdiff.compare(train, log, layer_ids=[1, 14, 26])
    assert report.verdict == "inconclusive" and "norms-only" in report.to_dict()["diagnosis"]["overrides"]
    assert "20 tokens × 3 slots" in report.cause and "is not training slot" not in report.cause


@pytest.mark.parametrize("shape", SHAPES)
def test_norm_only_logs_of_every_shape_rule_out_a_wrong_deployment(tmp_path, shape):
    train = B.specforge(tmp_path / "train", [0], [2, 15, 27])
    log = _norm_log(tmp_path / "norms.log", [3, 16, 28], shape)
    report = hsdiff.compare(train, log, layer_ids=[2, 15, 27])
    assert report.verdict == "mismatch" and "is not training slot 2" in report.cause
    assert _compare(train, log, "--layer-ids", "2,15,27").exit_code == 1


def test_norm_lines_of_two_forward_passes_are_two_series(tmp_path):
    train = B.specforge(tmp_path / "train", [0, 1], [2, 15, 27])
    one, two = (
        _norm_log(tmp_path / "a.log", [2, 15, 27], "lines"),
        _norm_log(tmp_path / "b.log", [2, 15, 27], "lines", 2),
    )
    log = tmp_path / "norms.log"
    log.write_text(one.read_text() + two.read_text())
    report = hsdiff.compare(train, log, layer_ids=[1, 14, 26])
    found = report.to_dict()["diagnosis"]["norm_findings"]
    assert [f["slot"] for f in found] == [0, 1, 2, 0, 1, 2] and all(f["tokens"] == 20 for f in found)
    assert report.verdict == "inconclusive"


def test_a_json_line_of_values_is_not_taken_for_norms(tmp_path):
    train = B.specforge(tmp_path / "train", [0], [2, 15, 27])
    hs = B.states(0)["bf16"].float()
    log = tmp_path / "values.log"
    rows = [
        json.dumps({"slot": j, "token": 3, "values": [round(x, 4) for x in hs[b][3, :16].tolist()]})
        for j, b in enumerate([2, 15, 27])
    ]
    log.write_text(LOG_HEAD + "\n".join(rows) + "\n")
    report = hsdiff.compare(train, log, layer_ids=[1, 14, 26])
    assert "norms-only" not in report.to_dict()["diagnosis"]["overrides"]
    assert report.slots[1].match is not None and report.slots[1].match.metrics.rel_err < 0.05
