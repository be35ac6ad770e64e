"""``hsdiff fix-config DRAFT_CONFIG (--from-report REPORT.json | --layer-ids IDS)``."""

from __future__ import annotations

import click

from .. import conventions as conv
from ..fix_config import fix_config, ids_from_report
from ._group import cli
from ._options import engine_option, engine_version_option, family_option, where_ids_are_read

EPILOG = """\b
Examples:
  hsdiff gate train/ dump/ --draft-config draft/config.json --json gate.json
  hsdiff fix-config draft/config.json --from-report gate.json
  hsdiff fix-config draft/config.json --layer-ids 2,30,58 --engine sglang --dry-run
\b
The original is kept beside the config as config.json.bak (byte for byte); nothing else is written.
TensorRT-LLM reads no ids from a draft config.json: for it, set eagle3_layers_to_capture in its
speculative config (hsdiff ids --to trtllm prints the values) instead.
""" + where_ids_are_read()


@cli.command("fix-config", epilog=EPILOG)
@click.argument("draft_config", type=click.Path(path_type=str))
@click.option("--from-report", "report", type=click.Path(path_type=str), default=None,
              help="A JSON report of hsdiff gate/compare whose verdict was confident.")
@click.option("--layer-ids", default=None, metavar="IDS", help="The ids to write, in the --engine convention.")
@engine_option
@family_option
@engine_version_option
@click.option("--dry-run", is_flag=True, help="Print the diff, write nothing.")
def fix_config_cmd(draft_config, report, layer_ids, engine, model_family, engine_versions, dry_run) -> None:
    """Write the layer ids where ENGINE reads them, atomically, keeping a backup; print the diff."""
    if (report is None) == (layer_ids is None):
        raise click.UsageError("give exactly one of --from-report REPORT.json or --layer-ids IDS")
    version = conv.versions(engine_versions, [engine])[conv.rule(engine).key]
    if report is not None:
        found = ids_from_report(report, engine, model_family=model_family, version=version)
        ids, model_family = list(found.ids), found.model_family
    else:
        ids = conv.parse_ids(layer_ids)
    result = fix_config(draft_config, ids, engine=engine, dry_run=dry_run, model_family=model_family, version=version)
    for w in result.warnings:
        click.echo(f"hsdiff: warning: {w}", err=True)
    if not result.changed:
        click.echo(f"{result.path}: {result.key} is already {list(result.new)}; nothing to do")
        return
    click.echo(result.diff, nl=False)
    if result.written:
        click.echo(f"wrote {result.path} ({result.key} = {list(result.new)}); the original is kept in {result.backup}")
    else:
        click.echo("dry run: nothing written")
