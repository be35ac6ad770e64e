"""Golden reports: the JSON report and the text output of every case in :mod:`tests.golden.cases`.

A moved line of code must not change an answer. Paths are normalised (the repository and the
temporary folder become ``<repo>`` and ``<tmp>``), floats are stored to 6 significant digits and compared
within 1e-5 relative, and text is compared word for word (where a long path wraps a line depends on where
the checkout is).
Rewrite after an intended change: ``HSDIFF_UPDATE_GOLDEN=1 pytest tests/test_golden.py`` (and say
why in the commit).
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hsdiff.cli import cli

from . import builders as B
from .golden.cases import CASES

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("HSDIFF_UPDATE_GOLDEN") == "1"


def _norm_text(text: str, tmp: Path) -> str:
    text = text.replace(str(tmp), "<tmp>").replace(str(B.ROOT), "<repo>")
    return re.sub(r"<tmp>/[^\s'\"]*?(pytest-\d+|\d{3,})", "<tmp>", text)


def _round(obj: Any) -> Any:
    if isinstance(obj, float):
        return float(f"{obj:.6g}")
    if isinstance(obj, dict):
        return {k: _round(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_round(v) for v in obj]
    return obj


def _differences(got: Any, want: Any, at: str = "") -> list[str]:
    """Where ``got`` differs from ``want``: floats within 1e-5 relative (or 1e-6 absolute) are equal, so
    a last-bit difference of another CPU's BLAS kernel, which can move a 6th digit, is not an answer
    changed; everything else must be equal."""
    if isinstance(got, float) and isinstance(want, float):
        return [] if math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-6) else [f"{at}: {got!r} != {want!r}"]
    if isinstance(got, dict) and isinstance(want, dict):
        if got.keys() != want.keys():
            return [f"{at}: keys {sorted(got.keys() ^ want.keys())} in one side only"]
        return [d for k in want for d in _differences(got[k], want[k], f"{at}.{k}")]
    if isinstance(got, list) and isinstance(want, list):
        if len(got) != len(want):
            return [f"{at}: {len(got)} items != {len(want)}"]
        return [d for i, (g, w) in enumerate(zip(got, want)) for d in _differences(g, w, f"{at}[{i}]")]
    return [] if type(got) is type(want) and got == want else [f"{at}: {got!r} != {want!r}"]


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
    got = {"exit_code": code, "report": _round(doc)}
    jpath, tpath = GOLDEN / f"{name}.json", GOLDEN / f"{name}.txt"
    if UPDATE:
        jpath.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        tpath.write_text(text)
        return
    assert jpath.exists(), f"no golden report for {name}: run HSDIFF_UPDATE_GOLDEN=1 pytest tests/test_golden.py"
    want = json.loads(jpath.read_text())
    assert got["exit_code"] == want["exit_code"]
    assert _differences(got, want) == []
    # line wrapping depends on the length of the checkout's path: compare the words, not the breaks
    assert text.split() == tpath.read_text().split()
