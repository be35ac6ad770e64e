"""Off-by-one deployments on deep targets: SmolLM2 depth up-scaled to 61 and 126 layers (the seed
fixture's recipe, :func:`tests.builders.deep_model`), where neighbouring boundaries differ by a few
percent, about as much as the engine's bf16 noise.

Every :class:`DeepCase` is one deployment: training slots at ``train_b`` (sample 1, fp32, SpecForge
layout), an SGLang server whose ids capture every slot ``shift`` layers off (bf16, SGLang dumper),
the dump holding only the configured captures or every boundary too, the training side labelled or
not. A correct gate never passes a shifted deployment; with every boundary dumped it recommends the
training layers.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

from .. import builders as B
from .generate import to_ids
from .write import dumper_records

SAMPLE = 1  # the training sample and the request the engine replays
#: Training slots per depth: early, middle and last third, the issue's cases and the EAGLE-3 default.
SLOTS = {
    61: ([3, 31, 59], [2, 30, 58], [8, 40, 55], [20], [50], [5, 47]),
    126: ([100, 110, 123], [3, 63, 124], [2, 63, 123], [20, 45, 90], [110], [40], [15, 85]),
}
SHIFTS = (0, 1, -1)
DUMPS = (
    "configured",
    "every",
)  # the configured captures only (one concatenated tensor, no labels), or every boundary tagged
LABELS = ("none", "right", "shifted")  # the training side's config.json: absent, agreeing, one layer off


@dataclass(frozen=True)
class DeepCase:
    depth: int
    train_b: tuple[int, ...]
    shift: int  # the engine captures train_b + shift
    dump: str
    label: str

    @property
    def capture_b(self) -> list[int]:
        return [b + self.shift for b in self.train_b]

    @property
    def layer_ids(self) -> list[int]:
        return to_ids("sglang", self.capture_b)

    @property
    def truth_ids(self) -> list[int]:
        return to_ids("sglang", list(self.train_b))

    def __str__(self) -> str:
        return f"L{self.depth}-B{'-'.join(map(str, self.train_b))}-shift{self.shift:+d}-{self.dump}-labels-{self.label}"


def slot_sets(depth: int) -> tuple[list[int], ...]:
    """The training slot sets at ``depth``: :data:`SLOTS`, or for another depth the EAGLE-3 default
    and slots early, middle and in the last third, alone and together."""
    if depth in SLOTS:
        return SLOTS[depth]
    return (
        [2, depth // 2, depth - 3],
        [depth // 6, depth // 2, 5 * depth // 6],
        [depth // 3],
        [3 * depth // 4],
        [depth // 5, 4 * depth // 5],
    )


def cases(depth: int) -> list[DeepCase]:
    """Every case at ``depth`` whose captures an SGLang llama server can take (B 1..L-1)."""
    out = []
    for train_b, shift, dump, label in itertools.product(slot_sets(depth), SHIFTS, DUMPS, LABELS):
        c = DeepCase(depth, tuple(train_b), shift, dump, label)
        if all(1 <= b <= depth - 1 for b in c.capture_b):
            out.append(c)
    return out


def write(c: DeepCase, root: Path) -> tuple[Path, Path]:
    """Both sides of ``c`` under ``root``: (training dir, inference dir)."""
    train = B.specforge(root / "train", [SAMPLE], c.train_b, depth=c.depth)
    if c.label != "none":
        off = 1 if c.label == "shifted" else 0
        B.draft_config(train / "config.json", [i + off for i in c.truth_ids])
    s = B.states(SAMPLE, c.depth)
    bf16 = s["bf16"]
    import torch

    records = [
        ("input_ids", s["input_ids"], {}),
        ("aux_hidden_states", torch.cat([bf16[b] for b in c.capture_b], dim=-1), {}),
    ]
    if c.dump == "every":
        records += [("layer_input", bf16[b], {"layer_id": b}) for b in range(c.depth)]
    infer = root / "infer"
    dumper_records(infer / "dump_20261202_000000_000001", records)
    return train, infer


def outcome(c: DeepCase, root: Path) -> dict:
    """``c`` run through ``hsdiff.compare``: its exit code, verdict and how the recommended ids stand
    against the training layers (per slot ``right`` / ``null`` / ``wrong``)."""
    import hsdiff

    train, infer = write(c, root)
    r = hsdiff.compare(train, infer, layer_ids=c.layer_ids)
    ids = [("null" if g is None else "right" if g == t else "wrong") for g, t in zip(r.recommended.ids, c.truth_ids)]
    return {
        "case": str(c),
        "shift": c.shift,
        "dump": c.dump,
        "label": c.label,
        "exit_code": int(r.exit_code),
        "verdict": str(r.verdict),
        "ids": ids,
    }


def table(depth: int, outcomes: list[dict]) -> str:
    """A markdown table of the outcomes at ``depth``: exits per kind of deployment, dump and training
    labels, and how the recommended ids stand per slot."""
    rows = [
        f"Depth {depth} (SmolLM2 depth up-scaled; {len(outcomes)} deployments, `tests/scenarios/deep.py`):",
        "",
        "| deployment | dump | training labels | n | exit 0 | inconclusive | mismatch "
        "| slot ids right / null / wrong |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    for (name, off), dump, label in itertools.product((("one layer off", True), ("right", False)), DUMPS, LABELS):
        sel = [o for o in outcomes if bool(o["shift"]) == off and o["dump"] == dump and o["label"] == label]
        ids = [i for o in sel for i in o["ids"]]
        rows.append(
            f"| {name} | {dump} | {label} | {len(sel)} | {sum(o['exit_code'] == 0 for o in sel)} | "
            f"{sum(o['verdict'] == 'inconclusive' for o in sel)} | {sum(o['verdict'] == 'mismatch' for o in sel)} | "
            f"{ids.count('right')} / {ids.count('null')} / {ids.count('wrong')} |"
        )
    return "\n".join(rows)
