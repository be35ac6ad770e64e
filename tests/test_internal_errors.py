"""A bug in hsdiff is exit 3 with a short "this is a bug, please report" message, never a verdict.

A library function is made to raise; the command must exit 3 (not 0/1, which a CI gate reads as a
verdict, nor 2, which says the input was at fault), print no report, and show the traceback only
with ``--debug``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hsdiff.cli import cli

from . import builders as B

SEED = B.SEED
HSDIFF = shutil.which("hsdiff", path=str(Path(sys.executable).parent)) or "hsdiff"
BOOM = "simulated failure deep in the library"


def boom(*args, **kwargs):
    raise RuntimeError(BOOM)


def compare_args(out: Path) -> list[str]:
    return ["compare", str(SEED / "train"), str(SEED / "infer-wrong"), "--layer-ids=-1,2,30", "--json", str(out)]


def assert_bug_report(r, *, debug: bool) -> None:
    assert r.exit_code == 3, r.output
    err = r.stderr
    assert "internal error" in err and "bug" in err and "report" in err, err
    assert BOOM in err
    assert "verdict" not in r.stdout.lower() and "MISMATCH" not in r.stdout and r.stdout.strip() == "", r.stdout
    if debug:
        assert "Traceback (most recent call last)" in err and "raise" in err, err
    else:
        assert "Traceback" not in err and "--debug" in err
        assert len(err.strip().splitlines()) <= 2, err  # short: what happened, and how to report it


@pytest.mark.parametrize("debug", [False, True])
def test_deep_library_failure_is_exit_3(monkeypatch, tmp_path: Path, debug: bool) -> None:
    import hsdiff.align

    monkeypatch.setattr(hsdiff.align, "best_alignment", boom)
    out = tmp_path / "report.json"
    r = CliRunner().invoke(cli, (["--debug"] if debug else []) + compare_args(out))
    assert_bug_report(r, debug=debug)
    assert not out.exists(), "a report was written for a crashed run"


@pytest.mark.parametrize(
    "target",
    [
        "hsdiff.readers.sniff_container",
        "hsdiff.readers._collapse_ranks",
        "hsdiff.comparison.shape.hidden_size",
        "hsdiff.decide.resolve",
        "hsdiff.explain.explain",
    ],
)
def test_failure_anywhere_in_compare_is_exit_3(monkeypatch, tmp_path: Path, target: str) -> None:
    module, _, name = target.rpartition(".")
    try:
        obj = __import__(module, fromlist=["_"])
    except ImportError:  # a class path: module.Class.method
        mod, _, cls = module.rpartition(".")
        obj = getattr(__import__(mod, fromlist=["_"]), cls)
    assert hasattr(obj, name), f"{target} no longer exists: point this test at the step that replaced it"
    monkeypatch.setattr(obj, name, boom)
    r = CliRunner().invoke(cli, compare_args(tmp_path / "r.json"))
    assert_bug_report(r, debug=False)


@pytest.mark.parametrize("command", sorted(cli.load_all()))
@pytest.mark.parametrize("exc", [RuntimeError, KeyError, TypeError, AssertionError])
def test_every_command_maps_a_crash_to_exit_3(monkeypatch, command: str, exc: type) -> None:
    """Whatever a command's code raises that is not an input error is a bug, for every command (new ones too)."""
    cmd = cli.load_all()[command]

    def crash(*args, **kwargs):
        raise exc(BOOM)

    monkeypatch.setattr(cmd, "callback", crash)
    # the options every command has are not needed: the callback is replaced, only required ones are given
    argv = [command] + _minimal_args(cmd)
    r = CliRunner().invoke(cli, argv)
    assert_bug_report(r, debug=False)
    r = CliRunner().invoke(cli, ["--debug", *argv])
    assert_bug_report(r, debug=True)


def _minimal_args(cmd) -> list[str]:
    """Values for a command's required arguments and options that pass click's own checks."""
    import click

    out: list[str] = []
    for p in cmd.params:
        if not p.required:
            continue
        value = str(SEED / "train") if isinstance(p.type, click.Path) else "1"
        if isinstance(p.type, click.Choice):
            value = str(p.type.choices[0])
        if isinstance(p, click.Option):
            out += [p.opts[0], value]
        else:
            out.append(value)
    return out


def test_input_errors_stay_exit_2(tmp_path: Path) -> None:
    """The other side of the line: a user's mistake is not reported as a bug."""
    r = CliRunner().invoke(cli, ["compare", str(tmp_path / "missing"), str(SEED / "infer-wrong")])
    assert r.exit_code == 2 and "bug" not in r.stderr and r.stderr.startswith("hsdiff: error:")


def test_real_process_exit_status_is_3(tmp_path: Path) -> None:
    """Through the console entry point: the process status a CI job sees is 3, and the report is not written."""
    out = tmp_path / "r.json"
    code = (
        "import sys, hsdiff.align as a\n"
        f"def boom(*x, **k): raise RuntimeError({BOOM!r})\n"
        "a.best_alignment = boom\n"
        "from hsdiff.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    p = subprocess.run([sys.executable, "-c", code, *compare_args(out)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 3, p.stderr
    assert "bug" in p.stderr and "Traceback" not in p.stderr and p.stdout.strip() == ""
    assert not out.exists()


def test_json_report_of_a_good_run_is_still_written(tmp_path: Path) -> None:
    """Control for the tests above: without the failure the same command writes its report."""
    out = tmp_path / "r.json"
    r = CliRunner().invoke(cli, compare_args(out))
    assert r.exit_code == 1
    assert json.loads(out.read_text())["verdict"] == "mismatch"
