"""``hsdiff check-config DRAFT_CONFIG``."""

from __future__ import annotations

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
\b
Exit status: 0 no error-level finding (warnings too with --strict), 1 a finding, 2 bad input.
""" + where_ids_are_read()


@cli.command("check-config", epilog=EPILOG)
@click.argument("draft_config", type=click.Path(path_type=str))
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
@ci_options
def check_config_cmd(
    draft_config,
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
) -> None:
    """Static checks of a draft config, no dumps needed: ids unsorted, duplicated, out of range or not
    capturable, the fc width, ids in a key the engine ignores, ids a model-family rule reads differently."""
    result = check_config(
        draft_config,
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
    emit(result, json_path=json_path, junit_path=junit_path, markdown_path=markdown_path, github=github, quiet=quiet)
