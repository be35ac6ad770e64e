"""A Markdown summary of a gate result, fit for a pull-request comment or ``$GITHUB_STEP_SUMMARY``."""

from __future__ import annotations

import math

from ..conventions import describe_boundary
from ..gate import GateResult
from .gate import engine_title

__all__ = ["render_markdown"]

_ICON = {"ok": "✅ ok", "FAIL": "❌ fail", "warn": "⚠️ warn", "skipped": "⏭️ skipped"}


def render_markdown(result: GateResult) -> str:
    """Verdict, where the ids came from, the checks, the per-slot table, the cause and the fix."""
    head = "✅ PASS" if result.passed else "❌ FAIL"
    out = [f"## hsdiff {result.command}: {head}", ""]
    target = ""
    if result.num_layers or result.hidden_size:
        target = f" · **target** {result.num_layers or '?'} layers, hidden size {result.hidden_size or '?'}"
    out.append(f"**Engine** {engine_title(result)} · **draft config** `{result.draft_config}`{target}")
    out.append("")
    if result.ids is not None:
        out += [f"**Layer ids:** {_cell(result.ids.note)}", ""]
    if not result.passed:
        out += [f"**Cause:** {_cell(result.cause)}", ""]
    out += ["| check | status | detail |", "|---|---|---|"]
    out += [f"| `{c.name}` | {_ICON.get(c.status, c.status)} | {_cell(c.message)} |" for c in result.checks]
    report = result.report
    if report is not None:
        out += ["", f"**Comparison:** {report.verdict} — {_cell(report.cause)}", ""]
        out += ["| slot | training layer | engine captures | status | error | note |", "|---|---|---|---|---|---|"]
        for s in report.slots:
            err = s.match.metrics.rel_err if s.match is not None else None
            out.append(
                f"| {s.slot} | {_b(s.boundary_index, report.num_layers)} | {_b(s.configured_boundary, report.num_layers)} "
                f"| {s.status} | {_pct(err)} | {_cell(s.note)} |"
            )
        if report.verdict != "ok":
            rec = report.recommended
            where = ' under `"eagle_config"`' if rec.engine == "sglang" else ""
            out += ["", f"**Fix:** put this in the draft's `config.json`{where}:", "", "```json",
                    rec.config_line(), "```", "",
                    "or run `hsdiff fix-config DRAFT_CONFIG --from-report REPORT.json` with this run's `--json` report."]
    for note in result.notes:
        out += ["", f"> {_cell(note)}"]
    return "\n".join(out) + "\n"


def _b(b: int | None, L: int | None) -> str:
    return "-" if b is None else f"B{b} ({describe_boundary(b, L)})"


def _pct(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x * 100:.2f}%"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
