"""``--draft DIR`` and its settings, shared by ``compare`` and ``gate``: predicted acceptance."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

F = Callable[..., Any]


def draft_options(f: F) -> F:
    """``--draft``, ``--target-model``, ``--num-steps``, ``--topk``, ``--num-draft-tokens``, ``--draft-dtype``."""
    for d in reversed([
        click.option("--draft", "draft_dir", type=click.Path(path_type=str), default=None,
                     help="The deployed EAGLE-3 draft's folder (config.json + weights): predict its acceptance "
                     "length on both sides' hidden states."),
        click.option("--target-model", type=click.Path(path_type=str), default=None,
                     help="The target model's folder: embeddings when the draft has none, lm_head for the greedy "
                     "reference (default: the folder of --model-config / --target-config)."),
        click.option("--num-steps", type=click.IntRange(min=1), default=5, show_default=True,
                     help="Drafting steps per verification (SGLang --speculative-num-steps)."),
        click.option("--topk", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Branching per step (SGLang --speculative-eagle-topk)."),
        click.option("--num-draft-tokens", type=click.IntRange(min=2), default=None,
                     help="Tokens per verification, the root included (SGLang --speculative-num-draft-tokens; "
                     "default num-steps + 1 for top-k 1)."),
        click.option("--draft-dtype", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True,
                     help="Precision of the draft's CPU forward."),
        click.option("--acceptance-plot", type=click.Path(path_type=str), default=None,
                     help="With --draft: save a PNG of the predicted acceptance length of every setting."),
    ]):
        f = d(f)
    return f


def attach(record: Any, report: Any, train: str, infer: str, kw: dict, *, target_config: str | None = None,
           minimum: float | None = None) -> tuple[Any, str | None]:
    """With ``--draft``: ``record`` (a report or gate result) carrying the prediction, and its text; else unchanged."""
    plot = kw.pop("acceptance_plot", None)
    if minimum is not None and not kw.get("draft_dir"):
        raise click.UsageError("--min-acceptance needs --draft DIR")
    prediction = predict(report, train, infer, kw, target_config)
    if prediction is None:  # no --draft, or the comparison did not run (the gate fails on its own)
        return record, None
    from ..draft.attach import acceptance_check, prediction_text, with_prediction

    check = acceptance_check(prediction, minimum) if hasattr(record, "checks") else None
    if plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(9, 4))
        prediction.plot(ax=ax)
        fig.tight_layout()
        fig.savefig(plot, dpi=120)
        plt.close(fig)
    return with_prediction(record, prediction, check), "\n" + prediction_text(prediction)


def predict(report: Any, train: str, infer: str, kw: dict, target_config: str | None = None) -> Any:
    """The prediction for ``--draft`` (None without it); pops the draft options from ``kw``."""
    opts = {k: kw.pop(k, None) for k in ("draft_dir", "target_model", "num_steps", "topk", "num_draft_tokens",
                                         "draft_dtype")}
    if not opts["draft_dir"] or report is None:
        return None
    import torch

    from ..draft import predict_acceptance

    target = opts["target_model"]
    if target is None:  # the folder of the target's config.json, when its weights are there too
        derived = Path(target_config or kw.get("model_config") or ".")
        folder = derived.parent if derived.is_file() else derived
        if target_config or kw.get("model_config"):
            target = str(folder) if any(folder.glob("*.safetensors")) or any(folder.glob("*.bin")) else None
    return predict_acceptance(
        train, infer, report, opts["draft_dir"], target=target, num_steps=opts["num_steps"] or 5,
        topk=opts["topk"] or 1, num_draft_tokens=opts["num_draft_tokens"],
        dtype=torch.bfloat16 if opts["draft_dtype"] == "bf16" else torch.float32,
    )
