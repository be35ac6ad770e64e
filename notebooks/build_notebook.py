"""Writes notebooks/investigate.ipynb from the cells below (keeps the notebook reviewable as code)."""

from pathlib import Path

import nbformat as nbf

CELLS = [
    ("md", """# Investigating a collapsed acceptance rate with hsdiff

A draft model trained on a 61-layer target accepts ~19% of tokens on the SGLang server. The
training data and the server's capture are in `fixtures/seed/`. This notebook walks through the
investigation the way an engineer would, with hsdiff doing the arithmetic."""),
    ("code", """import os
from pathlib import Path

import hsdiff

ROOT = Path(os.environ.get("HSDIFF_ROOT", "..")).resolve()
SEED = ROOT / "fixtures" / "seed"
train = hsdiff.load(SEED / "train", side="train")
infer = hsdiff.load(SEED / "infer-wrong")
train, infer"""),
    ("md", """Both sides are read lazily: nothing is in memory until a tensor is compared. The training
side holds two SpecForge samples with three concatenated aux slots each; the server dumped what it
fed the draft (one `[T, 3·576]` tensor, two tensor-parallel replicas collapsed into one)."""),
    ("code", """[(c.origin.path, c.shape, c.dtype) for c in train.captures + infer.captures]"""),
    ("md", """## Compare, with the ids the server ran with"""),
    ("code", """report = hsdiff.compare(train, infer, layer_ids=[-1, 2, 30])
report"""),
    ("code", """print(report.cause)"""),
    ("code", """report.slots_frame()[["boundary_index", "layer_id", "evidence", "status", "confidence", "rel_err", "runner_up_err"]]"""),
    ("md", """Every pair that was scored, as a frame: the training slot, the inference capture, the token
offset the aligner found, and the errors."""),
    ("code", """scores = report.scores_frame()
scores.pivot_table(index="capture", columns="slot", values="rel_err", aggfunc="min").round(4)"""),
    ("code", """from hsdiff.report.plot import plot_scores

ax = plot_scores(report)"""),
    ("md", """## The same layers in every engine's convention"""),
    ("code", """report.recommended.by_engine"""),
    ("code", """hsdiff.translate([2, 30, 58], "sglang", "vllm", num_layers=61)"""),
    ("md", """## After the fix"""),
    ("code", """fixed = hsdiff.compare(SEED / "train", SEED / "infer-fixed", layer_ids=[2, 30, 58])
assert fixed.verdict == "ok", fixed.cause
fixed.verdict, fixed.recommended.ids"""),
]


def build() -> nbf.NotebookNode:
    nb = nbf.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbf.v4.new_markdown_cell(src) if kind == "md" else nbf.v4.new_code_cell(src) for kind, src in CELLS]
    return nb


if __name__ == "__main__":
    out = Path(__file__).with_name("investigate.ipynb")
    nbf.write(build(), out)
    print(f"wrote {out}")
