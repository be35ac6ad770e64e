"""SGLang's forward-hook tensor dump (``--debug-tensor-dump-output-folder``):
``TP{t}_PP{p}_Rank{r}_pid{pid}/Pass{N:05d}.pt``.

Read from the sglang 0.5.10 wheel (``sglang/srt/debug_utils/tensor_dump_forward_hook.py``, the same
file in 0.5.23, where no server flag reaches it any more; the flag: ``server_args.py:687-689``, the
hooks registered by ``model_executor/model_runner.py:1254-1258``):

* ``TensorDumper.__init__`` (lines 26-44): one directory per rank, ``TP{tp_rank}_PP{pp_rank}_Rank{rank}_pid{pid}``;
* ``add_tensor`` (49-76): ``{module name: output}``, a module returning several tensors gives their
  list (flattened here as ``name.0``, ``name.1``); the top-level model's ``ForwardBatch`` gives
  ``model.forward_batch_info.input_ids`` (and ``seq_lens``, ``positions``);
* ``dump_current_tensors`` (78-87): ``torch.save`` of that dict per forward pass, ``Pass{N:05d}.pt``;
* ``_add_hook_recursive`` / ``_dump_hook`` (89-138): hooks on leaf modules and on ``model``, whose
  hook saves the pass *before* adding the model's own output, so the ``model`` entry of a pass
  (and whatever ran after it, such as ``logits_processor``) belongs to the previous forward pass.
  This reader leaves those out.

What the leaf outputs are, from ``models/llama.py`` (0.5.10: lines 309-313 and 405) and
``layers/layernorm.py`` (``RMSNorm.forward_native``, 273-321: with a residual it returns
``(normed, x + residual)``): ``model.embed_tokens`` is B0; ``model.layers.{i}.input_layernorm``
is ``[normed, residual]`` for i ≥ 1, the residual being the stream entering layer i, B{i} (layer 0
gets no residual, so its entry is the normed tensor alone); ``model.norm`` is ``[final state after
the norm, B{L}]``. Other families that fuse add and norm the same way read the same; a pass that
holds no such entry is refused, naming what was expected.
"""

from __future__ import annotations

import re

from ..errors import FormatError
from ..model import Capture, Index, LabelSource, Layer
from ._common import ReadContext, make_capture, rank_and_run
from ._container import Table

KEY = "sglang_hook"
READS = "table"
PRIORITY = 12  # its keys are module names: claim the file before any reader that reads names
IDS_KEY = "model.forward_batch_info.input_ids"
_LAYER_RE = re.compile(r"^(?:(.+)\.)?layers\.(\d{1,6})\.input_layernorm\.1$")
_RANK_RE = re.compile(r"^TP(\d+)_PP(\d+)_Rank(\d+)_pid\d+$")


def sniff(table: Table) -> bool:
    return table.container == "torch" and IDS_KEY in table.entries


def read(table: Table, ctx: ReadContext) -> list[Capture]:
    ids_entry = table.entries[IDS_KEY]
    ids = tuple(int(v) for v in ids_entry.loader().reshape(-1).tolist())
    rank, run = rank_and_run(table.path, _RANK_RE, ctx)
    group = f"{run}:{table.path.stem}"
    picked: list[tuple[str, Layer | None, bool]] = []
    layers = {int(m.group(2)): k for k in table.entries if (m := _LAYER_RE.match(k))}
    prefix = next((m.group(1) for k in layers.values() if (m := _LAYER_RE.match(k)) and m.group(1)), "model")
    if f"{prefix}.embed_tokens" in table.entries:
        picked.append((f"{prefix}.embed_tokens", Layer(0, Index.BOUNDARY, LabelSource.KEY), False))
    picked += [(layers[i], Layer(i, Index.BOUNDARY, LabelSource.KEY), False) for i in sorted(layers)]
    complete = bool(layers) and sorted(layers) == list(range(1, max(layers) + 1))
    if f"{prefix}.norm.1" in table.entries and complete:  # B = L is labelled when every layer was dumped
        picked.append((f"{prefix}.norm.1", Layer(max(layers) + 1, Index.BOUNDARY, LabelSource.KEY), False))
    if f"{prefix}.norm.0" in table.entries:
        picked.append((f"{prefix}.norm.0", None, True))
    out = []
    for key, layer, post in picked:
        e = table.entries[key]
        if len(e.shape) == 2 and e.shape[0] == len(ids) and e.is_float:
            out.append(
                make_capture(table, e, ctx, fmt=KEY, group=group, token_ids=ids, layer=layer, post_norm=post, rank=rank)
            )
    if not any(c.layer is not None for c in out):
        raise FormatError(
            f"a forward-hook pass of {len(ids)} tokens with no residual stream in it: expected "
            f"{prefix}.layers.N.input_layernorm as [normed, residual] of [{len(ids)}, H] (or {prefix}.embed_tokens)",
            path=table.path,
            hint="dump a model whose decoder layers fuse add and norm (llama, qwen, ...), "
            "with --debug-tensor-dump-layers covering the layers you compare",
        )
    return out
