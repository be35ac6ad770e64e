"""How each engine and trainer counts layers, and translation between them.

Two ways of counting name the same tensors one apart (``L`` = ``num_hidden_layers``):

* **boundary index** (B): B=0 is the embedding output, B=k (1 ≤ k ≤ L-1) is the residual stream
  entering decoder layer k (= output of layer k-1), B=L is the output of the last layer *before*
  the final norm. Hugging Face ``output_hidden_states`` tuple indices are B-indices, except that
  HF's entry ``[L]`` has the final norm applied.
* **output index** (O): O=k is the output of layer k; ``B = O + 1``; O=-1 is the embeddings.

Everything inside hsdiff is kept as B-indices; engine ids are translated at the edges with
:func:`to_boundary` and :func:`from_boundary`. Each rule below cites the public source it was read
from (versions as noted in ``docs/conventions.md``).

Example::

    >>> to_boundary([2, 30, 58], "sglang", num_layers=61)
    [3, 31, 59]
    >>> from_boundary([3, 31, 59], "vllm", num_layers=61)
    [3, 31, 59]
    >>> translate([2, 30, 58], "sglang", "vllm", num_layers=61)
    [3, 31, 59]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .errors import InputError

__all__ = [
    "BOUNDARY",
    "OUTPUT",
    "ENGINES",
    "MODEL_FAMILIES",
    "EngineRule",
    "rule",
    "normalize_family",
    "family_from_config",
    "to_boundary",
    "from_boundary",
    "translate",
    "default_ids",
    "default_boundaries",
    "describe_boundary",
    "name_boundary",
    "max_capturable",
    "parse_ids",
    "VLLM_RUNNERS",
    "config_keys",
    "write_key",
    "key_name",
    "read_config_ids",
]

BOUNDARY = "boundary"
OUTPUT = "output"


@dataclass(frozen=True)
class EngineRule:
    """One engine's or trainer's way of reading ``eagle_aux_hidden_state_layer_ids``."""

    key: str
    title: str
    kind: str  # "engine" or "trainer"
    index: str  # BOUNDARY or OUTPUT: what a plain id means (before model-family rules)
    config_keys: tuple[tuple[str, ...], ...]  # where the ids are read from, first match wins
    sorts: bool  # the engine sorts/de-duplicates ids before use
    captures_last: bool  # B = L (last layer, pre-norm) can be captured
    source: str

    def __repr__(self) -> str:
        return f"<EngineRule {self.key}: {self.index}-index>"


_NESTED = ("eagle_config", "eagle_aux_hidden_state_layer_ids")
_TOP = ("eagle_aux_hidden_state_layer_ids",)

_RULES: dict[str, EngineRule] = {
    r.key: r
    for r in [
        EngineRule(
            "sglang", "SGLang", "engine", OUTPUT, (_NESTED,), True, False,
            "sglang/srt/models/llama_eagle3.py + llama.py set_eagle3_layers_to_capture: "
            "layers_to_capture = [v + 1 for v in ids]; captured before layer i in loop order",
        ),
        EngineRule(
            "vllm", "vLLM", "engine", BOUNDARY, (_TOP, _NESTED), True, True,
            "vllm/model_executor/models/llama.py aux_hidden_state_layers (sorted, used as given); "
            "speculative config reads the top-level key (V1 runner also the nested one)",
        ),
        EngineRule(
            "trtllm", "TensorRT-LLM", "engine", OUTPUT, (("eagle3_layers_to_capture",),), True, True,
            "tensorrt_llm/llmapi EagleDecodingConfig.eagle3_layers_to_capture: captured after "
            "layer i's MLP (set, so sorted)",
        ),
        EngineRule(
            "modelopt", "NVIDIA ModelOpt", "trainer", OUTPUT, (("eagle_architecture_config", "eagle_aux_hidden_state_layer_ids"), _NESTED), True, True,
            "modelopt/torch/speculative/plugins/transformers.py: forward hooks on layer outputs; "
            "default sorted{1, L//2-1, L-4}",
        ),
        EngineRule(
            "specforge", "SpecForge", "trainer", OUTPUT, (("aux_hidden_state_layer_ids",), _NESTED), True, False,
            "specforge data generation captures through SGLang (+1 applied); default [1, L//2-1, L-4]",
        ),
        EngineRule(
            "eagle", "SafeAILab EAGLE-3", "trainer", BOUNDARY, (), True, True,
            "EAGLE/eagle/model/modeling_llama_kv.py: hidden states at the inputs of layers "
            "{2, L//2, L-3}, concatenated ascending",
        ),
        EngineRule(
            "hf", "Hugging Face transformers", "trainer", BOUNDARY, (), False, True,
            "transformers output_hidden_states: tuple of L+1, [0] = embeddings, [L] post-norm",
        ),
    ]
}

ENGINES: tuple[str, ...] = tuple(_RULES)

#: SGLang model-family rules (the only engine whose reading depends on the model family).
MODEL_FAMILIES: dict[str, str] = {
    "llama": "ids are O-index: +1 always (llama, qwen, mistral and most families)",
    "deepseek": "+1 only if ids[0] == 1, otherwise ids are B-index (deepseek_v2/v3, kimi_k25; SGLang PR #25454)",
    "deepseek-legacy": "+1 always (deepseek/kimi before SGLang PR #25454)",
    "gpt-oss": "ids are B-index if max(ids) == L, otherwise +1 (gpt_oss; SGLang PR #32334)",
}

_FAMILY_ALIASES = {
    "llama": "llama", "qwen": "llama", "qwen2": "llama", "qwen3": "llama", "qwen3_moe": "llama",
    "qwen2_moe": "llama", "mistral": "llama", "mixtral": "llama", "minimax": "llama",
    "minimax_m2": "llama", "glm4_moe": "llama", "llama4": "llama",
    # deepseek_v4 captures *after* layer i returns, so its ids are layer outputs: the llama rule in B terms
    "deepseek_v4": "llama",
    "deepseek": "deepseek", "deepseek_v2": "deepseek", "deepseek_v3": "deepseek", "kimi": "deepseek",
    "kimi_k2": "deepseek", "kimi_k25": "deepseek", "kimi-k2.5": "deepseek",
    "deepseek-legacy": "deepseek-legacy", "deepseek_legacy": "deepseek-legacy",
    "gpt-oss": "gpt-oss", "gpt_oss": "gpt-oss", "gptoss": "gpt-oss",
}


def rule(engine: str) -> EngineRule:
    """The :class:`EngineRule` for ``engine``; raises :class:`InputError` naming the valid keys."""
    try:
        return _RULES[engine.lower()]
    except KeyError:
        raise InputError(
            f"unknown engine {engine!r}", hint=f"choose one of: {', '.join(ENGINES)}"
        ) from None


def normalize_family(family: str | None) -> str:
    """Map a model family or ``model_type`` (``kimi_k25``, ``qwen3``, ...) to an SGLang rule key."""
    if family is None:
        return "llama"
    key = family.strip().lower()
    if key in _FAMILY_ALIASES:
        return _FAMILY_ALIASES[key]
    raise InputError(
        f"unknown model family {family!r}",
        hint=f"choose one of: {', '.join(MODEL_FAMILIES)} (or a model_type such as qwen3, kimi_k25)",
    )


def family_from_config(config: dict) -> str:
    """Guess the SGLang model-family rule from a target ``config.json`` (``model_type``)."""
    model_type = str(config.get("model_type", "")).lower()
    text_cfg = config.get("text_config")
    if isinstance(text_cfg, dict) and text_cfg.get("model_type"):
        model_type = str(text_cfg["model_type"]).lower() if model_type in ("", "kimi_k25") else model_type
    if model_type.startswith("deepseek_v4"):
        return "llama"
    if model_type.startswith(("deepseek", "kimi")):
        return "deepseek"
    if model_type.startswith("gpt_oss"):
        return "gpt-oss"
    return "llama"


def _needs_layers(num_layers: int | None, what: str) -> int:
    if num_layers is None:
        raise InputError(
            f"{what} depends on the number of target layers",
            hint="pass --num-layers or --model-config (the target's config.json)",
        )
    return num_layers


def _check_range(boundaries: Iterable[int], num_layers: int | None) -> None:
    if num_layers is None:
        return
    for b in boundaries:
        if b < 0 or b > num_layers:
            raise InputError(
                f"layer id names boundary {b}, outside 0..{num_layers} for a {num_layers}-layer target",
                hint="check the ids and --num-layers",
            )


def to_boundary(
    ids: Sequence[int],
    engine: str,
    *,
    num_layers: int | None = None,
    model_family: str | None = None,
    keep_order: bool = False,
) -> list[int]:
    """Boundary indices that ``engine`` captures for configured ``ids``, in slot order.

    Engines capture in layer-loop order, so slots come out ascending and de-duplicated unless the
    rule keeps the user's order (``hf``) or ``keep_order`` asks for the list as written.

    >>> to_boundary([-1, 2, 30], "sglang")
    [0, 3, 31]
    >>> to_boundary([2, 30, 58], "sglang", model_family="kimi_k25")
    [2, 30, 58]
    """
    r = rule(engine)
    ids = [int(i) for i in ids]
    if not ids:
        return []
    if r.key == "sglang":
        family = normalize_family(model_family)
        if family in ("llama", "deepseek-legacy"):
            shift = 1
        elif family == "deepseek":
            shift = 1 if ids[0] == 1 else 0
        else:  # gpt-oss
            L = _needs_layers(num_layers, "SGLang's gpt-oss rule")
            shift = 0 if max(ids) == L else 1
    else:
        shift = 1 if r.index == OUTPUT else 0
    out = [i + shift for i in ids]
    _check_range(out, num_layers)
    if r.sorts and not keep_order:
        out = sorted(set(out))
    return out


def from_boundary(
    boundaries: Sequence[int | None],
    engine: str,
    *,
    num_layers: int | None = None,
    model_family: str | None = None,
) -> list[int | None]:
    """The ids to configure on ``engine`` so that it captures ``boundaries``.

    An entry is ``None`` where the boundary is unknown or the engine cannot capture it (B = L on
    SGLang's llama rule, B = 1 first on SGLang's deepseek rule).

    >>> from_boundary([3, 31, 59], "sglang")
    [2, 30, 58]
    >>> from_boundary([2, 15, 30], "sglang", num_layers=30)
    [1, 14, None]
    """
    r = rule(engine)
    known = [b for b in boundaries if b is not None]
    _check_range(known, num_layers)
    if r.key == "sglang":
        family = normalize_family(model_family)
        if family == "deepseek":
            first = known[0] if known else None
            if first == 2:
                shift = 1  # conventional O-index form [1, ...]: ids[0] == 1 triggers +1
            elif first == 1:
                return [None for _ in boundaries]  # B 1 first can be written neither way
            else:
                shift = 0
        elif family == "gpt-oss":
            L = _needs_layers(num_layers, "SGLang's gpt-oss rule")
            shift = 0 if known and max(known) == L else 1
        else:
            shift = 1
    else:
        shift = 1 if r.index == OUTPUT else 0
    out: list[int | None] = []
    for b in boundaries:
        if b is None or (num_layers is not None and b not in range(max_capturable(engine, num_layers, model_family) + 1)):
            out.append(None)
        else:
            out.append(b - shift)
    return out


def translate(
    ids: Sequence[int],
    src: str,
    dst: str,
    *,
    num_layers: int | None = None,
    src_family: str | None = None,
    dst_family: str | None = None,
) -> list[int | None]:
    """The ids that make ``dst`` capture the same tensors as ``ids`` on ``src``."""
    return from_boundary(
        to_boundary(ids, src, num_layers=num_layers, model_family=src_family),
        dst,
        num_layers=num_layers,
        model_family=dst_family,
    )


def default_boundaries(num_layers: int) -> list[int]:
    """The usual EAGLE-3 default, as boundary indices: ``[2, L//2, L-3]``."""
    return sorted({2, num_layers // 2, num_layers - 3})


def default_ids(engine: str, num_layers: int, model_family: str | None = None) -> list[int]:
    """The ids ``engine`` uses when the draft config names none (all name B ``[2, L//2, L-3]``)."""
    rule(engine)
    ids = from_boundary(default_boundaries(num_layers), engine, num_layers=num_layers, model_family=model_family)
    return [i for i in ids if i is not None]


def max_capturable(engine: str, num_layers: int, model_family: str | None = None) -> int:
    """The largest boundary index ``engine`` can capture (L-1 where nothing runs after the last layer)."""
    r = rule(engine)
    if r.key == "sglang":
        return num_layers if normalize_family(model_family) == "gpt-oss" else num_layers - 1
    return num_layers if r.captures_last else num_layers - 1


def describe_boundary(b: int | None, num_layers: int | None = None) -> str:
    """Words for a boundary index: ``"embeddings"``, ``"output of layer 2 (input of layer 3)"``..."""
    if b is None:
        return "unknown"
    if b == 0:
        return "embeddings (input of layer 0)"
    if num_layers is not None and b == num_layers:
        return f"output of the last layer {b - 1}, before the final norm"
    if num_layers is not None and b > num_layers:
        return f"boundary {b}, beyond a {num_layers}-layer model"
    return f"output of layer {b - 1} (input of layer {b})"


def name_boundary(b: int | None, num_layers: int | None = None) -> str:
    """A boundary with its meaning, for sentences: ``"B0 (the embeddings)"``, ``"B3 (the output of layer 2)"``."""
    if b is None:
        return "an unknown layer"
    if b == 0:
        return "B0 (the embeddings)"
    if num_layers is not None and b == num_layers:
        return f"B{b} (the last layer's output before the final norm)"
    return f"B{b} (the output of layer {b - 1})"


def parse_ids(text: str | Sequence[int], *, what: str = "--layer-ids") -> list[int]:
    """Parse ``"-1,2,30"``, ``"[2, 30, 58]"`` or a list into ints; raises :class:`InputError`."""
    if not isinstance(text, str):
        return [int(i) for i in text]
    cleaned = text.strip().strip("[]()")
    if not cleaned:
        raise InputError(f"{what} is empty", hint='give comma-separated integers, e.g. "2,30,58"')
    try:
        return [int(p) for p in cleaned.replace(" ", ",").split(",") if p.strip()]
    except ValueError:
        raise InputError(
            f"{what} {text!r} is not a list of integers", hint='give comma-separated integers, e.g. "2,30,58"'
        ) from None


#: vLLM's model runners differ in where they read the ids: V1 (the default) reads the top-level key and
#: then ``eagle_config``'s; V2 (``VLLM_USE_V2_MODEL_RUNNER=1``) reads only the top-level key
#: (vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py get_eagle3_aux_layers_from_config).
VLLM_RUNNERS = ("v1", "v2")

_WRITE_KEYS = {"sglang": _NESTED, "vllm": _TOP, "trtllm": ("eagle3_layers_to_capture",), "modelopt": _NESTED,
               "specforge": _NESTED}


def config_keys(engine: str, *, vllm_runner: str = "v1") -> tuple[tuple[str, ...], ...]:
    """Where ``engine`` reads the ids in a draft ``config.json``, first match wins.

    >>> config_keys("vllm", vllm_runner="v2")
    (('eagle_aux_hidden_state_layer_ids',),)
    """
    r = rule(engine)
    if r.key == "vllm" and vllm_runner == "v2":
        return (_TOP,)
    return r.config_keys


def write_key(engine: str) -> tuple[str, ...]:
    """The key ``hsdiff fix-config`` writes for ``engine`` (the one the engine reads first)."""
    r = rule(engine)
    if r.key not in _WRITE_KEYS:
        raise InputError(
            f"{r.title} reads no layer ids from a draft config.json",
            hint=f"choose an engine that does: {', '.join(_WRITE_KEYS)}",
        )
    return _WRITE_KEYS[r.key]


def key_name(path: Sequence[str]) -> str:
    """``("eagle_config", "eagle_aux_hidden_state_layer_ids")`` -> ``"eagle_config.eagle_aux_hidden_state_layer_ids"``."""
    return ".".join(path)


def read_config_ids(config: dict, engine: str, *, vllm_runner: str = "v1") -> tuple[object, tuple[str, ...] | None]:
    """The raw value ``engine`` reads from a draft config and the key it came from, or ``(None, None)``.

    The value is returned as stored (a list, ``null``, an empty list...): what an engine does with an
    empty or null value differs, see :func:`hsdiff.gate.read_ids`.
    """
    for path in config_keys(engine, vllm_runner=vllm_runner):
        node: object = config
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None or _has_path(config, path):
            if rule(engine).key == "vllm" and not (isinstance(node, (list, tuple)) and node):
                continue  # vLLM: `if layer_ids and isinstance(layer_ids, (list, tuple))`, else the next key / default
            return node, tuple(path)
    return None, None


def _has_path(config: dict, path: Sequence[str]) -> bool:
    node: object = config
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True
