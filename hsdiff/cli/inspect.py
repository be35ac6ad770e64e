"""``hsdiff inspect PATH``."""

from __future__ import annotations

import click

from ..readers import FORMATS
from ._group import cli
from ._output import write_text

EPILOG = """\b
Examples:
  hsdiff inspect fixtures/seed/infer-wrong          # SGLang dumper: 2 ranks, replicated
  hsdiff inspect fixtures/seed/train                # SpecForge: 3 slots × 576, labelled B[3, 31, 59]
  hsdiff inspect sglang_dump/ --json inspect.json
  hsdiff inspect draft/hsdiff-fingerprint.safetensors  # a fingerprint: its target, probes, training slots
"""


@cli.command("inspect", epilog=EPILOG)
@click.argument("path", type=click.Path(exists=False, path_type=str))
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None, help="Force a format for every file.")
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=str),
    default=None,
    help="Write the description as JSON to PATH ('-' for stdout).",
)
@click.option(
    "--sample-rows",
    type=click.IntRange(min=1),
    default=256,
    show_default=True,
    help="Rows (tokens) read from each tensor for the norm and NaN/Inf statistics.",
)
def inspect_cmd(path, fmt, json_path, sample_rows) -> None:
    """Say what a dump holds without comparing it: format and why, files, shapes, dtypes, tokens,
    per-token norms and attention sinks, NaN/Inf, tensor-parallel ranks, runs and steps. A fingerprint
    (hsdiff fingerprint) is named, with its target, probes, noise floor and training slots (--json: its
    document, schema hsdiff/schemas/fingerprint.schema.json)."""
    from ..fingerprint import is_fingerprint
    from ..inspection import inspect
    from ..report.inspect import render_inspect_text

    if is_fingerprint(path):  # not a dump: what it holds, and its document (schema: fingerprint)
        from ..fingerprint import load, summary
        from ..jsonout import dumps

        fp = load(path)
        if json_path:
            write_text(json_path, dumps(fp.meta))
        if json_path != "-":
            click.echo(f"{path}: hsdiff fingerprint\n" + "\n".join(f"  {line}" for line in summary(fp)))
        return
    info = inspect(path, fmt=fmt, sample_rows=sample_rows)
    if json_path:
        write_text(json_path, info.to_json())
    if json_path != "-":
        click.echo(render_inspect_text(info))
