"""``hsdiff fingerprint``: record a fingerprint of every layer of the target beside the draft."""

from __future__ import annotations

from pathlib import Path

import click

from ._group import cli
from ._options import progress_bars

EPILOG = """\b
Examples:
  hsdiff fingerprint --model target/ --train train/ --draft draft/         # draft/hsdiff-fingerprint.safetensors
  hsdiff fingerprint --from ref/ --train train/ --draft draft/              # hsdiff capture's all-layer dumps
  hsdiff fingerprint --model target/ --probes builtin --out fp.safetensors  # no training dump at hand
Then:
  hsdiff compare draft/hsdiff-fingerprint.safetensors sglang_dump/ --layer-ids 2,30,58
  hsdiff gate sglang_dump/ --fingerprint draft/hsdiff-fingerprint.safetensors --draft-config draft/
\b
--model needs the capture extra (pip install "hsdiff[capture]"); --from needs nothing beyond the core.
"""


@cli.command("fingerprint", epilog=EPILOG)
@click.option(
    "--model",
    "model_dir",
    type=click.Path(path_type=str),
    default=None,
    help="The target's Hugging Face folder: run here on the probes (CPU, or --device-map auto).",
)
@click.option(
    "--from",
    "from_dump",
    type=click.Path(path_type=str),
    default=None,
    help="An all-layer dump already on disk (hsdiff capture's output): no forward pass.",
)
@click.option(
    "--train",
    type=click.Path(path_type=str),
    default=None,
    help="The training dump: its first samples are the probes, and its slots are identified by value.",
)
@click.option(
    "--draft",
    "draft",
    type=click.Path(path_type=str),
    default=None,
    help="The draft's folder (or config.json): its kind and ids are recorded, and the file is written beside it.",
)
@click.option(
    "--out",
    type=click.Path(path_type=str),
    default=None,
    help="Where to write the fingerprint (default: beside the draft, hsdiff-fingerprint.safetensors).",
)
@click.option(
    "--dtype",
    type=click.Choice(["bf16", "fp16", "fp32"]),
    default="bf16",
    show_default=True,
    help="--model: the reference pass's dtype, the one the engine serves the target in.",
)
@click.option(
    "--noise-dtype",
    type=click.Choice(["fp32", "bf16", "fp16", "none"]),
    default="fp32",
    show_default=True,
    help="--model: a second pass whose difference from the reference is the noise floor (none: no second pass).",
)
@click.option(
    "--noise-from",
    type=click.Path(path_type=str),
    default=None,
    help="--from: an all-layer dump of the same tokens in other numerics, for the noise floor.",
)
@click.option(
    "--probes",
    type=click.Choice(["train", "builtin"]),
    default="train",
    show_default=True,
    help="The probes: the training dump's first samples, or built-in texts (tokenised by the target's tokenizer).",
)
@click.option(
    "--probe-tokens",
    type=click.IntRange(min=16, max=4096),
    default=256,
    show_default=True,
    help="Probe tokens to keep (each 132 bytes per boundary).",
)
@click.option(
    "--target-config",
    type=click.Path(path_type=str),
    default=None,
    help="--from: the target's config.json (its identity and depth; default: a config beside the dump).",
)
@click.option(
    "--train-engine",
    default="specforge",
    show_default=True,
    help="How the training dump's own labels count (its config.json's ids), said beside the values.",
)
@click.option("--device-map", default=None, help="--model: passed to from_pretrained, e.g. auto (needs accelerate).")
def fingerprint_cmd(
    model_dir,
    from_dump,
    train,
    draft,
    out,
    dtype,
    noise_dtype,
    noise_from,
    probes,
    probe_tokens,
    target_config,
    train_engine,
    device_map,
) -> None:
    """Record the target's every boundary on a few probes, as 64-number sketches, with the training
    slots identified by value: the file hsdiff compare and gate check any engine capture against."""
    from .. import fingerprint as fpr
    from ..fingerprint.sources import check_out

    if (model_dir is None) == (from_dump is None):
        raise click.UsageError("give one of --model TARGET_DIR or --from ALL_LAYER_DUMP")
    path = _out_path(out, draft)
    check_out(path, [p for p in (train, from_dump, noise_from) if p])
    if model_dir is not None:
        fp = fpr.from_model(
            model_dir,
            train=train,
            draft_config=draft,
            dtype=dtype,
            noise_dtype=None if noise_dtype == "none" else noise_dtype,
            probes=probes,
            device_map=device_map,
            train_engine=train_engine,
            budget=probe_tokens,
            progress=progress_bars(None),
        )
    else:
        fp = fpr.from_dump(
            from_dump,
            train=train,
            draft_config=draft,
            noise_from=noise_from,
            target_config=target_config,
            train_engine=train_engine,
            budget=probe_tokens,
        )
    _write(fp, path)


def _write(fp, path: Path) -> None:
    from .. import fingerprint as fpr

    written = fpr.write(fp, path)
    click.echo(f"wrote {written} ({written.stat().st_size / 1024:.0f} kB)")
    for line in fpr.summary(fpr.load(written)):
        click.echo(f"  {line}")


def _out_path(out: str | None, draft: str | None) -> Path:
    from ..fingerprint import FILENAME

    if out is not None:
        p = Path(out)
        return p / FILENAME if p.is_dir() else p
    if draft is None:
        raise click.UsageError("give --draft DIR (the fingerprint goes beside the draft) or --out PATH")
    d = Path(draft)
    return (d if d.is_dir() else d.parent) / FILENAME
