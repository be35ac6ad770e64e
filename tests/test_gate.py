"""`hsdiff gate`: ids read where the engine reads them, the static checks, the compare, CI outputs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from click.testing import CliRunner

from hsdiff.cli import cli
from hsdiff.configs import read_ids
from hsdiff.gate import run_gate

from . import builders as B

SEED = B.SEED
TARGET = str(SEED / "model" / "config.json")
HSDIFF = shutil.which("hsdiff", path=str(Path(sys.executable).parent)) or "hsdiff"


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def gate(infer: str, draft: str | Path, *extra: str):
    return run(
        "gate", str(SEED / "train"), str(SEED / infer), "--draft-config", str(draft), "--target-config", TARGET, *extra
    )


def _snapshot(*dirs: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for d in dirs for p in sorted(d.rglob("*"))}


def _cases(xml_text: str) -> dict[str, ET.Element]:
    root = ET.fromstring(xml_text)
    return {c.get("name"): c for c in root.iter("testcase")}


def test_correctly_configured_seed_passes_with_a_clean_junit(tmp_path):
    junit = tmp_path / "gate.xml"
    r = gate("infer-fixed-neighbours", SEED / "draft-fixed" / "config.json", "--junit", str(junit), "-q")
    assert r.exit_code == 0, r.output
    assert "gate: PASS" in r.output
    root = ET.fromstring(junit.read_text())
    assert root.get("failures") == "0"
    cases = _cases(junit.read_text())
    assert {"slot 0 (training B3)", "slot 1 (training B31)", "slot 2 (training B59)", "ids-source", "fc-width"} <= set(
        cases
    )
    assert all(c.find("failure") is None for c in cases.values())


def test_seed_fails_and_junit_names_the_failing_slot_and_the_cause(tmp_path):
    junit, report = tmp_path / "gate.xml", tmp_path / "gate.json"
    r = gate("infer-wrong", SEED / "draft-wrong" / "config.json", "--junit", str(junit), "--json", str(report))
    assert r.exit_code == 1, r.output
    doc = json.loads(report.read_text())
    cause = doc["report"]["cause"]
    root = ET.fromstring(junit.read_text())  # valid XML
    assert root.tag == "testsuites" and int(root.get("failures")) >= 4
    cases = _cases(junit.read_text())
    slot0 = cases["slot 0 (training B3)"].find("failure")
    assert slot0 is not None
    assert "the engine captures B0" in slot0.get("message") and "embeddings" in slot0.get("message")
    assert cause in slot0.text
    assert '"eagle_aux_hidden_state_layer_ids": [2, 30, 58]' in slot0.text
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["gate"] == "fail" and "verdict" not in props  # the gate's pass/fail; the testcase is the comparison's
    verdict = cases["verdict"].find("failure")
    assert verdict is not None and verdict.get("message") == cause and verdict.get("type") == "mismatch"
    assert cases["ids-source"].find("failure") is None  # the ids were read, not a default
    assert "warning" in cases["ids-embeddings"].findtext("system-out")  # id -1 feeds the embeddings


def test_gate_json_records_where_the_ids_came_from(tmp_path):
    r = gate("infer-wrong", SEED / "draft-wrong" / "config.json", "--json", "-")
    assert r.exit_code == 1
    doc = json.loads(r.output)
    assert doc["command"] == "gate" and doc["gate"] == "fail" and doc["exit_code"] == 1
    assert "verdict" not in doc  # the only verdict is the comparison's, under report
    assert doc["ids"]["key"] == "eagle_config.eagle_aux_hidden_state_layer_ids"
    assert doc["ids"]["eagle_aux_hidden_state_layer_ids"] == [-1, 2, 30]
    assert doc["ids"]["boundary_indices"] == [0, 3, 31]
    assert doc["ids"]["fallback"] is False
    assert doc["num_hidden_layers"] == 61 and doc["hidden_size"] == 576
    assert doc["report"]["verdict"] == "mismatch"
    assert doc["report"]["recommended"]["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]
    assert doc["report"]["configured"]["source"].endswith("[eagle_config.eagle_aux_hidden_state_layer_ids]")
    assert [c["name"] for c in doc["checks"]] == [
        "ids-source",
        "ignored-key",
        "ids-sorted",
        "ids-unique",
        "ids-in-range",
        "ids-capturable",
        "ids-embeddings",
        "family-rule",
        "target-hidden-size",
        "fc-width",
        "ids-count",
        "draft-kind",
        "silent-fallback",
    ]


def test_markdown_and_github_outputs(tmp_path):
    md = tmp_path / "summary.md"
    r = gate("infer-wrong", SEED / "draft-wrong" / "config.json", "--markdown", str(md), "--github", "-q")
    assert r.exit_code == 1
    text = md.read_text()
    assert text.startswith("## hsdiff gate: ❌ FAIL")
    assert "| 0 | B3 (" in text and '"eagle_aux_hidden_state_layer_ids": [2, 30, 58]' in text
    errors = [line for line in r.output.splitlines() if line.startswith("::error ")]
    assert any("title=hsdiff slot 0::" in line and "B0" in line for line in errors)
    assert all("\n" not in line for line in errors)
    ok = gate("infer-fixed-neighbours", SEED / "draft-fixed" / "config.json", "--github", "-q")
    assert ok.exit_code == 0
    assert [line for line in ok.output.splitlines() if line.startswith("::")] == [
        line for line in ok.output.splitlines() if line.startswith("::notice")
    ]


def seed_dump(root: Path, boundaries: list[int]) -> Path:
    """An SGLang dumper directory holding what a server capturing ``boundaries`` of the 61-layer seed
    target fed the draft for seed sample 1 (real bf16 states of that target)."""
    import torch
    from safetensors.torch import load_file

    states = load_file(str(SEED / "states-sample-1.safetensors"))
    exp = root / "dump_20261201_000000_000003"
    exp.mkdir(parents=True)
    base = {"step": 0, "rank": 0, "recompute_status": "disabled"}
    aux = torch.cat([states["bf16.boundaries"][b] for b in boundaries], dim=-1)
    for i, (name, value) in enumerate((("input_ids", states["input_ids"]), ("aux_hidden_states", aux))):
        torch.save(
            {"value": value.clone(), "meta": {**base, "dump_index": i, "name": name}},
            exp / f"step=0___rank=0___dump_index={i}___name={name}___recompute_status=disabled.pt",
        )
    return root


def test_silent_fallback_is_said_and_then_compared(tmp_path):
    cfg = json.loads((SEED / "draft-fixed" / "config.json").read_text())
    del cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    draft = tmp_path / "config.json"
    draft.write_text(json.dumps(cfg))
    # what the server really captured after falling back to SGLang's default B[2, L//2, L-3]
    infer = seed_dump(tmp_path / "fallback-dump", [2, 30, 58])
    r = run(
        "gate",
        str(SEED / "train"),
        str(infer),
        "--draft-config",
        str(draft),
        "--target-config",
        TARGET,
        "--json",
        str(tmp_path / "g.json"),
    )
    assert r.exit_code == 1, r.output
    doc = json.loads((tmp_path / "g.json").read_text())
    assert doc["ids"]["fallback"] is True and doc["ids"]["key"] is None
    assert doc["ids"]["boundary_indices"] == [2, 30, 58]  # SGLang's [2, L//2, L-3]
    source = next(c for c in doc["checks"] if c["name"] == "ids-source")
    assert source["status"] == "warn" and "silently falls back" in source["message"]
    assert doc["report"]["configured"]["boundary_indices"] == [2, 30, 58]
    assert doc["report"]["verdict"] != "ok"  # training used B3, 31, 59
    assert "falls back" in r.output


def test_vllm_reads_the_top_level_key(tmp_path):
    cfg = json.loads((SEED / "draft-fixed" / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = [3, 31, 59]  # vLLM: boundary indices
    draft = tmp_path / "config.json"
    draft.write_text(json.dumps(cfg))
    r = run(
        "gate",
        str(SEED / "train"),
        str(SEED / "infer-fixed-neighbours"),
        "--draft-config",
        str(draft),
        "--model-config",
        TARGET,
        "--engine",
        "vllm",
        "-q",
    )
    assert r.exit_code == 0, r.output
    src = read_ids(cfg, "vllm", num_layers=61)
    assert src.key == "eagle_aux_hidden_state_layer_ids" and src.boundaries == (3, 31, 59)


def test_out_of_range_ids_stop_before_the_compare(tmp_path):
    junit = tmp_path / "g.xml"
    r = gate("infer-fixed-neighbours", B.FIXTURES / "configs" / "out-of-range.json", "--junit", str(junit))
    assert r.exit_code == 1
    cases = _cases(junit.read_text())
    assert cases["ids-in-range"].find("failure") is not None
    assert cases["verdict"].find("failure").get("type") == "not-run"


def test_bad_input_exits_2_with_one_line(tmp_path):
    r = gate("infer-fixed-neighbours", tmp_path / "missing" / "config.json")
    assert r.exit_code == 2
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "missing/config.json" in lines[0] and "no such config file" in lines[0]
    r = run(
        "gate",
        str(SEED / "train"),
        str(SEED / "infer-fixed-neighbours"),
        "--draft-config",
        str(SEED / "draft-fixed"),
        "--target-config",
        TARGET,
        "--model-config",
        str(B.SMOLLM2 / "config.json"),
    )
    assert r.exit_code == 2


def test_gate_writes_nothing_into_the_dumps(tmp_path):
    before = _snapshot(SEED / "train", SEED / "infer-wrong", SEED / "draft-wrong")
    gate("infer-wrong", SEED / "draft-wrong", "--json", str(tmp_path / "g.json"), "--junit", str(tmp_path / "g.xml"))
    assert _snapshot(SEED / "train", SEED / "infer-wrong", SEED / "draft-wrong") == before


def test_strict_fails_on_warnings():
    cfg = str(B.FIXTURES / "configs" / "kimi-first-id.json")
    target = str(B.FIXTURES / "configs" / "targets" / "kimi-k25-61.json")
    assert run("check-config", cfg, "--target-config", target).exit_code == 0
    assert run("check-config", cfg, "--target-config", target, "--strict").exit_code == 1


def test_library_result():
    result = run_gate(
        SEED / "train", SEED / "infer-fixed-neighbours", SEED / "draft-fixed" / "config.json", target_config=TARGET
    )
    assert result.verdict == "pass" and result.exit_code == 0 and result.report.verdict == "ok"
    assert result.ids.ids == (2, 30, 58) and result.ids.boundaries == (3, 31, 59)
    assert "pass" in repr(result)


def test_console_script_subprocess(tmp_path):
    junit = tmp_path / "gate.xml"
    env = {**os.environ, "COLUMNS": "120"}
    wrong = subprocess.run(
        [
            HSDIFF,
            "gate",
            str(SEED / "train"),
            str(SEED / "infer-wrong"),
            "--draft-config",
            str(SEED / "draft-wrong" / "config.json"),
            "--target-config",
            TARGET,
            "--junit",
            str(junit),
            "-q",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert wrong.returncode == 1, wrong.stderr
    assert "gate: FAIL" in wrong.stdout
    assert _cases(junit.read_text())["slot 0 (training B3)"].find("failure") is not None
    fixed = subprocess.run(
        [
            HSDIFF,
            "gate",
            str(SEED / "train"),
            str(SEED / "infer-fixed-neighbours"),
            "--draft-config",
            str(SEED / "draft-fixed"),
            "--target-config",
            TARGET,
            "-q",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr


def test_vllm_gate_on_a_nested_only_config_reports_the_v2_default_and_fails(tmp_path):
    # vLLM 0.29-0.33 run EAGLE-3 on the V2 model runner unless forced (vllm==0.33.0 vllm/config/vllm.py:730-766),
    # which reads only the top-level key (v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:113-150) and else
    # falls back to (2, L//2, L-3) (model_executor/models/interfaces.py:1772)
    draft = SEED / "draft-fixed" / "config.json"
    assert "eagle_aux_hidden_state_layer_ids" not in json.loads(draft.read_text())  # nested only
    infer = seed_dump(tmp_path / "vllm-dump", [2, 30, 58])  # what vLLM really captured: its default
    r = run(
        "gate",
        str(SEED / "train"),
        str(infer),
        "--draft-config",
        str(draft),
        "--target-config",
        TARGET,
        "--engine",
        "vllm",
        "--json",
        str(tmp_path / "g.json"),
    )
    assert r.exit_code == 1, r.output
    doc = json.loads((tmp_path / "g.json").read_text())
    assert doc["ids"]["vllm_runner"] == "v2" and doc["ids"]["fallback"] is True
    assert doc["ids"]["boundary_indices"] == [2, 30, 58] and doc["engine_version"] == "0.33"
    assert doc["report"]["configured"]["boundary_indices"] == [2, 30, 58]
    assert doc["report"]["verdict"] != "ok"  # training used B3, 31, 59
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["ignored-key"]["status"] == "FAIL" and "V2 model runner" in checks["ignored-key"]["message"]
    # forced onto the V1 runner, vLLM reads the nested ids, as boundary indices: still not the training layers
    v1 = run("check-config", str(draft), "--target-config", TARGET, "--engine", "vllm", "--vllm-runner", "v1")
    assert "vLLM 0.33 reads eagle_config.eagle_aux_hidden_state_layer_ids = [2, 30, 58]" in v1.output
    assert "captures B[2, 30, 58]" in v1.output
