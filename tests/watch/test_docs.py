"""docs/watch.md says what the code does: every series of the table with its source, the rule's constants,
the exit codes, and the flags it names exist."""

from __future__ import annotations

import re
from pathlib import Path

from hsdiff.cli import cli
from hsdiff.rules.metrics import SERIES, WATCH_INFO
from hsdiff.watch import collapse

DOC = " ".join((Path(__file__).resolve().parents[2] / "docs" / "watch.md").read_text().split())


def test_every_series_is_on_the_page_with_its_source():
    for s in SERIES:
        assert f"`{s.sample}" in DOC, s.sample
        lines = re.search(r":(\d[\d,\-]*)", s.source)
        if lines:
            assert lines[1].split(",")[0] in DOC, (s.sample, s.source)
    for w in WATCH_INFO.values():
        assert f"`{w.metrics_path}`" in DOC


def test_the_rule_as_the_page_states_it():
    assert f"**{collapse.GAIN_SHARE:.0%}**" in DOC and f"**{collapse.POSITION1_SHARE}×**" in DOC
    assert f"**{collapse.FLOOR_ACCEPTANCE}**" in DOC and f"**≥ {collapse.FLOOR_MIN_SPEC_TOKENS}**" in DOC
    assert f"| {collapse.CONSECUTIVE_WINDOWS} in a row |" in DOC
    assert f"`--window-drafts` verification steps ({collapse.DEFAULT_WINDOW_DRAFTS:,};" in DOC
    assert f"{collapse.FLOOR_MIN_BASELINE:.2f}" in DOC


def test_the_flags_named_exist():
    watch = cli.get_command(None, "watch")  # type: ignore[arg-type]
    flags = {o for p in watch.params for o in getattr(p, "opts", [])}
    named = set(re.findall(r"`(--[a-z-]+)", DOC))
    others = {"--draft", "--target-model", "--engine-log", "--enable-metrics"}  # compare's and SGLang's
    assert named - flags <= others
    assert {"--baseline", "--window-drafts", "--once", "--state", "--events", "--on-alarm", "--log"} <= flags
