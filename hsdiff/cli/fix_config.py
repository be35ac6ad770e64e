"""``hsdiff fix-config DRAFT_CONFIG (--from-report REPORT.json | --layer-ids IDS)``."""

from __future__ import annotations

import click

from ..fix_config import fix_config, ids_from_report
from ..rules import conventions as conv
from ._group import cli
from ._options import draft_kind_option, engine_version_option, family_option, where_ids_are_read

EPILOG = """\b
Examples:
  hsdiff gate train/ dump/ --draft-config draft/config.json --json gate.json
  hsdiff fix-config draft/config.json --from-report gate.json
  hsdiff fix-config draft/config.json --from-report gate.json --engine vllm --translate
  hsdiff fix-config draft/config.json --layer-ids 2,30,58 --engine sglang --dry-run
  hsdiff fix-config dflash/config.json --layer-ids 1,9,17,25,33 --engine vllm --draft-kind dflash
\b
With --from-report, the ids are the report's, for the engine, version and model family it was made
for; an --engine, --engine-version or --model-family that says otherwise is refused (exit 2) unless
--translate asks for the same layers on that engine and version.
The original is kept beside the config as config.json.bak (byte for byte); nothing else is written.
TensorRT-LLM reads no ids from a draft config.json: for it, set eagle3_layers_to_capture in its
speculative config (hsdiff ids --to trtllm prints the values) instead.
""" + where_ids_are_read()


@cli.command("fix-config", epilog=EPILOG)
@click.argument("draft_config", type=click.Path(path_type=str))
@click.option(
    "--from-report",
    "report",
    type=click.Path(path_type=str),
    default=None,
    help="A JSON report of hsdiff gate/compare whose verdict was confident.",
)
@click.option("--layer-ids", default=None, metavar="IDS", help="The ids to write, in the --engine convention.")
@click.option(
    "--engine",
    type=click.Choice(conv.ENGINES, case_sensitive=False),
    default=None,
    help="The engine whose key and convention to write (default: the report's engine, else sglang).",
)
@family_option
@engine_version_option
@draft_kind_option
@click.option(
    "--translate",
    is_flag=True,
    help="With --from-report: write the report's layers for another --engine, --engine-version or "
    "--model-family than the report's (otherwise refused).",
)
@click.option("--dry-run", is_flag=True, help="Print the diff, write nothing.")
def fix_config_cmd(
    draft_config, report, layer_ids, engine, model_family, engine_versions, draft_kind, translate, dry_run
) -> None:
    """Write the layer ids where ENGINE reads them, atomically, keeping a backup; print the diff."""
    if (report is None) == (layer_ids is None):
        raise click.UsageError("give exactly one of --from-report REPORT.json or --layer-ids IDS")
    if translate and report is None:
        raise click.UsageError("--translate goes with --from-report")
    ids, model_family, engine, version, dumps, draft_kind = _ids(
        report, layer_ids, engine, model_family, engine_versions, translate, draft_kind
    )
    result = fix_config(
        draft_config,
        ids,
        engine=engine,
        dry_run=dry_run,
        model_family=model_family,
        version=version,
        dumps=dumps,
        kind=draft_kind,
    )
    for w in result.warnings:
        click.echo(f"hsdiff: warning: {w}", err=True)
    what = f"{result.key} = {list(result.new)} for {conv.rule(result.engine).title} {result.version}"
    if not result.changed:
        click.echo(f"{result.path}: {what} already; nothing to do")
        return
    click.echo(result.diff, nl=False)
    click.echo(
        f"wrote {result.path} ({what}); the original is kept in {result.backup}"
        if result.written
        else f"dry run: nothing written ({what})"
    )


def _ids(report, layer_ids, engine, model_family, engine_versions, translate, draft_kind):
    """The ids to write, their model family, engine and version, the dumps they came from and the draft kind
    (a report's own; a --draft-kind that contradicts it is refused)."""
    if report is None:
        engine = engine or "sglang"
        return (
            conv.parse_ids(layer_ids),
            model_family,
            engine,
            conv.versions(engine_versions, [engine])[conv.rule(engine).key],
            (),
            draft_kind,
        )
    found = ids_from_report(
        report, engine, model_family=model_family, engine_versions=engine_versions, translate=translate
    )
    for note in found.notes:
        click.echo(f"hsdiff: note: {note}", err=True)
    if found.translated_from is not None:
        click.echo(
            f"translated the report's layers B{list(found.boundaries)} from "
            f"{found.translated_from.words()} to {found.at.words()}"
        )
    if draft_kind is not None and draft_kind != found.kind:
        raise click.UsageError(
            f"the report's ids are for a {found.kind} draft; --draft-kind {draft_kind} asks for another (drop it)"
        )
    return list(found.ids), found.model_family, found.engine, found.version, found.dumps, found.kind
