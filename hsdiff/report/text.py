"""The readable report printed by ``hsdiff compare``: a table per training slot, the cause in one
sentence, the walk-through of the evidence, and the line to paste into the draft's config.json."""

from __future__ import annotations

import math

from ..conventions import describe_boundary
from ..model import Report

_STATUS = {
    "ok": "OK",
    "mismatch": "MISMATCH",
    "identified": "identified",
    "inferred": "inferred",
    "ambiguous": "AMBIGUOUS",
    "unverified": "unverified",
    "unobserved": "unobserved",
    "unmatched": "NO MATCH",
    "matched-unlabelled": "unlabelled",
}


def _fmt_err(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x * 100:.2f}%" if x < 0.1 else f"{x * 100:.0f}%"


def render_table(report: Report) -> str:
    head = ["slot", "layer (B)", "evidence", "conf", "error", "runner-up", "configured", "status", "matched"]
    rows = []
    for s in report.slots:
        m = s.match.metrics if s.match else None
        rows.append(
            [
                str(s.slot),
                "?" if s.boundary_index is None else f"B{s.boundary_index}",
                s.evidence,
                f"{s.confidence:.2f}",
                _fmt_err(m.rel_err if m else None),
                _fmt_err(s.runner_up.metrics.rel_err if s.runner_up else None),
                "-" if s.configured_boundary is None else f"B{s.configured_boundary}",
                _STATUS.get(s.status, s.status),
                "-" if s.match is None else _short(s.match.capture.label(), 40),
            ]
        )
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def render_text(report: Report, *, verbose: bool = True) -> str:
    """The full text report (``verbose`` adds the walk-through of the evidence)."""
    out = [render_table(report), ""]
    out.append(f"verdict: {report.verdict.upper()}")
    out.append(f"cause:   {report.cause}")
    if verbose and report.explanation:
        out.append("")
        out.append("evidence:")
        out += [f"  - {line}" for line in report.explanation]
    if report.warnings:
        out.append("")
        out.append("warnings:")
        out += [f"  ! {w}" for w in report.warnings]
    out.append("")
    rec = report.recommended
    meaning = ", ".join(describe_boundary(b, report.num_layers) for b in rec.boundary_indices)
    out.append(f"recommended for {rec.engine} ({rec.model_family}): {meaning}")
    nested = rec.engine == "sglang"
    line = rec.config_line()
    out.append("paste into the draft's config.json under \"eagle_config\":" if nested else "paste into the draft's config.json:")
    out.append(f"  {line}")
    others = ", ".join(f"{e} {v}" for e, v in rec.by_engine.items() if e != rec.engine and e in ("sglang", "vllm", "trtllm"))
    if others:
        out.append(f"same layers on other engines: {others}")
    return "\n".join(out)
