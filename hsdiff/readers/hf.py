"""All-layer stacks in Hugging Face ``output_hidden_states`` order.

A tensor named ``hidden_states`` (or ``*.boundaries``) whose leading axis holds L+1 entries, or a
list/tuple of L+1 tensors: entry k is boundary index k (0 = embeddings). In HF's own tuple the last
entry has the final norm applied; files whose metadata says ``index: boundary`` (as written by
``hsdiff capture``) hold the last layer's output *before* the norm instead.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from ..model import Capture, Index, LabelSource, Layer
from ._common import ReadContext, make_capture, sample_name, token_ids_of
from ._container import Entry, Table

KEY = "hf"
READS = "table"
PRIORITY = 50

_STACK_NAMES = ("hidden_states", "all_hidden_states", "boundaries")
_LIST_RE = re.compile(r"^(?:(.*)\.)?(\d+)$")


def _stacks(table: Table) -> list[Entry]:
    return [
        e
        for e in table.entries.values()
        if e.is_float and len(e.shape) in (3, 4) and e.shape[0] >= 3 and e.name.split(".")[-1] in _STACK_NAMES
    ]


def _lists(table: Table) -> dict[str, list[Entry]]:
    groups: dict[str, list[tuple[int, Entry]]] = {}
    for e in table.entries.values():
        m = _LIST_RE.match(e.name)
        if m and e.is_float and len(e.shape) >= 2 and (m.group(1) or "") in ("", *_STACK_NAMES):
            groups.setdefault(m.group(1) or "", []).append((int(m.group(2)), e))
    out = {}
    for prefix, items in groups.items():
        items.sort(key=lambda x: x[0])
        if len(items) >= 3 and [i for i, _ in items] == list(range(len(items))):
            out[prefix] = [e for _, e in items]
    return out


def _plane(e: Entry, b: int, per: int) -> Callable[[], Any]:
    """Entry ``b`` of a stack in its stored dtype: a view of the memory-mapped stack when the file
    allows (nothing read until used), not the whole stack."""
    return lambda: e.loader()[b]


def _plane_rows(e: Entry, b: int, per: int) -> Callable[..., Any] | None:
    if e.rows is None:
        return None
    rows = e.rows
    return lambda i0, i1, c0=0, c1=None, out=None, raw=False: rows(b * per + i0, b * per + i1, c0, c1, out, raw)


def sniff(table: Table) -> bool:
    return bool(_stacks(table) or _lists(table))


def read(table: Table, ctx: ReadContext) -> list[Capture]:
    ids = token_ids_of(table)
    pre_norm_last = table.metadata.get("index") == "boundary" or table.extras.get("index") == "boundary"
    out: list[Capture] = []
    for e in _stacks(table):
        n = e.shape[0]
        prefix = e.name.rsplit(".", 1)[0] if "." in e.name else ""
        group = sample_name(table.path) + (f":{prefix}" if prefix else "")
        per = math.prod(e.shape[1:-1])  # rows of one entry of the stack
        for b in range(n):
            post = b == n - 1 and not pre_norm_last
            cap = make_capture(
                table,
                e,
                ctx,
                fmt=KEY,
                group=group,
                token_ids=ids,
                key=f"{e.name}[{b}]",
                loader=_plane(e, b, per),
                shape=e.shape[1:],
                rows=_plane_rows(e, b, per),
                layer=None if post else Layer(b, Index.BOUNDARY, LabelSource.KEY),
                post_norm=post,
            )
            out.append(cap)
    for prefix, entries in _lists(table).items():
        n = len(entries)
        group = sample_name(table.path) + (f":{prefix}" if prefix else "")
        for b, e in enumerate(entries):
            post = b == n - 1 and not pre_norm_last
            out.append(
                make_capture(
                    table,
                    e,
                    ctx,
                    fmt=KEY,
                    group=group,
                    token_ids=ids,
                    layer=None if post else Layer(b, Index.BOUNDARY, LabelSource.KEY),
                    post_norm=post,
                )
            )
    return out
