"""Per-layer labelled tensors in safetensors, ``.pt``/``.pth``/``.bin``, ``.npy``/``.npz`` files.

The layer number comes from the key (``hidden_states.layer_3``, ``layers.31``, ``blocks.3``,
``decoder.layers.3``) or, for a file that holds one tensor, from the file name (``h59.npy``). It
counts as the name says (``model.layers.3.output``: the output of layer 3, boundary 4), else as the
side's index convention (``--infer-index`` / ``--train-index``: boundary unless told otherwise).
Tensors with no number are kept unlabelled, in file order, and take their slot from their position.
"""

from __future__ import annotations

from ..model import Capture
from ._common import (
    TOKEN_KEYS,
    ReadContext,
    float_entries,
    layer_from_name,
    layer_label,
    make_capture,
    sample_name,
    token_ids_of,
)
from ._container import Table

KEY = "tensors"
READS = "table"
PRIORITY = 90  # last: it takes any floating-point tensor


def sniff(table: Table) -> bool:
    return bool(float_entries(table))


def read(table: Table, ctx: ReadContext) -> list[Capture]:
    ids = token_ids_of(table)
    entries = [e for e in float_entries(table) if e.name not in TOKEN_KEYS]
    single = len(entries) == 1
    file_layer = layer_from_name(sample_name(table.path))
    out = []
    for slot, e in enumerate(entries):
        n = layer_from_name(e.name) if e.name else None
        source = "key"
        if n is None and single and file_layer is not None:
            n, source = file_layer, "filename"
        group = str(table.path.parent) if source == "filename" else sample_name(table.path)
        layer = None if n is None else layer_label(n, e.name if source == "key" else table.path.name, ctx, source)
        cap = make_capture(table, e, ctx, fmt=KEY, group=group, token_ids=ids, layer=layer)
        out.append(cap if layer is not None or single else cap.replace(slot=slot))
    return out
