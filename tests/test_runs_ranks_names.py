"""What an inference dumper directory holds besides one clean run: tensor-parallel ranks (compared per
ordinary token), several runs (matched within one), repeated dumps of one rank (not ranks), and layer
numbers in capture names (labels, counted as the name says). Real SmolLM2-135M states throughout;
training slots B 2, 15, 27 (SGLang ids [1, 14, 26])."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import hsdiff
from hsdiff.readers import scan
from hsdiff.readers._common import layer_side

from . import builders as B
from .scenarios.noise import apply
from .scenarios.write import dumper_records

TRAIN_B = [2, 15, 27]
SGL = (1, 14, 26)


def noisy(sample: int, b: int) -> torch.Tensor:
    return apply(sample, b, "bf16", 0.0, torch.Generator().manual_seed(1234 + b))


def aux(sample: int, bs: list[int]) -> torch.Tensor:
    return torch.cat([noisy(sample, b) for b in bs], dim=-1)


def words(r) -> str:
    return " ".join([r.cause, *r.explanation, *r.warnings])


@pytest.fixture(scope="module")
def train(tmp_path_factory) -> Path:
    root = B.specforge(tmp_path_factory.mktemp("train"), [0, 1, 2], TRAIN_B)
    B.draft_config(root / "config.json", list(SGL))
    return root


def broken(x: torch.Tensor, level: float, rows: slice = slice(1, None)) -> torch.Tensor:
    """``x`` with ``level`` relative noise on ``rows`` (token 0, SmolLM2's attention sink, left intact)."""
    y = x.float().clone()
    n = torch.randn(y[rows].shape, generator=torch.Generator().manual_seed(7))
    y[rows] += n / n.norm(dim=-1, keepdim=True) * y[rows].norm(dim=-1, keepdim=True) * level
    return y.to(x.dtype)


def two_ranks(root: Path, values: tuple[torch.Tensor, torch.Tensor]) -> Path:
    """A TP2 dumper run of sample 1 whose ranks hold ``values``."""
    for rank, v in enumerate(values):
        dumper_records(
            root / "dump_20261201_000000_000001",
            [("input_ids", B.states(1)["input_ids"], {}), ("aux_hidden_states", v, {})],
            rank=rank,
            ranks=2,
        )
    return root


# ------------------------------------------------------------------------- tensor-parallel ranks
def test_ranks_are_compared_on_ordinary_tokens_not_the_sink(tmp_path):
    good = aux(1, TRAIN_B)
    dump = scan(two_ranks(tmp_path, (good, broken(good, 0.37))), "infer")
    (conflict,) = dump.rank_conflicts
    assert conflict.startswith("rank 1 differs by") and "rank 0" in conflict and "ordinary tokens" in conflict
    assert float(re.search(r"by ([\d.]+)%", conflict).group(1)) > 30  # the whole tensor would say ~5%


def test_replicas_within_rounding_agree(tmp_path):
    good = aux(1, TRAIN_B)
    dump = scan(two_ranks(tmp_path, (good, broken(good, 0.002))), "infer")
    assert dump.rank_conflicts == () and len(dump.captures) == 1 and dump.captures[0].rank is None


def test_disagreeing_ranks_fail_the_cli_gate(tmp_path, train):
    from click.testing import CliRunner

    from hsdiff.cli import cli

    good = aux(1, TRAIN_B)
    infer = two_ranks(tmp_path / "infer", (broken(good, 0.4), good))  # the first rank is the broken one
    res = CliRunner().invoke(
        cli, ["compare", str(train), str(infer), "--layer-ids", "1,14,26", "--json", str(tmp_path / "r.json")]
    )
    assert res.exit_code == 1, res.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["verdict"] == "mismatch" and re.search(r"(?i)ranks disagree: rank 1 .* rank 0", report["cause"])


def test_two_dumps_of_one_rank_are_not_two_ranks(tmp_path):
    # the dumper called twice in one step on each rank (dump_index 2 and 3): two tensors, each replicated
    exp = tmp_path / "dump_20261201_000000_000001"
    first, second = aux(1, TRAIN_B), aux(1, [3, 16, 28])
    for rank in (0, 1):
        dumper_records(
            exp,
            [
                ("input_ids", B.states(1)["input_ids"], {}),
                ("aux_hidden_states", first, {}),
                ("aux_hidden_states", second, {}),
            ],
            rank=rank,
            ranks=2,
        )
    dump = scan(tmp_path, "infer")
    assert dump.rank_conflicts == () and not any("disagree" in w for w in dump.warnings)
    assert len(dump.captures) == 2 and all(c.rank is None for c in dump.captures)


def test_older_dumper_directories_per_rank_are_one_run(tmp_path):
    # SGLang 0.4's dumper writes sglang_dump_{time}_{rank}/forward_pass_id=N___name=X.pt, the raw tensor
    for rank in (0, 1):
        d = tmp_path / f"sglang_dump_1700000000.5_{rank}"
        d.mkdir()
        for b in TRAIN_B:
            torch.save(noisy(1, b), d / f"forward_pass_id=0___name=layer_input___layer_id={b}.pt")
    dump = scan(tmp_path, "infer")
    assert sorted(c.boundary for c in dump.captures) == TRAIN_B and all(c.rank is None for c in dump.captures)
    assert {c.group for c in dump.captures} == {"sglang_dump_1700000000.5:step=0"}


# ------------------------------------------------------------------------- several runs
def test_inspect_counts_dumper_runs_as_compare_does(tmp_path):
    ids1 = B.states(1)["input_ids"]
    for name in ("dump_20261201_000000_000001", "dump_20261201_090000_000002"):
        dumper_records(tmp_path / name, [("input_ids", ids1, {}), ("aux_hidden_states", aux(1, [2, 15, 27]), {})])
    info = hsdiff.inspect(tmp_path).to_dict()
    assert info["runs"]["runs"] == 2 and info["runs"]["steps"] == ["0"]


def test_the_run_that_matches_is_reported_and_the_broken_one_named(tmp_path, train):
    ids1 = B.states(1)["input_ids"]
    # an earlier run with ids [1, 14, 26], then a later one restarted with [0, 14, 26] (slot 0 one layer short)
    dumper_records(
        tmp_path / "dump_20261201_000000_000001",
        [("input_ids", ids1, {}), ("aux_hidden_states", aux(1, [2, 15, 27]), {})],
    )
    dumper_records(
        tmp_path / "dump_20261201_090000_000002",
        [("input_ids", ids1, {}), ("aux_hidden_states", aux(1, [1, 15, 27]), {})],
    )
    r = hsdiff.compare(train, tmp_path, layer_ids=list(SGL))
    assert {Path(s.match.capture.origin.path).parent.name for s in r.slots} == {"dump_20261201_000000_000001"}
    assert r.recommended.ids == SGL  # the training config and the values agree on every slot
    assert r.verdict == "inconclusive" and r.exit_code == 1  # which run did the ids configure? the runs disagree
    assert re.search(r"(?i)runs .*disagree", r.cause) and "dump_20261201_090000_000002: mismatch" in r.cause
    (w,) = [w for w in r.warnings if "dumper runs" in w]
    assert "run dump_20261201_000000_000001" in w


def test_a_run_labelled_only_by_the_configured_ids_is_not_trusted_when_runs_disagree(tmp_path):
    # no training labels; the configured ids [1, 14, 26] fit the first run, the second (after a restart)
    # captured one layer shallower: its values equal the training slots of a B 3, 16, 28 draft
    train = B.specforge(tmp_path / "train", [0, 1, 2], [3, 16, 28])
    ids1 = B.states(1)["input_ids"]
    infer = tmp_path / "infer"
    dumper_records(
        infer / "dump_20261201_000000_000001", [("input_ids", ids1, {}), ("aux_hidden_states", aux(1, [2, 15, 27]), {})]
    )
    dumper_records(
        infer / "dump_20261201_090000_000002", [("input_ids", ids1, {}), ("aux_hidden_states", aux(1, [3, 16, 28]), {})]
    )
    r = hsdiff.compare(train, infer, layer_ids=list(SGL))
    # the second run matches every slot under the first run's ids: B 2, 15, 27 would be wrong at confidence 1
    assert all(s.boundary_index in (None, b) for s, b in zip(r.slots, [3, 16, 28]))
    assert all(s.confidence < 0.9 for s in r.slots if s.boundary_index is None)
    assert r.verdict != "ok" and r.exit_code == 1


def test_one_run_with_several_steps_is_one_run(tmp_path, train):
    exp = tmp_path / "dump_20261201_000000_000001"
    for step in (0, 1):
        dumper_records(
            exp, [("input_ids", B.states(1)["input_ids"], {}), ("aux_hidden_states", aux(1, TRAIN_B), {})], step=step
        )
    r = hsdiff.compare(train, tmp_path, layer_ids=list(SGL))
    assert r.verdict == "ok" and r.recommended.ids == SGL
    assert not any("dumper runs" in w for w in r.warnings)


# ------------------------------------------------------------------------- layer numbers in names
def test_the_side_a_name_means():
    assert layer_side("model.layers.3.input") == layer_side("layer3_residual_in") == "boundary"
    assert layer_side("non_intrusive__model.layers.3.inputs.0") == "boundary"  # SGLang's hook dumper
    assert layer_side("model.layers.3.output") == layer_side("layer3_out") == "output"
    assert layer_side("blocks.3") is None and layer_side("h.3") is None
    assert layer_side("output_hidden_states.3") is None  # Hugging Face's flag: its tuple index is a boundary
    assert layer_side("layer 3 input and output") is None


@pytest.mark.parametrize("kind", ["dumper", "safetensors", "log"])
def test_output_names_are_one_boundary_deeper(tmp_path, train, kind):
    # hooks on the layer outputs: model.layers.{i}.output holds B i+1, so B 2, 15, 27 print as layers 1, 14, 26
    bs = sorted({b + d for b in TRAIN_B for d in (-1, 0, 1)})  # each slot's layer and its neighbours
    name = "model.layers.{i}.output"
    if kind == "dumper":
        dumper_records(
            tmp_path / "dump",
            [("input_ids", B.states(1)["input_ids"], {})] + [(name.format(i=b - 1), noisy(1, b), {}) for b in bs],
        )
        infer = tmp_path
    elif kind == "safetensors":
        infer = tmp_path / "hooks.safetensors"
        save_file({name.format(i=b - 1): noisy(1, b).contiguous() for b in bs}, str(infer))
    else:
        infer = tmp_path / "server.log"
        infer.write_text(
            "\n".join(
                f"[2026-12-01 00:00:05 TP0] {name.format(i=b - 1)} h[4:8, :8]="
                + json.dumps([[round(float(v), 4) for v in row] for row in noisy(1, b)[4:8, :8]])
                for b in bs
            )
            + "\n"
        )
    r = hsdiff.compare(train, infer)
    assert [s.boundary_index for s in r.slots] == TRAIN_B
    assert r.recommended.ids == SGL and r.verdict == "ok" and r.exit_code == 0
    assert all(s.match.capture.layer.index == "output" for s in r.slots)


def test_slot_numbers_in_dumper_names_are_not_layers(tmp_path, train):
    # aux_0, aux_1, aux_2: the draft's input slots, labelled by the configured ids in slot order
    dumper_records(
        tmp_path / "dump",
        [("input_ids", B.states(1)["input_ids"], {})] + [(f"aux_{j}", noisy(1, b), {}) for j, b in enumerate(TRAIN_B)],
    )
    r = hsdiff.compare(train, tmp_path, layer_ids=list(SGL))
    assert r.recommended.ids == SGL and r.verdict == "ok"
    assert all(s.match.capture.layer.source == "configured" for s in r.slots)
