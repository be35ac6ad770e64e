"""NVIDIA ModelOpt's offline hidden-state dumps: ``{conversation_id}.pt``, from three engines.

Read from NVIDIA/Model-Optimizer (main at a2fbac7, 0.47.0dev, 2026-08-21),
``examples/speculative_decoding/collect_hidden_states/``. Every script writes ``torch.save(dict)``
with ``input_ids`` [T], ``aux_hidden_states`` [T, k·H] (the aux layers concatenated, ascending),
``hidden_states`` [T, H] (the final state) and ``conversation_id``; newer ones add ``loss_mask``. What
the final state is depends on the script, and the file says so only through the optional flag:

* ``compute_hidden_states_hf.py:183-200``: Hugging Face ``output_hidden_states``; aux
  ``hidden_states[lid + 1]``, final ``hidden_states[-1]``, *after* the final norm;
* ``compute_hidden_states_vllm.py:168-178,258-264,291-326``: vLLM's ``extract_hidden_states`` with the aux
  ids handed over unshifted (boundary indices, the ``modelopt-vllm`` row of the engine profile) and
  ``num_hidden_layers`` appended; final ``hidden_states[:, -1]``, the last layer's output *before* the
  final norm, with no flag;
* ``compute_hidden_states_trtllm.py:215-243``: TensorRT-LLM's ``SaveHiddenStates`` record with
  ``id`` replaced by ``conversation_id`` and ``hidden_state`` renamed ``hidden_states`` (the -1
  capture: after the final norm); its aux key is ``hidden_state_features`` from TensorRT-LLM
  releases before ``aux_hidden_states``, and when -1 was asked for explicitly the final state is
  also the aux tensor's last H columns, a slot the draft is trained on (see :mod:`.trtllm`);
* ``modelopt/torch/speculative/eagle/utils.py:152-162``: the trainer reads
  ``hidden_states_prenorm`` (absent: False, post-norm) and re-applies the final norm when it is true
  (added in bc5bc1ac5, #1846).

Which variant a file is, this reader decides from what it holds, in this order: the flag when
present; ``hidden_state_features`` (TensorRT-LLM); else the final state's
per-token norms: a final RMSNorm scales every token to about the same norm (SmolLM2: 0.84–1.25×
the median), while the residual stream before it keeps its attention sinks (over 8× the median), so
a token over :data:`PRENORM_SINK` times the median among the first rows (``PROBE_ROWS``) makes the file a
vLLM dump, pre-norm. A model without attention sinks reads as post-norm, as ModelOpt's own trainer
reads a file without the flag.

Every column of the aux tensor is a slot: the trainer feeds all of them to the draft's fc. When its last
H columns equal the final state bit for bit (TensorRT-LLM with -1; an HF dump that listed the last
entry), that slot is the final state, marked post-norm unless the file says the final state is pre-norm.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import FormatError
from ..model import Capture
from ._common import (
    PRENORM_SINK,
    ReadContext,
    final_in_last_columns,
    make_capture,
    sample_name,
    sink_ratio,
    token_ids_of,
)
from ._container import Entry, Table

KEY = "modelopt"
READS = "table"
PRIORITY = 20

_AUX_KEYS = ("aux_hidden_states", "hidden_state_features")


def sniff(table: Table) -> bool:
    return "aux_hidden_states" in table.entries or {"hidden_state_features", "hidden_states"} <= set(table.entries)


def read(table: Table, ctx: ReadContext) -> list[Capture]:
    key = next(k for k in _AUX_KEYS if k in table.entries)
    entry, final = table.entries[key], table.entries.get("hidden_states")
    if not entry.shape or not entry.shape[-1] or (final is not None and _tokens(final) != _tokens(entry)):
        raise FormatError(
            f"{key!r} has shape {list(entry.shape)}"
            + (f" beside 'hidden_states' {list(final.shape)}" if final else "")
            + "; a ModelOpt dump holds aux [T, k·H] with the final state [T, H] (an empty aux tensor: the dump "
            "captured no aux layer)",
            path=table.path,
            hint="re-dump with at least one aux layer (--aux-layers), or point hsdiff at the aux dump itself",
        )
    h = final.shape[-1] if final is not None and len(final.shape) >= 2 else None
    pre_norm, variant = _variant(table, key, final)
    last = final is not None and h is not None and final_in_last_columns(entry, final)
    if last:
        variant += (
            f"; the aux tensor's last {h} columns are that final state, bit for bit: a slot of its own (the draft's "
            "fc was trained on it: TensorRT-LLM's -1, HF's hidden_states[-1])"
        )
    conv = table.extras.get("conversation_id")
    group = str(conv) if isinstance(conv, (str, int)) else sample_name(table.path)
    cap = make_capture(
        table,
        entry,
        ctx,
        fmt=KEY,
        group=group,
        token_ids=token_ids_of(table),
        concat=True,
        final_width=h,
        final=final.loader if final is not None and h else None,
        mask=table.entries["loss_mask"].loader if "loss_mask" in table.entries else None,
    )
    return [cap.replace(final_pre_norm=pre_norm, variant=variant, final_last=last)]


def _variant(table: Table, key: str, final: Entry | None) -> tuple[bool, str]:
    """(final state pre-norm?, the variant in words)."""
    flag = _flag(table)
    if flag is not None:
        return flag, f"hidden_states_prenorm={flag}: final state {'before' if flag else 'after'} the final norm"
    if key == "hidden_state_features":
        return False, "TensorRT-LLM dump (hidden_state_features, renamed by compute_hidden_states_trtllm.py)"
    if final is None or len(final.shape) < 2:
        return False, "no final state"
    ratio = sink_ratio(final)
    if ratio > PRENORM_SINK:
        return (
            True,
            f"vLLM dump: the final state has attention sinks ({ratio:.0f}× the median "
            "norm), so it was taken before the final norm; its aux ids went to vLLM unshifted, so they are "
            "vLLM's boundary indices (the modelopt-vllm convention), not ModelOpt's output indices",
        )
    return False, "HF or TensorRT-LLM dump: final state after the final norm (no attention sink in it)"


def _flag(table: Table) -> bool | None:
    value: Any = table.extras.get("hidden_states_prenorm")
    if value is None and "hidden_states_prenorm" in table.entries:
        value = table.entries["hidden_states_prenorm"].loader().reshape(-1)[:1].tolist()[0]
    return None if value is None else bool(value)


def _tokens(entry: Entry) -> int:
    return math.prod(entry.shape[:-1])
