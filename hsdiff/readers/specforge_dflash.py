"""SpecForge offline records of its DFlash-family drafts (DFlash, Domino, DSpark): ``rows_*/data_{idx}.ckpt``.

Read from sgl-project/SpecForge (main at a6b6b02, version 0.2.0, 2026-08-08):

* ``scripts/prepare_hidden_states.py:709-730``: one ``torch.save`` (or ``.ckpt.gz``) per sample, the
  record the strategy's ``OfflineCaptureLayout.materialize`` builds from ``input_ids``,
  ``loss_mask``, the aux capture ``unsqueeze(0)`` and the last hidden state ``unsqueeze(0)``; paths
  from ``_get_file_path`` (lines 578-594), as for EAGLE-3 (:mod:`.specforge`);
* ``specforge/algorithms/dflash/providers.py:196-212`` and ``domino/providers.py:175-187``:
  ``aux_feature="hidden_states"``, ``last_hidden_feature=None``: ``input_ids`` [T], ``loss_mask`` [T],
  ``hidden_states`` [1, T, k·H] (the target layers the draft config selects, concatenated) and no
  final state;
* ``specforge/algorithms/dspark/providers.py:171-183``: the same plus
  ``target_last_hidden_states`` [1, T, H], the final state after the final norm (SGLang's
  ``logits_processor`` with SpecForge's ``patches/sglang/v0.5.14/spec-capture.patch``: "the post-norm
  last hidden");
* ``docs/basic_usage/data_preparation.md:298-307`` lists the same contracts.

The records name no layers: the slots are identified by value.
"""

from __future__ import annotations

import math

from ..errors import FormatError
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

KEY = "specforge_dflash"
READS = "table"
PRIORITY = 22  # after modelopt (whose files also hold 'hidden_states' and 'loss_mask'), before vllm
_FINAL = "target_last_hidden_states"


def sniff(table: Table) -> bool:
    keys = set(table.entries)
    return {"hidden_states", "input_ids", "loss_mask"} <= keys and not keys & {"aux_hidden_state", "token_ids"}


def read(table: Table, ctx: ReadContext) -> list[Capture]:
    entry = table.entries["hidden_states"]
    ids = token_ids_of(table)
    final = table.entries.get(_FINAL)
    t = len(ids) if ids is not None else None
    if (
        len(entry.shape) != 3
        or entry.shape[0] != 1
        or entry.shape[1] != t
        or (final is not None and math.prod(final.shape[:-1]) != t)
    ):
        raise FormatError(
            f"'hidden_states' has shape {list(entry.shape)} for {t} input_ids"
            + (f" and {_FINAL!r} {list(final.shape)}" if final is not None else "")
            + "; a SpecForge DFlash/Domino/DSpark record holds hidden_states [1, T, k·H] (and DSpark's "
            f"{_FINAL} [1, T, H])",
            path=table.path,
            hint="point hsdiff at the records prepare_hidden_states.py wrote, unchanged",
        )
    variant = (
        "DSpark record: aux and the final state after the final norm"
        if final is not None
        else "DFlash or Domino record: aux only, no final state"
    )
    cap = make_capture(
        table,
        entry,
        ctx,
        fmt=KEY,
        group=sample_name(table.path),
        token_ids=ids,
        concat=True,
        final_width=final_width(table, _FINAL),
        final=final_loader(table, _FINAL),
        mask=table.entries["loss_mask"].loader,
    )
    return [with_final_last(cap.replace(variant=variant), entry, final if final_width(table, _FINAL) else None)]
