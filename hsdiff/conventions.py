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
    "NESTED_KEY",
    "TOP_KEY",
    "FamilyRule",
    "family_rule",
    "needs_num_layers",
    "slot_order",
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


#: The draft-config keys engines read the ids from: nested under ``eagle_config``, and top-level.
NESTED_KEY = ("eagle_config", "eagle_aux_hidden_state_layer_ids")
TOP_KEY = ("eagle_aux_hidden_state_layer_ids",)
_NESTED, _TOP = NESTED_KEY, TOP_KEY

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

@dataclass(frozen=True)
class FamilyRule:
    """One SGLang model-family rule: how its ``set_eagle3_layers_to_capture`` turns ids into boundaries.

    ``reading`` is ``"output"`` (B = id + 1 always), ``"deepseek"`` (+1 only when ``ids[0] == 1``,
    otherwise the ids are boundaries) or ``"gpt-oss"`` (the ids are boundaries when ``max(ids) == L``,
    otherwise +1). ``model_types`` are the names (``model_type`` values and aliases) that select it,
    ``prefixes`` the ``model_type`` prefixes that select it when no name matches.
    """

    key: str
    reading: str
    summary: str
    model_types: tuple[str, ...]
    prefixes: tuple[str, ...]
    source: str

    def shift(self, ids: Sequence[int], num_layers: int | None) -> int:
        """What this rule adds to every id of ``ids`` (written in list order)."""
        if self.reading == "deepseek":
            return 1 if ids[0] == 1 else 0
        if self.reading == "gpt-oss":
            L = _needs_layers(num_layers, "SGLang's gpt-oss rule")
            return 0 if max(ids) == L else 1
        return 1

    def unshift(self, boundaries: Sequence[int], num_layers: int | None) -> int | None:
        """What to subtract from ``boundaries`` (ascending) to write them as ids; ``None`` when no list
        of ids makes this rule capture them."""
        if self.reading == "deepseek":
            first = boundaries[0] if boundaries else None
            if first == 2:
                return 1  # conventional O-index form [1, ...]: ids[0] == 1 triggers +1
            if first == 1:
                return None  # B 1 first can be written neither way
            return 0
        if self.reading == "gpt-oss":
            L = _needs_layers(num_layers, "SGLang's gpt-oss rule")
            return 0 if boundaries and max(boundaries) == L else 1
        return 1

    def max_capturable(self, num_layers: int) -> int:
        """The largest boundary this family captures (L-1 where nothing runs after the last layer)."""
        return num_layers if self.reading == "gpt-oss" else num_layers - 1

    def __repr__(self) -> str:
        return f"<FamilyRule {self.key}: {self.reading}>"


#: SGLang model-family rules (the only engine whose reading depends on the model family), one row per
#: rule, each citing the setter it encodes.
_FAMILIES: dict[str, FamilyRule] = {
    f.key: f
    for f in [
        FamilyRule(
            "llama", "output", "ids are O-index: +1 always (llama, qwen, mistral and most families)",
            ("llama", "qwen", "qwen2", "qwen3", "qwen3_moe", "qwen2_moe", "mistral", "mixtral", "minimax",
             "minimax_m2", "glm4_moe", "llama4",
             # deepseek_v4 captures *after* layer i returns, so its ids are layer outputs: the llama rule in B terms
             "deepseek_v4"),
            ("deepseek_v4",),
            "sglang/srt/models/llama.py set_eagle3_layers_to_capture: layers_to_capture = [v + 1 for v in ids]",
        ),
        FamilyRule(
            "deepseek", "deepseek",
            "+1 only if ids[0] == 1, otherwise ids are B-index (deepseek_v2/v3, kimi_k25; SGLang PR #25454)",
            ("deepseek", "deepseek_v2", "deepseek_v3", "kimi", "kimi_k2", "kimi_k25", "kimi-k2.5"),
            ("deepseek", "kimi"),
            "sglang/srt/models/deepseek_v2.py set_eagle3_layers_to_capture (SGLang PR #25454)",
        ),
        FamilyRule(
            "deepseek-legacy", "output", "+1 always (deepseek/kimi before SGLang PR #25454)",
            ("deepseek-legacy", "deepseek_legacy"), (),
            "sglang/srt/models/deepseek_v2.py set_eagle3_layers_to_capture before SGLang PR #25454",
        ),
        FamilyRule(
            "gpt-oss", "gpt-oss", "ids are B-index if max(ids) == L, otherwise +1 (gpt_oss; SGLang PR #32334)",
            ("gpt-oss", "gpt_oss", "gptoss"), ("gpt_oss",),
            "sglang/srt/models/gpt_oss.py set_eagle3_layers_to_capture (SGLang PR #32334)",
        ),
    ]
}

#: SGLang model-family rules: key -> one line (for help texts and error messages).
MODEL_FAMILIES: dict[str, str] = {k: f.summary for k, f in _FAMILIES.items()}

_FAMILY_ALIASES = {name: f.key for f in _FAMILIES.values() for name in f.model_types}


def family_rule(family: str | None) -> FamilyRule:
    """The :class:`FamilyRule` for a family key or ``model_type`` (``None``: the llama rule)."""
    return _FAMILIES[normalize_family(family)]


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
    best, length = "llama", 0
    for f in _FAMILIES.values():
        for prefix in f.prefixes:
            if model_type.startswith(prefix) and len(prefix) > length:
                best, length = f.key, len(prefix)
    return best


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
    check_range: bool = True,
) -> list[int]:
    """Boundary indices that ``engine`` captures for configured ``ids``, in slot order.

    Engines capture in layer-loop order, so slots come out ascending and de-duplicated unless the
    rule keeps the user's order (``hf``) or ``keep_order`` asks for the list as written.
    ``check_range=False`` leaves boundaries outside ``0..num_layers`` for the caller to report.

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
        shift = family_rule(model_family).shift(ids, num_layers)
    else:
        shift = 1 if r.index == OUTPUT else 0
    out = [i + shift for i in ids]
    if check_range:
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
        shift = family_rule(model_family).unshift(known, num_layers)
        if shift is None:
            return [None for _ in boundaries]
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


def needs_num_layers(engine: str, model_family: str | None = None) -> bool:
    """Whether reading ids on ``engine`` depends on the target's ``num_hidden_layers`` (SGLang's gpt-oss rule)."""
    return rule(engine).key == "sglang" and family_rule(model_family).reading == "gpt-oss"


def slot_order(boundaries: Sequence[int], engine: str) -> list[int]:
    """The slots ``engine`` fills for boundaries read in list order: ascending and once each if it sorts."""
    return sorted(set(boundaries)) if rule(engine).sorts else list(boundaries)


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
        return family_rule(model_family).max_capturable(num_layers)
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
