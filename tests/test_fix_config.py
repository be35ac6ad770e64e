"""`hsdiff fix-config`: writes the ids where the engine reads them, atomically, with a byte-exact backup."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from hsdiff.cli import cli
from hsdiff.configs import read_ids
from hsdiff.fix_config import fix_config, ids_from_report
from hsdiff.report.text import render_text

from . import builders as B

SEED = B.SEED
TARGET = str(SEED / "model" / "config.json")


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def wrong_copy(tmp_path):
    draft = tmp_path / "draft" / "config.json"
    draft.parent.mkdir()
    shutil.copyfile(SEED / "draft-wrong" / "config.json", draft)
    return draft


def gate(infer: str, draft, *extra: str):
    return run(
        "gate", str(SEED / "train"), str(SEED / infer), "--draft-config", str(draft), "--target-config", TARGET, *extra
    )


def test_fix_from_the_gate_report_makes_the_gate_pass(tmp_path, wrong_copy):
    report = tmp_path / "gate.json"
    assert gate("infer-wrong", wrong_copy, "--json", str(report)).exit_code == 1
    original = (SEED / "draft-wrong" / "config.json").read_bytes()
    r = run("fix-config", str(wrong_copy), "--from-report", str(report))
    assert r.exit_code == 0, r.output
    assert "-      -1," in r.stdout and "+      58" in r.stdout  # the diff
    backup = wrong_copy.with_name("config.json.bak")
    assert backup.read_bytes() == original  # byte for byte
    cfg = json.loads(wrong_copy.read_text())
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]
    assert "eagle_aux_hidden_state_layer_ids" not in cfg  # SGLang reads only the nested key
    before, after = json.loads(original), dict(cfg)
    before["eagle_config"].pop("eagle_aux_hidden_state_layer_ids")
    after["eagle_config"] = {k: v for k, v in cfg["eagle_config"].items() if k != "eagle_aux_hidden_state_layer_ids"}
    assert after == before  # nothing else changed
    # the server restarted with the fixed config captures B3, 31, 59; dumped with B30, B32, B58 and B60 too
    # (infer-fixed-neighbours, what the values need to rule out the neighbours), the gate passes
    assert gate("infer-fixed-neighbours", wrong_copy).exit_code == 0
    assert sorted(p.name for p in wrong_copy.parent.iterdir()) == ["config.json", "config.json.bak"]


def test_a_second_run_changes_nothing_and_keeps_the_first_backup(tmp_path, wrong_copy):
    assert run("fix-config", str(wrong_copy), "--layer-ids", "2,30,58").exit_code == 0
    first = wrong_copy.with_name("config.json.bak").read_bytes()
    r = run("fix-config", str(wrong_copy.parent), "--layer-ids", "2,30,58")
    assert r.exit_code == 0 and "nothing to do" in r.output
    assert sorted(p.name for p in wrong_copy.parent.iterdir()) == ["config.json", "config.json.bak"]
    assert wrong_copy.with_name("config.json.bak").read_bytes() == first
    assert run("fix-config", str(wrong_copy), "--layer-ids", "3,31,59").exit_code == 0
    assert wrong_copy.with_name("config.json.bak.1").exists()  # an existing backup is never overwritten
    assert wrong_copy.with_name("config.json.bak").read_bytes() == first


def test_vllm_gets_the_top_level_key_in_its_own_convention(tmp_path, wrong_copy):
    report = tmp_path / "compare.json"
    run("compare", str(SEED / "train"), str(SEED / "infer-wrong"), "--layer-ids=-1,2,30", "--json", str(report))
    before = wrong_copy.read_bytes()
    r = run("fix-config", str(wrong_copy), "--from-report", str(report), "--engine", "vllm")
    assert r.exit_code == 2 and "made for SGLang 0.5.23" in r.output and "--engine vllm asks for vLLM 0.33" in r.output
    assert wrong_copy.read_bytes() == before  # a report for SGLang is not written for vLLM unless asked to
    r = run("fix-config", str(wrong_copy), "--from-report", str(report), "--engine", "vllm", "--translate")
    assert r.exit_code == 0, r.output
    assert "translated the report's layers B[3, 31, 59] from SGLang 0.5.23" in r.stdout
    assert "eagle_aux_hidden_state_layer_ids = [3, 31, 59] for vLLM 0.33" in r.stdout
    cfg = json.loads(wrong_copy.read_text())
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [3, 31, 59]
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [-1, 2, 30]  # left alone, and said so
    assert "left as it is" in r.stderr
    assert ids_from_report(report, "trtllm", translate=True).ids == (2, 30, 58)


def test_dry_run_writes_nothing(wrong_copy):
    before = wrong_copy.read_bytes()
    r = run("fix-config", str(wrong_copy), "--layer-ids", "2,30,58", "--dry-run")
    assert r.exit_code == 0 and "dry run" in r.output and "+      58" in r.output
    assert wrong_copy.read_bytes() == before
    assert list(wrong_copy.parent.iterdir()) == [wrong_copy]


def _report(tmp_path, **changes):
    doc = json.loads(
        run("compare", str(SEED / "train"), str(SEED / "infer-wrong"), "--layer-ids=-1,2,30", "--json", "-").stdout
    )
    doc.update(changes)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(doc))
    return path, doc


def test_refuses_a_report_that_is_not_confident(tmp_path, wrong_copy):
    before = wrong_copy.read_bytes()
    path, _ = _report(tmp_path, verdict="inconclusive")
    r = run("fix-config", str(wrong_copy), "--from-report", str(path))
    assert r.exit_code == 2
    assert "not confident" in r.output and "verdict 'inconclusive'" in r.output
    path, doc = _report(tmp_path)
    doc["slots"][2].update(status="ambiguous", boundary_index=None, evidence="none")
    path.write_text(json.dumps(doc))
    r = run("fix-config", str(wrong_copy), "--from-report", str(path))
    assert r.exit_code == 2 and "slot 2 ambiguous" in r.output
    assert wrong_copy.read_bytes() == before and list(wrong_copy.parent.iterdir()) == [wrong_copy]


def test_refuses_layers_the_engine_cannot_capture(tmp_path, wrong_copy):
    path, doc = _report(tmp_path)
    doc["num_hidden_layers"] = 59  # B59 would be the last layer's output: SGLang's llama rule cannot capture it
    path.write_text(json.dumps(doc))
    r = run("fix-config", str(wrong_copy), "--from-report", str(path))
    assert r.exit_code == 2 and "cannot capture B59" in r.output


def test_refuses_an_order_no_id_list_reproduces(tmp_path, wrong_copy):
    before = wrong_copy.read_bytes()
    path, doc = _report(tmp_path)
    doc["recommended"]["boundary_indices"] = [59, 3, 31]  # trained on B59 first: SGLang captures in layer order
    for s, b in zip(doc["slots"], [59, 3, 31]):
        s["boundary_index"] = b
    path.write_text(json.dumps(doc))
    r = run("fix-config", str(wrong_copy), "--from-report", str(path))
    assert r.exit_code == 2 and "no id list reproduces the training order" in r.output and "(1, 2, 0)" in r.output
    assert wrong_copy.read_bytes() == before


def test_deepseek_rule_writing_is_accepted(tmp_path, wrong_copy):
    # B[1, 30, 58] on SGLang's DeepSeek rule: id 1 must not come first (sglang==0.5.23 deepseek_v2.py:3470-3473)
    r = run("fix-config", str(wrong_copy), "--layer-ids", "30,1,58", "--model-family", "kimi_k25")
    assert r.exit_code == 0, r.output
    assert json.loads(wrong_copy.read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [30, 1, 58]
    r = run("fix-config", str(wrong_copy), "--layer-ids", "30,1,58")  # the llama rule re-sorts it: refused
    assert r.exit_code == 2 and "not ascending" in r.output


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("--layer-ids", "2,30,58", "--from-report", "x.json"),
        ("--layer-ids", "30,2,58"),
        ("--from-report", "missing.json"),
        ("--layer-ids", "2,30,58", "--engine", "hf"),
    ],
)
def test_bad_input_exits_2(wrong_copy, args):
    before = wrong_copy.read_bytes()
    r = run("fix-config", str(wrong_copy), *args)
    assert r.exit_code == 2, r.output
    assert wrong_copy.read_bytes() == before


def test_library_keeps_key_order_and_indent(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{\n    "b": 1,\n    "a": {"x": 2}\n}\n')
    res = fix_config(p, [2, 30, 58], engine="sglang")
    assert res.written and res.key == "eagle_config.eagle_aux_hidden_state_layer_ids" and res.old is None
    text = p.read_text()
    assert text.startswith('{\n    "b": 1,\n    "a": {')
    assert list(json.loads(text)) == ["b", "a", "eagle_config"]


# --------------------------------------------------------------------------- the engine version a report was made for

KIMI = ("--model-family", "kimi_k25")


@pytest.fixture(scope="module")
def kimi_reports(tmp_path_factory):
    """The seed story with a Kimi-K2.5 target, compared for SGLang 0.5.12 and for 0.5.23 (with the ids that
    make each capture what the wrong deployment captured, B[0, 3, 31]: on 0.5.23 -1 would name no layer)."""
    d = tmp_path_factory.mktemp("reports")
    out = {}
    for version, ids in (("0.5.12", "-1,2,30"), ("0.5.23", "0,3,31")):
        path, md = d / f"r-{version}.json", d / f"r-{version}.md"
        r = run(
            "compare",
            str(SEED / "train"),
            str(SEED / "infer-wrong"),
            f"--layer-ids={ids}",
            *KIMI,
            "--engine-version",
            f"sglang=={version}",
            "--json",
            str(path),
            "--markdown",
            str(md),
        )
        assert r.exit_code == 1, r.output
        for text in (r.output, md.read_text()):  # the text and Markdown reports say it beside the ids
            assert f"(for SGLang {version}, rule: SGLang " in text and f"SGLang {version}, rule:" in text
        out[version] = path
    return out


def _written(draft) -> list[int]:
    return json.loads(draft.read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"]


def test_a_0_5_12_report_writes_what_sglang_0_5_12_needs(kimi_reports, wrong_copy):
    doc = json.loads(kimi_reports["0.5.12"].read_text())
    rec = doc["recommended"]
    assert (rec["engine_version"], rec["eagle_aux_hidden_state_layer_ids"]) == ("0.5.12", [2, 30, 58])
    assert rec["by_engine"]["sglang"] == {"version": "0.5.12", "rule": rec["rule"], "ids": [2, 30, 58]}  # one answer
    assert doc["settings"]["engine_version"] == "0.5.12" and doc["settings"]["engine_versions_given"] == [
        "sglang==0.5.12"
    ]
    r = run("fix-config", str(wrong_copy), "--from-report", str(kimi_reports["0.5.12"]))
    assert r.exit_code == 0, r.output
    assert _written(wrong_copy) == [2, 30, 58]  # 0.5.12 adds 1 to every id: B[3, 31, 59], the training layers
    assert "= [2, 30, 58] for SGLang 0.5.12" in r.stdout


def test_a_0_5_23_report_writes_what_sglang_0_5_23_needs(kimi_reports, wrong_copy):
    doc = json.loads(kimi_reports["0.5.23"].read_text())
    rec = doc["recommended"]
    r = run("fix-config", str(wrong_copy), "--from-report", str(kimi_reports["0.5.23"]))
    assert r.exit_code == 0, r.output
    assert _written(wrong_copy) == rec["eagle_aux_hidden_state_layer_ids"] == rec["by_engine"]["sglang"]["ids"]
    assert "for SGLang 0.5.23" in r.stdout
    ids = read_ids(json.loads(wrong_copy.read_text()), "sglang", model_family="kimi_k25", version="0.5.23")
    assert list(ids.boundaries) == rec["boundary_indices"]  # read back as 0.5.23 reads it: the report's layers


def test_another_version_than_the_report_s_is_refused_unless_translated(kimi_reports, wrong_copy):
    before = wrong_copy.read_bytes()
    args = (
        "fix-config",
        str(wrong_copy),
        "--from-report",
        str(kimi_reports["0.5.12"]),
        "--engine-version",
        "sglang==0.5.23",
    )
    r = run(*args)
    assert r.exit_code == 2
    assert "made for SGLang 0.5.12" in r.output and "asks for SGLang 0.5.23" in r.output and "--translate" in r.output
    assert wrong_copy.read_bytes() == before
    r = run(*args, "--translate")
    assert r.exit_code == 0, r.output
    assert "translated the report's layers B[3, 31, 59] from SGLang 0.5.12" in r.stdout
    assert "eagle_config.eagle_aux_hidden_state_layer_ids = [3, 31, 59] for SGLang 0.5.23" in r.stdout
    assert _written(wrong_copy) == [3, 31, 59]  # the DeepSeek rule reads them as written
    r = run("fix-config", str(wrong_copy), "--from-report", str(kimi_reports["0.5.12"]), "--model-family", "llama")
    assert r.exit_code == 2 and "--model-family llama" in r.output


def _schema_1(doc: dict) -> dict:
    """A report as hsdiff wrote it before it recorded settings."""
    old = {k: v for k, v in doc.items() if k != "settings"}
    old["schema_version"] = 1
    rec = {k: v for k, v in doc["recommended"].items() if k not in ("engine_version", "rule")}
    rec["by_engine"] = {e: v["ids"] for e, v in rec["by_engine"].items()}
    old["recommended"] = rec
    return old


def test_a_report_of_schema_1_is_still_read(kimi_reports, wrong_copy, tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps(_schema_1(json.loads(kimi_reports["0.5.12"].read_text()))))
    before = wrong_copy.read_bytes()
    r = run("fix-config", str(wrong_copy), "--from-report", str(old))  # its ids are wrong on the newest SGLang
    assert r.exit_code == 2 and "does not record the engine version" in r.output and "--engine-version" in r.output
    assert wrong_copy.read_bytes() == before
    r = run("fix-config", str(wrong_copy), "--from-report", str(old), "--engine-version", "sglang==0.5.12")
    assert r.exit_code == 0, r.output
    assert _written(wrong_copy) == [2, 30, 58]
    llama = tmp_path / "llama.json"  # the seed story on a llama target: the same ids on every SGLang version
    llama.write_text(json.dumps(_schema_1(_report(tmp_path)[1])))
    r = run("fix-config", str(wrong_copy), "--from-report", str(llama))
    assert r.exit_code == 0 and "does not record the engine version" in r.stderr
    text = render_text(json.loads(old.read_text()))
    assert "for SGLang (engine version not recorded" in text and "vLLM [3, 31, 59]" in text


def test_gate_check_config_and_ids_name_the_same_version(tmp_path, wrong_copy):
    gate_json = tmp_path / "gate.json"
    r = gate("infer-wrong", wrong_copy, *KIMI, "--engine-version", "sglang==0.5.12", "--json", str(gate_json))
    assert r.exit_code == 1, r.output
    doc = json.loads(gate_json.read_text())
    rule = "SGLang ≤ 0.5.12, DeepSeek family (+1 always)"
    assert (doc["settings"]["engine_version"], doc["settings"]["rule"]) == ("0.5.12", rule)
    assert doc["settings"] == doc["report"]["settings"]  # the gate's record is its comparison's
    assert doc["settings"]["model_family_source"] == "--model-family kimi_k25"
    assert (
        doc["settings"]["num_hidden_layers"] == 61
        and doc["settings"]["num_hidden_layers_source"] == "the target config.json"
    )
    assert f"(for SGLang 0.5.12, rule: {rule})" in r.output
    r = run("fix-config", str(wrong_copy), "--from-report", str(gate_json))
    assert r.exit_code == 0 and _written(wrong_copy) == [2, 30, 58], r.output
    check = tmp_path / "check.json"
    r = run(
        "check-config",
        str(wrong_copy),
        "--target-config",
        TARGET,
        *KIMI,
        "--engine-version",
        "sglang==0.5.12",
        "--json",
        str(check),
    )
    assert r.exit_code == 0, r.output
    assert (
        json.loads(check.read_text())["settings"]["rule"] == rule and f"engine: SGLang 0.5.12, rule: {rule}" in r.output
    )
    r = run(
        "ids", "2,30,58", "--from", "sglang", "--to", "vllm", *KIMI, "--engine-version", "sglang==0.5.12", "--explain"
    )
    assert r.stdout.strip() == "3,31,59" and f"SGLang 0.5.12, rule: {rule} → vLLM 0.33" in r.stderr


def test_a_version_of_another_engine_asks_for_that_engine(kimi_reports, wrong_copy):
    args = (
        "fix-config",
        str(wrong_copy),
        "--from-report",
        str(kimi_reports["0.5.12"]),
        "--engine-version",
        "vllm==0.31",
    )
    r = run(*args)
    assert (
        r.exit_code == 2
        and "made for SGLang 0.5.12" in r.output
        and "--engine-version vllm==0.31 asks for vLLM 0.31" in r.output
    )
    r = run(*args, "--translate")
    assert r.exit_code == 0, r.output
    assert json.loads(wrong_copy.read_text())["eagle_aux_hidden_state_layer_ids"] == [3, 31, 59]
    assert "eagle_aux_hidden_state_layer_ids = [3, 31, 59] for vLLM 0.31" in r.stdout


def test_a_config_inside_a_dump_the_report_read_is_not_rewritten(tmp_path):
    """A config.json beside a dump is that dump's labels: rewriting it from the report would make the
    next compare read the new ids as training evidence. Refused, and nothing in the dump changes."""
    train = tmp_path / "train"
    shutil.copytree(SEED / "train", train)
    report = tmp_path / "r.json"
    assert (
        run("compare", str(train), str(SEED / "infer-wrong"), "--layer-ids=-1,2,30", "--json", str(report)).exit_code
        == 1
    )
    before = {p: p.read_bytes() for p in train.rglob("*") if p.is_file()}
    r = run("fix-config", str(train / "config.json"), "--from-report", str(report))
    assert r.exit_code == 2 and "training dump the report read" in r.output and "Traceback" not in r.output
    assert {p: p.read_bytes() for p in train.rglob("*") if p.is_file()} == before
    outside = tmp_path / "draft"
    outside.mkdir()
    shutil.copyfile(train / "config.json", outside / "config.json")
    assert run("fix-config", str(outside), "--from-report", str(report)).exit_code == 0
