"""Named classes of held-out cases, each where a real user's evidence is thin or unusual, graded like the
deployments: per class, how many should pass / should fail and what hsdiff answered, and every slot's
answer against the truth (right / null / wrong, with its confidence).

A class is a function ``seed -> Case`` registered in :data:`CLASSES`; a :class:`Case` writes both sides
(real SmolLM2-135M states, ``fixtures/smollm2/states``: fp32 training side, bf16 engine side) and says
what a correct tool answers. ``make calibrate`` prints a table per class on held-out seeds; CI runs a
few fit seeds of each (``tests/test_calibration.py``).
"""

from __future__ import annotations

import json
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


# ----------------------------------------------------------------------------- printed evidence, thin
#: How the engine's captures relate to the training slots: right, every slot one layer off, the
#: embeddings in slot 0 with the rest shifted by one slot (the seed's ``[-1, 2, 30]``), one slot one layer off.
ENGINE_WAYS = ("right", "right", "layer-off", "embeddings-first", "one-slot-off")


def _deployment(rng: random.Random, train_b: list[int]) -> tuple[str, str, list[int], list[int]]:
    """(way, engine, configured ids, captured boundaries) of a server fed ``train_b``'s draft."""
    way = rng.choice(ENGINE_WAYS)
    captured = list(train_b)
    if way == "layer-off":
        d = rng.choice([1, -1])
        captured = [b + d for b in train_b]
    elif way == "embeddings-first":
        captured = [0, *train_b[:-1]]
    elif way == "one-slot-off":
        i = rng.randrange(len(train_b))
        moves = [b for b in (train_b[i] - 1, train_b[i] + 1) if 0 <= b < B.L and b not in train_b]
        captured[i] = rng.choice(moves)
        captured.sort()
    engine = rng.choice(["sglang", "vllm"])
    ids = [b - 1 for b in captured] if engine == "sglang" else captured  # SGLang's llama rule: B = id + 1
    return way, engine, ids, captured


@dataclass(frozen=True)
class _Train:
    """A SpecForge training dump of ``samples`` (the printed one among them) at ``slots``, with the draft's
    config naming them (SpecForge's O-index ids) or without it."""

    samples: tuple[int, ...]
    slots: tuple[int, ...]
    labelled: bool

    @classmethod
    def draw(cls, rng: random.Random, sample: int, train_b: list[int]) -> _Train:
        return cls(
            tuple(sorted({sample, *rng.sample(range(3), rng.choice([0, 1, 2]))})), tuple(train_b), rng.random() < 0.5
        )

    def write(self, root: Path) -> Path:
        train = B.specforge(root / "train", self.samples, self.slots)
        if self.labelled:
            B.draft_config(train / "config.json", [b - 1 for b in self.slots])
        return train

    def __str__(self) -> str:
        return f"train B{list(self.slots)} samples {list(self.samples)}{' labelled' if self.labelled else ''}"


def _train_slots(rng: random.Random, k: int) -> list[int]:
    return sorted(rng.sample(range(1, B.L - 1), k))  # B1..B28: one layer deeper is still a boundary


def _torch_print(t: torch.Tensor) -> str:
    torch.set_printoptions(profile="default")  # summarised past 1000 elements, 3 edge items
    return str(t)


LOG_HEAD = "[2026-12-07 10:02:11 TP0] Prefill batch. #new-seq: 1, #new-token: {n}, #cached-token: 0\n"


@_class("summarised-print-concat")
def summarised_concat(seed: int) -> Case:
    """``print("aux:", torch.cat(aux_hidden_states, -1))`` in bf16: torch's summarised print of the
    concatenated slots (the first three columns of slot 0 and the last three of slot k-1, of the first and
    last three tokens), for k = 2..4, the whole prompt or a window of it. A right deployment cannot be told
    from its neighbours by 18 values a slot, and the slots between are not printed: either answer but a
    pass is defensible; a wrong one must never pass."""
    rng = random.Random(f"summarised-{seed}")
    sample = rng.randrange(3)
    k = rng.choice([2, 3, 3, 4])
    train_b = _train_slots(rng, k)
    way, engine, ids, captured = _deployment(rng, train_b)
    tr = _Train.draw(rng, sample, train_b)
    t = int(B.states(sample)["input_ids"].numel())
    a = rng.choice([0, 0, rng.randrange(t - 1)])
    z = rng.choice([t, rng.randrange(a + 1, t + 1)])
    label = rng.choice(["aux:", "eagle3 aux_hidden_states after cat:", "[eagle3] hidden states fed to the draft"])
    newline = rng.random() < 0.3
    should_pass = None if way == "right" else False

    def write(root: Path) -> tuple[Path, Path]:
        train = tr.write(root)
        aux = torch.cat([B.states(sample)["bf16"][b][a:z] for b in captured], dim=-1)
        log = root / "server.log"
        sep = "\n" if newline else " "
        log.write_text(LOG_HEAD.format(n=z - a) + f"[2026-12-07 10:02:11 TP0] {label}{sep}{_torch_print(aux)}\n")
        return train, log

    return Case(
        "summarised-print-concat",
        seed,
        f"{tr}, printed sample {sample}; {way}: {engine} ids {ids} captures B{captured}; tokens {a}:{z}",
        train_b,
        should_pass,
        write,
        {"engine": engine, "layer_ids": ids},
    )


def _norms(sample: int, b: int, a: int, z: int, dtype: str) -> list[float]:
    h = B.states(sample)["bf16"][b][a:z]
    n = h.norm(dim=-1) if dtype == "bf16" else h.float().norm(dim=-1)
    return [float(x) for x in n.float()]


@_class("norm-list-offset")
def norm_list_offset(seed: int) -> Case:
    """A list of per-token norms per aux slot (``h[a:b].norm(dim=-1).tolist()``), starting at a random
    token, its positions printed or not: weak evidence that can rule a layer out (a mismatch) but never
    prove one, so a right deployment is inconclusive at best and a wrong one must never pass."""
    rng = random.Random(f"norm-list-{seed}")
    sample = rng.randrange(3)
    k = rng.choice([2, 3, 3, 4])
    train_b = _train_slots(rng, k)
    way, engine, ids, captured = _deployment(rng, train_b)
    tr = _Train.draw(rng, sample, train_b)
    t = int(B.states(sample)["input_ids"].numel())
    a = rng.choice([0, rng.randrange(1, 9)])
    z = rng.randrange(min(t, a + 6), t + 1)
    style = rng.choice(["slot-list", "layer-slice", "unlabelled", "torch"])
    dtype = rng.choice(["bf16", "fp32"])

    def write(root: Path) -> tuple[Path, Path]:
        train = tr.write(root)
        lines = [LOG_HEAD.format(n=t).rstrip("\n")]
        for j, (i, b) in enumerate(zip(ids, captured)):
            norms = _norms(sample, b, a, z, dtype)
            pre = "[2026-12-07 10:02:11 TP0] "
            if style == "slot-list":
                lines.append(f"{pre}eagle3 aux slot {j} norms: {[round(x, 4) for x in norms]}")
            elif style == "layer-slice":
                lines.append(f"{pre}layer {i}: h[{a}:{z}].norm(dim=-1).tolist()={norms}")
            elif style == "unlabelled":
                lines.append(f"{pre}aux hidden norms={[round(x, 3) for x in norms]}")
            else:
                n = torch.tensor(norms, dtype=torch.bfloat16 if dtype == "bf16" else torch.float32)
                lines.append(f"{pre}aux_hidden_states[{j}].norm(dim=-1) = {_torch_print(n)}")
        log = root / "server.log"
        log.write_text("\n".join(lines) + "\n")
        return train, log

    return Case(
        "norm-list-offset",
        seed,
        f"{tr}, printed sample {sample}; {way}: {engine} ids {ids} captures B{captured}; norms {style} "
        f"{dtype} tokens {a}:{z}",
        train_b,
        None if way == "right" else False,
        write,
        {"engine": engine, "layer_ids": ids},
    )


NORM_SHAPES = ("lines", "json-tokens", "json-lists")


@_class("norm-lines")
def norm_lines(seed: int) -> Case:
    """Norm-only logs in the three shapes users print them: ``layer=2 token=1 norm=105.52`` a token a line
    (layer by layer, or token by token across the layers), the same as JSON lines, and JSON lines of one
    list per slot (``{"slot": 0, "norms": [...]}``), from a random first token. Weak evidence: a right
    deployment is inconclusive at best; a wrong one must never pass."""
    rng = random.Random(f"norm-lines-{seed}")
    sample = rng.randrange(3)
    k = rng.choice([2, 3, 3, 4])
    train_b = _train_slots(rng, k)
    way, engine, ids, captured = _deployment(rng, train_b)
    tr = _Train.draw(rng, sample, train_b)
    t = int(B.states(sample)["input_ids"].numel())
    a = rng.choice([0, 0, rng.randrange(1, 9)])
    z = rng.randrange(min(t, a + 6), t + 1)
    shape = rng.choice(NORM_SHAPES)
    by_token = rng.random() < 0.5  # token-major: every layer's norm of token 0, then of token 1 ...
    digits = rng.choice([2, 4])

    def write(root: Path) -> tuple[Path, Path]:
        train = tr.write(root)
        norms = [_norms(sample, b, a, z, "fp32") for b in captured]
        lines = [LOG_HEAD.format(n=t).rstrip("\n")]
        if shape == "json-lists":
            lines += [json.dumps({"slot": j, "norms": [round(x, digits) for x in n]}) for j, n in enumerate(norms)]
        else:
            cells = (
                [(j, p) for p in range(z - a) for j in range(len(ids))]
                if by_token
                else [(j, p) for j in range(len(ids)) for p in range(z - a)]
            )
            for j, p in cells:
                x = round(norms[j][p], digits)
                if shape == "lines":
                    lines.append(f"[2026-12-07 10:02:11 TP0] layer={ids[j]} token={a + p} norm={x}")
                else:
                    lines.append(json.dumps({"layer": ids[j], "token": a + p, "norm": x}))
        log = root / "norms.log"
        log.write_text("\n".join(lines) + "\n")
        return train, log

    return Case(
        "norm-lines",
        seed,
        f"{tr}, printed sample {sample}; {way}: {engine} ids {ids} captures B{captured}; {shape}"
        f"{' token-major' if by_token and shape != 'json-lists' else ''} tokens {a}:{z}",
        train_b,
        None if way == "right" else False,
        write,
        {"engine": engine, "layer_ids": ids},
    )


# ----------------------------------------------------------------------------- dumper tags that count outputs
@_class("dump-tags-shifted")
def dump_tags(seed: int) -> Case:
    """An SGLang dumper run of per-layer tensors tagged with a layer id (``dumper.dump(name, h,
    layer_id=i)``, a neutral name), called before each decoder layer (tag i holds Bi) or after it (tag i
    holds B(i+1): the tags lie one layer), over every layer or around the configured ones only, over the
    whole request or its positions with the repeated tokens left out (no embedding lookup to check the
    tags by), training labels absent or right, SGLang ids right or one layer deep. Wrong ids must never
    pass; where nothing can tell the tags' counting, an honest inconclusive is right."""
    rng = random.Random(f"tags-{seed}")
    sample = rng.randrange(3)
    k = rng.choice([1, 2, 3])
    train_b = sorted(rng.sample(range(2, B.L - 2), k))
    after = rng.random() < 0.5
    every = rng.random() < 0.5
    repeats = rng.random() < 0.6
    labels = rng.choice(["none", "right"])
    off = rng.choice([0, 0, 1])
    ids = [b - 1 + off for b in train_b]
    s = real(sample)
    positions = list(range(len(s["input_ids"])))
    if not repeats:
        first = {t: p for p, t in reversed(list(enumerate(s["input_ids"].tolist())))}
        positions = sorted(first.values())
    captured = [b + off for b in train_b]
    tags = range(B.L) if every else sorted({t for b in captured for t in (b - 1, b, b + 1)} & set(range(B.L)))
    checkable = every and repeats
    should_pass: bool | None
    if off:
        should_pass = False
    elif after and not checkable:
        should_pass = None  # the tags say one layer less and nothing confirms or refutes them
    else:
        should_pass = True

    def write(root: Path) -> tuple[Path, Path]:
        train = root / "train"
        _spec_train(train, s, train_b, sample)
        if labels == "right":
            B.draft_config(train / "config.json", [b - 1 for b in train_b])
        idx = torch.tensor(positions)
        recs = [("input_ids", s["input_ids"][idx], {})]
        recs += [("hidden_states", s["bf16"][t + 1 if after else t][idx], {"layer_id": t}) for t in tags]
        dumper_records(root / "infer" / "dump_20261207_000000_000001", recs)
        return train, root / "infer"

    return Case(
        "dump-tags-shifted",
        seed,
        f"train B{train_b} (labels {labels}); ids {ids}; tags {'after' if after else 'before'} each layer, "
        f"{'every layer' if every else 'around the configured'}, {'with' if repeats else 'without'} repeated tokens",
        train_b,
        should_pass,
        write,
        {"engine": "sglang", "layer_ids": ids},
    )


# ----------------------------------------------------------------------------- training labels one layer deep
@_class("training-labels-shifted")
def labels_shifted(seed: int) -> Case:
    """The training side's config.json names every slot one layer deeper than the files hold (ids written
    in another engine's convention), and the engine runs either those ids (one layer deeper: a wrong
    deployment whose fix must not repeat them) or the right ones; the dump holds the configured captures
    only, or with their neighbours, or every layer."""
    rng = random.Random(f"labels-{seed}")
    sample = rng.randrange(3)
    k = rng.choice([1, 2, 3])
    train_b = sorted(rng.sample(range(2, B.L - 3), k))
    engine = rng.choice(["sglang", "vllm"])
    runs_labels = rng.random() < 0.7
    dump = rng.choice(["configured", "neighbours", "every"])
    labelled = [b + 1 for b in train_b]  # what the training config.json says, as boundaries
    captured = labelled if runs_labels else list(train_b)
    ids = [b - 1 for b in captured] if engine == "sglang" else list(captured)
    s = real(sample)
    should_pass = None if not runs_labels else False  # right ids beside wrong labels: either answer defensible

    def write(root: Path) -> tuple[Path, Path]:
        train = root / "train"
        _spec_train(train, s, train_b, sample)
        B.draft_config(train / "config.json", [b - 1 for b in labelled])  # SpecForge writes SGLang's ids
        extra = (
            range(B.L)
            if dump == "every"
            else sorted({n for b in captured for n in (b - 1, b + 1)} - set(captured))
            if dump == "neighbours"
            else ()
        )
        if engine == "vllm":
            infer = root / "infer"
            infer.mkdir(parents=True)
            hs = torch.stack([s["bf16"][b] for b in captured], dim=1).contiguous()
            save_file({"hidden_states": hs, "token_ids": s["input_ids"].clone()}, str(infer / "req-0.safetensors"))
            if extra:
                recs = [("input_ids", s["input_ids"], {})]
                recs += [("layer_input", s["bf16"][b], {"layer_id": b}) for b in extra]
                dumper_records(infer / "dump_20261207_000000_000001", recs)
            return train, infer
        aux = torch.cat([s["bf16"][b] for b in captured], dim=-1)
        recs = [("input_ids", s["input_ids"], {}), ("aux_hidden_states", aux, {})]
        recs += [("layer_input", s["bf16"][b], {"layer_id": b}) for b in extra]
        dumper_records(root / "infer" / "dump_20261207_000000_000001", recs)
        return train, root / "infer"

    return Case(
        "training-labels-shifted",
        seed,
        f"train B{train_b}, labels B{labelled}; {engine} ids {ids} ({'the labels' if runs_labels else 'right'}); "
        f"dump {dump}",
        train_b,
        should_pass,
        write,
        {"engine": engine, "layer_ids": ids},
    )


def _spec_train(d: Path, s: dict, train_b: list[int], sample: int) -> None:
    rows = d / "rows_0-2000"
    rows.mkdir(parents=True)
    ids = s["input_ids"]
    torch.save(
        {
            "input_ids": ids.clone(),
            "loss_mask": torch.ones_like(ids),
            "aux_hidden_state": torch.cat([s["fp32"][b] for b in train_b], dim=-1)[None].clone(),
            "hidden_state": s["fp32.final"][None].clone(),
        },
        rows / f"data_{sample}.ckpt",
    )


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
