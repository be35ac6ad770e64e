"""The readable text of ``hsdiff gate`` and ``hsdiff check-config``: where the ids came from, one
line per static check, the comparison report, and the verdict."""

from __future__ import annotations

import textwrap

from ..conventions import rule
from ..gate import GateResult
from .text import render_text

__all__ = ["render_gate_text", "engine_title"]


def engine_title(result: GateResult) -> str:
    title = rule(result.engine).title
    if result.model_family:
        title += f" ({result.model_family} rule)"
    if result.ids is not None and result.ids.vllm_runner:
        title += f" ({result.ids.vllm_runner.upper()} runner)"
    return title


def render_gate_text(result: GateResult, *, verbose: bool = True) -> str:
    """Checks, then the compare report (gate only), then ``gate: PASS|FAIL`` and the cause."""
    out = [f"hsdiff {result.command}: {engine_title(result)}, draft config {result.draft_config}"]
    if result.num_layers or result.hidden_size:
        out.append(f"target: {result.num_layers or '?'} layers, hidden size {result.hidden_size or '?'}"
                   + (f" ({result.target_config})" if result.target_config else ""))
    if result.ids is not None:
        out.append(_wrap("ids: " + result.ids.note, "     "))
    out.append("")
    out.append("checks:")
    width = max(len(c.name) for c in result.checks) if result.checks else 0
    for c in result.checks:
        if c.ok and not verbose:
            continue
        out.append(_wrap(f"  {c.status:<7} {c.name:<{width}}  {c.message}", " " * (width + 12)))
    if result.report is not None:
        out += ["", render_text(result.report, verbose=verbose)]
    for note in result.notes:
        out += ["", note]
    out += ["", f"{result.command}: {result.verdict.upper()} — {result.cause}"]
    return "\n".join(out)


def _wrap(text: str, indent: str) -> str:
    return "\n".join(textwrap.wrap(text, width=110, subsequent_indent=indent, break_on_hyphens=False)) or text
