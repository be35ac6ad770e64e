"""Named classes of held-out cases, each where a real user's evidence is thin or unusual, graded like the
deployments: per class, how many should pass / should fail and what hsdiff answered, and every slot's
answer against the truth (right / null / wrong, with its confidence).

A class is a function ``seed -> Case`` registered in :data:`CLASSES`; a :class:`Case` writes both sides
(real SmolLM2-135M states, ``fixtures/smollm2/states``: fp32 training side, bf16 engine side) and says
what a correct tool answers. ``make calibrate`` prints a table per class on held-out seeds; CI runs a
few fit seeds of each (``tests/test_calibration.py``).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .. import builders as B
from .write import dumper_records

FINAL = B.L + 1  # the final post-norm state's boundary index on SmolLM2 (30 layers)


@dataclass
class Case:
    name: str  # the class
    seed: int
    about: str
    truth: list[int]  # per training slot, its boundary (FINAL: the final post-norm state)
    should_pass: bool | None
    write: Callable[[Path], tuple[Path, Path]] = field(repr=False)
    kwargs: dict = field(default_factory=dict)


CLASSES: dict[str, Callable[[int], Case]] = {}


def _class(name: str) -> Callable[[Callable[[int], Case]], Callable[[int], Case]]:
    def deco(f: Callable[[int], Case]) -> Callable[[int], Case]:
        CLASSES[name] = f
        return f

    return deco


@cache
def real(sample: int) -> dict[str, torch.Tensor]:
    """``fp32``/``bf16`` [L+1, T, H] (B0..B30, B30 before the final norm), ``fp32.final``/``bf16.final``
    [T, H] (after it), ``input_ids`` [T] of SmolLM2 sample ``sample``."""
    s = load_file(str(B.SMOLLM2 / "states" / f"sample-{sample}.safetensors"))
    return {
        "fp32": s["fp32.boundaries"],
        "bf16": s["bf16.boundaries"],
        "fp32.final": s["fp32.final"],
        "bf16.final": s["bf16.final"],
        "input_ids": s["input_ids"],
    }


def _state(s: dict, b: int, run: str) -> torch.Tensor:
    return s[f"{run}.final"] if b == FINAL else s[run][b]


# ----------------------------------------------------------------------------- the final post-norm state
#: How an engine takes (or cannot take) a training slot that holds the final post-norm state.
FINAL_WAYS = ("vllm-last-layer", "vllm-other", "sglang", "trtllm-two-model", "trtllm-one-model", "one-id-short")


@_class("final-post-norm-slot")
def final_slot(seed: int) -> Case:
    """The training aux tensor's last slot is the final post-norm state (ModelOpt's HF script, TensorRT-LLM's
    SaveHiddenStates with -1 listed, or SpecForge-format data of the same), against each engine's way of
    capturing it: vLLM and SGLang have no id for it (the last layer's output they capture is pre-norm);
    TensorRT-LLM's two-model path serves -1 last, its one-model path puts -1 first; and ids one short of
    the slots. Only the two-model path with the right ids should pass."""
    rng = random.Random(f"final-{seed}")
    sample = rng.randrange(3)
    k = rng.choice([2, 3])
    train_b = [*sorted(rng.sample(range(1, B.L - 1), k - 1)), FINAL]
    fmt = rng.choice(["modelopt", "specforge", "trtllm"])
    way = rng.choice(FINAL_WAYS)
    off = rng.choice([0, 0, 1])  # trtllm-two-model: the layers one deeper (a wrong deployment)
    with_depth = rng.random() < 0.5
    s = real(sample)
    inner = train_b[:-1]
    if way == "vllm-last-layer":
        engine, ids, captured, dump = "vllm", [*inner, B.L], [*inner, B.L], "vllm"
    elif way == "vllm-other":
        extra = rng.choice([b for b in range(1, B.L) if b not in inner])
        captured = sorted([*inner, extra])
        engine, ids, dump = "vllm", captured, "vllm"
    elif way == "sglang":
        captured = [*inner, B.L - 1] if B.L - 1 not in inner else [*inner, B.L - 2]
        captured = sorted(captured)
        engine, ids, dump = "sglang", [b - 1 for b in captured], "dumper"
    elif way == "trtllm-two-model":
        shifted = [b + off for b in inner]
        engine, ids, dump = "trtllm", [b - 1 for b in shifted] + [-1], rng.choice(["stack", "save"])
        captured = [*shifted, FINAL]
    elif way == "trtllm-one-model":
        engine, ids, dump = "trtllm", [-1] + [b - 1 for b in inner], "stack"
        captured = [FINAL, *inner]
    else:  # the ids name the layers but leave out the final state: the fc is fed a slot short
        engine, ids, dump, captured = "vllm", list(inner), "vllm", list(inner)
    version = {"trtllm-two-model": "two-model", "trtllm-one-model": "main"}.get(way)
    should_pass = way == "trtllm-two-model" and off == 0
    kwargs: dict = {"engine": engine, "layer_ids": ids}
    if version:
        kwargs["engine_version"] = version
    if with_depth or engine == "trtllm":  # TensorRT-LLM's -1 needs the depth to be named; a stack shows it
        kwargs["num_layers"] = B.L

    def write(root: Path) -> tuple[Path, Path]:
        train = _final_train(root / "train", s, train_b, fmt, sample)
        infer = root / "infer"
        if dump == "vllm":
            infer.mkdir(parents=True)
            hs = torch.stack([_state(s, b, "bf16") for b in captured], dim=1).contiguous()
            save_file({"hidden_states": hs, "token_ids": s["input_ids"].clone()}, str(infer / "req-0.safetensors"))
        elif dump == "dumper":
            aux = torch.cat([_state(s, b, "bf16") for b in captured], dim=-1)
            dumper_records(infer / "dump_20261207_000000_000001", [("input_ids", s["input_ids"], {}), ("aux", aux, {})])
        elif dump == "save":  # SaveHiddenStates on the engine side: the buffer in layer order, -1 last
            infer.mkdir(parents=True)
            aux = torch.cat([_state(s, b, "bf16") for b in captured], dim=-1)
            torch.save(
                [{"id": 1, "input_ids": s["input_ids"], "hidden_state": s["bf16.final"], "aux_hidden_states": aux}],
                infer / "save_1.pt",
            )
        else:  # every boundary as HF's output_hidden_states gives them: [L] after the final norm
            infer.mkdir(parents=True)
            stack = torch.cat([s["bf16"][: B.L], s["bf16.final"][None]]).contiguous()
            save_file({"hidden_states": stack, "input_ids": s["input_ids"].clone()}, str(infer / "hf.safetensors"))
        return train, infer

    return Case(
        "final-post-norm-slot",
        seed,
        f"train {fmt} B{train_b[:-1]}+final; {way} ids {ids}"
        + (" (+1 layer)" if off and way == "trtllm-two-model" else "")
        + f"; dump {dump}{'; depth given' if 'num_layers' in kwargs else ''}",
        train_b,
        should_pass,
        write,
        kwargs,
    )


def _final_train(d: Path, s: dict, train_b: list[int], fmt: str, sample: int) -> Path:
    aux = torch.cat([_state(s, b, "fp32") for b in train_b], dim=-1)
    final = s["fp32.final"]
    ids = s["input_ids"]
    if fmt == "modelopt":
        d.mkdir(parents=True)
        torch.save(
            {
                "input_ids": ids.clone(),
                "hidden_states": final.clone(),
                "aux_hidden_states": aux.clone(),
                "conversation_id": f"conv-{sample}",
            },
            d / f"conv-{sample}.pt",
        )
    elif fmt == "trtllm":
        d.mkdir(parents=True)
        torch.save(
            [{"id": 1, "input_ids": ids.clone(), "hidden_state": final.clone(), "aux_hidden_states": aux}],
            d / "data_1.pt",
        )
    else:
        rows = d / "rows_0-2000"
        rows.mkdir(parents=True)
        torch.save(
            {
                "input_ids": ids.clone(),
                "loss_mask": torch.ones_like(ids),
                "aux_hidden_state": aux[None].clone(),
                "hidden_state": final[None].clone(),
            },
            rows / f"data_{sample}.ckpt",
        )
    return d


# ----------------------------------------------------------------------------- grading
def outcome(case: Case, root: Path) -> dict:
    """``case`` through ``hsdiff.compare``: exit code, verdict, and per slot right / null / wrong (the slot's
    boundary, or the boundary its recommended id stands for) with its confidence."""
    import hsdiff
    from hsdiff.errors import HsdiffError

    train, infer = case.write(root)
    try:
        r = hsdiff.compare(train, infer, **case.kwargs)
    except HsdiffError as e:
        return {
            "class": case.name,
            "seed": case.seed,
            "case": case.about,
            "should_pass": case.should_pass,
            "exit_code": 2,
            "verdict": "error",
            "error": str(e),
            "slots": [("null", 0.0)] * len(case.truth),
        }
    rec = list(r.recommended.boundary_indices or ())
    slots = []
    for i, b in enumerate(case.truth):
        s = r.slots[i] if len(r.slots) == len(case.truth) else None
        got = {x for x in (None if s is None else s.boundary_index, rec[i] if i < len(rec) else None) if x is not None}
        slots.append(("null" if not got else "right" if got == {b} else "wrong", 0.0 if s is None else s.confidence))
    return {
        "class": case.name,
        "seed": case.seed,
        "case": case.about,
        "should_pass": case.should_pass,
        "exit_code": int(r.exit_code),
        "verdict": str(r.verdict),
        "slots": slots,
        "slots_read": len(r.slots),
    }


def table(outcomes: list[dict]) -> str:
    """Markdown: per class, the cases that should pass / should fail / either, each as n: exit 0 /
    inconclusive / mismatch (errors as exit 2), and the slot answers."""
    seeds = [o["seed"] for o in outcomes]
    head = (
        "| class | cases | should pass, n: exit 0 / inconclusive / mismatch | should fail, n: exit 0 / inconclusive "
        "/ mismatch | either, n: exit 0 / inconclusive / mismatch | slots, n: right / null / wrong "
        "| wrong at confidence >= 0.9 | exit 2 |"
    )
    rows = [
        f"Held-out cases per class (seeds {min(seeds, default=0)}..{max(seeds, default=0)}, "
        "`tests/scenarios/classes.py`):",
        "",
        head,
        "|---|---:|---|---|---|---|---:|---:|",
    ]
    for name in CLASSES:
        sel = [o for o in outcomes if o["class"] == name]
        if not sel:
            continue

        def exits(want: bool | None, sel: list[dict] = sel) -> str:
            g = [o for o in sel if o["should_pass"] is want]
            return (
                f"{len(g)}: {sum(o['exit_code'] == 0 for o in g)} / {sum(o['verdict'] == 'inconclusive' for o in g)} "
                f"/ {sum(o['verdict'] == 'mismatch' for o in g)}"
            )

        slots = [x for o in sel for x in o["slots"]]
        n = [sum(1 for k, _ in slots if k == want) for want in ("right", "null", "wrong")]
        wrong = sum(1 for k, c in slots if k == "wrong" and c >= 0.9)
        errors = sum(o["exit_code"] == 2 for o in sel)
        rows.append(
            f"| {name} | {len(sel)} | {exits(True)} | {exits(False)} | {exits(None)} "
            f"| {len(slots)}: {n[0]} / {n[1]} / {n[2]} | **{wrong}** | {errors} |"
        )
    return "\n".join(rows)
