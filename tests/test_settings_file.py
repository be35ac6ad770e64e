"""The settings file (``hsdiff.toml``, or ``[tool.hsdiff]`` in ``pyproject.toml``), searched from the working
directory upward: ``hsdiff gate`` with no flags in a configured repository runs the configured gate, a flag
overrides the file, and the JSON report says where each setting came from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.core

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "fixtures" / "seed"

SETTINGS = """\
engine = "sglang"
version = "0.5.23"
draft-config = "seed/draft-fixed/config.json"
target-config = "seed/model/config.json"

[dumps]
train = "seed/train"
infer = "seed/infer-fixed-neighbours"

[thresholds]
strict = true

[outputs]
json = "out/gate.json"
junit = "out/gate.xml"
markdown = "out/gate.md"

[compare]
layer-ids = "2,30,58"
"""


def hsdiff(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "hsdiff", *args], cwd=cwd, env=env, capture_output=True, text=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository whose settings name the seed fixture by paths relative to the file; run from a subfolder."""
    (tmp_path / "seed").symlink_to(SEED)
    (tmp_path / "out").mkdir()
    (tmp_path / "hsdiff.toml").write_text(SETTINGS)
    (tmp_path / "src" / "deep").mkdir(parents=True)
    return tmp_path


def test_gate_with_no_flags_runs_the_configured_gate_and_records_the_file(repo):
    r = hsdiff("gate", "-q", cwd=repo / "src" / "deep")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "gate: PASS" in r.stdout
    doc = json.loads((repo / "out" / "gate.json").read_text())
    assert (repo / "out" / "gate.xml").is_file() and (repo / "out" / "gate.md").is_file()
    assert doc["settings"]["engine_version"] == "0.5.23" and doc["strict"] is True
    src = doc["inputs"]["sources"]
    here = str(repo / "hsdiff.toml")
    assert {src[k] for k in ("train", "infer", "draft_config", "target_config", "engine_versions", "strict")} == {here}
    assert src["json_path"] == here and src["tolerance"] == "default" and src["draft_dir"] == "default"


def test_a_flag_overrides_the_file_and_says_so(repo, tmp_path):
    r = hsdiff(
        "gate",
        "--draft-config",
        str(SEED / "draft-wrong" / "config.json"),
        "--json",
        str(tmp_path / "flagged.json"),
        cwd=repo,
    )
    assert r.returncode == 1 and "gate: FAIL" in r.stdout  # --strict from the file: the -1 id fails
    doc = json.loads((tmp_path / "flagged.json").read_text())
    assert doc["inputs"]["sources"]["draft_config"] == "flag" and doc["inputs"]["sources"]["json_path"] == "flag"
    assert doc["inputs"]["sources"]["train"] == str(repo / "hsdiff.toml")
    assert not (repo / "out" / "gate.json").exists()  # the file's output was overridden, not written too


def test_compare_and_check_config_take_their_settings_too(repo):
    r = hsdiff("compare", "--json", "-", cwd=repo)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["configured"]["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]  # its own [compare] table
    assert doc["inputs"]["sources"]["layer_ids"] == str(repo / "hsdiff.toml")
    assert doc["inputs"]["sources"]["model_config"] == str(repo / "hsdiff.toml")  # target-config, as compare names it
    assert not (repo / "out" / "gate.md").exists()  # the [outputs] table is the gate's
    assert hsdiff("check-config", "-q", cwd=repo).returncode == 0
    (repo / "hsdiff.toml").write_text(SETTINGS.replace("draft-fixed", "draft-wrong"))
    r = hsdiff("check-config", "-q", cwd=repo)
    assert r.returncode == 1 and "ids-embeddings" in r.stdout  # strict from the file


def test_pyproject_tool_hsdiff_is_found_and_an_unknown_key_is_one_error_line(tmp_path):
    (tmp_path / "seed").symlink_to(SEED)
    body = SETTINGS.replace("[dumps]", "[tool.hsdiff.dumps]").replace("[thresholds]", "[tool.hsdiff.thresholds]")
    body = body.replace("[outputs]", "[tool.hsdiff.outputs]").replace("[compare]", "[tool.hsdiff.compare]")
    (tmp_path / "out").mkdir()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.hsdiff]\n' + body)
    r = hsdiff("gate", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads((tmp_path / "out" / "gate.json").read_text())["inputs"]["sources"]["train"] == str(
        tmp_path / "pyproject.toml"
    )
    (tmp_path / "hsdiff.toml").write_text('engine = "sglang"\nenigne-version = "0.5.23"\n')  # nearer, and wins
    r = hsdiff("gate", "-q", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("hsdiff: error: ") and "unknown setting 'enigne-version'" in r.stderr


def test_no_settings_file_changes_nothing(tmp_path):
    r = hsdiff("gate", cwd=tmp_path)
    assert r.returncode == 2 and "Missing option '--draft-config'" in r.stderr and "permissions" not in r.stderr
    r = hsdiff("gate", "--draft-config", str(SEED / "draft-fixed"), cwd=tmp_path)
    assert r.returncode == 2 and "Missing argument 'TRAIN'" in r.stderr


def test_a_configured_fingerprint_takes_the_training_side(repo):
    made = hsdiff(
        "fingerprint", "--from", "seed/states-sample-1.safetensors", "--train", "seed/train", "--draft",
        "seed/draft-fixed", "--target-config", "seed/model/config.json", "--out", "fp.safetensors", cwd=repo,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    settings = SETTINGS.replace(
        'train = "seed/train"\ninfer = "seed/infer-fixed-neighbours"', 'infer = "seed/infer-fixed"'
    )
    (repo / "hsdiff.toml").write_text('fingerprint = "fp.safetensors"\n' + settings)
    r = hsdiff("gate", "-q", cwd=repo / "src" / "deep")  # no neighbours dump: the fingerprint holds every layer
    assert r.returncode == 0 and "gate: PASS" in r.stdout, r.stdout + r.stderr
    src = json.loads((repo / "out" / "gate.json").read_text())["inputs"]["sources"]
    assert src["fingerprint"] == src["infer"] == str(repo / "hsdiff.toml")
    wrong = hsdiff(
        "gate", "../../seed/infer-wrong", "--draft-config", "../../seed/draft-wrong", cwd=repo / "src" / "deep"
    )
    assert wrong.returncode == 1 and "gate: FAIL" in wrong.stdout, wrong.stdout + wrong.stderr  # the one dump is INFER
    both = hsdiff("gate", "../../seed/train", "../../seed/infer-wrong", cwd=repo / "src" / "deep")
    assert both.returncode == 2 and "give INFER alone" in both.stderr
