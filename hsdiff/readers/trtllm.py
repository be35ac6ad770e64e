"""TensorRT-LLM's ``SaveHiddenStates`` speculative mode: ``{file_prefix}_{iter}.pt``, a list of records.

Read from NVIDIA/TensorRT-LLM ``tensorrt_llm/_torch/speculative/save_hidden_state.py``
(``SaveHiddenStatesDrafter``: at 3e906a0 lines 33-63 ``_process_request``, 65-70 ``_write_to_file``;
the same at 17c59c3 with the older key) and ``tensorrt_llm/llmapi/llm_args.py``
(``SaveHiddenStatesDecodingConfig.model_post_init``):

* every ``write_interval`` requests (default 20), ``torch.save`` of a *list* of dicts, one per request:
  ``id`` (the request's iteration), ``input_ids`` [T] and ``hidden_state`` [T, H], the capture of
  layer -1: the final state *after* the final norm;
* with more than one layer to capture, the capture buffer as ``aux_hidden_states`` [T, k·H]
  (``hidden_state_features`` in older releases): the layers of ``eagle3_layers_to_capture`` in
  ascending order, each the output of that layer (O-index, ``hidden_states + residual``), -1 last;
* with no ``eagle3_layers_to_capture``, the layers are ``(1, L//2-1, L-4)`` plus -1 (``save_hidden_state.py``
  ``SaveHiddenStatesSpecMetadata.__post_init__``, lines 158-166 of the code index's newest text, whose commit
  it does not record): an O-index training set, which SGLang's ids ``[1, L//2-1, L-4]`` reproduce;
* the config always adds -1; only when the user listed -1 itself does the aux tensor keep it as its
  last H columns (``_last_hidden_in_save``), and then the draft is trained on it: a slot like the
  others. This reader finds those columns by value (they equal ``hidden_state`` bit for bit) and marks
  that slot as the final post-norm state, so that it is scored against the engine's final state and
  an engine that cannot feed it is named.

A record with no aux tensor holds only the final state (one layer captured): it is read as a
post-norm capture. Records count as samples, named ``{file stem}:{id}``.
"""

from __future__ import annotations

import re

from ..errors import FormatError
from ..model import Capture
from ._common import (
    ReadContext,
    make_capture,
    sample_name,
    token_ids_of,
    with_final_last,
)
from ._container import Table

KEY = "trtllm"
READS = "table"
PRIORITY = 15  # a list of records: nothing else claims keys "0.hidden_state"
_AUX_KEYS = ("aux_hidden_states", "hidden_state_features")
_RECORD_RE = re.compile(r"^(\d+)\.hidden_state$")


def _records(table: Table) -> list[str]:
    return sorted((m.group(1) for k in table.entries if (m := _RECORD_RE.match(k))), key=int)


def sniff(table: Table) -> bool:
    return table.container == "torch" and isinstance(table.raw, list) and bool(_records(table))


def read(table: Table, ctx: ReadContext) -> list[Capture]:
    out = []
    for i in _records(table):
        sub = Table(
            table.path,
            table.container,
            {k.split(".", 1)[1]: e for k, e in table.entries.items() if k.startswith(f"{i}.")},
        )
        final = sub.entries["hidden_state"]
        aux_key = next((k for k in _AUX_KEYS if k in sub.entries), None)
        rid = table.extras.get(f"{i}.id", i)
        group = f"{sample_name(table.path)}:{rid}"
        ids = token_ids_of(sub)
        t = final.shape[0] if len(final.shape) == 2 else None
        aux = sub.entries.get(aux_key) if aux_key else None
        if (
            t is None
            or ids is None
            or len(ids) != t
            or (aux is not None and (len(aux.shape) != 2 or aux.shape[0] != t))
        ):
            raise FormatError(
                f"record {i} holds hidden_state {list(final.shape)}, input_ids of {len(ids) if ids else 'no'} tokens"
                + (f" and {aux_key} {list(aux.shape)}" if aux is not None else "")
                + "; TensorRT-LLM's SaveHiddenStates writes input_ids [T], hidden_state [T, H] and aux [T, k·H]",
                path=table.path,
                hint="point hsdiff at the files SaveHiddenStates wrote, unchanged",
            )
        if aux is None:
            out.append(
                make_capture(
                    sub, final, ctx, fmt=KEY, group=group, token_ids=ids, post_norm=True, key=f"[{i}].hidden_state"
                )
            )
            continue
        cap = make_capture(
            sub,
            aux,
            ctx,
            fmt=KEY,
            group=group,
            token_ids=ids,
            concat=True,
            key=f"[{i}].{aux_key}",
            final_width=final.shape[1],
            final=final.loader,
        )
        out.append(with_final_last(cap.replace(variant=f"{aux_key}: the layers captured"), aux, final))
    return out
