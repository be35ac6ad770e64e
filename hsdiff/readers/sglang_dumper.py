"""SGLang's tensor dumper (``sglang.srt.debug_utils.dumper``), both generations.

* current: ``{dir}/{exp_name}/step=S___rank=R___dump_index=I___name=N___<tags>.pt`` holding
  ``{"value": tensor, "meta": {...tags}}``;
* older: ``{dir}/sglang_dump_*/forward_pass_id=N___rank=R___name=X___dump_index=I.pt`` holding the
  raw tensor.

Tags are read from the file name and from ``meta``. ``layer_id`` (or ``layer``) is a layer label,
counted as ``--infer-index`` says (boundary by default: the dumper is usually called where SGLang
captures, at the input of layer i). A tensor named ``input_ids`` gives the token ids of its forward
pass. Replicas of one tensor from several tensor-parallel ranks collapse into one capture.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..model import Capture, Layer
from ._common import ReadContext, make_capture
from ._container import Table

KEY = "sglang_dumper"

_TAG_RE = re.compile(r"^(?:[A-Za-z_][\w]*=[^_]*(?:_[^_]+)*___)+[A-Za-z_]\w*=.*\.pt$")
_LAYER_TAGS = ("layer_id", "layer", "layer_idx", "layer_index")
_SLOT_TAGS = ("slot", "aux_idx", "aux_index")


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


def sniff_path(path: Path) -> bool:
    return parse_tags(path.name) is not None


def _int(v: object) -> int | None:
    try:
        return int(str(v))
    except (TypeError, ValueError):
        return None


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
    step = tags.get("step", tags.get("forward_pass_id", "0"))
    group = f"{ctx.rel(table.path.parent)}:step={step}"
    layer_val = next((_int(tags[t]) for t in _LAYER_TAGS if t in tags), None)
    slot = next((_int(tags[t]) for t in _SLOT_TAGS if t in tags), None)
    name = str(tags.get("name"))
    extra = {k: v for k, v in tags.items() if k not in ("step", "forward_pass_id", "rank", "dump_index", "name", "world_rank", "world_size", "recompute_status")}
    key = "name=" + name + "".join(f" {k}={v}" for k, v in sorted(extra.items()))
    rank = _int(tags.get("rank"))
    if _int(tags.get("world_size")) == 1:
        rank = None  # a single-rank run: nothing to collapse or compare
    cap = make_capture(
        table, entry, ctx, fmt=KEY, group=group, rank=rank, key=key,
        layer=None if layer_val is None else Layer(layer_val, ctx.index, "tag"),
    )
    return [cap.replace(slot=slot)]


def is_token_ids(cap: Capture) -> bool:
    return cap.origin.format == KEY and (cap.origin.key or "").split(" ")[0] in ("name=input_ids", "name=token_ids")
