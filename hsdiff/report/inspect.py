"""The readable text of ``hsdiff inspect``: what hsdiff makes of a dump, then files, captures
(shape, dtype, tokens, norm statistics, NaN/Inf), tensor-parallel ranks and runs.

Renders an :class:`~hsdiff.inspection.Inspection` or the dict of its ``--json`` output.
"""

from __future__ import annotations

from typing import Any

__all__ = ["render_inspect_text"]


def render_inspect_text(info: Any, *, max_captures: int = 40) -> str:
    """Summary sentences first, then one line per file and per capture (the first ``max_captures``)."""
    d = info if isinstance(info, dict) else info.to_dict()
    out = [f"hsdiff inspect: {d['path']}", ""]
    out += [f"  {s}" for s in d["summary"]]
    out += ["", "formats:"]
    out += [f"  {f['format']:<14} {f['captures']:>4} capture(s)  because {f['why']}" for f in d["formats"]]
    total = sum(f["bytes"] or 0 for f in d["files"])
    out += ["", f"files: {len(d['files'])} with hidden states, {_size(total)}"]
    out += [f"  {f['path']}  ({f['format']}, {_size(f['bytes'])})" for f in d["files"][:10]]
    if len(d["files"]) > 10:
        out.append(f"  … {len(d['files']) - 10} more")
    for c in d["configs"]:
        ids = f", eagle_aux_hidden_state_layer_ids {c['eagle_aux_hidden_state_layer_ids']}" if c["draft"] else ""
        out.append(f"config: {c['path']} ({'draft' if c['draft'] else 'model'}{ids})")
    out += ["", "captures:"]
    head = ["file / key", "shape", "dtype", "group", "label", "rank", "median norm", "sink at", "NaN/Inf"]
    rows = [head]
    for c in d["captures"][:max_captures]:
        norm = c.get("norm") or {}
        slot_norms = c.get("slot_norms")
        med = "/".join(_num(s["median"]) for s in slot_norms) if slot_norms else _num(norm.get("median"))
        label = c["layer"] or ("-" if c["slot"] is None else f"slot {c['slot']}")
        if c["label_source"]:
            label += f" ({c['label_source']})"
        rows.append(
            [
                _short(f"{c['file']} [{c['key']}]" if c["key"] else c["file"], 56),
                "x".join(map(str, c["shape"] or [])) or "?",
                c["dtype"],
                _short(str(c["group"]), 28),
                label,
                "-" if c["rank"] is None else str(c["rank"]),
                med,
                ",".join(map(str, norm.get("sink_tokens") or [])) or "-",
                "-" if c["nonfinite"] is None else str(c["nonfinite"]),
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    out += ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    if len(d["captures"]) > max_captures:
        out.append(f"  … {len(d['captures']) - max_captures} more (--json lists them all)")
    sampled = {c["sampled_rows"] for c in d["captures"] if c["sampled_rows"]}
    if sampled:
        out.append(
            f"  (norms and NaN/Inf counted on up to {max(sampled)} sampled rows per tensor; "
            "sink at: positions of the tokens with norm > 8× the median)"
        )
    r = d["ranks"]
    if r["ranks"]:
        out += ["", f"ranks: {r['ranks']} — {r['state']} ({r['tensors']} tensor(s) per rank)"]
        out += [
            f"  {x['tensor']}: rank {x['rank']} vs {x['against']}: {x['state']} ({x['why']})" for x in r["detail"][:8]
        ]
    runs = d["runs"]
    if runs.get("runs"):
        out.append(f"runs: {runs['runs']}, steps {', '.join(runs['steps'][:10])}")
    if d["warnings"]:
        out += ["", "warnings:"] + [f"  ! {w}" for w in d["warnings"]]
    return "\n".join(out)


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    x = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if x < 1024 or unit == "GB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return f"{x} B"


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else "…" + text[-(n - 1) :]
