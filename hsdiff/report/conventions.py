"""The convention table as Markdown: ``docs/conventions.md`` holds this output between two markers,
and ``tests/test_convention_table.py`` fails when the two drift apart.

Regenerate the block with ``python -m hsdiff.report.conventions docs/conventions.md``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..convention_rules import ENGINE_INFO, RULES, VERSIONS, Rule
from ..conventions import default_version

__all__ = ["BEGIN", "END", "render_rules", "render_engines", "render_block", "update"]

BEGIN = "<!-- convention table: generated from hsdiff/convention_rules.py, do not edit by hand -->"
END = "<!-- end of the generated convention table -->"

_READING = {
    "output": "id + 1 (output index)",
    "boundary": "id (boundary index)",
    "deepseek": "id + 1 if ids[0] == 1, else id",
    "gpt-oss": "id if max(ids) == L, else id + 1",
    "none": "no EAGLE-3 capture",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _versions(r: Rule) -> str:
    if r.since and r.until:
        return r.since if r.since == r.until else f"{r.since}–{r.until}"
    if r.since:
        return f"≥ {r.since}"
    if r.until:
        return f"≤ {r.until}"
    return "all"


def _range(r: Rule) -> str:
    if r.reading == "none":
        return "—"
    low = f"B{r.min_boundary}"
    high = "B(L)" if r.captures_last else "B(L-1)"
    extra = " and the post-norm final state" if r.names_final else ""
    return f"{low} to {high}{extra}"


def render_engines() -> str:
    """One row per engine or trainer: where it reads the ids, versions checked, default version."""
    out = ["| key | name | reads the ids from | versions checked | default `--engine-version` |",
           "|---|---|---|---|---|"]
    for e in ENGINE_INFO.values():
        vs = VERSIONS[e.key]
        checked = vs[0] if len(vs) == 1 else f"{vs[0]}–{vs[-1]}"
        out.append(f"| `{e.key}` | {e.title} | {_cell(e.reads)} | {checked} | {default_version(e.key)} |")
    return "\n".join(out)


def render_rules() -> str:
    """One row per rule: engine, family, versions, reading, capturable range, label and source."""
    out = ["| engine | model family | versions | B for an id | capturable | rule (as reports name it) | source |",
           "|---|---|---|---|---|---|---|"]
    for r in RULES:
        fam = ", ".join(r.families) or "(any other)"
        reading = _READING[r.reading] + (" — default B[3, L//2+1, L-2]" if r.default == "shifted" else "")
        if r.note:
            reading += f" — {r.note}"
        out.append(f"| `{r.engine}` | {fam} | {_versions(r)} | {_cell(reading)} | {_range(r)} | {_cell(r.label)} "
                   f"| {_cell(r.source)} |")
    return "\n".join(out)


def render_block() -> str:
    """The generated block, markers included."""
    return "\n".join([BEGIN, "", render_engines(), "", render_rules(), "", END])


def update(path: str | Path) -> bool:
    """Rewrite the generated block in ``path``; ``True`` when it changed."""
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    start, stop = text.index(BEGIN), text.index(END) + len(END)
    new = text[:start] + render_block() + text[stop:]
    if new != text:
        p.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":  # pragma: no cover - the docs' regeneration command
    update(sys.argv[1] if len(sys.argv) > 1 else "docs/conventions.md")
