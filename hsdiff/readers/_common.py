"""Helpers shared by the format readers: context, labels from names, token ids, capture builders."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..model import Capture, Layer, Origin
from ._container import Entry, Table


@dataclass
class ReadContext:
    """What a reader needs to know about the side it reads: ``side`` and how layer labels count."""

    side: str
    index: str = "boundary"  # how layer numbers found in names/tags count: "boundary" or "output"
    root: Path | None = None
    warnings: list[str] = field(default_factory=list)
    log_pattern: str | None = None  # --log-pattern: a regex with a named group "values" for debug logs

    def rel(self, path: Path) -> str:
        if self.root is not None:
            try:
                rel = path.relative_to(self.root)
                return str(rel) if str(rel) != "." else path.name
            except ValueError:
                pass
        return str(path)


# A layer number in a key or a file name: hidden_states.layer_3, layers.31, h59, layer_id=12, blk.7 ...
# (at most 9 digits: no model has a billion layers, and int() refuses strings of over 4300 digits)
_LAYER_RE = re.compile(
    r"(?:^|[^a-z])(?:layer_id|layer_idx|layers?|hidden_states?|hs|h|blk|block|capture|aux)[._\-=\[:]?(-?\d{1,9})\]?(?![\d])",
    re.IGNORECASE,
)
TOKEN_KEYS = ("input_ids", "token_ids", "tokens", "ids", "prompt_token_ids")


def layer_from_name(name: str) -> int | None:
    """The layer number a key or file name carries, or None (``hidden_states.layer_3`` -> 3)."""
    found = _LAYER_RE.findall(name)
    return int(found[-1]) if found else None


def token_ids_of(table: Table) -> tuple[int, ...] | None:
    for key in TOKEN_KEYS:
        entry = table.entries.get(key)
        if entry is not None and not entry.is_float and len(entry.shape) <= 2:
            t = entry.loader()
            return tuple(int(v) for v in t.reshape(-1).tolist())
    return None


def make_capture(
    table: Table,
    entry: Entry,
    ctx: ReadContext,
    *,
    fmt: str,
    group: str | None,
    layer: Layer | None = None,
    token_ids: tuple[int, ...] | None = None,
    concat: bool = False,
    post_norm: bool = False,
    rank: int | None = None,
    key: str | None = None,
    loader: Any = None,
    shape: tuple[int, ...] | None = None,
    rows: Any = None,
) -> Capture:
    return Capture(
        side=ctx.side,
        origin=Origin(ctx.rel(table.path), key if key is not None else (entry.name or None), None, fmt),
        shape=shape if shape is not None else entry.shape,
        dtype=entry.dtype,
        width=(shape or entry.shape)[-1] if (shape or entry.shape) else None,
        group=group,
        layer=layer,
        token_ids=token_ids,
        concat=concat,
        post_norm=post_norm,
        rank=rank,
        loader=loader if loader is not None else entry.loader,
        rows=rows if rows is not None else (entry.rows if loader is None else None),
    )


def sample_name(path: Path) -> str:
    """A readable sample id from a file name: ``data_12.ckpt.gz`` -> ``data_12``."""
    name = path.name
    for suffix in (".gz", ".ckpt", ".pt", ".pth", ".bin", ".safetensors", ".npz", ".npy"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def float_entries(table: Table) -> list[Entry]:
    return [e for e in table.entries.values() if e.is_float and len(e.shape) >= 1 and e.shape[-1] > 1]

