"""A comparison report to attach: Markdown to paste into an issue, or one self-contained HTML file
(styles inline, the three pictures embedded as ``data:`` URIs, no external URL).

Both render from the report's data alone — a :class:`Report`, the dict of its JSON or the path of a
saved one — and never import torch.
"""

from __future__ import annotations

import base64
import html
import math
from typing import Any

from ..errors import MissingExtraError
from ..extras import require
from ..rules.conventions import describe_boundary
from ._doc import (
    DocLike,
    as_doc,
    config_line,
    engine_title,
    is_gate,
    nested_in,
    other_engines,
    rec_words,
    settings_lines,
    writable,
)
from .pictures import heatmap, norm_trajectory, png_bytes, report_data, token_errors, zoomed

__all__ = ["render_report_markdown", "render_html", "has_pictures", "NO_PICTURES"]

#: What the HTML page says in place of its pictures where matplotlib is not installed.
NO_PICTURES = "No pictures: they need matplotlib, which is not installed here (pip install 'hsdiff[plot]')"


def has_pictures() -> bool:
    """Whether the pictures can be drawn here (matplotlib, the ``plot`` extra, is installed)."""
    try:
        require("matplotlib", "plot", "the pictures")
    except MissingExtraError:
        return False
    return True


_HEAD = {"ok": "✅ OK", "mismatch": "❌ MISMATCH", "inconclusive": "⚠️ INCONCLUSIVE"}


def _pct(x: Any) -> str:
    if not isinstance(x, (int, float)) or not math.isfinite(x):
        return "-"
    return f"{x * 100:.2f}%" if x < 0.1 else f"{x * 100:.0f}%"


def _b(b: int | None, L: int | None) -> str:
    return "-" if b is None else f"B{b}: {describe_boundary(b, L)}"


def _rows(data: dict) -> list[list[str]]:
    L = data.get("num_hidden_layers")
    rows = []
    for s in data["slots"]:
        m = s.get("metrics") or {}
        matched = (s.get("matched") or {}).get("label") or "-"
        rows.append(
            [
                str(s["slot"]),
                _b(s.get("boundary_index"), L),
                _b(s.get("configured_boundary_index"), L),
                s.get("status", ""),
                s.get("evidence", ""),
                f"{s.get('confidence', 0):.2f}",
                _pct(m.get("rel_err")),
                matched,
            ]
        )
    return rows


_COLUMNS = ["slot", "training layer", "engine captures", "status", "evidence", "confidence", "error", "matched capture"]


def _fix(data: dict) -> tuple[str, str]:
    """Where to put the ids (and the engine version they are right for), and the JSON line."""
    rec = data["recommended"]
    where = f' under "{nested_in(rec)}"' if nested_in(rec) else ""
    return f"the draft's config.json{where} ({rec_words(rec)})", config_line(rec)


def _others(data: dict) -> str:
    return other_engines(data["recommended"])


def render_report_markdown(report: DocLike) -> str:
    """Verdict, cause, the per-slot table, the fix (the ids to paste), the walk-through and the
    warnings, as GitHub-flavoured Markdown.

    >>> text = render_report_markdown(report)      # doctest: +SKIP
    """
    data = report_data(report)
    inputs = data.get("inputs") or {}
    out = [f"## hsdiff compare: {_HEAD.get(data['verdict'], data['verdict'])}", ""]
    out.append(
        f"**Training** `{inputs.get('train', '?')}` · **inference** `{inputs.get('infer', '?')}` · "
        f"**engine** {inputs.get('engine', data['recommended']['engine'])}"
        + (f" · **target** {data['num_hidden_layers']} layers" if data.get("num_hidden_layers") else "")
    )
    if data.get("configured"):
        c = data["configured"]
        out.append(
            f"**Configured ids** `{c['eagle_aux_hidden_state_layer_ids']}` ({c.get('source', '')}) "
            f"→ boundaries B{c['boundary_indices']}"
        )
    out += ["", f"**Cause:** {_cell(data['cause'])}", ""]
    out += ["| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
    out += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in _rows(data)]
    where, line = _fix(data)
    title = "**Fix:** put this in" if data["verdict"] != "ok" else "**Ids in use** (keep them) for"
    out += ["", f"{title} {where}:", "", "```json", line, "```"]
    others = _others(data)
    if others:
        out += ["", f"Same layers on other engines: {others}."]
    if data["verdict"] != "ok" and writable(data):
        out += [
            "",
            "Or run `hsdiff fix-config DRAFT_CONFIG --from-report REPORT.json` with this run's `--json` report.",
        ]
    out += ["", "<details><summary>Settings</summary>", ""] + [f"- {_cell(x)}" for x in settings_lines(data)]
    out += ["", "</details>"]
    if data.get("explanation"):
        out += ["", "<details><summary>How hsdiff decided</summary>", ""]
        out += [f"- {_cell(e)}" for e in data["explanation"]]
        out += ["", "</details>"]
    if data.get("warnings"):
        out += ["", "**Warnings**", ""] + [f"- {_cell(w)}" for w in data["warnings"]]
    return "\n".join(out) + "\n"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.5em}.ok{color:#1a7f37}.mismatch{color:#cf222e}.inconclusive{color:#9a6700}
table{border-collapse:collapse;font-size:.9em;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}
th{background:#f4f4f4}tr.st-ok td:nth-child(4){color:#1a7f37}tr.st-bad td:nth-child(4){color:#cf222e;font-weight:bold}
pre{background:#f6f8fa;padding:.8em;overflow:auto}img{max-width:100%;border:1px solid #eee;margin:.5em 0}
.meta{color:#555;font-size:.9em}li{margin:.2em 0}
"""  # noqa: E501


def render_html(report: DocLike, *, pictures: bool | None = None) -> str:
    """One self-contained HTML page: the verdict, cause, table, fix, the three pictures (embedded
    PNG data URIs), the walk-through and warnings. Nothing is fetched from anywhere when it opens.
    ``pictures``: True draws them (matplotlib, the ``plot`` extra, must be installed), False leaves them
    out, None (the default) draws them where matplotlib is installed and says how to get them where not.
    A gate result (``hsdiff gate --html``) leads with its verdict and checks, then its comparison.

    >>> page = render_html(report)      # doctest: +SKIP
    """
    d = as_doc(report)
    if is_gate(d):
        head = "PASS" if d["gate"] == "pass" else "FAIL"
        parts = _gate_parts(d)
        if isinstance(d.get("report"), dict):
            parts += _report_parts(d["report"], pictures, level=2)
        title, cls = f"hsdiff {d['command']}: {head}", "ok" if head == "PASS" else "mismatch"
    else:
        data = report_data(d)
        parts = _report_parts(data, pictures)
        title, cls = f"hsdiff compare: {data['verdict'].upper()}", data["verdict"]
    e = html.escape
    top, _, verdict = title.partition(": ")
    return (
        "\n".join(
            [
                "<!DOCTYPE html>",
                '<html lang="en"><head><meta charset="utf-8">',
                f"<title>{e(title)}</title>",
                f"<style>{_CSS}</style></head><body>",
                f'<h1>{e(top)}: <span class="{e(cls)}">{e(verdict)}</span></h1>',
                *parts,
                "</body></html>",
            ]
        )
        + "\n"
    )


def _gate_parts(d: dict) -> list[str]:
    """A gate result's head: engine, draft config, where the ids came from, the cause and the checks."""
    e = html.escape
    parts = [
        f'<p class="meta">engine {e(engine_title(d))} · draft config <code>{e(str(d["draft_config"]))}</code>'
        + (f" · target {d['num_hidden_layers']} layers" if d.get("num_hidden_layers") else "")
        + "</p>"
    ]
    if d.get("ids"):
        parts.append(f"<p><b>Layer ids:</b> {e(str(d['ids']['note']))}</p>")
    if d["gate"] != "pass":
        parts.append(f"<p><b>Cause:</b> {e(str(d['cause']))}</p>")
    parts.append("<table><tr><th>check</th><th>status</th><th>detail</th></tr>")
    for c in d["checks"]:
        cls = "st-bad" if c["status"] == "FAIL" else "st-ok"
        parts.append(
            f'<tr class="{cls}"><td><code>{e(c["name"])}</code></td><td>{e(c["status"])}</td>'
            f"<td>{e(str(c['message']))}</td></tr>"
        )
    parts.append("</table>")
    parts += [f"<blockquote>{e(str(n))}</blockquote>" for n in d.get("notes") or ()]
    if not isinstance(d.get("report"), dict):
        parts.append("<p>The comparison did not run.</p>")
    return parts


def _report_parts(data: dict, pictures: bool | None, level: int = 1) -> list[str]:
    """A comparison report's body (``level`` 2: under a gate result's head, with its own heading)."""
    e = html.escape
    inputs = data.get("inputs") or {}
    verdict = data["verdict"]
    parts = []
    if level > 1:
        parts.append(f'<h2>Comparison: <span class="{e(verdict)}">{e(verdict.upper())}</span></h2>')
    parts.append(
        f'<p class="meta">training <code>{e(str(inputs.get("train", "?")))}</code> · inference '
        f"<code>{e(str(inputs.get('infer', '?')))}</code> · engine {e(str(inputs.get('engine', '')))}"
        + (f" · target {data['num_hidden_layers']} layers" if data.get("num_hidden_layers") else "")
        + "</p>",
    )
    if data.get("configured"):
        c = data["configured"]
        parts.append(
            f'<p class="meta">configured ids <code>{e(str(c["eagle_aux_hidden_state_layer_ids"]))}</code> '
            f"({e(str(c.get('source', '')))}) → boundaries B{e(str(c['boundary_indices']))}</p>"
        )
    parts.append(f"<p><b>Cause:</b> {e(data['cause'])}</p>")
    parts.append("<table><tr>" + "".join(f"<th>{e(c)}</th>" for c in _COLUMNS) + "</tr>")
    for r in _rows(data):
        cls = "st-ok" if r[3] in ("ok", "identified") else "st-bad"
        parts.append(f'<tr class="{cls}">' + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>")
    parts.append("</table>")
    where, line = _fix(data)
    title = "Fix: put this in" if verdict != "ok" else "Ids in use (keep them), for"
    parts.append(f"<p><b>{e(title)}</b> {e(where)}:</p><pre>{e(line)}</pre>")
    others = _others(data)
    if others:
        parts.append(f"<p>Same layers on other engines: {e(others)}.</p>")
    if pictures is None:
        pictures = has_pictures()
        if not pictures:
            parts.append(f'<p class="meta">{e(NO_PICTURES)}.</p>')
    if pictures:
        for caption, draw in (
            ("Which inference capture holds each training slot", heatmap),
            ("Norm trajectory", norm_trajectory),
            ("Per-token error of each matched pair", token_errors),
        ):
            uri = "data:image/png;base64," + base64.b64encode(png_bytes(draw(data))).decode("ascii")
            parts.append(f'<h2>{e(caption)}</h2><img alt="{e(caption)}" src="{uri}">')
            if draw is heatmap and zoomed(data):  # the picture shows the region around the matches
                full = base64.b64encode(png_bytes(heatmap(data, full=True))).decode("ascii")
                parts.append(
                    '<details><summary>Full view: every inference capture</summary><img alt="every inference '
                    f'capture" src="data:image/png;base64,{full}"></details>'
                )
    parts.append("<h2>Settings</h2><ul>" + "".join(f"<li>{e(x)}</li>" for x in settings_lines(data)) + "</ul>")
    if data.get("explanation"):
        parts.append(
            "<h2>How hsdiff decided</h2><ul>" + "".join(f"<li>{e(x)}</li>" for x in data["explanation"]) + "</ul>"
        )
    if data.get("warnings"):
        parts.append("<h2>Warnings</h2><ul>" + "".join(f"<li>{e(w)}</li>" for w in data["warnings"]) + "</ul>")
    return parts
