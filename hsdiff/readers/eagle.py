"""EAGLE-1/2 ``ge_data`` files: ``data_{idx}.ckpt`` with ``hidden_state`` (the last layer, post-norm),
``input_ids`` and ``loss_mask``. The single slot is the final hidden state."""

from __future__ import annotations

from ..model import Capture
from ._common import ReadContext, make_capture, sample_name, token_ids_of
from ._container import Table

KEY = "eagle"
READS = "table"
PRIORITY = 40


def sniff(table: Table) -> bool:
    return "hidden_state" in table.entries and "loss_mask" in table.entries and "aux_hidden_state" not in table.entries


def read(table: Table, ctx: ReadContext) -> list[Capture]:
    entry = table.entries["hidden_state"]
    return [
        make_capture(
            table, entry, ctx, fmt=KEY, group=sample_name(table.path), token_ids=token_ids_of(table), post_norm=True
        )
    ]
