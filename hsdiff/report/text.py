"""The readable report printed by ``hsdiff compare``: a table per training slot, the cause in one
sentence, the walk-through of the evidence, and the line to paste into the draft's config.json."""

from __future__ import annotations

from ..model.results import pct
from ..rules.conventions import describe_boundary
from ..rules.serving import boundary_label, serving_engines
from ._doc import DocLike, as_doc, config_line, nested_in, other_engines, rec_words, rel_err, settings_lines

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


def render_table(report: DocLike) -> str:
    """One row per training slot: layer, evidence, confidence, error, runner-up, configured, status."""
    d = as_doc(report)
    head = ["slot", "layer (B)", "evidence", "conf", "error", "runner-up", "configured", "status", "matched"]
    rows = []
    for s in d["slots"]:
        b, cfg = s["boundary_index"], s["configured_boundary_index"]
        rows.append(
            [
                str(s["slot"]),
                boundary_label(b, d.get("num_hidden_layers")),
                s["evidence"],
                f"{s['confidence']:.2f}",
                pct(rel_err(s["matched"]), table=True),
                pct(rel_err(s["runner_up"]), table=True),
                "-" if cfg is None else boundary_label(cfg, d.get("num_hidden_layers")),
                _STATUS.get(s["status"], s["status"]),
                "-" if s["matched"] is None else _short(s["matched"]["label"], 40),
            ]
        )
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def render_text(report: DocLike, *, verbose: bool = True) -> str:
    """The full text report (``verbose`` adds the walk-through of the evidence).

    >>> print(render_text(load_doc("report.json")))    # doctest: +SKIP
    """
    d = as_doc(report)
    out = [render_table(d), ""]
    out.append(f"verdict: {d['verdict'].upper()}")
    out.append(f"cause:   {d['cause']}")
    if verbose and d["explanation"]:
        out.append("")
        out.append("evidence:")
        out += [f"  - {line}" for line in d["explanation"]]
    if d["warnings"]:
        out.append("")
        out.append("warnings:")
        out += [f"  ! {w}" for w in d["warnings"]]
    out.append("")
    if verbose:
        out += ["settings:"] + [f"  {line}" for line in settings_lines(d)] + [""]
    rec = d["recommended"]
    meaning = ", ".join(describe_boundary(b, d["num_hidden_layers"]) for b in rec["boundary_indices"])
    out.append(f"recommended layers: {meaning}")
    where = f' under "{nested_in(rec)}"' if nested_in(rec) else ""
    out.append(f"paste into the draft's config.json{where} ({rec_words(rec)}):")
    out.append(f"  {config_line(rec)}")
    others = other_engines(rec, serving_engines)
    if others:
        out.append(f"same layers on other engines: {others}")
    return "\n".join(out)
