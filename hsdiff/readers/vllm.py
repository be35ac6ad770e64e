"""vLLM's ``extract_hidden_states`` connector: ``{req_id}.safetensors`` with ``hidden_states``
[T, k, H] (one entry per configured aux layer, in the engine's sorted order) and ``token_ids`` [T].
The file carries no layer numbers: slots are labelled from ``--layer-ids`` by the aligner."""

from __future__ import annotations

from ..model import Capture
from ._common import ReadContext, make_capture, sample_name, token_ids_of
from ._container import Table

KEY = "vllm"
READS = "table"
PRIORITY = 30  # before hf: its [T, k, H] stack would read as an all-layer stack


def sniff(table: Table) -> bool:
    hs = table.entries.get("hidden_states")
    return hs is not None and "token_ids" in table.entries and len(hs.shape) in (2, 3)


def accepts(table: Table) -> bool:
    """``--infer-format vllm``: a ``hidden_states`` [T, k, H] or [T, k*H] whose ``token_ids`` were left out."""
    hs = table.entries.get("hidden_states")
    return hs is not None and len(hs.shape) in (2, 3)


def read(table: Table, ctx: ReadContext) -> list[Capture]:
    entry = table.entries["hidden_states"]
    ids = token_ids_of(table)
    group = sample_name(table.path)
    if len(entry.shape) == 2:  # already concatenated [T, k*H]
        return [make_capture(table, entry, ctx, fmt=KEY, group=group, token_ids=ids, concat=True)]
    t_len = len(ids) if ids is not None else entry.shape[0]
    layer_axis = 1 if entry.shape[0] == t_len else 0
    out = []
    for s in range(entry.shape[layer_axis]):
        if layer_axis == 1:
            loader = lambda e=entry, s=s: e.loader()[:, s, :]  # noqa: E731
            shape = (entry.shape[0], entry.shape[2])
        else:
            loader = lambda e=entry, s=s: e.loader()[s]  # noqa: E731
            shape = (entry.shape[1], entry.shape[2])
        cap = make_capture(
            table, entry, ctx, fmt=KEY, group=group, token_ids=ids, key=f"hidden_states[:, {s}]" if layer_axis == 1
            else f"hidden_states[{s}]", loader=loader, shape=shape,
        )
        out.append(cap.replace(slot=s))
    return out
