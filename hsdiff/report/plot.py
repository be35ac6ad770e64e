"""Matplotlib view of a report: error of every training slot against every inference capture."""

from __future__ import annotations

from typing import Any

from ..model import Report


def plot_scores(report: Report, ax: Any = None) -> Any:
    """Log-scale error per inference capture, one line per training slot; returns the Axes.

    >>> ax = plot_scores(report)        # doctest: +SKIP
    """
    import matplotlib

    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(9, 4))
    frame = report.scores_frame()
    if frame.empty:
        ax.set_title("hsdiff: nothing was scored")
        return ax
    best = frame.groupby(["slot", "capture"], sort=False)["rel_err"].min().reset_index()
    order = list(dict.fromkeys(frame["capture"]))
    x = {c: i for i, c in enumerate(order)}
    for slot, part in best.groupby("slot"):
        xs = [x[c] for c in part["capture"]]
        ax.plot(xs, part["rel_err"].clip(lower=1e-4), marker="o", label=f"training slot {slot}")
    ax.axhline(report_tolerance(report), color="grey", linestyle="--", linewidth=1, label="noise tolerance")
    ax.set_yscale("log")
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels([_tick(c) for c in order], rotation=90, fontsize=7)
    ax.set_ylabel("median per-token relative error")
    ax.set_title(f"hsdiff: {report.verdict} — recommended ids {list(report.recommended.ids)}")
    ax.legend(fontsize=8)
    matplotlib.pyplot.tight_layout() if hasattr(matplotlib, "pyplot") else None
    return ax


def report_tolerance(report: Report) -> float:
    """The tolerance that decided this report (``--tolerance``)."""
    return float(report.tolerance)


def _tick(label: str) -> str:
    return label if len(label) <= 28 else "…" + label[-27:]
