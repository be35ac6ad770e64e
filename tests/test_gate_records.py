"""The gate's records and check table: a saved gate result renders without the comparison pipeline,
and the check names (JUnit test names) stay put."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hsdiff.gate.checks import CHECK_NAMES

pytestmark = pytest.mark.core

STABLE = (
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
)


def test_check_names_are_the_stable_junit_names():
    assert CHECK_NAMES == STABLE


def test_rendering_a_gate_result_imports_no_torch(tmp_path):
    code = """
import json, sys
from hsdiff.model.gate import Check, GateResult, IdsSource
from hsdiff.report.gate import render_gate_text
from hsdiff.report.junit import render_junit
from hsdiff.report.markdown import render_markdown
from hsdiff.report.github import render_github
ids = IdsSource("sglang", (2, 30, 58), (3, 31, 59), "eagle_config.eagle_aux_hidden_state_layer_ids",
                "config.json", False, "SGLang reads [2, 30, 58]")
r = GateResult("check-config", "config.json", None, "sglang", ids,
               (Check("ids-sorted", False, "error", "[30, 2, 58] is not ascending", path="config.json"),))
text = render_gate_text(r) + render_junit(r) + render_markdown(r) + render_github(r)
print(json.dumps({"torch": "torch" in sys.modules, "pipeline": "hsdiff.comparison" in sys.modules,
                  "fail": "check-config: FAIL" in text, "junit": 'name="ids-sorted"' in text}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    seen = json.loads(out.stdout)
    assert seen == {"torch": False, "pipeline": False, "fail": True, "junit": True}
