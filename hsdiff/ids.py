"""``hsdiff ids``: the same layers written in another engine's convention, with words for each id.

>>> translate_ids([2, 30, 58], "sglang", "vllm", num_layers=61).line()
'3,31,59'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from . import conventions as conv

__all__ = ["Translation", "translate_ids"]


@dataclass(frozen=True)
class Translation:
    """``ids`` on ``src`` name ``boundaries``; ``out`` are the ids that make ``dst`` capture them."""

    src: str
    dst: str
    ids: tuple[int, ...]
    boundaries: tuple[int, ...]
    out: tuple[int | None, ...]
    num_layers: int | None
    model_family: str | None

    @property
    def complete(self) -> bool:
        return all(i is not None for i in self.out)

    def missing(self) -> list[int]:
        """Boundaries ``dst`` cannot capture (no id of its convention names them)."""
        return [b for b, i in zip(self.boundaries, self.out) if i is None]

    def line(self) -> str:
        return ",".join("?" if i is None else str(i) for i in self.out)

    def explain(self) -> list[str]:
        """One sentence per id: which tensor it names on ``src`` and the id for it on ``dst``."""
        s, d = conv.rule(self.src), conv.rule(self.dst)
        family = self.model_family if self.src == "sglang" else None
        src_order = conv.to_boundary(self.ids, self.src, num_layers=self.num_layers, model_family=family, keep_order=True)
        lines = []
        for i, b in zip(self.ids, src_order):
            j = self.out[self.boundaries.index(b)] if b in self.boundaries else None
            what = conv.describe_boundary(b, self.num_layers)
            there = f"{d.title} id {j}" if j is not None else f"no {d.title} id (it cannot capture B{b})"
            lines.append(f"{s.title} id {i} → B{b}: {what} → {there}")
        if s.sorts and list(self.ids) != sorted(set(self.ids)):
            lines.append(f"{s.title} captures in ascending layer order, so its slots hold B{list(self.boundaries)}")
        return lines


def translate_ids(
    ids: Sequence[int],
    src: str,
    dst: str,
    *,
    num_layers: int | None = None,
    model_family: str | None = None,
) -> Translation:
    """Translate ``ids`` from ``src``'s convention to ``dst``'s; ``model_family`` applies to SGLang sides."""
    src, dst = conv.rule(src).key, conv.rule(dst).key
    fam_src = model_family if src == "sglang" else None
    fam_dst = model_family if dst == "sglang" else None
    family = conv.normalize_family(model_family) if "sglang" in (src, dst) else None
    b = conv.to_boundary(ids, src, num_layers=num_layers, model_family=fam_src)
    out = conv.from_boundary(b, dst, num_layers=num_layers, model_family=fam_dst)
    return Translation(src, dst, tuple(int(i) for i in ids), tuple(b), tuple(out), num_layers, family)
