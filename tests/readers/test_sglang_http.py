"""The SGLang HTTP-response reader: meta_info.hidden_states of a saved /generate response."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import hsdiff
from hsdiff.cli import cli
from hsdiff.readers import scan

from .. import builders as B
from .cli import inspected, refusal


@pytest.mark.parametrize("generated", [1, 4])
def test_the_prefill_and_decode_rows_are_compared_by_value(tmp_path, generated):
    resp = B.sglang_response(tmp_path / "i" / "resp.json", 1, [2, 15, 27], generated=generated)
    (cap,) = scan(tmp_path / "i", "infer").captures
    assert cap.origin.format == "sglang_http" and cap.token_ids is None and cap.shape == (23, 1728)
    np.testing.assert_array_equal(cap.array()[:, 576:1152], B.states(1)["bf16"][15][:23].float().numpy())
    train = B.specforge(tmp_path / "train", [0, 1, 2], [2, 15, 27])
    r = hsdiff.compare(train, resp, layer_ids=[1, 14, 26])
    assert r.verdict == "ok" and r.exit_code == 0 and [s.boundary_index for s in r.slots] == [2, 15, 27]
    # the server of the case behind this project: ids [-1, 1, 14] make SGLang capture B0, B2, B15
    wrong = B.sglang_response(tmp_path / "w" / "resp.json", 1, [0, 2, 15], generated=generated)
    r = hsdiff.compare(train, wrong, layer_ids=[-1, 1, 14])
    assert r.verdict == "mismatch" and r.exit_code == 1 and r.recommended.ids[:2] == (1, 14)
    assert [s.boundary_index for s in r.slots][:2] == [2, 15]


def test_inspect_names_the_response_and_a_config_beside_it_stays_a_config(tmp_path):
    B.sglang_response(tmp_path / "resp.json", 0, [2, 15, 27])
    B.draft_config(tmp_path / "config.json", [1, 14, 26])
    assert inspected(tmp_path, "sglang_http", "meta_info", "23 rows (23 prompt tokens, 1 generated)")
    dump = scan(tmp_path, "infer")
    assert [c.origin.format for c in dump.captures] == ["sglang_http"] and len(dump.configs) == 1


def test_the_request_asks_for_hidden_states(tmp_path):
    train = B.specforge(tmp_path, [2], [2, 15, 27])
    r = CliRunner().invoke(cli, ["request", str(train), "--hidden-states"])
    assert r.exit_code == 0
    body = json.loads(r.stdout)
    assert body["return_hidden_states"] is True and body["input_ids"] == B.states(2)["input_ids"].tolist()
    assert "--enable-return-aux-hidden-states" in r.stderr
    assert "`hsdiff ids --to sglang`" in r.stderr and "never captures id L-1" in r.stderr  # read as EAGLE-3 ids


def test_hidden_states_that_are_not_rows_are_one_line(tmp_path):
    (tmp_path / "resp.json").write_text(json.dumps({"text": "", "meta_info": {"hidden_states": [[1.0, 2.0], [3.0]]}}))
    line = refusal(["inspect", str(tmp_path)])
    assert "resp.json" in line and "not a list of rows" in line and "one list per decoded token" in line


def test_an_unreadable_json_beside_a_dump_is_left_alone(tmp_path, monkeypatch):
    import builtins

    B.sglang_response(tmp_path / "resp.json", 0, [2, 15, 27])
    (tmp_path / "notes.json").write_text("{}")
    real_open = builtins.open

    def denying(file, *args, **kwargs):  # what open() does on a file the user may not read (root may read any)
        if str(file).endswith("notes.json"):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", denying)
    assert [c.origin.format for c in scan(tmp_path, "infer").captures] == ["sglang_http"]
