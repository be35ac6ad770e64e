"""The documentation holds what the code and the benchmarks write into it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hsdiff.extras import EXTRAS

pytestmark = pytest.mark.core

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def test_every_benchmark_table_has_its_markers_on_its_page():
    import sys

    sys.path.insert(0, str(ROOT))
    from benchmarks.stamp import PAGES

    for section, page in PAGES.items():
        body = page.read_text()
        assert f"<!-- bench:{section}:begin -->" in body and f"<!-- bench:{section}:end -->" in body, section
    calibrate = (ROOT / "benchmarks/calibrate.py").read_text()
    assert 'PAGE = ROOT / "docs" / "calibration.md"' in calibrate
    body = (DOCS / "calibration.md").read_text()
    assert "<!-- calibrate:begin -->" in body and "<!-- calibrate:end -->" in body
    assert (
        "bench:" not in (ROOT / "README.md").read_text() and "calibrate:begin" not in (ROOT / "README.md").read_text()
    )


def test_the_install_page_lists_every_extra():
    page = (DOCS / "install.md").read_text()
    listed = re.findall(r"^\| `(\w+)` \|", page.split("## Extras", 1)[1], re.MULTILINE)
    assert listed == [*EXTRAS, "all"]


def test_every_page_is_in_the_site_navigation():
    nav = set(re.findall(r"(\w+\.md)$", (ROOT / "mkdocs.yml").read_text(), re.MULTILINE))
    assert nav == {p.name for p in DOCS.glob("*.md")}
