"""Golden reports: the JSON report and the text output of every case in :mod:`tests.golden.cases`.

A moved line of code must not change an answer, and another CPU must not fail the suite. Paths are
normalised (the repository and the temporary folder become ``<repo>`` and ``<tmp>``); what a user relies
on is compared exactly, metrics within the noise of how they are computed and stored
(:mod:`tests.golden.compare` says how, and ``tests/test_golden_compare.py`` tests it); text is compared
word for word (where a long path wraps a line depends on where the checkout is).
Rewrite after an intended change: ``HSDIFF_UPDATE_GOLDEN=1 pytest tests/test_golden.py`` (and say
why in the commit).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from hsdiff.cli import cli

from . import builders as B
from .golden.cases import CASES
from .golden.compare import differences, hidden_size, round_floats, text_differences

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("HSDIFF_UPDATE_GOLDEN") == "1"


def _norm_text(text: str, tmp: Path) -> str:
    text = text.replace(str(tmp), "<tmp>").replace(str(B.ROOT), "<repo>")
    return re.sub(r"<tmp>/[^\s'\"]*?(pytest-\d+|\d{3,})", "<tmp>", text)


def run_case(name: str, tmp: Path) -> tuple[int, dict | None, str]:
    argv = CASES[name](tmp)
    out = tmp / "report.json"
    result = CliRunner().invoke(cli, [*argv, "--json", str(out)])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    doc = None
    if out.exists():
        doc = json.loads(_norm_text(out.read_text(), tmp))
    return result.exit_code, doc, _norm_text(result.output, tmp)


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name: str, tmp_path: Path) -> None:
    code, doc, text = run_case(name, tmp_path)
    got = {"exit_code": code, "report": round_floats(doc)}
    jpath, tpath = GOLDEN / f"{name}.json", GOLDEN / f"{name}.txt"
    if UPDATE:
        jpath.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        tpath.write_text(text)
        return
    assert jpath.exists(), f"no golden report for {name}: run HSDIFF_UPDATE_GOLDEN=1 pytest tests/test_golden.py"
    want = json.loads(jpath.read_text())
    assert got["exit_code"] == want["exit_code"]
    assert differences(got, want) == []
    assert text_differences(text, tpath.read_text(), hidden_size(want) or 8192) == []
