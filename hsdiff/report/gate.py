"""The readable text of ``hsdiff gate`` and ``hsdiff check-config``: where the ids came from, one
line per static check, the comparison report, and the verdict."""

from __future__ import annotations

import textwrap

from ._doc import DocLike, as_doc, engine_title, settings_lines
from .text import render_text

__all__ = ["render_gate_text", "engine_title"]


def render_gate_text(result: DocLike, *, verbose: bool = True) -> str:
    """Checks, then the compare report (gate only), then ``gate: PASS|FAIL`` and the cause."""
    d = as_doc(result)
    out = [f"hsdiff {d['command']}: {engine_title(d)}, draft config {d['draft_config']}"]
    if d["num_hidden_layers"] or d["hidden_size"]:
        out.append(
            f"target: {d['num_hidden_layers'] or '?'} layers, hidden size {d['hidden_size'] or '?'}"
            + (f" ({d['target_config']})" if d["target_config"] else "")
        )
    if d["ids"] is not None:
        out.append(_wrap("ids: " + d["ids"]["note"], "     "))
    out.append("")
    out.append("checks:")
    checks = d["checks"]
    width = max(len(c["name"]) for c in checks) if checks else 0
    for c in checks:
        if c["ok"] and not verbose:
            continue
        out.append(_wrap(f"  {c['status']:<7} {c['name']:<{width}}  {c['message']}", " " * (width + 12)))
    if d["report"] is not None:
        out += ["", render_text(d["report"], verbose=verbose)]
    elif verbose:
        out += ["", "settings:"] + [f"  {line}" for line in settings_lines(d)]
    for note in d["notes"]:
        out += ["", note]
    out += ["", f"{d['command']}: {d['gate'].upper()} — {d['cause']}"]
    return "\n".join(out)


def _wrap(text: str, indent: str) -> str:
    return (
        "\n".join(
            textwrap.wrap(text, width=110, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)
        )
        or text
    )
