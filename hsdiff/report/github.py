"""GitHub Actions workflow commands (``::error::``, ``::warning::``, ``::notice::``) for a gate
result: each failed check and each failed slot becomes an annotation on the draft config."""

from __future__ import annotations

from ..gate import GateResult

__all__ = ["render_github"]


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def _line(level: str, title: str, message: str, file: str | None) -> str:
    props = [f"title={_prop(title)}"]
    if file:
        props.insert(0, f"file={_prop(file)}")
    return f"::{level} {','.join(props)}::{_data(message)}"


def render_github(result: GateResult) -> str:
    """One workflow command per line; a passing result gives a single ``::notice::``."""
    lines = []
    for c in result.checks:
        if c.failed or (result.strict and c.warned):
            lines.append(_line("error", f"hsdiff {c.name}", c.message, c.path))
        elif c.warned:
            lines.append(_line("warning", f"hsdiff {c.name}", c.message, c.path))
    report = result.report
    if report is not None:
        for s in report.slots:
            if s.status != "ok":
                trained = "?" if s.boundary_index is None else f"B{s.boundary_index}"
                got = "nothing" if s.configured_boundary is None else f"B{s.configured_boundary}"
                lines.append(_line("error", f"hsdiff slot {s.slot}",
                                   f"slot {s.slot} {s.status}: training {trained}, engine captures {got}. {s.note}",
                                   result.draft_config))
        if report.verdict != "ok":
            lines.append(_line("error", f"hsdiff gate {report.verdict}",
                               f"{report.cause} Fix: {report.recommended.config_line()}", result.draft_config))
    elif result.command == "gate":
        lines.append(_line("error", "hsdiff gate", result.cause, result.draft_config))
    if result.passed:
        lines.append(_line("notice", f"hsdiff {result.command}", f"pass: {result.cause}", None))
    return "\n".join(lines)
