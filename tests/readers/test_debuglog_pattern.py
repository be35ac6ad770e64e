"""``--log-pattern`` (:mod:`hsdiff.readers.debuglog.pattern`): a user's regular expression for an unusual log."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hsdiff.cli import cli
from hsdiff.errors import FormatError, InputError
from hsdiff.readers import debuglog

from .. import builders as B
from .logs import LOGS, read_text


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
    lines = [
        f"## L={b} s{k} t{t} :: " + " | ".join(f"{v:.4g}" for v in h[b, t, :16])
        for k, b in enumerate((2, 15, 27))
        for t in (3, 7, 11)
    ]
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
