"""``hsdiff ids``: the same layers written in another engine's convention, with words for each id.

Each side is read with the convention-table row for its engine, model family and version; the
translation names those rows and warns when the source engine could not have captured a layer.

>>> translate_ids([2, 30, 58], "sglang", "vllm", num_layers=61).line()
'3,31,59'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from .errors import InputError
from .model import EngineVersion
from .rules import conventions as conv
from .rules.serving import boundary_list, serve
from .rules.settings import engine_version

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
    src_at: EngineVersion  # the version of ``src`` the ids are read at, and the row it applies
    dst_at: EngineVersion  # the version of ``dst`` they are written for
    warnings: tuple[str, ...] = ()
    obstacles: tuple[str, ...] = ()  # why ``dst`` cannot be given these layers in this order (hsdiff.rules.serving)
    kind: str = "eagle3"  # the draft kind (hsdiff.rules.kinds) whose rows read the ids
    key: str = ""  # the draft-config key ``dst`` reads these ids from ("" where it reads none)

    @property
    def complete(self) -> bool:
        return not self.obstacles and all(i is not None for i in self.out)

    def line(self) -> str:
        return ",".join("?" if i is None else str(i) for i in self.out)

    @property
    def src_version(self) -> str | None:
        return self.src_at.version

    @property
    def dst_version(self) -> str | None:
        return self.dst_at.version

    def rules(self) -> str:
        """Which rows of the convention table were applied, one line."""
        return f"{self.src_at.words()} → {self.dst_at.words()}"

    def explain(self) -> list[str]:
        """One sentence per id: which tensor it names on ``src`` and the id for it on ``dst``."""
        s, d = conv.rule(self.src), conv.rule(self.dst)
        family = s.family_for(self.model_family)
        src_order = conv.to_boundary(
            self.ids,
            self.src,
            num_layers=self.num_layers,
            model_family=family,
            version=self.src_version,
            keep_order=True,
            kind=self.kind,
        )
        L = self.num_layers
        dst_family = d.family_for(self.model_family)
        written = [i for i in self.out if i is not None]
        dst_order = conv.to_boundary(
            written,
            self.dst,
            num_layers=L,
            model_family=dst_family,
            version=self.dst_version,
            keep_order=True,
            check_range=False,
            kind=self.kind,
        )
        there_id = dict(zip(dst_order, written))  # the id that names each boundary on dst (the list may be reordered)
        lines = [f"rules: {self.rules()}"] + ([f"{d.title} reads them from {self.key}"] if self.key else [])
        for i, b in zip(self.ids, src_order):
            j = there_id.get(b)
            what = conv.describe_boundary(b, L)
            name = "" if L is not None and b == conv.final_boundary(L) else f"B{b}: "
            there = f"{d.title} id {j}" if j is not None else f"no {d.title} id"
            lines.append(f"{s.title} id {i} → {name}{what} → {there}")
        if s.sorts and list(self.ids) != sorted(set(self.ids)):
            lines.append(
                f"{s.title} captures in ascending layer order, so its slots hold {boundary_list(self.boundaries, L)}"
            )
        return lines


def translate_ids(
    ids: Sequence[int],
    src: str,
    dst: str,
    *,
    num_layers: int | None = None,
    model_family: str | None = None,
    src_version: str | None = None,
    dst_version: str | None = None,
    kind: str | None = None,
) -> Translation:
    """Translate ``ids`` from ``src``'s convention to ``dst``'s for a draft of ``kind`` (default EAGLE-3);
    ``model_family`` applies to the engines whose reading depends on it (SGLang, SpecForge through SGLang,
    vLLM's DeepSeek models).

    >>> translate_ids([1, 9, 17, 25, 33], "specforge", "sglang", num_layers=48, model_family="qwen3_next",
    ...               kind="dflash").key
    'dflash_config.target_layer_ids'
    """
    k = conv.draft_kind(kind).key
    src, dst = conv.rule(src).key, conv.rule(dst).key
    sv, dv = conv.parse_version(src, src_version), conv.parse_version(dst, dst_version)
    fam_src, fam_dst = conv.rule(src).family_for(model_family), conv.rule(dst).family_for(model_family)
    family = conv.normalize_family(model_family) if conv.rule(src).family_rule or conv.rule(dst).family_rule else None
    src_rule = conv.applied(src, fam_src, sv, k)
    b = conv.to_boundary(ids, src, num_layers=num_layers, model_family=fam_src, version=sv, kind=k)
    fixed = (  # a row that reads no ids: to_boundary gave the layers it captures, whatever these ids say
        [
            f"{conv.rule(src).title} reads no ids: it captured B{b} whatever {list(ids)} say ({src_rule.label}); "
            "these are translated"
        ]
        if src_rule.fixed
        else []
    )
    served = serve(b, dst, num_layers=num_layers, model_family=fam_dst, version=dv, kind=k)
    n = conv.rule(src).id_count
    if n and len(ids) != n and conv.draft_kind(k).reading == conv.draft_kind(None).reading:
        fixed.append(
            f"{conv.rule(src).title} takes exactly {n} ids ({conv.rule(src).source('id_count')}): data said to "
            f"come from it with {len(ids)} is suspect"
        )
    warnings = (
        fixed
        + [
            f"{conv.rule(src).title} {sv} could not have captured {conv.name_boundary(x, num_layers)} "
            f"({src_rule.label}): no id of its convention names it, so data said to come from it is suspect"
            for x in b
            if not conv.capturable(x, src, num_layers, fam_src, sv, k)
        ]
        + list(served.notes)
    )
    try:
        key = conv.key_name(conv.write_key(dst, k))
    except InputError:  # an engine that reads no draft config (TensorRT-LLM)
        key = ""
    return Translation(
        src,
        dst,
        tuple(int(i) for i in ids),
        tuple(b),
        served.ids,
        num_layers,
        family,
        _at(src, sv, fam_src, k),
        _at(dst, dv, fam_dst, k),
        tuple(warnings),
        tuple(served.sentences()),
        k,
        key,
    )


def _at(engine: str, version: str, family: str | None, kind: str) -> EngineVersion:
    """``engine`` at ``version`` and the row it applies for a draft of ``kind``."""
    at = engine_version(engine, version, family)
    if conv.draft_kind(kind).reading == conv.draft_kind(None).reading:
        return at
    return replace(at, rule=conv.applied(engine, family, version, kind).label)
