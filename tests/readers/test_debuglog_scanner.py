"""The bounded line scanner (:mod:`hsdiff.readers.debuglog.scanner`): noise, the line cap, prints over several lines."""

from __future__ import annotations

import numpy as np

from hsdiff.readers import debuglog
from hsdiff.readers._common import ReadContext

from .. import builders as B
from .logs import read_text


def test_timestamps_ansi_colour_crlf_and_bad_bytes_are_noise(tmp_path):
    raw = (
        b"\x1b[32m[2026-11-30 01:15:02 TP0] Load weight end. avail mem=74.21 GB\x1b[0m\r\n"
        b"\xff\xfe garbage \x00 from a crashed worker\r\n"
        b"[2026-11-30 01:15:03 TP0] \x1b[33maux_hidden_states[1] layer=3 norm=13.2 first5=[42.5, 1.72, 34.5, 42.75, -3.703]\x1b[0m\r\n"  # noqa: E501
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
