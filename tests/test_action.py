"""The GitHub Action (action.yml): its shell steps replayed as a runner runs them, on the seed fixture.

A composite action's ``run:`` steps are bash scripts fed by ``env:`` mappings of ``${{ inputs.* }}``; this
replays each with the runner's shell (``bash --noprofile --norc -eo pipefail``), the inputs' defaults
overridden as a workflow's ``with:`` would, ``$GITHUB_OUTPUT`` and ``$GITHUB_STEP_SUMMARY`` as files, and
the ``uses:`` steps (setup-python, upload-artifact) checked for what they are given. The install step runs
with ``pip install --dry-run`` (this venv already holds hsdiff).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "fixtures" / "seed"
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
STEPS = {s["name"]: s for s in ACTION["runs"]["steps"]}
_EXPR = re.compile(r"\$\{\{\s*([^}]+?)\s*\}\}")


def _value(expr: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    if expr.startswith("inputs."):
        return inputs[expr.removeprefix("inputs.")]
    if expr == "github.action_path":
        return str(ROOT)
    if expr.startswith("steps.gate.outputs."):
        return outputs.get(expr.removeprefix("steps.gate.outputs."), "")
    raise AssertionError(f"an expression this replay does not know: {expr}")


def _sub(text: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    return _EXPR.sub(lambda m: _value(m.group(1), inputs, outputs), str(text))


def _runs(step: dict, inputs: dict[str, str]) -> bool:
    """The ``if:`` conditions action.yml uses, evaluated (any other fails the test)."""
    cond = step.get("if")
    if cond is None or cond == "always()":
        return True
    m = re.fullmatch(r"inputs\.([\w-]+) (==|!=) '([^']*)'", cond)
    assert m, f"an if: this replay does not know: {cond}"
    equal = inputs[m.group(1)] == m.group(3)
    return equal if m.group(2) == "==" else not equal


def replay(tmp_path: Path, **given: str) -> dict:
    """Run the action's steps in ``tmp_path`` (the workspace) with ``given`` inputs (``draft_config`` for
    ``draft-config``); what each printed, the step outputs, the job summary and the final exit code."""
    inputs = {k: str(v.get("default", "")) for k, v in ACTION["inputs"].items()}
    inputs.update({k.replace("_", "-"): v for k, v in given.items()})
    assert inputs.keys() == ACTION["inputs"].keys(), "an input action.yml does not declare"
    tmp_path.mkdir(parents=True, exist_ok=True)
    files = {"GITHUB_OUTPUT": tmp_path / "github_output", "GITHUB_STEP_SUMMARY": tmp_path / "summary.md"}
    for f in files.values():
        f.write_text("")
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    base = {**os.environ, "PATH": path, "GITHUB_ACTIONS": "true", **{k: str(v) for k, v in files.items()}}
    base.pop("CI", None)
    outputs: dict[str, str] = {}
    result: dict = {"printed": {}, "uploaded": None, "exit": 0, "skipped": []}
    for step in ACTION["runs"]["steps"]:
        if not _runs(step, inputs):
            result["skipped"].append(step["name"])
            continue
        if "uses" in step:
            action, _, _ = step["uses"].partition("@")
            assert action in ("actions/setup-python", "actions/upload-artifact"), step["uses"]
            if action == "actions/upload-artifact":
                result["uploaded"] = tmp_path / _sub(step["with"]["path"], inputs, outputs)
            continue
        env = {k: _sub(v, inputs, outputs) for k, v in step["env"].items()}
        assert step["shell"] == "bash"
        r = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
            cwd=tmp_path, env={**base, **env}, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        result["printed"][step["name"]] = r.stdout + r.stderr
        outputs = dict(line.split("=", 1) for line in files["GITHUB_OUTPUT"].read_text().splitlines() if "=" in line)
        if r.returncode != 0:
            result["exit"] = r.returncode
            break
    result["outputs"] = outputs
    result["summary"] = files["GITHUB_STEP_SUMMARY"].read_text()
    return result


#: The install step is replayed as a dry run: this venv already holds hsdiff and every extra.
DRY = "--dry-run --no-deps --no-build-isolation"


def test_the_wrong_ids_fail_the_action_with_all_three_reports_and_annotations(tmp_path):
    r = replay(
        tmp_path,
        train=str(SEED / "train"),
        infer=str(SEED / "infer-wrong"),
        draft_config=str(SEED / "draft-wrong"),
        target_config=str(SEED / "model" / "config.json"),
        pip_args=DRY,
    )
    assert r["exit"] == 1 and r["outputs"] == {"gate": "fail", "exit-code": "1"}
    assert f"installing {ROOT}[plot]" in r["printed"]["Install hsdiff"]
    assert "does not provide the extra" not in r["printed"]["Install hsdiff"]
    run = r["printed"]["Run hsdiff gate"]
    assert "::error " in run and "gate: FAIL" in run  # the PR's annotations, and the verdict in the log
    reports = r["uploaded"]
    assert reports == tmp_path / "hsdiff-reports"
    assert 'failures="0"' not in (reports / "gate.xml").read_text()
    assert json.loads((reports / "gate.json").read_text())["gate"] == "fail"
    html = (reports / "gate.html").read_text()
    assert "hsdiff gate: " in html and "FAIL" in html and "data:image/png;base64," in html
    assert r["summary"] == (reports / "gate.md").read_text() and "❌ FAIL" in r["summary"]


def test_the_fixed_ids_with_the_neighbours_dump_pass(tmp_path):
    r = replay(
        tmp_path,
        train=str(SEED / "train"),
        infer=str(SEED / "infer-fixed-neighbours"),
        draft_config=str(SEED / "draft-fixed" / "config.json"),
        target_config=str(SEED / "model" / "config.json"),
        engine="sglang",
        engine_version="0.5.23",
        reports="out/gate",
        pip_args=DRY,
    )
    assert r["exit"] == 0 and r["outputs"] == {"gate": "pass", "exit-code": "0"}, r["printed"]
    reports = tmp_path / "out" / "gate"
    assert r["uploaded"] == reports
    assert {p.name for p in reports.iterdir()} == {"gate.json", "gate.xml", "gate.md", "gate.html"}
    assert 'failures="0"' in (reports / "gate.xml").read_text()
    assert "✅ PASS" in r["summary"] and "::notice" in r["printed"]["Run hsdiff gate"]
    assert json.loads((reports / "gate.json").read_text())["settings"]["engine_version"] == "0.5.23"


def test_a_failing_gate_can_only_report(tmp_path):
    r = replay(
        tmp_path,
        train=str(SEED / "train"),
        infer=str(SEED / "infer-wrong"),
        draft_config=str(SEED / "draft-wrong" / "config.json"),
        fail="false",
        pictures="false",
        pip_args=DRY,
    )
    assert r["exit"] == 0 and r["outputs"]["gate"] == "fail"
    assert "Fail when the gate failed" in r["skipped"]
    assert f"installing {ROOT}\n" in r["printed"]["Install hsdiff"]  # no extra: the core alone


def test_bad_input_is_exit_2_and_still_fails_the_action(tmp_path):
    r = replay(
        tmp_path,
        train=str(tmp_path / "missing"),
        infer=str(SEED / "infer-wrong"),
        draft_config=str(SEED / "draft-wrong"),
        pictures="false",
        pip_args=DRY,
    )
    assert r["exit"] == 2 and r["outputs"]["exit-code"] == "2"
    assert "hsdiff: error: " in r["printed"]["Run hsdiff gate"]


def test_the_draft_input_installs_the_draft_extra(tmp_path):
    step = STEPS["Install hsdiff"]
    inputs = {k: str(v.get("default", "")) for k, v in ACTION["inputs"].items()}
    inputs.update({"draft": "draft/", "hsdiff-version": "0.2.0"})
    env = {k: _sub(v, inputs, {}) for k, v in step["env"].items()}
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python").write_text('#!/bin/sh\necho "pip: $*"\n')  # records what would be installed from PyPI
    (fake / "python").chmod(0o755)
    r = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
        env={**os.environ, **env, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "installing hsdiff[plot,draft]==0.2.0" in r.stdout and r.stdout.rstrip().endswith(
        "hsdiff[plot,draft]==0.2.0"
    )


def test_a_repository_with_a_settings_file_needs_no_inputs(tmp_path):
    (tmp_path / "hsdiff.toml").write_text(
        f'engine = "sglang"\ndraft-config = "{SEED}/draft-wrong/config.json"\n'
        f'[dumps]\ntrain = "{SEED}/train"\ninfer = "{SEED}/infer-wrong"\n'
    )
    r = replay(tmp_path, pictures="false", pip_args=DRY)
    assert r["exit"] == 1 and r["outputs"]["gate"] == "fail"
    doc = json.loads((tmp_path / "hsdiff-reports" / "gate.json").read_text())
    assert doc["inputs"]["sources"]["train"] == str(tmp_path / "hsdiff.toml")
    assert doc["inputs"]["sources"]["json_path"] == "flag"  # the action's own reports


def test_with_a_fingerprint_the_fixed_ids_pass_without_the_neighbours_dump(tmp_path):
    fp = tmp_path / "seed-fingerprint.safetensors"
    made = subprocess.run(
        [sys.executable, "-m", "hsdiff", "fingerprint", "--from", str(SEED / "states-sample-1.safetensors"),
         "--train", str(SEED / "train"), "--draft", str(SEED / "draft-fixed"),
         "--target-config", str(SEED / "model" / "config.json"), "--out", str(fp)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    fixed = replay(
        tmp_path / "fixed",
        infer=str(SEED / "infer-fixed"),
        fingerprint=str(fp),
        draft_config=str(SEED / "draft-fixed" / "config.json"),
        pip_args=DRY,
    )
    assert fixed["exit"] == 0 and fixed["outputs"] == {"gate": "pass", "exit-code": "0"}, fixed["printed"]
    reports = tmp_path / "fixed" / "hsdiff-reports"
    assert {p.name for p in reports.iterdir()} == {"gate.json", "gate.xml", "gate.md", "gate.html"}
    wrong = replay(
        tmp_path / "wrong",
        infer=str(SEED / "infer-wrong"),
        fingerprint=str(fp),
        draft_config=str(SEED / "draft-wrong" / "config.json"),
        pip_args=DRY,
    )
    assert wrong["exit"] == 1 and wrong["outputs"] == {"gate": "fail", "exit-code": "1"}
    doc = json.loads((tmp_path / "wrong" / "hsdiff-reports" / "gate.json").read_text())
    assert doc["report"]["recommended"]["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]
