"""docs/conventions.md shows the convention table the code uses: its generated block must equal what
hsdiff.report.conventions renders from hsdiff/rules/profile.py."""

from __future__ import annotations

from hsdiff.report.conventions import BEGIN, END, render_block
from hsdiff.rules.profile import RULES

from . import builders as B

DOC = B.ROOT / "docs" / "conventions.md"


def test_docs_table_is_generated_from_the_rules():
    text = DOC.read_text(encoding="utf-8")
    block = text[text.index(BEGIN) : text.index(END) + len(END)]
    assert block == render_block(), "run: python -m hsdiff.report.conventions docs/conventions.md"


def test_every_row_and_its_source_is_in_the_docs():
    text = DOC.read_text(encoding="utf-8")
    for r in RULES:
        assert r.label in text and r.source.replace("|", "\\|") in text


def test_modelopt_dump_script_takes_layer_numbers():
    # NVIDIA/Model-Optimizer@a2fbac7b examples/speculative_decoding/collect_hidden_states/
    # compute_hidden_states_hf.py:183-189: --aux-layers are 0-based layer numbers, dumped as hidden_states[lid + 1]
    text = DOC.read_text(encoding="utf-8")
    assert "0-based layer numbers" in text and "hidden_states[lid + 1]" in text
    assert "takes HF tuple indices" not in text
