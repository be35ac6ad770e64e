"""``hsdiff ids IDS --from E --to E2``."""

from __future__ import annotations

import click

from ..ids import translate_ids
from ..rules import conventions as conv
from ._group import cli
from ._options import draft_kind_option, engine_version_option, family_option

EPILOG = """\b
Examples:
  hsdiff ids 2,30,58 --from sglang --to vllm --num-layers 61      # 3,31,59
  hsdiff ids 3,31,59 --from vllm --to sglang --explain
  hsdiff ids -1,2,30 --from sglang --to vllm --num-layers 61
  hsdiff ids 24,30,36 --from sglang --to vllm --num-layers 36 --model-family gpt-oss
  hsdiff ids 2,30,58 --from sglang --to vllm --model-family kimi_k25 --engine-version sglang==0.5.12
  hsdiff ids -1,2,30 --from trtllm --to hf --num-layers 61     # -1: the final post-norm state
  hsdiff ids 1,9,17,25,33 --draft-kind dflash --from specforge --to vllm --num-layers 36
\b
Exit status: 0 translated, 1 the target engine cannot capture one of the layers (or not in this order),
2 bad input.
"""

_ENGINE = click.Choice(conv.ENGINES, case_sensitive=False)


@cli.command("ids", epilog=EPILOG, context_settings={"ignore_unknown_options": True})  # IDS may start with -1
@click.argument("ids")
@click.option("--from", "src", type=_ENGINE, required=True, help="The convention IDS are written in.")
@click.option("--to", "dst", type=_ENGINE, required=True, help="The convention to print them in.")
@click.option(
    "--num-layers",
    type=click.IntRange(min=1),
    default=None,
    help="Target num_hidden_layers L (range checks, gpt-oss rule).",
)
@family_option
@engine_version_option
@draft_kind_option
@click.option("--explain", is_flag=True, help="Say in words which tensor each id names.")
def ids_cmd(ids, src, dst, num_layers, model_family, engine_versions, draft_kind, explain) -> None:
    """Print the same layers in another engine's convention, one comma-separated line (on stderr: the
    engine versions and rules it assumed)."""
    vs = conv.versions(engine_versions, [src, dst])
    t = translate_ids(
        conv.parse_ids(ids, what="IDS"),
        src,
        dst,
        num_layers=num_layers,
        model_family=model_family,
        src_version=vs[conv.rule(src).key],
        dst_version=vs[conv.rule(dst).key],
        kind=draft_kind,
    )
    for w in t.warnings:
        click.echo(f"hsdiff: warning: {w}", err=True)
    if explain:
        for line in t.explain():
            click.echo(line, err=True)
    else:  # the versions the answer rests on, on stderr: stdout stays one line of ids for scripts
        click.echo(f"hsdiff: {t.rules()}" + (f"; {conv.rule(dst).title} reads {t.key}" if t.key else ""), err=True)
    if not t.complete:
        for why in t.obstacles:
            click.echo(f"hsdiff: {why}", err=True)
        click.get_current_context().exit(1)
    click.echo(t.line())
