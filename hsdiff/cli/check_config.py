"""``hsdiff check-config DRAFT_CONFIG``."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..gate import check_config
from ..rules import conventions as conv
from ._ci import ci_options, emit
from ._group import cli
from ._options import draft_kind_option, engine_option, engine_version_option, family_option, where_ids_are_read

EPILOG = """\b
Examples:
  hsdiff check-config draft/config.json --target-config target/config.json
  hsdiff check-config draft/ --engine vllm --vllm-runner v2 --target-config target/ --github
  hsdiff check-config dflash-draft/ --engine sglang --draft-kind dflash --target-config target/
  hsdiff check-config --strict --drafts-only drafts/*/config.json       # one line each (the pre-commit hook)
\b
Exit status: 0 no error-level finding (warnings too with --strict), 1 a finding, 2 bad input.
""" + where_ids_are_read()


@cli.command("check-config", epilog=EPILOG)
@click.argument("draft_configs", metavar="DRAFT_CONFIG...", nargs=-1, required=True, type=click.Path(path_type=str))
@engine_option
@family_option
@engine_version_option
@draft_kind_option
@click.option(
    "--target-config",
    default=None,
    type=click.Path(path_type=str),
    help="The target model's config.json: num_hidden_layers, hidden_size and model_type.",
)
@click.option("--num-layers", type=click.IntRange(min=1), default=None, help="Target num_hidden_layers L.")
@click.option(
    "--json", "json_path", type=click.Path(path_type=str), default=None, help="Write JSON to PATH ('-' for stdout)."
)
@click.option("-q", "--quiet", is_flag=True, help="Print only the checks that did not pass.")
@click.option(
    "--one-line",
    is_flag=True,
    help="One line per config: PASS, or FAIL and why (the form of the pre-commit hook; several configs imply it).",
)
@click.option(
    "--drafts-only",
    is_flag=True,
    help="Pass over a config.json that is no draft's (no draft architecture nor layer-id key), e.g. a target's.",
)
@ci_options
def check_config_cmd(
    draft_configs,
    engine,
    model_family,
    engine_versions,
    draft_kind,
    target_config,
    num_layers,
    json_path,
    quiet,
    vllm_runner,
    strict,
    junit_path,
    markdown_path,
    github,
    one_line,
    drafts_only,
) -> None:
    """Static checks of a draft config, no dumps needed: ids unsorted, duplicated, out of range or not
    capturable, the fc width, ids in a key the engine ignores, ids a model-family rule reads differently."""
    settings = dict(
        engine=engine,
        target_config=target_config,
        model_family=model_family,
        vllm_runner=vllm_runner,
        num_layers=num_layers,
        strict=strict,
        engine_version=conv.versions(engine_versions, [engine])[conv.rule(engine).key],
        engine_versions=engine_versions,
        draft_kind=draft_kind,
    )
    configs = [c for c in draft_configs if not drafts_only or is_draft_config(c)]
    if len(configs) == 1 and not one_line:
        result = check_config(configs[0], **settings)
        emit(
            result, json_path=json_path, junit_path=junit_path, markdown_path=markdown_path, github=github, quiet=quiet
        )
    if (json_path or junit_path or markdown_path) and len(configs) > 1:
        raise click.UsageError("--json, --junit and --markdown take one DRAFT_CONFIG; give one at a time")
    click.get_current_context().exit(one_line_each(configs, settings, github))


def one_line_each(configs: list[str], settings: dict, github: bool) -> int:
    """Each config's verdict on one line (``PATH: PASS``, or ``PATH: FAIL — check: why``); the worst exit."""
    worst = 0
    for path in configs:
        result = check_config(path, **settings)
        click.echo(f"{path}: {result.verdict.upper()}" + ("" if result.passed else f" — {result.cause}"))
        if github and not result.passed:
            from ..report.github import render_github

            click.echo(render_github(result))
        worst = max(worst, result.exit_code)
    return worst


#: Keys that hold a draft's layer ids (EAGLE-3's, nested or not, and the DFlash family's).
_ID_KEYS = ("eagle_config", "eagle_aux_hidden_state_layer_ids", "dflash_config", "dspark_target_layer_ids")


def is_draft_config(path: str) -> bool:
    """Whether ``path`` (a config.json, or its folder) is a draft's: an architecture of a draft kind, or a
    key that holds layer ids. Unreadable files count as drafts, so that the check reports them."""
    p = Path(path)
    p = p / "config.json" if p.is_dir() else p
    try:
        config = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return True
    if not isinstance(config, dict):
        return True
    archs = [str(a) for a in config.get("architectures") or []]
    names = {n for kind in conv.DRAFT_KINDS.values() for n in kind.architectures}
    return any(k in config for k in _ID_KEYS) or any(n in a for n in names for a in archs)
