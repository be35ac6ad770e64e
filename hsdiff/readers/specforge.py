"""SpecForge offline hidden states: ``rows_{g}-{g+2000}/data_{idx}.ckpt`` (or ``.ckpt.gz``).

Each file is ``torch.save(dict)`` with ``input_ids`` [T], ``loss_mask`` [T], ``aux_hidden_state``
[1, T, k·H] (the aux slots concatenated, ascending) and ``hidden_state`` [1, T, H] (final, post-norm).
Every column block of ``aux_hidden_state`` is a slot; when the last equals ``hidden_state`` bit for bit
(data of a pipeline that captured the final state, e.g. TensorRT-LLM's -1, converted), that slot is marked
as the final post-norm state.
"""

from __future__ import annotations

from ..model import Capture
from ._common import (
    ReadContext,
    final_loader,
    final_width,
    make_capture,
    sample_name,
    token_ids_of,
    with_final_last,
)
from ._container import Table

KEY = "specforge"
READS = "table"
PRIORITY = 10


def sniff(table: Table) -> bool:
    return "aux_hidden_state" in table.entries


def read(table: Table, ctx: ReadContext) -> list[Capture]:
    entry = table.entries["aux_hidden_state"]
    final = table.entries.get("hidden_state")
    cap = make_capture(
        table,
        entry,
        ctx,
        fmt=KEY,
        group=sample_name(table.path),
        token_ids=token_ids_of(table),
        concat=True,
        final_width=final_width(table, "hidden_state"),
        final=final_loader(table, "hidden_state"),
        mask=table.entries["loss_mask"].loader if "loss_mask" in table.entries else None,
    )
    return [with_final_last(cap, entry, final if final_width(table, "hidden_state") else None)]
