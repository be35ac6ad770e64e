"""``hsdiff compare TRAIN INFER``."""

from __future__ import annotations

import dataclasses

import click

from ..comparison import Options, compare
from ..decide import NOISE_TOLERANCE
from ..engine_log import configured_ids
from ..model import Report
from ..report.text import render_text
from ..rules import conventions as conv
from ._config import sources
from ._draft import attach, draft_options, engine_log
from ._group import cli
from ._options import dump_options, engine_option, progress_bars
from ._output import write_documents, write_json, write_plot

EPILOG = """\b
Examples:
  hsdiff compare fixtures/seed/train fixtures/seed/infer-wrong --layer-ids=-1,2,30
  hsdiff compare train_dump/ server.log --layer-ids 2,30,58 --json report.json
  hsdiff compare train_dump/ sglang_dump/ --engine vllm --model-config target/config.json
  hsdiff compare train_dump/ sglang_dump/ --layer-ids 2,30,58 --plot pictures/ --html report.html
  hsdiff compare train/ all_layers/ --layer-ids=-1,1,14 --draft draft/ --target-model target/ --num-steps 5
  hsdiff compare train/ vllm_dump/ --engine-log vllm.log --model-config target/config.json   # ids from the log
  hsdiff compare draft/hsdiff-fingerprint.safetensors sglang_dump/ --layer-ids 2,30,58  # against a fingerprint
"""


@cli.command("compare", epilog=EPILOG)
@dump_options
@engine_option
@click.option(
    "--layer-ids",
    default=None,
    metavar="IDS",
    help='The ids the inference run was configured with, in the --engine convention, e.g. "-1,2,30".',
)
@click.option(
    "--markdown",
    "markdown_path",
    type=click.Path(path_type=str),
    default=None,
    help="Write the report as Markdown to PATH, to paste into an issue ('-' for stdout).",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(path_type=str),
    default=None,
    help="Write one self-contained HTML page (pictures embedded) to PATH.",
)
@draft_options
def compare_cmd(
    train, infer, layer_ids, engine, json_path, plot_path, markdown_path, html_path, quiet, progress, **kw
) -> None:
    """Match training slots to inference captures by value and recommend the layer ids.

    TRAIN and INFER are files or directories (scanned recursively): SpecForge, ModelOpt, EAGLE,
    SGLang dumper, vLLM connector, per-layer tensors, HF all-layer stacks, or debug logs. TRAIN may be
    a fingerprint (hsdiff fingerprint): every layer of the target, so no neighbouring layers need dumping.
    """
    given = click.get_current_context().get_parameter_source("engine") != click.core.ParameterSource.DEFAULT
    log = engine_log(kw)
    ids, engine = configured_ids(log, layer_ids, engine, given)
    line = None if log is None else log.aux_line if log.aux_line is not None else log.default_line
    source = f"the engine log {log.path}:{line}" if layer_ids is None and ids and log else "--layer-ids"
    opts = options_from(kw, engine=engine, layer_ids=ids, progress=progress, source=source)
    report = compare_or_check(train, infer, opts, kw)
    printing = "-" not in (json_path, markdown_path)
    if printing:  # the verdict now, before --draft replays the draft (it may take a while)
        click.echo(render_text(report, verbose=not quiet))
    report, acceptance = attach(report, report, train, infer, kw, progress=opts.progress)
    report = dataclasses.replace(report, inputs={**report.inputs, "sources": sources()})
    if json_path:
        write_json(report, json_path)
    if plot_path:
        write_plot(report, plot_path)
    write_documents(report, markdown_path, html_path)
    if printing and acceptance:
        click.echo(acceptance)
    click.get_current_context().exit(report.exit_code)


def compare_or_check(train: str, infer: str, opts: Options, kw: dict) -> Report:
    """``compare``, or the fingerprint check when TRAIN is a fingerprint (no --draft: it needs full states)."""
    from ..fingerprint import check, is_fingerprint

    if not is_fingerprint(train):
        return compare(train, infer, opts)
    no_draft_with(train, kw)
    return check(train, infer, opts)


def no_draft_with(train: str, kw: dict) -> None:
    """Refuse --draft when TRAIN is a fingerprint: the prediction runs the draft on the training dump's full
    states, which a fingerprint's sketches are not."""
    from ..fingerprint import is_fingerprint

    if kw.get("draft_dir") and is_fingerprint(train):
        raise click.UsageError(
            "--draft runs the draft on the training dump's full states, which a fingerprint does not hold: give the "
            "training dump as TRAIN for --draft"
        )


def options_from(
    kw: dict, *, engine: str, layer_ids: str | None, progress: bool | None, source: str = "--layer-ids"
) -> Options:
    """Build :class:`Options` from the shared dump options."""
    engine = engine.lower()
    train_engine = (kw.get("train_engine") or "specforge").lower()
    vs = conv.versions(kw.get("engine_versions"), [engine, train_engine])
    return Options(
        engine_version=vs[conv.rule(engine).key],
        train_engine_version=vs[conv.rule(train_engine).key],
        engine_versions=tuple(kw.get("engine_versions") or ()),
        layer_ids=None if layer_ids is None else conv.parse_ids(layer_ids),
        engine=engine,
        model_family=kw.get("model_family"),
        infer_index=kw.get("infer_index", "boundary"),
        train_index=kw.get("train_index", "boundary"),
        hidden_size=kw.get("hidden_size"),
        num_layers=kw.get("num_layers"),
        model_config=kw.get("model_config"),
        train_layer_ids=None
        if kw.get("train_layer_ids") is None
        else conv.parse_ids(kw["train_layer_ids"], what="--train-layer-ids"),
        train_engine=train_engine,
        train_format=kw.get("train_format"),
        infer_format=kw.get("infer_format"),
        tolerance=kw.get("tolerance", NOISE_TOLERANCE),
        log_pattern=kw.get("log_pattern"),
        draft_kind=kw.get("draft_kind"),
        configured_source=source,
        progress=progress_bars(progress),
    )
