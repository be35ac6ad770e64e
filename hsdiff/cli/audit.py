"""``hsdiff audit DATASET``."""

from __future__ import annotations

from pathlib import Path

import click

from ..audit import AuditOptions, audit, check_outside, render_text
from ._group import cli
from ._options import progress_bars
from ._output import write_text

EPILOG = """\b
Examples:
  hsdiff audit /data/specforge/train --json audit.json          # local processes, one per core (up to 4)
  hsdiff audit /data/train --cluster tcp://scheduler:8786 --json audit.json --resume
  hsdiff audit s3://bucket/train --sample 2000 --workers 8     # any fsspec URL whose backend is installed
"""


@cli.command("audit", epilog=EPILOG)
@click.argument("dataset", type=str)
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=str),
    default=None,
    help="Write the JSON report to PATH ('-' for stdout).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=None,
    help="Local worker processes (default: one per core, up to 4; 0: this process, no Dask).",
)
@click.option(
    "--cluster",
    default=None,
    metavar="ADDRESS",
    help="A running Dask scheduler, e.g. tcp://host:8786, instead of local processes.",
)
@click.option("--sample", type=click.IntRange(min=1), default=None, help="Audit a random subset of N files.")
@click.option(
    "--resume", is_flag=True, help="Continue an interrupted audit: files in the checkpoint are not read again."
)
@click.option(
    "--checkpoint",
    type=click.Path(path_type=str),
    default=None,
    help="Checkpoint file (default: next to --json as PATH.checkpoint.jsonl, else in ~/.cache/hsdiff/audit).",
)
@click.option(
    "--hidden-size",
    type=click.IntRange(min=1),
    default=None,
    help="Target hidden size H (else from a config.json, the final hidden_state or the slot width).",
)
@click.option(
    "--tolerance",
    type=click.FloatRange(min=0.0, max=1.0, min_open=True),
    default=None,
    help="Largest median per-token relative error on a shared prefix read as the same layer, every slot "
    "(default: per slot, 3x the rounding spread measured on the set, at least 0.015).",
)
@click.option("--progress/--no-progress", default=None, help="Progress on stderr (default: when stderr is a terminal).")
def audit_cmd(dataset, json_path, checkpoint, progress, **kw) -> None:
    """Check a whole training set: unreadable, NaN/Inf, misshapen and duplicate files, and files whose
    slots hold other layers than the majority (told by value). Exit 1 when a problem is found."""
    if json_path not in (None, "-"):
        check_outside(dataset, json_path, "the JSON report")
    if checkpoint is None and json_path not in (None, "-"):
        checkpoint = str(Path(json_path).with_name(Path(json_path).name + ".checkpoint.jsonl"))
    report = audit(dataset, AuditOptions(checkpoint=checkpoint, progress=progress_bars(progress), **kw))
    if json_path:
        write_text(json_path, report.to_json())
    if json_path != "-":
        click.echo(render_text(report))
    click.get_current_context().exit(report.exit_code)
