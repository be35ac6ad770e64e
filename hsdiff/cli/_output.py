"""Writing report files for the commands (JSON, plots); never into the dump directories."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import click

from ..errors import InputError
from ..model import Report


def write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically ('-' for stdout)."""
    if path == "-":
        click.echo(text)
        return
    p = Path(path)
    if p.is_dir():
        raise InputError("is a directory", path=p, hint="give a file name for the output")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise InputError("the folder for this output does not exist", path=p, hint="create it first")
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text if text.endswith("\n") else text + "\n")
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(report: Report, path: str) -> None:
    write_text(path, report.to_json())


def write_plot(report: Report, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..report.plot import plot_scores

    fig, ax = plt.subplots(figsize=(10, 4.5))
    plot_scores(report, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
