"""The debug-log reader: what it pulls out of real, noisy logs, and what it refuses."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from hsdiff.cli import cli
from hsdiff.errors import FormatError, InputError
from hsdiff.readers import debuglog, scan
from hsdiff.readers._common import ReadContext

from . import builders as B

LOGS = B.FIXTURES / "logs"
REAL_LOG = B.REAL / "sglang-dumper.log"
REAL_DIR = B.REAL / "sglang-dumper" / "dump_20261130_023047_011830"


def read_text(tmp_path: Path, text: str | bytes, name: str = "server.log", **ctx) -> list:
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return debuglog.read(p, ReadContext(side="infer", root=tmp_path, **ctx))


# ----------------------------------------------------------------------------- the real SGLang dumper log
def test_real_sglang_dumper_log_gives_one_capture_per_layer_with_its_tags():
    ctx = ReadContext(side="infer", root=B.REAL)
    caps = debuglog.read(REAL_LOG, ctx)
    assert len(caps) == 30
    assert [c.boundary for c in caps] == list(range(30))
    assert {c.layer.source for c in caps} == {"log"}
    c = caps[0]
    assert c.shape == (61, 576) and c.width == 576 and c.dtype == "bfloat16"
    assert c.origin.line == 2 and c.origin.format == "debuglog"
    assert c.origin.key == "name=eagle3_aux layer_id=0"
    assert c.group == "sglang-dumper.log:dump_20261130_023047_011830:step=0"
    assert c.observation.rows == (0, 1, 2, 3, 4) and c.observation.cols == (0, 1, 2, 3, 4)
    assert c.observation.values[0].tolist() == [-0.0238, -0.0159, -0.0396, 0.0159, -0.1113]
    assert ctx.warnings == []


def test_real_dumper_log_sample_equals_the_saved_tensors_within_print_rounding():
    caps = debuglog.read(REAL_LOG, ReadContext(side="infer"))
    for c in caps:
        saved = torch.load(REAL_DIR / (
            f"step=0___rank=0___dump_index={c.boundary + 1}___name=eagle3_aux___recompute_status=disabled"
            f"___layer_id={c.boundary}.pt"), weights_only=True)["value"].float()
        printed = torch.as_tensor(c.observation.values, dtype=torch.float32)
        # PyTorch prints 4 decimals (or 5 significant digits in scientific notation)
        tol = 0.5e-4 + 0.5e-4 * saved[:5, :5].abs()
        assert bool(((printed - saved[:5, :5]).abs() <= tol).all()), c.origin


# ----------------------------------------------------------------------------- value notations
@pytest.mark.parametrize(
    "text, values, rows, cols",
    [
        ("[0.0295, -0.0114, -0.017, -0.0179, -0.0183]", [[0.0295, -0.0114, -0.017, -0.0179, -0.0183]], (0,), (0, 1, 2, 3, 4)),
        ("[ 2.9e-02 -1.1E-02  3. -4.  nan inf -inf ]", [[0.029, -0.011, 3.0, -4.0, math.nan, math.inf, -math.inf]], (0,),
         tuple(range(7))),
        ("[[1.5, 2.0, ..., 3.0], [4.0, 5.0, ..., 6.0]]", [[1.5, 2.0, 3.0], [4.0, 5.0, 6.0]], (0, 1), (0, 1, -1)),
        ("[[1., 2.],\n ...,\n [5., 6.]]", [[1.0, 2.0], [5.0, 6.0]], (0, -1), (0, 1)),
        ("[.5, +1.25, 1e3, -.75,]", [[0.5, 1.25, 1000.0, -0.75]], (0,), (0, 1, 2, 3)),
    ],
)
def test_parse_values_reads_every_float_notation(text, values, rows, cols):
    got = debuglog.parse_values(text)
    assert got is not None
    v, r, c = got
    np.testing.assert_array_equal(v, np.asarray(values, dtype=float))
    assert r == rows and c == cols


@pytest.mark.parametrize("text", ["[2026-11-30 01:15:02 TP0]", "[Dumper, rank=0]", "[1, 2, 3", "no list", "[00:01<00:00]"])
def test_parse_values_refuses_what_is_not_a_list_of_numbers(text):
    assert debuglog.parse_values(text) is None


# ----------------------------------------------------------------------------- noisy logs
def test_timestamps_ansi_colour_crlf_and_bad_bytes_are_noise(tmp_path):
    raw = (
        b"\x1b[32m[2026-11-30 01:15:02 TP0] Load weight end. avail mem=74.21 GB\x1b[0m\r\n"
        b"\xff\xfe garbage \x00 from a crashed worker\r\n"
        b"[2026-11-30 01:15:03 TP0] \x1b[33maux_hidden_states[1] layer=3 norm=13.2 first5=[42.5, 1.72, 34.5, 42.75, -3.703]\x1b[0m\r\n"
        b"Loading safetensors checkpoint shards: 100% Completed | 2/2 [00:01<00:00,  1.50it/s]\r\n"
    )
    (c,) = read_text(tmp_path, raw)
    assert c.slot == 1 and c.boundary == 3 and c.norm == 13.2
    assert c.origin.line == 3 and c.origin.key == "aux_hidden_states[1] layer=3"
    assert c.observation.values.tolist() == [[42.5, 1.72, 34.5, 42.75, -3.703]]
    assert c.observation.rows == (0,) and c.observation.cols == (0, 1, 2, 3, 4)
    assert c.shape is None and c.width is None and c.dtype == "unknown"


def test_a_line_longer_than_the_cap_is_read_only_up_to_it(tmp_path, monkeypatch):
    monkeypatch.setattr(debuglog, "MAX_LINE", 4096)
    long_line = "server_args=ServerArgs(" + "x=1, " * 50_000 + ")\n"
    text = long_line + "aux_hidden_states[0] first5=[0.5, 0.25, 0.125, 1.5, 2.5]\n"
    ctx = ReadContext(side="infer", root=tmp_path)
    (tmp_path / "s.log").write_text(text)
    (c,) = debuglog.read(tmp_path / "s.log", ctx)
    assert c.origin.line == 2 and c.slot == 0
    assert any("longer than" in w and "line 1" in w for w in ctx.warnings)


def test_a_print_cut_by_the_line_cap_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setattr(debuglog, "MAX_LINE", 4096)
    big = "h=[" + ", ".join(["0.123456"] * 5000) + "]\n"
    ctx = ReadContext(side="infer", root=tmp_path)
    (tmp_path / "s.log").write_text(big + "aux_hidden_states[0] first5=[0.5, 0.25, 0.125, 1.5, 2.5]\n")
    caps = debuglog.read(tmp_path / "s.log", ctx)
    assert [c.origin.line for c in caps] == [2]
    assert any("cut off" in w and "line limit" in w for w in ctx.warnings)


# ----------------------------------------------------------------------------- PyTorch, numpy, dumper prints
def test_summarised_pytorch_print_with_header_line_and_shape(tmp_path):
    h = B.states(0)["bf16"][15]
    text = f"[2026-11-30 01:15:02 TP0] aux_hidden_states[1] (layer 15) shape={tuple(h.shape)}:\n{h!r}\n"
    (c,) = read_text(tmp_path, text)
    assert c.slot == 1 and c.boundary == 15 and c.shape == (24, 576) and c.dtype == "bfloat16"
    obs = c.observation
    assert obs.rows == (0, 1, 2, -3, -2, -1)
    assert obs.cols == (0, 1, 2, 573, 574, 575)  # the shape turns end-counted columns into positions
    want = h.float()[[0, 1, 2, 21, 22, 23]][:, [0, 1, 2, 573, 574, 575]]
    assert np.allclose(obs.values, want.numpy(), rtol=1e-3, atol=1e-4)


def test_summarised_print_without_shape_keeps_end_counted_positions(tmp_path):
    h = B.states(0)["bf16"][2]
    (c,) = read_text(tmp_path, f"capture layer 2:\n{h!r}\n")
    assert c.shape is None and c.boundary == 2
    assert c.observation.rows == (0, 1, 2, -3, -2, -1) and c.observation.cols == (0, 1, 2, -3, -2, -1)


def test_printed_list_of_tensors_gives_slots_in_list_order(tmp_path):
    s = B.states(1)["bf16"]
    text = "aux_hidden_states=" + repr([s[0][:2, :3], s[2][:2, :3], s[15][:2, :3]]) + "\n"
    caps = read_text(tmp_path, text)
    assert [c.slot for c in caps] == [0, 1, 2]
    assert [c.origin.key for c in caps] == ["aux_hidden_states[0]", "aux_hidden_states[1]", "aux_hidden_states[2]"]
    assert np.allclose(caps[2].observation.values, s[15][:2, :3].float().numpy(), atol=1e-4)


def test_numpy_prints_spanning_lines(tmp_path):
    arr = B.states(1)["bf16"][2, :4, :8].float().numpy()
    text = "INFO aux: " + str(arr) + "\nINFO aux: " + str(arr * 2) + "\n"
    caps = read_text(tmp_path, text)
    assert [c.slot for c in caps] == [0, 1]  # two unlabelled prints with one label pattern: log order
    assert caps[0].observation.values.shape == (4, 8)
    np.testing.assert_allclose(caps[0].observation.values, arr, rtol=1e-6)


def test_sglang_dumper_ranks_collapse_and_int_tensors_are_skipped():
    caps = debuglog.read(LOGS / "seed-sglang-dumper.log", ReadContext(side="infer", root=LOGS))
    assert [c.boundary for c in caps] == [0, 3, 31]  # rank 1 printed the same values; input_ids are ints
    assert all(c.observation.values.shape == (25, 5) for c in caps)
    assert {c.group for c in caps} == {"seed-sglang-dumper.log:dump_20261130_011502_123456:step=0"}


def test_tensor_info_head_and_tail_merge_into_one_capture():
    caps = debuglog.read(LOGS / "smollm2-tensor-info.log", ReadContext(side="infer"))
    assert [c.boundary for c in caps] == [2, 15, 27]
    obs = caps[1].observation
    assert obs.rows == (0, -1) and obs.cols == tuple(range(5)) + tuple(range(571, 576))
    assert np.isnan(obs.values[0, 5:]).all() and np.isnan(obs.values[1, :5]).all()
    h = B.states(0)["bf16"][15].float()
    assert np.allclose(obs.values[1, 5:], h[-1, -5:].numpy(), atol=1e-6)


def test_two_lines_printing_parts_of_one_capture_merge(tmp_path):
    text = (
        "aux_hidden_states[2] layer=31 shape=torch.Size([25, 576]) norm=29.79 first5=[3.094, -43.5, 38.75, -78, 53]\n"
        "aux_hidden_states[2] layer=31 last_token=[-6.656, -0.543, 5.906, 6.938]\n"
    )
    (c,) = read_text(tmp_path, text)
    assert c.observation.rows == (0, -1) and c.observation.cols == (0, 1, 2, 3, 4)
    assert c.norm == 29.79 and c.origin.line == 1


def test_passes_and_pattern_order(tmp_path):
    text = (
        "Prefill batch. #new-seq: 1, #new-token: 24\n"
        "capture: [0.1, 0.2, 0.3, 0.4]\ncapture: [1.1, 1.2, 1.3, 1.4]\ncapture: [2.1, 2.2, 2.3, 2.4]\n"
        "Decode batch. #running-req: 1, #token: 25\n"
        "capture: [0.5, 0.6, 0.7, 0.8]\ncapture: [1.5, 1.6, 1.7, 1.8]\ncapture: [2.5, 2.6, 2.7, 2.8]\n"
    )
    caps = read_text(tmp_path, text)
    assert [c.slot for c in caps] == [0, 1, 2, 0, 1, 2]
    assert len({c.group for c in caps[:3]}) == 1 and caps[0].group != caps[3].group
    text2 = "aux_hidden_states[0] x=[0.1, 0.2, 0.3, 0.4]\naux_hidden_states[0] x=[0.5, 0.6, 0.7, 0.8]\n"
    a, b = read_text(tmp_path, text2, name="repeat.log")
    assert a.group != b.group  # the same slot printed again: the next forward pass


@pytest.mark.parametrize(
    "line, norm",
    [
        ("h first5=[0.1, 0.2, 0.3, 0.4, 0.5] norm=12.5", 12.5),
        ("h first5=[0.1, 0.2, 0.3, 0.4, 0.5] norm(dim=-1).mean()=3.25", 3.25),
        ("h norm: tensor(1.0312, device='cuda:0', dtype=torch.bfloat16) first5=[0.1, 0.2, 0.3, 0.4, 0.5]", 1.0312),
        ("h ||x||=7e2 first5=[0.1, 0.2, 0.3, 0.4, 0.5]", 700.0),
    ],
)
def test_norm_forms(tmp_path, line, norm):
    (c,) = read_text(tmp_path, line + "\n")
    assert c.norm == pytest.approx(norm)


@pytest.mark.parametrize(
    "line, row, cols",
    [
        ("h[5, :4]=[0.1, 0.2, 0.3, 0.4]", (5,), (0, 1, 2, 3)),
        ("h[-1, -4:]=[0.1, 0.2, 0.3, 0.4]", (-1,), (-4, -3, -2, -1)),
        ("aux_hidden_states[2][3, 100:104]=[0.1, 0.2, 0.3, 0.4]", (3,), (100, 101, 102, 103)),
        ("token=7 values=[0.1, 0.2, 0.3, 0.4]", (7,), (0, 1, 2, 3)),
        ("h.flatten()[-4:]=[0.1, 0.2, 0.3, 0.4]", (-1,), (-4, -3, -2, -1)),
    ],
)
def test_positions_from_index_expressions(tmp_path, line, row, cols):
    (c,) = read_text(tmp_path, line + "\n")
    assert c.observation.rows == row and c.observation.cols == cols


def test_positions_printed_beside_a_decode_capture(tmp_path):
    text = "positions=tensor([17, 18, 19], device='cuda:0') aux_hidden_states[0] h[:, :4]=" \
           "[[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8], [0.9, 1.0, 1.1, 1.2]]\n"
    (c,) = read_text(tmp_path, text)
    assert c.observation.rows == (17, 18, 19)


# ----------------------------------------------------------------------------- refusals
def test_a_log_without_tensors_is_a_clear_error():
    with pytest.raises(FormatError) as e:
        debuglog.read(LOGS / "no-tensor.log", ReadContext(side="infer"))
    assert "no printed tensor" in str(e.value) and "integer list" in str(e.value)
    r = CliRunner().invoke(cli, ["compare", str(LOGS / "smollm2-train"), str(LOGS / "no-tensor.log")])
    assert r.exit_code == 2
    assert "no printed tensor" in r.output and "Traceback" not in r.output


def test_a_log_of_norms_only_says_why(tmp_path):
    with pytest.raises(FormatError, match="only statistics"):
        read_text(tmp_path, "aux norms: norms=[1.02, 0.98, 13.5, 37.1]\nmean=[0.1, 0.2, 0.3, 0.4]\n")


def test_a_silent_log_beside_a_dump_is_skipped_not_fatal(tmp_path):
    d = B.sglang_dump(tmp_path / "dump", 1, [2, 15, 27])
    (d / "server.log").write_text("[2026-11-30 01:15:02 TP0] The server is fired up and ready to roll!\n")
    dump = scan(d, "infer")
    assert len(dump.captures) == 1 and not dump.captures[0].is_partial
    assert any("server.log" in w for w in dump.warnings)


# ----------------------------------------------------------------------------- --log-pattern
def test_log_pattern_reads_an_unusual_format(tmp_path):
    text = (
        "## hs dump L=3 s0 :: 0.3594 | 2.594 | -11 | -3.906 | 7.5 ## n=59.7\n"
        "## hs dump L=31 s1 :: 3.094 | -43.5 | 38.75 | -78 | 53 ## n=29.79\n"
    )
    rx = r"L=(?P<layer>\d+) s(?P<slot>\d+) :: (?P<values>[-\d.| ]+) ## n=(?P<norm>[\d.]+)"
    caps = read_text(tmp_path, text, log_pattern=rx)
    assert [(c.boundary, c.slot, c.norm) for c in caps] == [(3, 0, 59.7), (31, 1, 29.79)]
    assert caps[1].observation.values.tolist() == [[3.094, -43.5, 38.75, -78.0, 53.0]]
    with pytest.raises(FormatError, match="matched no line"):
        read_text(tmp_path, text, name="other.log", log_pattern=r"nothing (?P<values>\d)")


def test_log_pattern_end_to_end_and_bad_patterns_exit_2(tmp_path):
    h = B.states(1)["bf16"].float()
    lines = [f"## L={b} s{k} t{t} :: " + " | ".join(f"{v:.4g}" for v in h[b, t, :16]) for k, b in enumerate((2, 15, 27))
             for t in (3, 7, 11)]
    log = tmp_path / "odd.log"
    log.write_text("\n".join(lines) + "\n")
    rx = r"L=(?P<layer>\d+) s(?P<slot>\d+) t(?P<token>\d+) :: (?P<values>[-\d.e| ]+)"
    r = CliRunner().invoke(cli, ["compare", str(LOGS / "smollm2-train"), str(log), "--log-pattern", rx, "--json", "-"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["recommended"]["eagle_aux_hidden_state_layer_ids"] == [1, 14, 26]
    for bad in ("(unclosed", r"no values group (?P<x>\d)"):
        r = CliRunner().invoke(cli, ["compare", str(LOGS / "smollm2-train"), str(log), "--log-pattern", bad])
        assert r.exit_code == 2 and "--log-pattern" in r.output


def test_compile_pattern_errors_are_input_errors():
    with pytest.raises(InputError, match="named group 'values'"):
        debuglog.compile_pattern(r"(?P<slot>\d)")
