"""The probes of a fingerprint: the training dump's first samples, or built-in texts; and a forward pass over them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..model import Dump

__all__ = [
    "PROBE_TOKENS",
    "PROBE_MAX",
    "BUILTIN_TEXTS",
    "Probes",
    "Pass",
    "probes_from_dump",
    "builtin_probes",
    "embedding_ids",
    "first_of_probe",
    "positions",
]


#: Probe tokens a fingerprint keeps by default: 256 tokens of 64 sketch numbers are 34 kB per boundary.
PROBE_TOKENS = 256


#: Most tokens taken from one probe (a long sample gives its first tokens: in a causal model they are the
#: same states in any capture of the whole sample).
PROBE_MAX = 128


#: Probes when no training dump is at hand: plain prose, tokenised with the target's tokenizer.
BUILTIN_TEXTS = (
    "The river that runs through the old town was once the only road to the sea. Merchants brought salt, "
    "cloth and news up the valley every spring, and the bridge they built in stone still carries the market "
    "road today.",
    "To make bread, mix flour, water, salt and a little yeast, knead the dough until it is smooth, and leave "
    "it to rise in a warm place for two hours. Shape the loaf, let it rise again, and bake it in a hot oven.",
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n"
    "print([fibonacci(i) for i in range(10)])  # the first ten numbers of the sequence\n",
    "Question: a train leaves at nine and travels at sixty miles an hour; a second train leaves the same "
    "station at ten at eighty miles an hour. When does the second train catch up? Answer: at one o'clock.",
)


@dataclass(frozen=True)
class Probes:
    """The probes of a fingerprint: names, token ids and where they came from."""

    names: tuple[str, ...]
    ids: tuple[tuple[int, ...], ...]
    source: str

    @property
    def tokens(self) -> int:
        return sum(len(p) for p in self.ids)


@dataclass(frozen=True)
class Pass:
    """One forward pass over the probes: per probe, the states ``[rows, T, H]`` float32 (rows: B0..BL, and
    the final post-norm state last when ``final``) and how they were computed (``dtype``, ``how``)."""

    states: tuple[np.ndarray, ...]
    dtype: str
    how: str = ""
    final: bool = True


def embedding_ids(probes: Probes) -> list[int]:
    """The token ids whose embedding rows the digest covers: the probes' distinct ids, ascending."""
    return sorted({t for p in probes.ids for t in p})


def probes_from_dump(dump: Dump, budget: int = PROBE_TOKENS, per_probe: int = PROBE_MAX, max_probes: int = 8) -> Probes:
    """The first samples of a training dump (natural order of their names), each up to ``per_probe`` of its
    first tokens, until ``budget`` tokens."""
    samples: dict[str, tuple[int, ...]] = {}
    for c in dump.captures:
        if c.token_ids and c.group is not None:
            samples.setdefault(c.group, tuple(int(t) for t in c.token_ids))
    if not samples:
        raise InputError(
            "the training dump holds no token ids to take probes from",
            hint="give a dump that stores input_ids (SpecForge .ckpt, ModelOpt .pt), or `probes=builtin`",
            options=("probes",),
        )
    names: list[str] = []
    ids: list[tuple[int, ...]] = []
    left = budget
    for name in sorted(samples, key=_natural):
        if left <= 0 or len(names) >= max_probes:
            break
        take = samples[name][: min(per_probe, left)]
        if len(take) < 2:
            continue
        names.append(name)
        ids.append(take)
        left -= len(take)
    return Probes(tuple(names), tuple(ids), "the training dump")


def builtin_probes(tokenize: Callable[[str], Sequence[int]], budget: int = PROBE_TOKENS) -> Probes:
    """:data:`BUILTIN_TEXTS` tokenised by ``tokenize``, each up to ``budget / len(texts)`` tokens."""
    per = max(8, budget // len(BUILTIN_TEXTS))
    ids = tuple(tuple(int(t) for t in tokenize(text))[:per] for text in BUILTIN_TEXTS)
    return Probes(tuple(f"builtin-{i}" for i in range(len(ids))), ids, "built-in texts")


def _natural(name: str) -> tuple:
    import re

    return tuple(int(p) if p.isdecimal() else p for p in re.split(r"(\d+)", name))


def first_of_probe(probes: Probes) -> list[np.ndarray]:
    """Per probe, per position: the global index of the first stored token with the same prefix."""
    starts = np.cumsum([0] + [len(p) for p in probes.ids])
    out = []
    for j, p in enumerate(probes.ids):
        first = starts[j] + np.arange(len(p))
        set_ = np.zeros(len(p), dtype=bool)
        for q in range(j):
            other = probes.ids[q]
            n = min(len(p), len(other))
            diff = np.flatnonzero(np.asarray(p[:n]) != np.asarray(other[:n]))
            cp = int(diff[0]) if diff.size else n
            take = (~set_) & (np.arange(len(p)) < cp)
            first[take] = starts[q] + np.arange(len(p))[take]
            set_ |= take
        out.append(first)
    return out


def positions(probes: Probes, j: int) -> np.ndarray:
    start = sum(len(p) for p in probes.ids[:j])
    return start + np.arange(len(probes.ids[j]))
