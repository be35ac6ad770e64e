"""``--draft DIR`` and its settings, shared by ``compare`` and ``gate``: predicted acceptance; and
``--engine-log FILE``: the acceptance the engine measured (and the ids it logged)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..extras import require

if TYPE_CHECKING:
    from ..draft import PredictedAcceptance
    from ..engine_log import EngineLog
    from ..model import Report
    from ..progress import Progress

F = Callable[..., Any]


def draft_options(f: F) -> F:
    """``--draft``, ``--target-model``, ``--num-steps``, ``--topk``, ``--num-draft-tokens``, ``--draft-dtype``."""
    for d in reversed(
        [
            click.option(
                "--draft",
                "draft_dir",
                type=click.Path(path_type=str),
                default=None,
                help="The deployed EAGLE-3 draft's folder (config.json + weights): predict its acceptance "
                "length on both sides' hidden states (runs the draft with torch: pip install 'hsdiff[draft]').",
            ),
            click.option(
                "--target-model",
                type=click.Path(path_type=str),
                default=None,
                help="The target model's folder: embeddings when the draft has none, lm_head for the greedy "
                "reference (default: the folder of --model-config / --target-config).",
            ),
            click.option(
                "--num-steps",
                type=click.IntRange(min=1),
                default=5,
                show_default=True,
                help="Drafting steps per verification (SGLang --speculative-num-steps).",
            ),
            click.option(
                "--topk",
                type=click.IntRange(min=1),
                default=1,
                show_default=True,
                help="Branching per step (SGLang --speculative-eagle-topk).",
            ),
            click.option(
                "--num-draft-tokens",
                type=click.IntRange(min=2),
                default=None,
                help="Tokens per verification, the root included (SGLang --speculative-num-draft-tokens; "
                "default num-steps + 1 for top-k 1).",
            ),
            click.option(
                "--draft-dtype",
                type=click.Choice(["fp32", "bf16"]),
                default="fp32",
                show_default=True,
                help="Precision of the draft's CPU forward.",
            ),
            click.option(
                "--acceptance-plot",
                type=click.Path(path_type=str),
                default=None,
                help="With --draft: save a PNG of the predicted acceptance length of every setting.",
            ),
            click.option(
                "--engine-log",
                type=click.Path(path_type=str),
                default=None,
                metavar="FILE",
                help="The engine's own log: vLLM's 'Using auxiliary layers from speculative config' line (the "
                "ids it chose) and its 'SpecDecoding metrics' lines, or SGLang's 'accept len' lines (the "
                "acceptance it measured).",
            ),
        ]
    ):
        f = d(f)
    return f


def engine_log(kw: dict) -> EngineLog | None:
    """The :class:`~hsdiff.engine_log.EngineLog` of ``--engine-log`` (read once, kept in ``kw``), or None."""
    path = kw.get("engine_log")
    if path is None or not isinstance(path, str):
        return path
    from ..engine_log import read_engine_log

    kw["engine_log"] = read_engine_log(path)
    return kw["engine_log"]


def attach(
    record: Any,
    report: Any,
    train: str,
    infer: str,
    kw: dict,
    *,
    target_config: str | None = None,
    minimum: float | None = None,
    progress: Progress | None = None,
) -> tuple[Any, str | None]:
    """With ``--draft`` or ``--engine-log``: ``record`` (a report or gate result) carrying the prediction and
    the engine's measured acceptance, and their text; else unchanged."""
    plot = kw.pop("acceptance_plot", None)
    log = engine_log(kw)
    kw.pop("engine_log", None)
    measured = None if log is None else log.acceptance
    if minimum is not None and not kw.get("draft_dir") and measured is None:
        raise click.UsageError("--min-acceptance needs --draft DIR, or an --engine-log with acceptance lines")
    prediction = predict(report, train, infer, kw, target_config, progress)
    if prediction is None and log is None:  # neither, or the comparison did not run (the gate fails on its own)
        return record, None
    from ..draft.attach import acceptance_check, measured_text, prediction_text, with_prediction
    from ..engine_log import ids_check

    checks = []
    if hasattr(record, "checks"):
        if log is not None and record.ids is not None:
            checks.append(ids_check(log, record.ids))
        if prediction is not None or measured is not None:
            checks.append(acceptance_check(prediction, minimum, measured))
    text = [] if prediction is None else [prediction_text(prediction)]
    if measured is not None:
        text.append(measured_text(measured, prediction))
    if plot and prediction is not None:
        require("matplotlib", "plot", "--acceptance-plot").use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(9, 4))
        prediction.plot(ax=ax)
        fig.tight_layout()
        fig.savefig(plot, dpi=120)
        plt.close(fig)
    out = with_prediction(record, prediction, tuple(c for c in checks if c is not None), log)
    return out, ("\n" + "\n".join(text)) if text else None


def predict(
    report: Report | None,
    train: str,
    infer: str,
    kw: dict,
    target_config: str | None = None,
    progress: Progress | None = None,
) -> PredictedAcceptance | None:
    """The prediction for ``--draft`` (None without it); pops the draft options from ``kw``."""
    opts = {
        k: kw.pop(k, None)
        for k in ("draft_dir", "target_model", "num_steps", "topk", "num_draft_tokens", "draft_dtype")
    }
    if not opts["draft_dir"] or report is None:
        return None
    torch = require("torch", "draft", "--draft")

    from ..draft import Speculation, predict_acceptance

    target = opts["target_model"]
    if target is None:  # the folder of the target's config.json, when its weights are there too
        derived = Path(target_config or kw.get("model_config") or ".")
        folder = derived.parent if derived.is_file() else derived
        if target_config or kw.get("model_config"):
            target = str(folder) if any(folder.glob("*.safetensors")) or any(folder.glob("*.bin")) else None
    tree = Speculation(opts["num_steps"] or 5, opts["topk"] or 1, opts["num_draft_tokens"])
    return predict_acceptance(
        train,
        infer,
        report,
        opts["draft_dir"],
        target=target,
        tree=tree,
        dtype=torch.bfloat16 if opts["draft_dtype"] == "bf16" else torch.float32,
        progress=progress,
    )
