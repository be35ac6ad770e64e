"""What ``pip install hsdiff`` (numpy, safetensors, click) gives: every command a gate needs, each output,
and a one-line error naming the extra where a feature needs more.

Each command runs as its own process with the extras' packages blocked (``sys.modules[name] = None``,
which makes their import fail as if they were not installed), so this holds in the full venv as in the
core one (``make test-core``), where they are absent for real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hsdiff

pytestmark = pytest.mark.core

ROOT = Path(__file__).resolve().parent.parent
SEED = "fixtures/seed"
#: The import names of every extra's packages: none may be needed by the core.
EXTRAS = (
    "torch",
    "pandas",
    "matplotlib",
    "transformers",
    "accelerate",
    "dask",
    "distributed",
    "fsspec",
    "zstandard",
    "tqdm",
)
_RUN = "import sys; sys.modules.update(dict.fromkeys({blocked!r})); from hsdiff.cli import main; main(sys.argv[1:])"


def hsdiff_core(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """``hsdiff ARGS`` in a process where no extra can be imported."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", _RUN.format(blocked=EXTRAS), *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def one_error_line(r: subprocess.CompletedProcess) -> str:
    """The single line a user error prints (exit 2, no traceback)."""
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hsdiff: error: "), r.stderr
    return lines[0]


def test_the_seed_compare_finds_the_mismatch_and_writes_every_output(tmp_path):
    r = hsdiff_core(
        "compare",
        f"{SEED}/train",
        f"{SEED}/infer-wrong",
        "--layer-ids=-1,2,30",
        "--json",
        str(tmp_path / "r.json"),
        "--markdown",
        str(tmp_path / "r.md"),
        "--html",
        str(tmp_path / "r.html"),
    )
    assert r.returncode == 1, r.stderr
    assert "verdict: MISMATCH" in r.stdout
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["verdict"] == "mismatch"
    assert doc["recommended"]["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]
    assert '"eagle_aux_hidden_state_layer_ids": [2, 30, 58]' in (tmp_path / "r.md").read_text()
    page = (tmp_path / "r.html").read_text()
    assert "MISMATCH" in page and "pip install &#x27;hsdiff[plot]&#x27;" in page and "data:image/png" not in page
    assert r.stderr.strip() == (
        f"hsdiff: warning: {tmp_path / 'r.html'}: No pictures: they need matplotlib, which is not installed here "
        "(pip install 'hsdiff[plot]')"
    )


def test_the_seed_gate_fails_on_the_wrong_ids_and_passes_on_the_fix(tmp_path):
    wrong = hsdiff_core(
        "gate", f"{SEED}/train", f"{SEED}/infer-wrong", "--draft-config", f"{SEED}/draft-wrong/config.json", "-q"
    )
    assert wrong.returncode == 1, wrong.stderr
    assert "gate: FAIL — compare mismatch" in wrong.stdout
    fixed = hsdiff_core(
        "gate",
        f"{SEED}/train",
        f"{SEED}/infer-fixed-neighbours",
        "--draft-config",
        f"{SEED}/draft-fixed/config.json",
        "--target-config",
        f"{SEED}/model/config.json",
        "--junit",
        str(tmp_path / "gate.xml"),
        "--markdown",
        str(tmp_path / "gate.md"),
        "--json",
        str(tmp_path / "gate.json"),
        "-q",
    )
    assert fixed.returncode == 0, fixed.stderr
    assert "gate: PASS" in fixed.stdout
    assert json.loads((tmp_path / "gate.json").read_text())["gate"] == "pass"
    assert 'failures="0"' in (tmp_path / "gate.xml").read_text()
    assert "PASS" in (tmp_path / "gate.md").read_text()


def test_the_small_commands(tmp_path):
    ids = hsdiff_core("ids", "2,30,58", "--from", "sglang", "--to", "vllm", "--num-layers", "61")
    assert (ids.returncode, ids.stdout.strip()) == (0, "3,31,59")
    check = hsdiff_core(
        "check-config", f"{SEED}/draft-wrong/config.json", "--target-config", f"{SEED}/model/config.json"
    )
    assert check.returncode in (0, 1) and "-1" in check.stdout, check.stderr
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text((ROOT / SEED / "draft-wrong/config.json").read_text())
    fix = hsdiff_core("fix-config", str(draft / "config.json"), "--layer-ids", "2,30,58", "--engine", "sglang")
    assert fix.returncode == 0, fix.stderr
    assert json.loads((draft / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [
        2,
        30,
        58,
    ]
    request = hsdiff_core("request", f"{SEED}/train/rows_0-2000/data_0.ckpt")
    assert request.returncode == 0 and json.loads(request.stdout)["input_ids"], request.stderr
    inspect = hsdiff_core("inspect", f"{SEED}/infer-wrong", "--json", "-")
    assert inspect.returncode == 0 and json.loads(inspect.stdout)["schema_version"], inspect.stderr
    audit = hsdiff_core("audit", f"{SEED}/train", "--workers", "0")
    assert audit.returncode == 0 and "problems: none" in audit.stdout, audit.stderr


@pytest.mark.parametrize(
    "args, extra",
    [
        (("compare", f"{SEED}/train", f"{SEED}/infer-wrong", "--layer-ids=-1,2,30", "-q", "--plot", "PLOT"), "plot"),
        (("compare", f"{SEED}/train", f"{SEED}/infer-wrong", "--layer-ids=-1,2,30", "-q", "--draft", "X"), "draft"),
        (("capture", "--model", "M", "--input", f"{SEED}/train/rows_0-2000/data_0.ckpt", "--out", "OUT"), "capture"),
        (("audit", f"{SEED}/train"), "audit"),
    ],
)
def test_a_missing_extra_is_one_line_naming_it(tmp_path, args, extra):
    args = tuple(str(tmp_path / a) if a in ("PLOT", "OUT") else a for a in args)
    line = one_error_line(hsdiff_core(*args))
    assert line.endswith(f"is not installed — pip install 'hsdiff[{extra}]'"), line
    assert not (tmp_path / "OUT").exists()


def test_a_zstd_file_without_zstandard_names_the_extra(tmp_path):
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "hidden_states.safetensors.zst").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(60))
    line = one_error_line(hsdiff_core("inspect", str(dump)))
    assert "zstandard is needed for a zstd-compressed file" in line and "pip install 'hsdiff[zstd]'" in line, line


@pytest.mark.extra("torch")
def test_a_legacy_torch_file_without_torch_names_the_extra_and_the_way_around_it(tmp_path):
    import torch

    dump = tmp_path / "dump"
    dump.mkdir()
    torch.save({"hidden_states": torch.zeros(4, 8)}, dump / "states.pt", _use_new_zipfile_serialization=False)
    line = one_error_line(hsdiff_core("inspect", str(dump)))
    assert "torch is needed for a legacy (non-zip) torch.save file" in line, line
    assert "pip install 'hsdiff[torch]', or re-save it" in line, line


def test_python_m_hsdiff_is_the_command_line():
    r = subprocess.run(
        [sys.executable, "-m", "hsdiff", "--version"], cwd=ROOT, capture_output=True, text=True, env=os.environ
    )
    assert r.returncode == 0 and r.stdout.strip().endswith(hsdiff.__version__), r.stderr


def test_the_library_names_the_extra_a_notebook_needs(monkeypatch):
    from hsdiff.errors import MissingExtraError

    for name in [m for m in sys.modules if m.split(".")[0] in EXTRAS] + list(EXTRAS):
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed, even where another test imported it
    report = hsdiff.compare(str(ROOT / SEED / "train"), str(ROOT / SEED / "infer-wrong"), layer_ids=[-1, 2, 30])
    assert "<table>" in report._repr_html_() and "B3" in report._repr_html_()
    for call, extra in ((report.slots_frame, "frames"), (report.scores_frame, "frames"), (report.plot, "plot")):
        with pytest.raises(MissingExtraError) as e:
            call()
        assert e.value.extra == extra
    with pytest.raises(MissingExtraError, match=r"hsdiff\[torch\]"):
        report.slots[0].match.capture.load()


@pytest.mark.parametrize(
    "words, cword, expected",
    [
        ("hsdiff ga", 1, ["gate"]),
        ("hsdiff gate --draft-c", 2, ["--draft-config"]),
        ("hsdiff compare --engine vl", 3, ["vllm", "vllm-tpu"]),
    ],
)
def test_shell_completion_offers_commands_options_and_choices(words, cword, expected):
    """What docs/install.md's completion scripts ask the program (click's ``_HSDIFF_COMPLETE`` protocol)."""
    env = {**os.environ, "_HSDIFF_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    r = subprocess.run([sys.executable, "-m", "hsdiff"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert [line.split(",", 1)[1] for line in r.stdout.split()] == expected


def test_the_bash_completion_script_is_written_for_hsdiff():
    env = {**os.environ, "_HSDIFF_COMPLETE": "bash_source"}
    r = subprocess.run([sys.executable, "-m", "hsdiff"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0 and "complete -o nosort -F _hsdiff_completion hsdiff" in r.stdout, r.stdout[-500:]
