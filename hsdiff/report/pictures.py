"""The three pictures of a comparison, drawn from the report's data alone, so that a report can be
drawn again without torch: each function takes a :class:`Report` (or a gate result that ran the
comparison), the dict of its JSON, or the path of a saved ``--json`` file.

* :func:`heatmap`: error (or cosine) between every training slot and every inference capture,
  both ordered by layer; the chosen match and the configured capture of each slot are outlined;
* :func:`norm_trajectory`: median per-token norm per layer on both sides — a shifted capture shows
  as the inference curve sliding off the training one;
* :func:`token_errors`: the per-token error along the sequence of each matched pair (and of the
  pair the configured ids give), attention-sink tokens marked.

Each returns a matplotlib ``Figure``; :func:`write_pictures` saves all three as PNGs. Matplotlib is
imported when a picture is drawn, not before.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..extras import require
from ..model.capture import LabelSource
from ._doc import DocLike, as_doc

__all__ = ["heatmap", "norm_trajectory", "token_errors", "write_pictures", "PICTURES", "report_data", "zoomed"]

#: File names :func:`write_pictures` writes, in order.
PICTURES = ("heatmap.png", "norms.png", "tokens.png")
_MATCH, _CONFIGURED = "#00e5ff", "#ff2d55"
_TOLERANCE = 0.10


def report_data(report: DocLike) -> dict:
    """The comparison report as a plain dict, from a :class:`Report` or gate result, the dict of either's
    JSON, or the path of a saved one.

    >>> report_data("report.json")["verdict"]       # doctest: +SKIP
    'mismatch'
    """
    data = as_doc(report)
    if "slots" not in data and "report" in data:  # a gate or check-config result: draw its comparison
        if not isinstance(data["report"], dict):
            raise InputError(
                f"this {data.get('command', 'gate')} result holds no comparison to draw",
                path=report if isinstance(report, (str, os.PathLike)) else None,
                hint="draw a file written by hsdiff compare --json, or by a gate that ran the comparison",
            )
        data = data["report"]
    return data


def _plt() -> Any:
    return require("matplotlib.pyplot", "plot", "the pictures")


def _tolerance(data: dict) -> float:
    return float(data.get("tolerance") or (data.get("inputs") or {}).get("tolerance") or _TOLERANCE)


def _b(b: int | None) -> str:
    return "B?" if b is None else f"B{b}"


def _short(text: str, n: int = 34) -> str:
    return text if len(text) <= n else "…" + text[-(n - 1) :]


# ----------------------------------------------------------------------------- heatmap
def heatmap_grid(data: dict, metric: str = "rel_err") -> tuple[list[dict], list[dict], list[list[float | None]]]:
    """Rows (training slots, ordered by layer), columns (inference captures, ordered by layer) and
    the best ``metric`` of each pair (``None`` where the pair was not scored)."""
    slots = sorted(data["slots"], key=lambda s: (_slot_layer(s) is None, _slot_layer(s) or 0, s["slot"]))
    cols: dict[str, dict] = {}
    for r in data.get("scores") or []:
        cols.setdefault(
            r["capture"],
            {"capture": r["capture"], "boundary": r.get("capture_boundary"), "label_source": r.get("label_source")},
        )
    columns = sorted(cols.values(), key=lambda c: (c["boundary"] is None, c["boundary"] or 0, c["capture"]))
    index = {c["capture"]: j for j, c in enumerate(columns)}
    row_of = {s["slot"]: i for i, s in enumerate(slots)}
    grid: list[list[float | None]] = [[None] * len(columns) for _ in slots]
    for r in data.get("scores") or []:
        i, j, v = row_of.get(r["slot"]), index[r["capture"]], r.get(metric)
        if i is not None and v is not None:
            grid[i][j] = v
    return slots, columns, grid


def _slot_layer(s: dict) -> int | None:
    return s.get("boundary_index") if s.get("boundary_index") is not None else s.get("claimed_boundary_index")


def configured_column(slot: dict, columns: list[dict]) -> int | None:
    """The column of the capture the configured ids give ``slot``, if that capture is in the grid."""
    b = slot.get("configured_boundary_index")
    if b is None:
        return None
    same = [j for j, c in enumerate(columns) if c["boundary"] == b]
    configured = [
        j
        for j in same
        if columns[j]["label_source"] == LabelSource.CONFIGURED
        and f"slot {slot['slot']} " in columns[j]["capture"] + " "
    ]
    found = configured or same
    return found[0] if found else None


def heatmap(report: DocLike, metric: str = "rel_err", ax: Any = None, *, full: bool = False) -> Any:
    """Error (``metric="rel_err"``, log colour scale) or ``"cosine"`` of every slot against every
    capture; the chosen match is outlined in cyan, the configured capture in dashed red. With more than
    :data:`ZOOM_ABOVE` captures only the region around the matches and the configured captures is drawn
    (:data:`ZOOM_MARGIN` layers either side; ``full=True`` draws every capture). Where the captures come
    from several stacks (two all-layer dumps), each label says which.

    >>> fig = heatmap(report)          # doctest: +SKIP
    >>> fig = heatmap("report.json")   # doctest: +SKIP
    """
    plt = _plt()
    from matplotlib.colors import LogNorm, Normalize
    from matplotlib.patches import Rectangle

    data = report_data(report)
    slots, columns, grid = heatmap_grid(data, metric)
    every = len(columns)
    if not full:
        keep = region(slots, columns)
        columns, grid = [columns[j] for j in keep], [[row[j] for j in keep] for row in grid]
    stacks = _stacks(columns)
    many = len(columns) > 24
    if ax is None:
        w = min(14.0, max(7.0, 2.6 + 0.3 * len(columns)))
        fig, ax = plt.subplots(figsize=(w, max(3.6, 1.8 + 0.55 * len(slots)) + (1.0 if many else 0.0)))
    fig = ax.figure
    title = f"hsdiff {data['verdict'].upper()} — which inference capture holds each training slot"
    if len(columns) < every:
        title += f"\n(the region around the matches: {len(columns)} of {every} captures; the HTML page shows all)"
    if not slots or not columns:
        ax.set_title(title + "\n(nothing was scored)")
        ax.axis("off")
        return fig
    import numpy as np

    values = np.array([[np.nan if v is None else v for v in row] for row in grid], dtype=float)
    if metric == "cosine":
        norm: Any = Normalize(vmin=-1.0, vmax=1.0)
        cmap, label = "viridis", "median per-token cosine\n(1 = same direction)"
    else:
        values = np.clip(values, 1e-3, 2.0)
        norm = LogNorm(vmin=1e-3, vmax=2.0)
        cmap, label = "viridis_r", "median per-token relative error (log)\nbright = same tensor"
    img = ax.imshow(np.ma.masked_invalid(values), aspect="auto", cmap=cmap, norm=norm, interpolation="nearest")
    bar = fig.colorbar(img, ax=ax, pad=0.01, fraction=0.04)
    bar.set_label(label, fontsize=8)
    tol = _tolerance(data)
    if metric != "cosine":
        bar.ax.axhline(tol, color="white", linewidth=2)
    if len(columns) <= 16 and values.size <= 120:
        for i in range(values.shape[0]):
            for j in range(values.shape[1]):
                v = grid[i][j]
                if v is not None:
                    text = f"{v:.2f}" if metric == "cosine" else _pct(v)
                    dark = (v > 0.3) if metric != "cosine" else (v < 0.3)
                    ax.text(j, i, text, ha="center", va="center", fontsize=7, color="white" if dark else "black")
    prefix = _common_prefix([c["capture"] for c in columns])
    short = many or len(stacks) > 1
    labels = [_b(c["boundary"]) if short and c["boundary"] is not None else _col_label(c, prefix) for c in columns]
    step = max(1, math.ceil(len(columns) / 64))  # at most 64 labels: a full view of hundreds stays readable
    if len(stacks) > 1 and step > 1:  # a label per layer, on its first stack's column
        step = len(stacks) * max(1, math.ceil(len(columns) / len(stacks) / 64))
    elif len(stacks) > 1:
        labels = [f"{lab} {stacks[_stack(c)]}" for lab, c in zip(labels, columns)]
    ax.set_xticks(range(0, len(columns), step))
    ax.set_xticklabels(
        labels[::step],
        rotation=90 if many else 60 if len(columns) > 6 else 0,
        ha="center" if many or len(columns) <= 6 else "right",
        fontsize=8,
    )
    ax.set_yticks(range(len(slots)))
    ax.set_yticklabels([_row_label(s) for s in slots], fontsize=9)
    for j in range(1, len(columns)):  # a gap in the layers shown (the region's parts, another stack)
        a, b = columns[j - 1]["boundary"], columns[j]["boundary"]
        if a is not None and b is not None and b - a > 1:
            ax.axvline(j - 0.5, color="white", linewidth=2.5)
    where = f"{prefix.strip()} … " if prefix.strip() and len(stacks) < 2 else ""
    how = "labelled by layer only; --json names each capture" if many else "as labelled"
    if len(stacks) > 1:
        how = "stacks: " + "; ".join(f"{tag} = {_short(key, 40)}" for key, tag in stacks.items())
        how += ", side by side at each layer" if step > 1 else ""
    ax.set_xlabel(f"inference capture {where}({how}, ordered by layer)", fontsize=9)
    ax.set_ylabel("training slot (layer it holds)")
    for i, s in enumerate(slots):
        matched = (s.get("matched") or {}).get("label")
        if matched in {c["capture"] for c in columns}:
            j = next(k for k, c in enumerate(columns) if c["capture"] == matched)
            ax.add_patch(
                Rectangle(
                    (j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor=_MATCH, linewidth=3, gid=f"match:slot{s['slot']}"
                )
            )
        j2 = configured_column(s, columns)
        if j2 is not None:
            ax.add_patch(
                Rectangle(
                    (j2 - 0.42, i - 0.42),
                    0.84,
                    0.84,
                    fill=False,
                    edgecolor=_CONFIGURED,
                    linewidth=2,
                    linestyle="--",
                    gid=f"configured:slot{s['slot']}",
                )
            )
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=_MATCH, linewidth=3, label="chosen match (value evidence)")]
    if metric != "cosine":
        handles.append(
            Line2D([], [], color="white", linewidth=0, label=f"white mark on the colour bar: tolerance {tol:.0%}")
        )
    if data.get("configured"):
        ids = data["configured"].get("eagle_aux_hidden_state_layer_ids")
        handles.append(
            Line2D(
                [],
                [],
                color=_CONFIGURED,
                linewidth=2,
                linestyle="--",
                label=f"what the configured ids {ids} give the slot",
            )
        )
    ax.legend(
        handles=handles,
        loc="lower left",
        bbox_to_anchor=(0.0, 1.0),
        ncol=len(handles),
        fontsize=8,
        frameon=False,
        handlelength=2.5,
        borderaxespad=0.2,
    )
    ax.set_title(title, fontsize=10, pad=22)
    fig.tight_layout()
    return fig


#: Above this many captures the heatmap shows the region around the matches (``heatmap(full=True)``: all).
ZOOM_ABOVE = 30
#: Layers shown either side of a match, a slot's layer or a configured capture in that region.
ZOOM_MARGIN = 3


def region(slots: list[dict], columns: list[dict]) -> list[int]:
    """The columns the heatmap shows: all of them up to :data:`ZOOM_ABOVE`, else those within
    :data:`ZOOM_MARGIN` layers of a slot's layer, its match or its configured capture."""
    if len(columns) <= ZOOM_ABOVE:
        return list(range(len(columns)))
    centres: set[int] = set()
    matched = set()
    for s in slots:
        m = s.get("matched") or {}
        matched.add(m.get("label"))
        for b in (s.get("boundary_index"), s.get("configured_boundary_index"), s.get("claimed_boundary_index")):
            if b is not None:
                centres.add(b)
        if m.get("capture_boundary_index") is not None:
            centres.add(m["capture_boundary_index"])
    keep = [
        j
        for j, c in enumerate(columns)
        if c["capture"] in matched
        or (c["boundary"] is not None and any(abs(c["boundary"] - b) <= ZOOM_MARGIN for b in centres))
    ]
    return keep or list(range(len(columns)))


def zoomed(report: DocLike) -> bool:
    """Whether :func:`heatmap` shows a region of this report's captures (the HTML page adds the full view)."""
    slots, columns, _ = heatmap_grid(report_data(report))
    return len(region(slots, columns)) < len(columns)


def _stack(c: dict) -> str:
    """The stack a capture belongs to: its label without the layer (``file=a.safetensors hidden_states``)."""
    text = re.sub(r"\bB\d+\b|\[\d+\]|\blayer[ _=]?\d+\b", "", c["capture"])
    return " ".join(text.split())


def _stacks(columns: list[dict]) -> dict[str, str]:
    """Each stack's short tag (``s1``, ``s2``...), when a layer is captured by more than one stack; else {}."""
    keys = list(dict.fromkeys(_stack(c) for c in columns))
    bs = [c["boundary"] for c in columns if c["boundary"] is not None]
    if len(keys) < 2 or len(set(bs)) == len(bs):
        return {}
    return {k: f"s{i + 1}" for i, k in enumerate(keys)}


def _col_label(c: dict, prefix: str) -> str:
    text = _short(c["capture"][len(prefix) :] or c["capture"], 28)
    return text + ("" if c["label_source"] != LabelSource.CONFIGURED else "\n(--layer-ids)")


def _common_prefix(labels: list[str]) -> str:
    """The words every label starts with (``name=aux_hidden_states``), when there is more than one label."""
    if len(labels) < 2:
        return ""
    prefix = os.path.commonprefix(labels)
    prefix = prefix[: prefix.rfind(" ") + 1] if " " in prefix else ""
    return prefix[: prefix.find(" slot ") + 1] if " slot " in f" {prefix}" else prefix


def _row_label(s: dict) -> str:
    b = s.get("boundary_index")
    if b is not None:
        return f"slot {s['slot']} = {_b(b)}" + (" (inferred)" if s.get("evidence") == "inferred" else "")
    claimed = s.get("claimed_boundary_index")
    return f"slot {s['slot']} = ?" + ("" if claimed is None else f" (labelled B{claimed})")


def _pct(v: float) -> str:
    if not math.isfinite(v):
        return "-"
    return f"{v * 100:.1f}%" if v < 0.1 else f"{v * 100:.0f}%"


# ----------------------------------------------------------------------------- norms
def norm_trajectory(report: DocLike, ax: Any = None) -> Any:
    """Median per-token norm against the layer each tensor is labelled with, for both sides.

    Training slots are placed at the layer the evidence gives them (their training label when the
    evidence says nothing); inference captures at their own label, or at the configured layer when
    the label comes from ``--layer-ids`` (hollow markers): if the engine captures the wrong
    layers, those points sit off the training curve.
    """
    plt = _plt()
    data = report_data(report)
    norms = (data.get("profiles") or {}).get("norms") or []
    if ax is None:
        fig, ax = plt.subplots(figsize=(9, 4.2))
    fig = ax.figure
    title = "Norm trajectory: median per-token norm of the residual stream, per layer"
    if not norms:
        ax.set_title(title + "\n(no norm profile in this report)")
        ax.axis("off")
        return fig
    train = sorted(
        (
            (r.get("boundary") if r.get("boundary") is not None else r.get("claimed_boundary"), r)
            for r in norms
            if r["side"] == "train"
        ),
        key=lambda t: (t[0] is None, t[0] or 0),
    )
    infer = [r for r in norms if r["side"] == "infer" and r.get("boundary") is not None]
    unplaced = [r for r in norms if r["side"] == "infer" and r.get("boundary") is None]
    placed = [(b, r) for b, r in train if b is not None]
    if placed:
        ax.plot(
            [b for b, _ in placed],
            [r["median_norm"] for _, r in placed],
            "-o",
            color="#1f77b4",
            markersize=7,
            label="training slots (at the layer the values show)",
            zorder=3,
        )
        for b, r in placed:
            ax.annotate(
                f"slot {r['slot']}",
                (b, r["median_norm"]),
                textcoords="offset points",
                xytext=(0, 9),
                ha="center",
                fontsize=7,
                color="#1f77b4",
            )
    own = sorted((r for r in infer if r.get("label_source") != LabelSource.CONFIGURED), key=lambda r: r["boundary"])
    cfg = sorted((r for r in infer if r.get("label_source") == LabelSource.CONFIGURED), key=lambda r: r["boundary"])
    stacks = _stacks(own)  # two all-layer stacks: a line each, not one zigzag between them
    for n, (key, tag) in enumerate(stacks.items() or [("", "")]):
        rows = [r for r in own if not stacks or _stack(r) == key]
        if not rows:
            continue
        ax.plot(
            [r["boundary"] for r in rows],
            [r["median_norm"] for r in rows],
            "-s" if n == 0 else "-^",
            color=("#ff7f0e", "#2ca02c", "#9467bd", "#8c564b")[n % 4],
            markersize=4,
            linewidth=1.2,
            label="inference captures (at their own layer label)"
            if not tag
            else f"inference stack {tag}: {_short(key, 30)}",
            zorder=2,
        )
    if cfg:
        ax.plot(
            [r["boundary"] for r in cfg],
            [r["median_norm"] for r in cfg],
            "--D",
            color=_CONFIGURED,
            markerfacecolor="none",
            markersize=9,
            linewidth=1,
            label="engine captures, at the layers the configured ids name",
            zorder=4,
        )
        for r in cfg:
            if r.get("slot") is not None:
                ax.annotate(
                    f"engine slot {r['slot']}",
                    (r["boundary"], r["median_norm"]),
                    textcoords="offset points",
                    xytext=(0, -14),
                    ha="center",
                    fontsize=7,
                    color=_CONFIGURED,
                )
    ax.set_yscale("log")
    ax.margins(x=0.04, y=0.12)
    ax.set_xlabel("layer boundary B (B0 = embeddings, Bi = residual stream entering layer i)")
    ax.set_ylabel("median per-token L2 norm (log)")
    L = data.get("num_hidden_layers")
    if L:
        ax.axvline(L, color="grey", linewidth=0.8, linestyle=":")
        ax.text(L, ax.get_ylim()[0], f" B{L}", fontsize=7, color="grey", va="bottom")
    notes = []
    if unplaced:
        notes.append(f"{len(unplaced)} inference capture(s) carry no layer label and are not drawn")
    sinks = sorted({t for r in norms for t in r.get("sink_tokens", [])})
    if sinks:
        notes.append(
            "attention-sink tokens (norm > 8× median) at positions "
            + ", ".join(map(str, sinks[:6]))
            + (" …" if len(sinks) > 6 else "")
            + "; medians are barely moved by them"
        )
    if notes:
        ax.text(
            0.99, 0.02, "\n".join(notes), transform=ax.transAxes, fontsize=7, color="dimgrey", va="bottom", ha="right"
        )
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- per token
def token_errors(report: DocLike, axes: Any = None) -> Any:
    """Per-token relative error along the training sequence, one panel per training slot: the
    matched capture (solid) and the capture the configured ids give the slot (dashed)."""
    plt = _plt()
    data = report_data(report)
    curves = (data.get("profiles") or {}).get("tokens") or []
    slots = sorted({c["slot"] for c in curves})
    if axes is None:
        fig, axes = plt.subplots(
            max(1, len(slots)), 1, figsize=(11, 1.2 + 2.1 * max(1, len(slots))), squeeze=False, sharex=True
        )
        axes = list(axes[:, 0])
    fig = axes[0].figure
    if not curves:
        axes[0].set_title("Per-token error: no whole-tensor match to draw (printed values, or nothing matched)")
        axes[0].axis("off")
        return fig
    tol = _tolerance(data)
    slot_info = {s["slot"]: s for s in data["slots"]}
    for ax, slot in zip(axes, slots):
        info = slot_info.get(slot, {})
        for c in (c for c in curves if c["slot"] == slot):
            xs = [c["first_token"] + i for i in range(len(c["error"]))]
            ys = [math.nan if v is None else max(v, 1e-4) for v in c["error"]]
            match = c["role"] == "match"
            ax.plot(
                xs,
                ys,
                "-" if match else "--",
                color=_MATCH if match else _CONFIGURED,
                linewidth=1.6,
                marker="." if len(xs) <= 80 else None,
                label=("matched: " if match else "configured ids give: ") + _short(c["capture"], 40),
            )
            for t in c.get("sink_tokens", []):
                ax.axvspan(t - 0.5, t + 0.5, color="gold", alpha=0.35, linewidth=0)
        if any(c.get("sink_tokens") for c in curves if c["slot"] == slot):
            ax.plot([], [], color="gold", alpha=0.5, linewidth=6, label="attention-sink token")
        ax.axhline(tol, color="grey", linestyle=":", linewidth=1, label=f"tolerance {tol:.0%}")
        ax.set_yscale("log")
        ax.set_ylabel("relative error")
        evidence = "" if info.get("evidence") in (None, "observed") else f", {info['evidence']}"
        ax.set_title(
            f"training slot {slot} ({_b(info.get('boundary_index'))}{evidence}): {info.get('status', '?')}",
            fontsize=9,
            loc="left",
        )
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("token position in the training sample")
    fig.suptitle("Per-token error ‖infer−train‖/‖train‖ along the sequence", fontsize=10)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- files
def write_pictures(report: DocLike, folder: str | os.PathLike, dpi: int = 110) -> list[Path]:
    """Save :data:`PICTURES` into ``folder`` (created if missing); returns the paths written.

    >>> write_pictures(report, "out/pictures")      # doctest: +SKIP
    [PosixPath('out/pictures/heatmap.png'), PosixPath('out/pictures/norms.png'), PosixPath('out/pictures/tokens.png')]
    """
    _plt()
    out = Path(folder)
    out.mkdir(exist_ok=True)
    data = report_data(report)
    paths = []
    drawers: tuple[Callable[[Any], Any], ...] = (heatmap, norm_trajectory, token_errors)
    for name, draw in zip(PICTURES, drawers):
        path = out / name
        path.write_bytes(png_bytes(draw(data), dpi=dpi))
        paths.append(path)
    return paths


def png_bytes(fig: Any, dpi: int = 100) -> bytes:
    """The figure as PNG bytes (for embedding), and closes it."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", metadata={"Software": None})
    _plt().close(fig)
    return buf.getvalue()
