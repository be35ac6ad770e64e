"""verl-SpeCo's draft feature store: ``manifest.jsonl``, ``metadata.json`` and ``{prefix}_{N:06d}.pt`` shards.

Read from verl-project/verl-SpeCo (main at 333b754, 2026-08-19):

* ``verl_speco/trainer/feature_store.py``: ``TorchShardFeatureStore.flush`` (lines 307-334) saves
  ``{"samples": [...], "metadata": store metadata}`` (``format: "torch_shard"``, ``created_by:
  "verl_speco"``, lines 279-284) per shard and appends a line to ``manifest.jsonl``; a sample is
  ``DraftFeatureSample.to_dict`` (154-178): ``input_ids`` [T], ``loss_mask`` [T] float,
  ``hidden_states`` [T, W] (or a list of tensors, concatenated by the trainers), ``metadata``, and
  optionally ``last_hidden_states``/``target``, ``target_logprobs``, ``position_ids``;
* the sample's ``metadata.hidden_states_layout`` (``to_training_item``, 180-190) says how W splits:
  ``eagle3_aux_plus_last`` and ``dflash_aux_plus_last`` end with the final state (after the final
  norm: a hook on the final norm, ``integration/oldlogprob_runtime.py:1591-1598``; HF's
  ``hidden_states[-1]`` in ``ci/standalone_feature_store_smoke.py:96-99``), ``dflash_aux`` is aux
  only; ``backends/eagle3_trainer_backend.py:869-889`` takes aux = the first k·H columns and the
  final state the next H; without a layout the runtime assumes ``eagle3_aux_plus_last``
  (``oldlogprob_runtime.py:173-181``);
* ``metadata.target_layer_ids`` (the smoke script, 110-122): the decoder layers whose outputs the
  aux blocks are (``hidden_states[layer_id + 1]``), which label the slots when they fit.

A sample whose hidden rows do not cover its ``input_ids`` (a window of a rollout) is read without
token ids and placed by value. A layout hsdiff does not know, or a final state whose width cannot
be told, is refused with one line.
"""

from __future__ import annotations

import re

import numpy as np

from ..errors import FormatError
from ..model import Capture, Index, LabelSource, Layer
from ._common import ReadContext, make_capture
from ._container import Entry, Table

KEY = "verl_speco"
READS = "table"
PRIORITY = 16
LAYOUTS = {"eagle3_aux_plus_last": True, "dflash_aux_plus_last": True, "dflash_aux": False}
_SAMPLE_RE = re.compile(r"^samples\.(\d+)\.input_ids$")


def sniff(table: Table) -> bool:
    return (
        table.container == "torch"
        and table.extras.get("metadata.format") == "torch_shard"
        and any(_SAMPLE_RE.match(k) for k in table.entries)
    )


def read(table: Table, ctx: ReadContext) -> list[Capture]:
    out = []
    for i in sorted(int(m.group(1)) for k in table.entries if (m := _SAMPLE_RE.match(k))):
        out.append(_sample(table, ctx, i))
    return out


def _sample(table: Table, ctx: ReadContext, i: int) -> Capture:
    p = f"samples.{i}."
    meta = {k[len(p) + 9 :]: v for k, v in table.extras.items() if k.startswith(p + "metadata.")}
    layout = str(meta.get("hidden_states_layout") or "eagle3_aux_plus_last")
    parts = [
        e
        for k, e in table.entries.items()
        if k == p + "hidden_states" or re.fullmatch(re.escape(p) + r"hidden_states\.\d+", k)
    ]
    final = table.entries.get(p + "last_hidden_states") or table.entries.get(p + "target")
    ids = tuple(int(v) for v in table.entries[p + "input_ids"].loader().reshape(-1).tolist())
    layer_ids = meta.get("target_layer_ids")
    widths = [e.shape[-1] for e in parts if e.shape]
    width = sum(widths)
    rows = {int(np.prod(e.shape[:-1])) for e in parts}
    with_last = LAYOUTS.get(layout)
    blocks = len(layer_ids) + bool(with_last) if isinstance(layer_ids, list) and layer_ids else 0
    h = (
        final.shape[-1]
        if final is not None and final.shape
        else (width // blocks if blocks and width % blocks == 0 else None)
    )
    if with_last is None or not parts or len(rows) != 1 or (with_last and not h):
        raise FormatError(
            f"sample {i}: hidden_states layout {layout!r}, widths {widths}, rows {sorted(rows)}; "
            "verl-SpeCo's feature store "
            f"holds hidden_states [T, W] laid out as one of {sorted(LAYOUTS)} (with metadata.target_layer_ids or "
            "last_hidden_states telling the final state's width)",
            path=table.path,
            hint="point hsdiff at the shards TorchShardFeatureStore wrote",
        )
    (t,) = rows
    aux = width - h if with_last and h else width  # the trainers take the final state from these columns
    entry = parts[0] if len(parts) == 1 else _joined(parts, t, width)
    cap = make_capture(
        table,
        entry,
        ctx,
        fmt=KEY,
        group=f"{table.path.stem}:{i}",
        concat=True,
        token_ids=ids if len(ids) == t else None,
        shape=(t, aux),
        key=f"{p}hidden_states",
        final_width=h if with_last else None,
        final=_last(entry, aux) if with_last else None,
        mask=table.entries[p + "loss_mask"].loader if p + "loss_mask" in table.entries else None,
    )
    k = aux // h if h else None
    labels = (
        tuple(Layer(int(x), Index.OUTPUT, LabelSource.CLAIMED) for x in layer_ids)
        if isinstance(layer_ids, list) and len(layer_ids) == k
        else ()
    )
    window = "" if len(ids) == t else f"; {t} hidden rows for {len(ids)} input_ids (a window: placed by value)"
    return cap.replace(
        col_stop=aux if aux != width else None,
        slot_layers=labels,
        variant=f"hidden_states_layout {layout}" + (f", target_layer_ids {layer_ids}" if labels else "") + window,
    )


def _joined(parts: list[Entry], t: int, width: int) -> Entry:
    return Entry(
        parts[0].name,
        (t, width),
        parts[0].dtype,
        lambda: np.concatenate([np.asarray(e.loader()).reshape(t, -1) for e in parts], axis=-1),
    )


def _last(entry: Entry, aux: int):  # type: ignore[no-untyped-def]
    return lambda: np.asarray(entry.loader()).reshape(-1, entry.shape[-1])[:, aux:]
