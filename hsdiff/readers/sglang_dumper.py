"""SGLang's tensor dumper (``sglang.srt.debug_utils.dumper``), both generations, and its tag grammar.

* current: ``{dir}/{exp_name}/step=S___rank=R___dump_index=I___name=N___<tags>.pt`` holding
  ``{"value": tensor, "meta": {...tags}}``;
* older: ``{dir}/sglang_dump_*/forward_pass_id=N___rank=R___name=X___dump_index=I.pt`` holding the
  raw tensor.

Tags are read from the file name and from ``meta``. ``layer_id`` (or ``layer``) is a layer label,
and so is a layer number in the tensor's name (``model.layers.3.input``, ``layer3_residual_in``,
``blocks.3``) when no tag gives one. It counts as the name says (input of layer 3: boundary 3;
output of layer 3: boundary 4; SGLang's own hook dumper names them ``model.layers.3.inputs.0`` and
``model.layers.3.output``, python/sglang/srt/debug_utils/dumper.py, ``_NonIntrusiveDumper``), else as
``--infer-index`` says (boundary by default: the dumper is usually called where SGLang captures, at
the input of layer i). A tensor named ``input_ids`` gives the token ids of its forward
pass. Replicas of one tensor from several tensor-parallel ranks collapse into one capture.

The grammar (:func:`parse_tags`, :func:`read_tags`, :meth:`DumperTags.group`) is shared with the
debug-log reader, which reads the records the dumper prints (:mod:`hsdiff.readers.debuglog.dumper`):
a tensor has the same key, layer, slot and forward pass whether it is read from its file or from
the log.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..model import Capture
from ._common import ReadContext, layer_from_name, layer_label, make_capture
from ._container import Table

KEY = "sglang_dumper"
READS = "table"
#: Asked first: the file name says it is a dumper file, whatever keys it holds.
PRIORITY = 0

_LAYER_TAGS = ("layer_id", "layer", "layer_idx", "layer_index")
_SLOT_TAGS = ("slot", "aux_idx", "aux_index")
#: Tags that say where or when a tensor was dumped, not which tensor it is.
_NOT_IDENTITY = ("step", "forward_pass_id", "rank", "dump_index", "world_rank", "world_size", "recompute_status")


#: The older dumper's directory, one per rank: ``sglang_dump_{time}_{rank}`` (python/sglang/srt/debug_utils.py,
#: ``_Dumper.dump``, SGLang 0.4).
_OLD_RUN_DIR = re.compile(r"(sglang_dump_.+)_(\d{1,6})")


def parse_tags(filename: str) -> dict[str, str] | None:
    """``step=0___rank=1___name=x.pt`` -> ``{"step": "0", "rank": "1", "name": "x"}``; None if not a dumper name."""
    if not filename.endswith(".pt") or "___" not in filename:
        return None
    tags = {}
    for part in filename[:-3].split("___"):
        key, sep, value = part.partition("=")
        if not sep or not key or not re.fullmatch(r"[A-Za-z_]\w*", key):
            return None
        tags[key] = value
    return tags if "name" in tags else None


@dataclass(frozen=True)
class DumperTags:
    """What the dumper's tags say about one dumped tensor."""

    step: str
    name: str | None
    key: str  # ``name=eagle3_aux layer_id=3``: which tensor it is within a step, ranks aside
    layer: int | None
    slot: int | None
    rank: int | None  # None for a single-rank run (world_size=1): nothing to collapse
    dump_index: str | None
    named: bool = False  # the layer number comes from the name, not a layer tag

    def group(self, where: str) -> str:
        """The forward pass this tensor belongs to: ``{where}:step={step}``."""
        return f"{where}:step={self.step}"


def run_of(group: str | None) -> str | None:
    """The dumper run of a forward pass named by :meth:`DumperTags.group`: its experiment directory's
    name, whether the tensor was read from its file or from the record the dumper printed in a log;
    None for a capture that no dumper wrote.

    >>> run_of("dumps/dump_20261201_000000_000001:step=3"), run_of("server.log:dump_20261201_000000_000001:step=3")
    ('dump_20261201_000000_000001', 'dump_20261201_000000_000001')
    """
    where, sep, _ = (group or "").rpartition(":step=")
    return where.replace(":", "/").rsplit("/", 1)[-1] or None if sep else None


def _tag_int(v: object, signed: bool = True) -> int | None:
    text = str(v)
    return int(text) if re.fullmatch(r"-?\d{1,9}" if signed else r"\d{1,9}", text) else None


def read_tags(tags: Mapping[str, object]) -> DumperTags:
    """The tensor a dumper record describes, from its tags (file name and ``meta``).

    >>> read_tags(parse_tags("step=0___rank=0___dump_index=4___name=eagle3_aux___layer_id=3.pt")).key
    'name=eagle3_aux layer_id=3'
    """
    layer = next((v for v in (_tag_int(tags[t]) for t in _LAYER_TAGS if t in tags) if v is not None), None)
    slot = next((v for v in (_tag_int(tags[t], signed=False) for t in _SLOT_TAGS if t in tags) if v is not None), None)
    name = str(tags["name"]) if "name" in tags else None
    named = layer is None and name is not None and (layer := layer_from_name(name, tensor_name=True)) is not None
    extra = {k: v for k, v in tags.items() if k not in _NOT_IDENTITY and k != "name"}
    key = "name=" + (name if name is not None else "?") + "".join(f" {k}={v}" for k, v in sorted(extra.items()))
    rank = _tag_int(tags.get("rank"))
    if _tag_int(tags.get("world_size")) == 1:
        rank = None
    dump_index = tags.get("dump_index")
    return DumperTags(
        step=str(tags.get("step", tags.get("forward_pass_id", "0"))),
        name=name,
        key=key,
        layer=layer,
        slot=slot,
        rank=rank,
        dump_index=None if dump_index is None else str(dump_index),
        named=named,
    )


def sniff(table: Table) -> bool:
    return parse_tags(table.path.name) is not None


def accepts(table: Table) -> bool:
    """``--format sglang_dumper`` reads a ``value``/``meta`` file (or a lone tensor) of any name."""
    return True


def read(table: Table, ctx: ReadContext) -> list[Capture]:
    tags: dict[str, object] = dict(parse_tags(table.path.name) or {})
    if "value" in table.entries:
        entry = table.entries["value"]
        for k, v in table.extras.items():
            if k.startswith("meta."):
                tags[k[5:]] = v
    elif "" in table.entries:
        entry = table.entries[""]
    elif len(table.entries) == 1:
        entry = next(iter(table.entries.values()))
    else:
        return []
    where = ctx.rel(table.path.parent)
    old_dir = _OLD_RUN_DIR.fullmatch(table.path.parent.name)
    if old_dir and "rank" not in tags:  # the older dumper: one directory per rank of a run
        tags["rank"] = old_dir.group(2)
        where = where[: len(where) - len(old_dir.group(2)) - 1]
    t = read_tags(tags)
    cap = make_capture(
        table,
        entry,
        ctx,
        fmt=KEY,
        group=t.group(where),
        rank=t.rank,
        key=t.key,
        layer=None if t.layer is None else layer_label(t.layer, t.name or "", ctx, "key" if t.named else "tag"),
    )
    return [cap.replace(slot=t.slot)]


def is_token_ids(cap: Capture) -> bool:
    return cap.origin.format == KEY and (cap.origin.key or "").split(" ")[0] in ("name=input_ids", "name=token_ids")
