"""docs/conventions.md shows the convention table the code uses: its generated block must equal what
hsdiff.report.conventions renders from hsdiff/convention_rules.py."""

from __future__ import annotations

from hsdiff.convention_rules import RULES
from hsdiff.report.conventions import BEGIN, END, render_block

from . import builders as B

DOC = B.ROOT / "docs" / "conventions.md"


def test_docs_table_is_generated_from_the_rules():
    text = DOC.read_text(encoding="utf-8")
    block = text[text.index(BEGIN):text.index(END) + len(END)]
    assert block == render_block(), "run: python -m hsdiff.report.conventions docs/conventions.md"


def test_every_row_and_its_source_is_in_the_docs():
    text = DOC.read_text(encoding="utf-8")
    for r in RULES:
        assert r.label in text and r.source.replace("|", "\\|") in text
