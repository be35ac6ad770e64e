"""Options shared by several commands, defined once and stacked as decorators."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ..decide import NOISE_TOLERANCE
from ..progress import Progress, bars
from ..readers import FORMATS
from ..rules import conventions as conv
from ._group import quiet_run

F = Callable[..., Any]


def _stack(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    def apply(f: F) -> F:
        for d in reversed(decorators):
            f = d(f)
        return f

    return apply


engine_option = click.option(
    "--engine",
    type=click.Choice(conv.ENGINES, case_sensitive=False),
    default="sglang",
    show_default=True,
    help="The engine (or trainer) whose id convention --layer-ids uses and the recommendation is given in.",
)
engine_version_option = click.option(
    "--engine-version",
    "engine_versions",
    multiple=True,
    metavar="NAME==VERSION",
    help="The engine version whose counting rules apply, e.g. sglang==0.5.12 or vllm==0.33 (repeat for each engine "
    "involved). Default: the newest version hsdiff's convention table knows ("
    + ", ".join(f"{k}=={conv.default_version(k)}" for k in ("sglang", "vllm", "specforge"))
    + ", ...).",
)

draft_kind_option = click.option(
    "--draft-kind",
    type=click.Choice(list(conv.DRAFT_KINDS), case_sensitive=False),
    default=None,
    help="The kind of draft the ids feed, which selects the rows they are read with: "
    + "; ".join(f"{k.key} ({k.title})" for k in conv.DRAFT_KINDS.values())
    + ". Default: detected from a draft config's architectures where one is read, else eagle3. An MTP head "
    "takes no layer ids and is refused.",
)


def where_ids_are_read() -> str:
    """Epilog lines: where each engine and trainer reads the layer ids (from the convention table)."""
    lines = ["\b", "Where each engine reads the layer ids:"]
    for key in conv.ENGINES:
        lines.append(f"  {key}: {conv.rule(key).reads}")
    return "\n".join(lines) + "\n"


family_option = click.option(
    "--model-family",
    default=None,
    metavar="FAMILY",
    help="The target's model family for SGLang's (and SpecForge's) family rules: llama (default), deepseek (also "
    "kimi_k25, glm4_moe_lite, glm_moe_dsa, mistral_large_3), deepseek-legacy, gpt-oss, minimax_m3, minimax_m3_vl, "
    "deepseek_v4, looped; or a model_type such as qwen3.",
)


def _check_log_pattern(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--log-pattern must compile and name a group 'values': a usage error (exit 2) otherwise."""
    if value is None:
        return None
    from ..errors import InputError
    from ..readers.debuglog import compile_pattern
    from ._group import flag

    try:
        compile_pattern(value)
    except InputError as e:
        raise click.BadParameter(e.in_terms(flag)) from None
    return value


dump_arguments = _stack(
    click.argument("train", type=click.Path(exists=False, path_type=str)),
    click.argument("infer", type=click.Path(exists=False, path_type=str)),
)

dump_settings = _stack(
    family_option,
    engine_version_option,
    draft_kind_option,
    click.option(
        "--infer-index",
        type=click.Choice(["boundary", "output"]),
        default="boundary",
        show_default=True,
        help="How layer numbers found in inference dumps count: boundary = residual stream entering "
        "layer i (where SGLang and vLLM capture), output = output of layer i.",
    ),
    click.option(
        "--train-index",
        type=click.Choice(["boundary", "output"]),
        default="boundary",
        show_default=True,
        help="How layer numbers found in training dump keys or file names count.",
    ),
    click.option(
        "--hidden-size",
        type=click.IntRange(min=1),
        default=None,
        help="Target hidden size H (else taken from configs or shapes).",
    ),
    click.option("--num-layers", type=click.IntRange(min=1), default=None, help="Target num_hidden_layers L."),
    click.option(
        "--model-config",
        type=click.Path(path_type=str),
        default=None,
        help="The target model's config.json (gives H and L).",
    ),
    click.option(
        "--train-layer-ids",
        default=None,
        metavar="IDS",
        help="The ids the training data was captured with (default: read from a config.json in TRAIN).",
    ),
    click.option(
        "--train-engine",
        type=click.Choice(conv.ENGINES, case_sensitive=False),
        default="specforge",
        show_default=True,
        help="Convention of --train-layer-ids and of a draft config found in TRAIN.",
    ),
    click.option("--train-format", type=click.Choice(FORMATS), default=None, help="Force the training-side format."),
    click.option("--infer-format", type=click.Choice(FORMATS), default=None, help="Force the inference-side format."),
    click.option(
        "--log-pattern",
        default=None,
        metavar="REGEX",
        callback=_check_log_pattern,
        help="For a debug log in an unusual format: a regular expression with a named group 'values' "
        "(the printed numbers) and optionally slot, layer, token, col, norm, shape, dtype, name; "
        "each line it matches is one printed capture.",
    ),
    click.option(
        "--tolerance",
        type=click.FloatRange(min=0.0, max=1.0, min_open=True),
        default=NOISE_TOLERANCE,
        show_default=True,
        help="Largest median per-token relative error read as the same tensor.",
    ),
    click.option(
        "--json",
        "json_path",
        type=click.Path(path_type=str),
        default=None,
        help="Write the JSON report to PATH ('-' for stdout).",
    ),
    click.option(
        "--plot",
        "plot_path",
        type=click.Path(path_type=str),
        default=None,
        help="Write the pictures into folder PATH (created if missing): heatmap.png, norms.png, tokens.png; "
        "a PATH ending in .png gets the heatmap alone.",
    ),
    click.option("-q", "--quiet", is_flag=True, help="Print the table, the verdict and the fix only."),
    click.option(
        "--progress/--no-progress", default=None, help="Progress on stderr (default: when stderr is a terminal)."
    ),
)

dump_options = _stack(dump_arguments, dump_settings)


def progress_bars(enabled: bool | None) -> Progress | None:
    """``--progress/--no-progress``: a bar per step that takes time, on stderr (:func:`hsdiff.progress.bars`);
    by default only when stderr is a terminal, and not with ``-q``."""
    if enabled is None and quiet_run():
        return None
    return bars(enabled)
