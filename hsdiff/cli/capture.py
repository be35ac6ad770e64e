"""``hsdiff capture --model DIR --input SAMPLE --out DIR``."""

from __future__ import annotations

from pathlib import Path

import click

from ..samples import load_sample
from ._group import cli
from ._options import progress_bars

#: ``--dtype`` choices (the keys of :data:`hsdiff.capture.DTYPES`; that module imports torch, so it is
#: imported when the command runs, not when the CLI starts)
DTYPE_CHOICES = ("bf16", "bfloat16", "fp16", "float16", "fp32", "float32")

EPILOG = """\b
Example:
  hsdiff capture --model target/ --input train/rows_0-2000/data_1.ckpt --out ref/ --dtype bf16
  hsdiff compare train/ ref/
\b
Needs the capture extra: pip install "hsdiff[capture]".
"""


@cli.command("capture", epilog=EPILOG)
@click.option(
    "--model", "model_dir", required=True, type=click.Path(path_type=str), help="A Hugging Face model folder."
)
@click.option(
    "--input",
    "sample",
    required=True,
    type=click.Path(path_type=str),
    help='A training sample (any dump file hsdiff reads, or JSON {"input_ids": [...]}).',
)
@click.option("--sample", "name", default=None, help="Which sample, when --input holds several.")
@click.option(
    "--out", "out_dir", required=True, type=click.Path(path_type=str), help="Folder for the capture (created)."
)
@click.option("--dtype", type=click.Choice(sorted(DTYPE_CHOICES)), default="bf16", show_default=True)
@click.option("--device", default="cpu", show_default=True, help="torch device to run on.")
@click.option("--progress/--no-progress", default=None, help="Progress on stderr (default: when stderr is a terminal).")
def capture_cmd(model_dir, sample, name, out_dir, dtype, device, progress) -> None:
    """Run a Hugging Face model on a sample's token ids and write every boundary B0..BL (the last one
    before the final norm) with the ids: a ground-truth reference for hsdiff compare."""
    from ..capture import capture_hf, check_out_dir, write_capture

    s = load_sample(sample, name)
    out = Path(out_dir)
    check_out_dir(out, sample)
    result = capture_hf(model_dir, s.token_ids, dtype, device=device, progress=progress_bars(progress))
    path = write_capture(result, out / f"{s.name.replace(':', '_')}.safetensors")
    for w in result["warnings"]:
        click.echo(f"hsdiff: warning: {w}", err=True)
    hs = result["hidden_states"]
    click.echo(
        f"wrote {path}: B0..B{hs.shape[0] - 1} × {hs.shape[1]} tokens × {hs.shape[2]} ({dtype}), sample {s.name}"
    )
