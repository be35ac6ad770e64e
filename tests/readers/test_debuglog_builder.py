"""The capture builder (:mod:`hsdiff.readers.debuglog.builder`): parts merged, passes, slot order,
and logs with nothing to use."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from hsdiff.cli import cli
from hsdiff.errors import FormatError
from hsdiff.readers import debuglog, scan
from hsdiff.readers._common import ReadContext

from .. import builders as B
from .logs import LOGS, read_text


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


def test_a_log_without_tensors_is_a_clear_error():
    with pytest.raises(FormatError) as e:
        debuglog.read(LOGS / "no-tensor.log", ReadContext(side="infer"))
    assert "no printed tensor" in str(e.value) and "integer list" in str(e.value)
    r = CliRunner().invoke(cli, ["compare", str(LOGS / "smollm2-train"), str(LOGS / "no-tensor.log")])
    assert r.exit_code == 2
    assert "no printed tensor" in r.output and "Traceback" not in r.output


def test_a_log_of_statistics_only_says_why(tmp_path):
    with pytest.raises(FormatError, match="only statistics"):
        read_text(tmp_path, "aux means: mean=[0.1, 0.2, 0.3, 0.4]\n")


def test_a_log_of_per_token_norms_is_kept_as_weak_evidence(tmp_path):
    (tmp_path / "norms.log").write_text("aux norms: norms=[1.02, 0.98, 13.5, 37.1]\nmean=[0.1, 0.2, 0.3, 0.4]\n")
    dump = scan(tmp_path / "norms.log", "infer")
    assert dump.captures == () and [p.norms for p in dump.norm_prints] == [(1.02, 0.98, 13.5, 37.1)]


def test_per_token_norm_lines_make_one_series_per_capture_and_pass(tmp_path):
    lines = [
        f"[2026-11-30 01:15:07 TP0] layer={layer} token={t} norm={10 * layer + t}.5"
        for layer in (1, 14)
        for t in (3, 4, 5, 6)
    ]
    lines += ["[2026-11-30 01:15:08 TP0] Decode batch. #running-req: 1"]
    lines += [f"layer={layer} token={t} norm={t}.25" for t in (7, 8, 9, 10) for layer in (1, 14)]  # token by token
    lines += ["layer=1 token=3", "grad_norm=1.5 step=3", "layer=1 norm=2.0"]  # no norm; no label; no token
    (tmp_path / "norms.log").write_text("\n".join(lines) + "\n")
    dump = scan(tmp_path / "norms.log", "infer")
    assert dump.captures == ()
    got = [(p.slot, p.layer.value, p.rows, p.norms[0], p.origin.key, p.origin.line) for p in dump.norm_prints]
    assert got == [
        (0, 1, (3, 4, 5, 6), 13.5, "layer=1", 1),
        (1, 14, (3, 4, 5, 6), 143.5, "layer=14", 5),
        (0, 1, (7, 8, 9, 10), 7.25, "layer=1", 10),
        (1, 14, (7, 8, 9, 10), 7.25, "layer=14", 11),
    ]
    assert dump.norm_prints[0].group != dump.norm_prints[2].group  # another forward pass: other tokens


def test_json_lines_of_norms_are_read_by_their_keys(tmp_path):
    text = (
        '{"slot": 1, "norms": [1.5, 2.5, 3.5, 4.5]}\n{"slot": 0, "token": 2, "norms": [5.5, 6.5, 7.5, 8.5]}\n'
        + "".join(f'{{"layer": 3, "token": {t}, "norm": {t}.5}}\n' for t in range(4))
    )
    (tmp_path / "norms.jsonl").write_text(text)
    dump = scan(tmp_path / "norms.jsonl", "infer", fmt="debuglog")
    assert dump.captures == ()
    got = [(p.slot, p.rows, p.norms, p.origin.key) for p in dump.norm_prints]
    assert got[:2] == [
        (1, (0, 1, 2, 3), (1.5, 2.5, 3.5, 4.5), "slot=1"),
        (0, (2, 3, 4, 5), (5.5, 6.5, 7.5, 8.5), "slot=0"),
    ]
    assert got[2][1:] == ((0, 1, 2, 3), (0.5, 1.5, 2.5, 3.5), "layer=3") and dump.norm_prints[2].layer.value == 3


def test_a_shape_printed_before_the_values_is_a_label_not_a_statistic(tmp_path):
    (c,) = read_text(tmp_path, "aux torch.Size([2, 1152]) tensor([[1.5, 2.5, ..., 3.5], [4.5, 5.5, ..., 6.5]])\n")
    assert c.width == 1152 and c.observation.cols == (0, 1, 1151)


def test_a_silent_log_beside_a_dump_is_skipped_not_fatal(tmp_path):
    d = B.sglang_dump(tmp_path / "dump", 1, [2, 15, 27])
    (d / "server.log").write_text("[2026-11-30 01:15:02 TP0] The server is fired up and ready to roll!\n")
    dump = scan(d, "infer")
    assert len(dump.captures) == 1 and not dump.captures[0].is_partial
    assert any("server.log" in w for w in dump.warnings)
