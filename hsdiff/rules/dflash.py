"""The DFlash family (DFlash, DFlash2, DSpark, Domino) as rows of the engine profile: how each engine and
trainer reads ``target_layer_ids``, where it reads them, and the key ``hsdiff fix-config`` writes.

A DFlash id is nearly everywhere an output index (O: the output of layer ``id``, B = id + 1, as in Hugging
Face's ``hidden_states[id + 1]``); what differs is whether the engine can capture B = L (the last layer's
output before the final norm) and whether an id past the end is dropped or fails at startup. Each row
cites the source line it encodes.
"""

from __future__ import annotations

from .kinds import DFLASH_KINDS
from .profile import BOUNDARY, DFLASH_IDS, DSPARK_IDS, OUTPUT, TARGET_IDS, Rule

__all__ = ["DFLASH_RULES", "DFLASH_KEYS", "DFLASH_WRITES", "DFLASH_DEFAULTS"]

_SG = "sglang"
_ALL = DFLASH_KINDS
_NOT2 = tuple(k for k in DFLASH_KINDS if k != "dflash2")
_SG_SETTER = (
    "sglang==0.5.23 sglang/srt/models/llama.py:943-953, qwen3.py:793-805, qwen3_moe.py:1145-1155, "
    "laguna.py:833-844, mimo_v2.py:1501-1513, gpt_oss.py:1354-1364, deepseek_v2.py:3475-3485 "
    "(layers_to_capture = [val + 1 for val in layer_ids]); the loop captures before layer i, "
    "llama.py:485-494, so B = L is never captured"
)

DFLASH_RULES: tuple[Rule, ...] = (
    # ---------------------------------------------------------------- SGLang
    Rule(
        _SG,
        (),
        None,
        None,
        OUTPUT,
        "SGLang DFlash, +1 setter (output index)",
        _SG_SETTER,
        captures_last=False,
        default="spaced",
        kinds=_ALL,
    ),
    Rule(
        _SG,
        ("qwen3_next",),
        None,
        None,
        OUTPUT,
        "SGLang DFlash, Qwen3-Next / Qwen3.5 (+1, per-layer flag)",
        "sglang==0.5.23 sglang/srt/models/qwen3_next.py:1303-1313 (+1), :959-962 (flag on layers[id + 1]: "
        "id L-1 raises IndexError at startup); qwen3_5.py:1889-1892",
        captures_last=False,
        last_fails=True,
        default="spaced",
        kinds=_ALL,
    ),
    Rule(
        _SG,
        ("after_layer",),
        None,
        None,
        OUTPUT,
        "SGLang DFlash, capture after the layer (raw id = O)",
        "sglang==0.5.23 sglang/srt/models/beam.py:1160-1168,1360-1374 (after layer id, before the final norm), "
        "muse_spark.py:1336-1354, bailing_moe_v3.py:1348-1368,1731-1749",
        default="spaced",
        kinds=_ALL,
    ),
    Rule(
        _SG,
        ("muse_glimmer",),
        None,
        None,
        OUTPUT,
        "SGLang DFlash2 on Muse Glimmer (+1 for layer-output drafts)",
        "sglang==0.5.23 sglang/srt/model_executor/model_runner_components/spec_aux_hidden_state.py:17-29,252-258 "
        "(+1 for DFlash2DraftModel / MuseGlimmerAssistantModel); muse_glimmer.py:421-423 (before layer i), "
        ":866-879 (0 <= id < L)",
        captures_last=False,
        default="spaced",
        kinds=("dflash2",),
    ),
    Rule(
        _SG,
        ("muse_glimmer",),
        None,
        None,
        BOUNDARY,
        "SGLang DFlash on Muse Glimmer (layer-input ids, raw)",
        "sglang==0.5.23 sglang/srt/model_executor/model_runner_components/spec_aux_hidden_state.py:17-29,252-258 "
        "(legacy drafts store layer-input ids); muse_glimmer.py:421-423, :866-879",
        captures_last=False,
        default="spaced",
        kinds=_NOT2,
    ),
    Rule(
        _SG,
        ("deepseek_v4",),
        None,
        None,
        BOUNDARY,
        "SGLang DSpark on DeepSeek-V4 (raw: the input of layer id)",
        "sglang==0.5.23 sglang/srt/models/deepseek_v4.py:4853-4861 (set_dspark_layers_to_capture, ids as given), "
        ':4203-4209 ("the attention input of its target layers")',
        captures_last=False,
        default="spaced",
        kinds=_ALL,
    ),
    # ---------------------------------------------------------------- vLLM
    Rule(
        "vllm",
        (),
        None,
        None,
        OUTPUT,
        "vLLM DFlash (dflash_config.target_layer_ids + 1)",
        "vllm==0.33.0 vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:113-150 (V2: + 1 for "
        "dflash_config.target_layer_ids, dspark_target_layer_ids, target_layer_ids), v1/worker/"
        "gpu_model_runner.py:5207-5222 (V1: dflash_config only); capture as for EAGLE-3, "
        "model_executor/models/interfaces.py:1617,1640-1650 (B = L before the final norm)",
        default="standard",
        kinds=_ALL,
    ),
    Rule(
        "vllm",
        ("deepseek", "deepseek-legacy"),
        None,
        None,
        OUTPUT,
        "vLLM DFlash, DeepSeek models (+1, no B0)",
        "vllm==0.33.0 vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:113-150; "
        "model_executor/models/deepseek_v2.py:1525,1561-1568,1586-1587",
        min_boundary=1,
        kinds=_ALL,
    ),
    Rule(
        "tokenspeed",
        (),
        None,
        None,
        OUTPUT,
        "TokenSpeed DFlash (+1, ids 0..L-2 checked at startup)",
        "lightseekorg/tokenspeed@f4d8ec6e python/tokenspeed/runtime/models/base/causal_lm.py:146-171 (+1, sorted; "
        "an id outside 0..L-2 raises ValueError), deepseek_v3.py:1697-1705",
        captures_last=False,
        last_fails=True,
        default="",
        kinds=_ALL,
    ),
    Rule(
        "vllm-tpu",
        (),
        None,
        None,
        OUTPUT,
        "vLLM TPU JAX DFlash (raw, after layer id; -1 names nothing)",
        "tpu-inference==0.32.0 tpu_inference/models/jax/llama3.py:323-336 (dflash_config.target_layer_ids as "
        "written), :365-369 (captured after layer i), :374 (the norm after the loop: id L-1 is B = L, pre-norm); "
        "qwen3.py:328-341,357-367; the loop index is never -1",
        min_boundary=1,
        default="",
        kinds=_ALL,
    ),
    # ---------------------------------------------------------------- trainers
    Rule(
        "automodel",
        (),
        None,
        None,
        OUTPUT,
        "NeMo Automodel DSpark (hidden_states[id + 1]: -1 the embeddings, L-1 post-norm)",
        "NVIDIA-NeMo/Automodel@36044ad3d nemo_automodel/components/speculative/dspark/common.py:64-68 "
        "(hidden_states[0 if id == -1 else id + 1]), :71-108 (-1..L-1, ascending), target.py:189-196,277-286 (id "
        "L-1 read from a hook on the final norm: post-norm)",
        captures_last=False,
        names_final=True,
        final_is_last=True,
        default="",
        kinds=("dspark",),
    ),
    Rule(
        "automodel",
        (),
        None,
        None,
        OUTPUT,
        "NeMo Automodel DFlash (hooks on layers[id]; L-1 before the norm)",
        "NVIDIA-NeMo/Automodel@36044ad3d nemo_automodel/components/speculative/dflash/target.py:74-80,168-175 "
        "(the output of layers[id]), :117-125 (0 <= id < L), draft_qwen3.py:282-288 (default, evenly spaced "
        "1..L-3)",
        min_boundary=1,
        default="spaced",
        kinds=tuple(k for k in DFLASH_KINDS if k != "dspark"),
    ),
    Rule(
        "deepspec",
        (),
        None,
        None,
        OUTPUT,
        "DeepSpec DFlash/DSpark (hidden_states[id + 1], -1 the embeddings)",
        "deepseek-ai/DeepSpec@afdfa7c deepspec/modeling/dspark/common.py:54 (hidden_states[0 if id == -1 else "
        "id + 1]), deepspec/eval/base_evaluator.py:100-112 (id L-1 refused)",
        captures_last=False,
        default="",
        kinds=_ALL,
    ),
    Rule(
        "specforge",
        (),
        None,
        None,
        OUTPUT,
        "SpecForge DFlash (Hugging Face hidden_states[id + 1])",
        "SpecForge@a6b6b02 specforge/modeling/draft/dflash.py:284-293 (offset = 1), :271-281 (default, evenly "
        "spaced 1..L-3), :356-358 (dflash_config.target_layer_ids)",
        captures_last=False,
        default="spaced",
        kinds=_ALL,
    ),
)

#: Where each engine reads DFlash-family ids in a draft config (vLLM: the same keys as for EAGLE-3, one
#: function for every method), first match wins; a ``*:kind`` entry is one kind's own order.
DFLASH_KEYS: dict[str, tuple[tuple[str, ...], ...]] = {
    # parse_dflash_draft_config, dflash_utils.py:656-660 (0.5.23)
    "sglang": (DFLASH_IDS, TARGET_IDS),
    # dspark_config.py:226-310 (prefixed key first), spec_aux_hidden_state.py:260-274 (0.5.23)
    "sglang:dspark": (DSPARK_IDS, DFLASH_IDS, TARGET_IDS),
    "specforge": (DFLASH_IDS,),  # specforge/modeling/draft/dflash.py:356-358
    "tokenspeed": (DFLASH_IDS, TARGET_IDS),  # tokenspeed@f4d8ec6e runtime/execution/drafter/dflash.py:138-140
    "deepspec": (TARGET_IDS,),  # DeepSpec@afdfa7c config/dflash/dflash_qwen3_8b.py:13, config/dspark/*.py
    "vllm-tpu": (DFLASH_IDS,),  # tpu-inference==0.32.0 models/jax/llama3.py:323-336
    "automodel": (DFLASH_IDS,),  # Automodel@36044ad3d recipes/llm/train_dflash.py:501-510
    "automodel:dspark": (TARGET_IDS,),  # Automodel@36044ad3d components/speculative/dspark/config.py:28-55
}

#: The key hsdiff fix-config writes for a DFlash-family draft, by engine (``*:kind`` for one kind).
DFLASH_WRITES: dict[str, tuple[str, ...]] = {
    "sglang": DFLASH_IDS,
    "sglang:dspark": DSPARK_IDS,
    "vllm": DFLASH_IDS,  # eagle3_utils.py:120-124 (0.33): + 1, the O-index DFlash ids are written as they are
    "vllm:dspark": DSPARK_IDS,  # eagle3_utils.py:125-135
    "specforge": DFLASH_IDS,
    "tokenspeed": DFLASH_IDS,
    "deepspec": TARGET_IDS,
    "vllm-tpu": DFLASH_IDS,
    "automodel": DFLASH_IDS,
    "automodel:dspark": TARGET_IDS,
}

#: What an engine captures when the draft config names no DFlash ids.
DFLASH_DEFAULTS: dict[str, str] = {
    "sglang": "evenly spaced output indices 1..L-3, one per draft layer (dflash_utils.py:348-385, 0.5.23)",
    "vllm": "the EAGLE-3 default of the target model, B(2, L//2, L-3), three layers whatever the draft's width "
    "(eagle3_utils.py:34-39, interfaces.py:1751-1772, 0.33)",
    "specforge": "evenly spaced output indices 1..L-3, one per draft layer (dflash.py:271-281)",
    "vllm-tpu": "every layer: output indices L - num_target_layers .. L-1, num_target_layers from the draft "
    "config, else L (tpu-inference==0.32.0 models/jax/llama3.py:332-336), while its DFlash draft sizes itself "
    "for evenly spaced 1..L-3 (qwen3_dflash.py:45-65): set the ids",
    "automodel": "evenly spaced output indices 1..L-3, one per draft layer (Automodel@36044ad3d "
    "dflash/draft_qwen3.py:282-288)",
    "automodel:dspark": "evenly spaced output indices 1..L-1, the last (post-norm) included (Automodel@36044ad3d "
    "dspark/registry.py:86-104)",
}
