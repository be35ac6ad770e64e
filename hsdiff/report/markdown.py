"""A Markdown summary of a gate result, fit for a pull-request comment or ``$GITHUB_STEP_SUMMARY``."""

from __future__ import annotations

from ..model.gate import GateVerdict
from ..model.results import pct
from ..rules.conventions import describe_boundary
from ._doc import (
    DocLike,
    as_doc,
    config_line,
    engine_title,
    is_gate,
    nested_in,
    rec_words,
    rel_err,
    settings_lines,
    writable,
)

__all__ = ["render_markdown"]

_ICON = {"ok": "✅ ok", "FAIL": "❌ fail", "warn": "⚠️ warn", "skipped": "⏭️ skipped"}


def render_markdown(result: DocLike) -> str:
    """Verdict, where the ids came from, the checks, the per-slot table, the cause and the fix (a
    ``compare`` report renders as :func:`hsdiff.report.document.render_report_markdown` does)."""
    d = as_doc(result)
    if not is_gate(d):
        from .document import render_report_markdown  # pictures: drawn only for a compare report

        return render_report_markdown(d)
    passed = d["gate"] == GateVerdict.PASS
    head = "✅ PASS" if passed else "❌ FAIL"
    out = [f"## hsdiff {d['command']}: {head}", ""]
    target = ""
    if d["num_hidden_layers"] or d["hidden_size"]:
        target = f" · **target** {d['num_hidden_layers'] or '?'} layers, hidden size {d['hidden_size'] or '?'}"
    out.append(f"**Engine** {engine_title(d)} · **draft config** `{d['draft_config']}`{target}")
    out.append("")
    if d["ids"] is not None:
        out += [f"**Layer ids:** {_cell(d['ids']['note'])}", ""]
    if not passed:
        out += [f"**Cause:** {_cell(d['cause'])}", ""]
    out += ["| check | status | detail |", "|---|---|---|"]
    out += [f"| `{c['name']}` | {_ICON.get(c['status'], c['status'])} | {_cell(c['message'])} |" for c in d["checks"]]
    report = d["report"]
    if report is not None:
        L = report["num_hidden_layers"]
        out += ["", f"**Comparison:** {report['verdict']} — {_cell(report['cause'])}", ""]
        out += ["| slot | training layer | engine captures | status | error | note |", "|---|---|---|---|---|---|"]
        for s in report["slots"]:
            out.append(
                f"| {s['slot']} | {_b(s['boundary_index'], L)} | {_b(s['configured_boundary_index'], L)} "
                f"| {s['status']} | {pct(rel_err(s['matched']), table=True)} | {_cell(s['note'])} |"
            )
        if report["verdict"] != "ok":
            rec = report["recommended"]
            where = f' under `"{nested_in(rec)}"`' if nested_in(rec) else ""
            out += [
                "",
                f"**Fix:** put this in the draft's `config.json`{where} ({_cell(rec_words(rec))}):",
                "",
                "```json",
                config_line(rec),
                "```",
            ]
            if writable(report):
                out += [
                    "",
                    "or run `hsdiff fix-config DRAFT_CONFIG --from-report REPORT.json` with this run's "
                    "`--json` report.",
                ]
    for note in d["notes"]:
        out += ["", f"> {_cell(note)}"]
    out += ["", "<details><summary>Settings</summary>", ""] + [f"- {_cell(x)}" for x in settings_lines(d)]
    out += ["", "</details>"]
    return "\n".join(out) + "\n"


def _b(b: int | None, L: int | None) -> str:
    return "-" if b is None else f"B{b} ({describe_boundary(b, L)})"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
