"""What new users hit, each from real SmolLM2 states: ranks that are not replicas, the final post-norm
state as a capture, norms as weak evidence, a log's "output of model.layers.N", a --hidden-size that
contradicts the ids, and ``Report.plot``."""

from __future__ import annotations

from click.testing import CliRunner

import hsdiff
from hsdiff.cli import cli

from . import builders as B


def _compare(*args: str):
    return CliRunner().invoke(cli, ["compare", *map(str, args)])


# ----------------------------------------------------------------------------- a flag against the ids
def test_hidden_size_that_contradicts_the_ids_is_one_line_naming_both_flags(tmp_path):
    train = B.specforge(tmp_path / "train", [0], [2, 15, 27])
    infer = B.sglang_dump(tmp_path / "infer", 0, [2, 15, 27], concat_slots=False)  # one 576-wide file per slot
    r = _compare(train, infer, "--layer-ids", "2,15,27", "--hidden-size", "192")
    assert r.exit_code == 2, r.output
    line = r.output.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "--hidden-size 192 and --layer-ids [2, 15, 27] cannot both hold" in line and "576" in line
    # the library says the same in its own terms
    try:
        hsdiff.compare(train, infer, layer_ids=[2, 15, 27], hidden_size=192)
    except hsdiff.InputError as e:
        assert "`hidden_size=192` and `layer_ids=[2, 15, 27]` cannot both hold" in str(e) and "--" not in str(e)
        assert e.options == ("hidden_size", "layer_ids")
    else:
        raise AssertionError("hidden_size=192 was accepted")
    # the right hidden size, or none, compares as before
    assert _compare(train, infer, "--layer-ids", "2,15,27", "--hidden-size", "576").exit_code == 0
    assert _compare(train, infer, "--layer-ids", "2,15,27").exit_code == 0


# ----------------------------------------------------------------------------- Report.plot
def test_report_plot_is_the_heatmap_figure(tmp_path):
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    train = B.specforge(tmp_path / "train", [0], [2, 15, 27])
    infer = B.sglang_dump(tmp_path / "infer", 0, [2, 15, 27], concat_slots=False)
    report = hsdiff.compare(train, infer, layer_ids=[2, 15, 27])
    assert report.verdict == "ok" and all(s.match is not None for s in report.slots)
    fig = report.plot()
    assert isinstance(fig, Figure)
    ticks = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert [t.split(" (")[0] for t in ticks] == [f"slot {s.slot} = B{s.boundary_index}" for s in report.slots]
    marks = {p.get_gid() for p in fig.axes[0].patches if p.get_gid()}
    assert {f"{what}:slot{n}" for what in ("match", "configured") for n in range(3)} <= marks
    plt.close(fig)
    fig, ax = plt.subplots()
    assert report.plot(metric="cosine", ax=ax) is fig  # onto the caller's axes, as DataFrame.plot(ax=...)
    plt.close(fig)


# ----------------------------------------------------------------------------- "output of model.layers.N"
def _rows(values) -> str:
    return "[" + ", ".join("[" + ", ".join(f"{x:.4f}" for x in row) + "]" for row in values.tolist()) + "]"


def test_output_of_model_layers_n_in_a_log_line_is_boundary_n_plus_1(tmp_path):
    # the training side holds B 2, 15, 27: the outputs of layers 1, 14, 26 (SGLang ids [1, 14, 26])
    hs = B.states(0)["bf16"].float()
    log = tmp_path / "hook.log"
    log.write_text(
        "".join(
            f"[2026-11-30 01:15:02 TP0] forward hook: output of model.layers.{n} "
            f"hidden_states[1:9, :64]={_rows(hs[n + 1][1:9, :64])}\n"
            for n in (1, 14, 26)
        )
    )
    report = hsdiff.compare(B.FIXTURES / "logs" / "smollm2-train", log, layer_ids=[1, 14, 26])
    assert [s.match.capture.boundary for s in report.slots] == [2, 15, 27]
    assert [s.boundary_index for s in report.slots] == [2, 15, 27]
    assert list(report.recommended.ids) == [1, 14, 26] and report.verdict != "mismatch"
    assert "infer-index" not in report.cause
    r = _compare(B.FIXTURES / "logs" / "smollm2-train", log, "--layer-ids", "1,14,26")
    assert "O1 (B2)" in r.output and "infer_index" not in r.output and "--infer-index" not in r.output


# ----------------------------------------------------------------------------- ranks that are not replicas
def _dumper_ranks(root, parts):
    """An SGLang dumper run whose rank r holds ``parts[r]`` = (sample, token slice): its own ``input_ids``
    and the aux tensor (B 2, 15, 27, bf16) of those tokens."""
    import torch

    exp = root / "dump_20261130_000000_000001"
    exp.mkdir(parents=True)
    for r, (sample, tokens) in enumerate(parts):
        meta = {"step": 0, "rank": r, "recompute_status": "disabled", "world_rank": r, "world_size": len(parts)}
        for i, (name, value) in enumerate(
            (
                ("input_ids", B.states(sample)["input_ids"][tokens]),
                ("aux_hidden_states", B.concat(sample, [2, 15, 27], "bf16")[tokens]),
            )
        ):
            torch.save(
                {"value": value.clone(), "meta": {**meta, "dump_index": i, "name": name}},
                exp / f"step=0___rank={r}___dump_index={i}___name={name}___recompute_status=disabled.pt",
            )
    return root


def test_ranks_holding_different_requests_are_separate_sequences(tmp_path):
    train = B.specforge(tmp_path / "train", [0, 1, 2], [2, 15, 27])
    infer = _dumper_ranks(tmp_path / "dp", [(0, slice(None)), (2, slice(None))])  # DP attention: a request each
    r = _compare(train, infer, "--layer-ids", "1,14,26")
    assert r.exit_code == 0, r.output
    assert "all-reduce" not in r.output and "different token ids" in r.output
    report = hsdiff.compare(train, infer, layer_ids=[1, 14, 26])
    assert report.verdict == "ok" and list(report.recommended.ids) == [1, 14, 26]


def test_ranks_holding_parts_of_one_request_are_joined_by_position(tmp_path):
    train = B.specforge(tmp_path / "train", [0, 1, 2], [2, 15, 27])
    n = len(B.states(1)["input_ids"])
    infer = _dumper_ranks(tmp_path / "sp", [(1, slice(0, n // 2)), (1, slice(n // 2, None))])  # sequence parallel
    report = hsdiff.compare(train, infer, layer_ids=[1, 14, 26])
    assert report.verdict == "ok" and list(report.recommended.ids) == [1, 14, 26]
    assert all(s.match.capture.token_ids == tuple(B.states(1)["input_ids"].tolist()) for s in report.slots)
    assert any("joined by position" in w for w in report.warnings)
    assert "all-reduce" not in report.cause


def test_replicas_that_disagree_are_still_an_all_reduce_mismatch(tmp_path):
    import torch

    train = B.specforge(tmp_path / "train", [0], [2, 15, 27])
    infer = B.sglang_dump(tmp_path / "tp", 0, [2, 15, 27], ranks=2)  # the same tokens on both ranks
    broken = next((tmp_path / "tp").rglob("step=0___rank=1___dump_index=1*"))
    rec = torch.load(broken, weights_only=True)
    rec["value"] = B.concat(0, [3, 16, 28], "bf16").clone()  # rank 1 one layer off
    torch.save(rec, broken)
    r = _compare(train, infer, "--layer-ids", "1,14,26")
    assert r.exit_code == 1 and "Tensor-parallel ranks disagree" in r.output


# ----------------------------------------------------------------------------- the final post-norm state
def _final_in_a_slot(tmp_path):
    """Training data captured by TensorRT-LLM's two-model path with ids [1, 14, -1] (B2, B15 and the final
    post-norm state last), and an HF all-layer stack of the same prompt whose last entry is that state."""
    import torch
    from safetensors.torch import load_file, save_file

    s = load_file(str(B.SMOLLM2 / "states" / "sample-0.safetensors"))  # B 0..30 and the final post-norm state
    aux = torch.cat([s["fp32.boundaries"][2], s["fp32.boundaries"][15], s["fp32.final"]], dim=-1)
    train = tmp_path / "train" / "rows_0-2000"
    train.mkdir(parents=True)
    torch.save(
        {
            "input_ids": s["input_ids"][None],
            "loss_mask": torch.ones_like(s["input_ids"])[None],
            "aux_hidden_state": aux[None].clone(),
            "hidden_state": s["fp32.final"][None].clone(),
        },
        train / "data_0.ckpt",
    )
    infer = tmp_path / "infer"
    infer.mkdir()
    stack = torch.cat([s["bf16.boundaries"][: B.L], s["bf16.final"][None]]).contiguous()  # HF's tuple: [L] post-norm
    save_file({"hidden_states": stack, "input_ids": s["input_ids"]}, str(infer / "hf.safetensors"))
    return tmp_path / "train", infer


def test_the_final_post_norm_state_of_an_all_layer_stack_is_scored(tmp_path):
    train, infer = _final_in_a_slot(tmp_path)
    r = hsdiff.compare(train, infer, engine="trtllm", engine_version="two-model", layer_ids=[1, 14, -1])
    assert r.verdict == "ok" and list(r.recommended.ids) == [1, 14, -1]
    assert r.slots[2].match is not None and r.slots[2].match.capture.origin.key == f"hidden_states[{B.L}]"
    assert r.slots[2].evidence == "observed"


def test_the_one_model_path_says_minus_one_goes_first(tmp_path):
    train, infer = _final_in_a_slot(tmp_path)
    r = _compare(train, infer, "--engine", "trtllm", "--engine-version", "main", "--layer-ids=-1,1,14")
    assert r.exit_code == 1
    assert "final post-norm state (-1) first" in r.output and "no id list reproduces the training order" in r.output
    assert "cannot settle slot" not in r.output
    report = hsdiff.compare(train, infer, engine="trtllm", engine_version="main", layer_ids=[-1, 1, 14])
    assert report.verdict == "mismatch" and [s.boundary_index for s in report.slots] == [2, 15, B.L + 1]


# ----------------------------------------------------------------------------- norms as weak evidence
def _norms_log(path, boundaries, tokens: int = 20):
    """A server log that prints only the per-token norms of each aux slot (bf16 states of sample 0)."""
    import numpy as np

    hs = B.states(0)["bf16"].float().numpy()
    lines = [f"[2026-11-30 01:15:07 TP0] input_ids={B.states(0)['input_ids'][:tokens].tolist()}"]
    for j, b in enumerate(boundaries):
        norms = np.linalg.norm(hs[b][:tokens], axis=-1)
        lines.append(
            f"[2026-11-30 01:15:07 TP0] eagle3 aux slot {j}: per-token norms=[{', '.join(f'{x:.4f}' for x in norms)}]"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


TRAIN_LOGS = B.FIXTURES / "logs" / "smollm2-train"  # B 2, 15, 27


def test_norms_that_rule_out_the_trained_layers_are_a_mismatch(tmp_path):
    log = _norms_log(tmp_path / "norms.log", [3, 16, 28])  # one layer deeper than training: 9-19% off in norm
    r = _compare(TRAIN_LOGS, log, "--layer-ids", "2,15,27")
    assert r.exit_code == 1, r.output
    assert "holds no printed tensor" not in r.output and "were skipped" not in r.output
    report = hsdiff.compare(TRAIN_LOGS, log, layer_ids=[2, 15, 27])
    assert report.verdict == "mismatch" and "norms cannot prove a layer" in report.cause
    assert "is not training slot 2 (B27)" in report.cause  # 18% off: beyond any match
    assert "norms-only" in report.to_dict()["diagnosis"]["overrides"]


def test_norms_that_agree_prove_nothing(tmp_path):
    log = _norms_log(tmp_path / "norms.log", [2, 15, 27])
    report = hsdiff.compare(TRAIN_LOGS, log, layer_ids=[1, 14, 26])
    assert report.verdict == "inconclusive" and report.exit_code == 1
    assert "is not training slot" not in report.cause and "which norms cannot confirm" in report.cause


def test_a_log_without_tensors_or_norm_lists_is_still_refused(tmp_path):
    r = _compare(TRAIN_LOGS, B.FIXTURES / "logs" / "no-tensor.log", "--layer-ids", "1,14,26")
    assert r.exit_code == 2 and "holds no printed tensor" in r.output
