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
        assert "hidden_size 192 and layer_ids [2, 15, 27] cannot both hold" in str(e) and "--" not in str(e)
        assert e.params == ("hidden_size", "layer_ids")
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
    log.write_text("".join(f"[2026-11-30 01:15:02 TP0] forward hook: output of model.layers.{n} "
                           f"hidden_states[1:9, :64]={_rows(hs[n + 1][1:9, :64])}\n" for n in (1, 14, 26)))
    report = hsdiff.compare(B.FIXTURES / "logs" / "smollm2-train", log, layer_ids=[1, 14, 26])
    assert [s.match.capture.boundary for s in report.slots] == [2, 15, 27]
    assert [s.boundary_index for s in report.slots] == [2, 15, 27]
    assert list(report.recommended.ids) == [1, 14, 26] and report.verdict != "mismatch"
    assert "infer-index" not in report.cause
    r = _compare(B.FIXTURES / "logs" / "smollm2-train", log, "--layer-ids", "1,14,26")
    assert "O1 (B2)" in r.output and "infer_index" not in r.output and "--infer-index" not in r.output
