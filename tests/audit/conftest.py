"""Shared by the audit tests: the acceptance set and its audit on local worker processes, made once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hsdiff.cli import cli

from . import dataset as D


def kinds(report: dict) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for p in report["problems"]:
        out.setdefault(p["kind"], set()).add(p["file"])
    return out


def comparable(report: dict) -> dict:
    return {
        k: v for k, v in report.items() if k not in ("execution", "checkpoint", "files_resumed", "dataset", "_stdout")
    }


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, list(args))
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture(scope="package")
def acceptance(tmp_path_factory) -> tuple[Path, dict[str, list[str]]]:
    root = tmp_path_factory.mktemp("audit") / "train"
    truth = D.build(root)
    D.draft_config(root)
    return root, truth


@pytest.fixture(scope="package")
def local_report(acceptance, tmp_path_factory) -> dict:
    """The acceptance audit with no flags: local worker processes (LocalCluster)."""
    root, _ = acceptance
    out = tmp_path_factory.mktemp("out") / "audit.json"
    code, stdout, _ = run("audit", str(root), "--json", str(out))
    assert code == 1, stdout
    report = json.loads(out.read_text())
    report["_stdout"] = stdout
    return report
