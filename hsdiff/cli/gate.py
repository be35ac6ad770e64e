"""``hsdiff gate TRAIN INFER --draft-config PATH``."""

from __future__ import annotations

import click

from ..gate import run_gate
from ._ci import ci_options, emit
from ._draft import attach, draft_options
from ._group import cli
from ._options import dump_settings, engine_option, where_ids_are_read
from .compare import no_draft_with, options_from

EPILOG = """\b
Examples:
  hsdiff gate fixtures/seed/train fixtures/seed/infer-fixed-neighbours \\
      --draft-config fixtures/seed/draft-fixed/config.json --target-config fixtures/seed/model/config.json
  hsdiff gate train/ dump/ --draft-config draft/ --engine vllm --target-config target/ \\
      --junit gate.xml --markdown "$GITHUB_STEP_SUMMARY" --html gate.html --github
  hsdiff gate sglang_dump/ --fingerprint draft/hsdiff-fingerprint.safetensors --draft-config draft/
\b
Exit status: 0 pass, 1 fail (a check failed or the layers differ), 2 bad input, 3 a bug in hsdiff.
""" + where_ids_are_read()


@cli.command("gate", epilog=EPILOG)
@click.argument("train", type=click.Path(exists=False, path_type=str), required=False)
@click.argument("infer", type=click.Path(exists=False, path_type=str), required=False)
@dump_settings
@click.option(
    "--fingerprint",
    type=click.Path(path_type=str),
    default=None,
    help="A fingerprint (hsdiff fingerprint) as the training side: give INFER alone.",
)
@engine_option
@click.option(
    "--draft-config",
    required=True,
    type=click.Path(path_type=str),
    help="The draft model's config.json (or its folder): the ids are read from it as the engine reads them.",
)
@click.option(
    "--target-config",
    default=None,
    type=click.Path(path_type=str),
    help="The target model's config.json (L, hidden size, model family); same as --model-config.",
)
@ci_options
@click.option(
    "--html",
    "html_path",
    type=click.Path(path_type=str),
    default=None,
    help="Write one self-contained HTML page (the checks, the comparison, its pictures) to PATH.",
)
@draft_options
@click.option(
    "--min-acceptance",
    type=click.FloatRange(min=1.0),
    default=None,
    metavar="X",
    help="With --draft: fail when the predicted acceptance length (tokens per verification step) is below X.",
)
def gate_cmd(
    train,
    infer,
    engine,
    draft_config,
    target_config,
    vllm_runner,
    strict,
    json_path,
    plot_path,
    quiet,
    progress,
    junit_path,
    markdown_path,
    github,
    html_path,
    min_acceptance,
    fingerprint,
    **kw,
) -> None:
    """Pre-deployment gate: read the draft config's ids as ENGINE does, check it, compare TRAIN and INFER.

    Passes only when every error-level check passes and each training slot equals what the engine
    captures. Falls back to the engine's default ids exactly as the engine would, and says so.
    """
    train, infer = _sides(train, infer, fingerprint)
    no_draft_with(train, kw)
    if target_config and kw.get("model_config") and target_config != kw["model_config"]:
        raise click.UsageError("--target-config and --model-config name different files; give one")
    opts = options_from(kw, engine=engine, layer_ids=None, progress=progress)
    result = run_gate(
        train,
        infer,
        draft_config,
        opts,
        target_config=target_config or kw.get("model_config"),
        vllm_runner=vllm_runner,
        strict=strict,
    )
    result = _with_draft(result, train, infer, kw, target_config, min_acceptance, opts.progress, not quiet)
    _pictures(result, plot_path, html_path)
    emit(result, json_path=json_path, junit_path=junit_path, markdown_path=markdown_path, github=github, quiet=quiet)


def _sides(train: str | None, infer: str | None, fingerprint: str | None) -> tuple[str, str]:
    """TRAIN and INFER as given (on the command line or in a settings file); with ``--fingerprint`` the one
    dump given on the command line (else the settings file's INFER) is the inference side."""
    if fingerprint is None:
        if train is None or infer is None:
            raise click.UsageError(
                f"Missing argument '{'TRAIN' if train is None else 'INFER'}' (or give --fingerprint "
                "FILE and INFER alone)"
            )
        return train, infer
    ctx = click.get_current_context()
    typed = [
        v
        for name, v in (("train", train), ("infer", infer))
        if v is not None and ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE
    ]
    if len(typed) > 1:
        raise click.UsageError("with --fingerprint, give INFER alone (the fingerprint is the training side)")
    dump = typed[0] if typed else infer
    if dump is None:
        raise click.UsageError("Missing argument 'INFER': the dump the engine wrote, checked against --fingerprint")
    return fingerprint, dump


def _with_draft(result, train, infer, kw, target_config, minimum, progress, say: bool):
    """``--draft`` and ``--engine-log``: the result with the predicted and measured acceptance; with ``say``,
    the verdict so far is printed first (the draft's replay may take a while)."""
    if kw.get("draft_dir") and say:
        click.echo(
            f"hsdiff: gate so far: {result.verdict.upper()} ({result.cause}); replaying the draft for the "
            "predicted acceptance...",
            err=True,
        )
    result, _ = attach(
        result, result.report, train, infer, kw, target_config=target_config, minimum=minimum, progress=progress
    )
    return result


def _pictures(result, plot_path: str | None, html_path: str | None) -> None:
    """``--plot`` and ``--html``."""
    from ._output import write_gate_html, write_plot

    if plot_path and result.report is not None:
        write_plot(result.report, plot_path)
    if html_path:
        write_gate_html(result, html_path)
