"""NVIDIA ModelOpt's Hugging Face hidden-state dump: ``{conversation_id}.pt``.

``torch.save(dict)`` with ``input_ids`` [T], ``hidden_states`` [T, H] (final, post-norm),
``aux_hidden_states`` [T, k·H] (HF tuple indices concatenated) and ``conversation_id``.
"""

from __future__ import annotations

from ..model import Capture
from ._common import ReadContext, final_loader, final_width, make_capture, sample_name, token_ids_of
from ._container import Table

KEY = "modelopt"
READS = "table"
PRIORITY = 20


def sniff(table: Table) -> bool:
    return "aux_hidden_states" in table.entries


def read(table: Table, ctx: ReadContext) -> list[Capture]:
    entry = table.entries["aux_hidden_states"]
    conv = table.extras.get("conversation_id")
    group = str(conv) if isinstance(conv, (str, int)) else sample_name(table.path)
    return [make_capture(table, entry, ctx, fmt=KEY, group=group, token_ids=token_ids_of(table), concat=True,
                         final_width=final_width(table, "hidden_states"),
                         final=final_loader(table, "hidden_states"))]
