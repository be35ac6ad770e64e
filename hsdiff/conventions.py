"""How each engine and trainer counts layers, and translation between them.

Two ways of counting name the same tensors one apart (``L`` = ``num_hidden_layers``):

* **boundary index** (B): B=0 is the embedding output, B=k (1 ≤ k ≤ L-1) is the residual stream
  entering decoder layer k (= output of layer k-1), B=L is the output of the last layer *before*
  the final norm. The final hidden state *after* the norm is :func:`final_boundary` (L+1): only
  TensorRT-LLM (id -1) and Hugging Face (tuple index L) have an id for it.
* **output index** (O): O=k is the output of layer k; ``B = O + 1``; O=-1 is the embeddings.

Everything inside hsdiff is kept as B-indices; engine ids are translated at the edges with
:func:`to_boundary` and :func:`from_boundary`. Which reading applies depends on the engine, the
target's model family and the engine version: :func:`applied` picks the row of the table in
:mod:`hsdiff.convention_rules` (each row cites the source line it encodes); the default version is
the newest the table knows.

Example::

    >>> to_boundary([2, 30, 58], "sglang", num_layers=61)
    [3, 31, 59]
    >>> to_boundary([2, 30, 58], "sglang", num_layers=61, model_family="kimi_k25", version="0.5.12")
    [3, 31, 59]
    >>> translate([2, 30, 58], "sglang", "vllm", num_layers=61)
    [3, 31, 59]
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import replace

from .convention_rules import (
    BOUNDARY,
    CONFIG_KEYS,
    DEEPSEEK,
    DEFAULT_RUNNER,
    DEFAULT_VERSIONS,
    ENGINE_INFO,
    FAMILIES,
    FINAL_L,
    FINAL_MINUS_ONE,
    GPT_OSS,
    NESTED,
    NONE,
    OUTPUT,
    RULES,
    TOP,
    VERSIONS,
    VLLM_RUNNERS,
    EngineInfo,
    Rule,
)
from .errors import InputError

__all__ = [
    "BOUNDARY", "OUTPUT", "ENGINES", "MODEL_FAMILIES", "VLLM_RUNNERS", "DEFAULT_RUNNER", "NESTED_KEY", "TOP_KEY",
    "EngineInfo", "Rule", "rule", "applied", "parse_version", "default_version", "version_tuple", "version_for", "versions", "normalize_family",
    "family_from_config", "to_boundary", "from_boundary", "translate", "default_ids", "default_boundaries",
    "final_boundary", "capturable", "needs_num_layers", "slot_order", "describe_boundary",
    "name_boundary", "parse_ids", "config_keys", "write_key", "key_name",
]

NESTED_KEY, TOP_KEY = NESTED, TOP
ENGINES: tuple[str, ...] = tuple(ENGINE_INFO)

#: SGLang model-family rules: key -> the model types that select it.
MODEL_FAMILIES: dict[str, str] = {k: ", ".join(names[:6]) for k, (names, _) in FAMILIES.items()}
_FAMILY_ALIASES = {name: key for key, (names, _) in FAMILIES.items() for name in names}


def rule(engine: str) -> EngineInfo:
    """The :class:`EngineInfo` for ``engine``; raises :class:`InputError` naming the valid keys."""
    try:
        return ENGINE_INFO[engine.lower()]
    except KeyError:
        raise InputError(f"unknown engine {engine!r}", hint=f"choose one of: {', '.join(ENGINES)}") from None


# --------------------------------------------------------------------------- versions

def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def default_version(engine: str) -> str:
    """The newest version of ``engine`` the table was checked against (the default of --engine-version)."""
    key = rule(engine).key
    return DEFAULT_VERSIONS.get(key, VERSIONS[key][-1])


def parse_version(engine: str, text: str | None) -> str:
    """``"sglang==0.5.12"`` or ``"0.5.12"`` -> ``"0.5.12"``, checked against ``engine`` and the table.

    SpecForge captures through SGLang, so its version is the SGLang version it runs (``sglang==0.5.12``).
    """
    key = rule(engine).key
    if text is None or not text.strip():
        return default_version(key)
    name, _, ver = text.strip().rpartition("==")
    name = name.strip().lower().replace("-", "_")
    known_names = {n.replace("-", "_") for n in rule(key).names}
    ver = ver.strip().lstrip("v")
    if ver in VERSIONS[key] and not version_tuple(ver):
        return ver  # a label such as TensorRT-LLM's "main": one rule for all
    if (name and name not in known_names) or not ver or not version_tuple(ver) or not all(p.isdigit() for p in ver.split(".")):
        raise InputError(f"--engine-version {text!r} is not a version of {rule(key).title}",
                         hint=f"write it as {key}=={default_version(key)}")
    oldest = VERSIONS[key][0]
    if version_tuple(ver) < version_tuple(oldest):
        raise InputError(f"{rule(key).title} {ver} is older than any version hsdiff's convention table was checked "
                         f"against ({oldest}–{default_version(key)})",
                         hint="upgrade the engine, or check its set_eagle3_layers_to_capture by hand")
    return ver


def version_for(engine: str, given: Sequence[str] | str | None) -> str:
    """The version of ``engine`` among ``--engine-version`` values (``sglang==0.5.12``, ``vllm==0.33``...):
    the one naming ``engine``, a bare version when it is the only value, else the default.

    >>> version_for("vllm", ["sglang==0.5.12", "vllm==0.31"])
    '0.31'
    """
    key = rule(engine).key
    values = [given] if isinstance(given, str) else list(given or ())
    names = rule(key).names
    named = [v for v in values if "==" in v and v.split("==")[0].strip().lower() in names]
    if len({parse_version(key, v) for v in named}) > 1:  # one engine, one version: the last must not win silently
        raise InputError(f"--engine-version names {key} twice ({', '.join(named)})", hint=f"give one version of {key}")
    if named:
        return parse_version(key, named[-1])
    bare = [v for v in values if "==" not in v]
    if bare and len(values) == 1:
        return parse_version(key, bare[0])
    return default_version(key)


def versions(given: Sequence[str] | None, engines: Sequence[str]) -> dict[str, str]:
    """The version of each of ``engines`` from ``--engine-version`` values; a bare version applies to the
    first engine. Raises :class:`InputError` for a value that names none of them.

    >>> versions(["sglang==0.5.12"], ["sglang", "vllm"])
    {'sglang': '0.5.12', 'vllm': '0.33'}
    """
    keys = [rule(e).key for e in engines]
    values = list(given or ())
    for v in values:
        if "==" not in v:
            if len(values) > 1:
                raise InputError(f"--engine-version {v!r} names no engine",
                                 hint=f"write NAME==VERSION, e.g. {keys[0]}=={default_version(keys[0])}")
            continue
        name = v.split("==")[0].strip().lower()
        if not any(name in rule(k).names for k in keys):
            raise InputError(f"--engine-version {v!r} names an engine this command does not use",
                             hint=f"give a version of {' or '.join(dict.fromkeys(keys))}")
    out: dict[str, str] = {}
    for i, k in enumerate(keys):
        vals = values if i == 0 else [v for v in values if "==" in v]
        out.setdefault(k, version_for(k, vals))
    return out


def _in(r: Rule, version: str) -> bool:
    v = version_tuple(version)
    return (r.since is None or v >= version_tuple(r.since)) and (r.until is None or v[:len(version_tuple(r.until))] <= version_tuple(r.until))


# --------------------------------------------------------------------------- families

def normalize_family(family: str | None) -> str:
    """Map a model family or ``model_type`` (``kimi_k25``, ``qwen3``, ...) to a rule key."""
    if family is None:
        return "llama"
    key = family.strip().lower()
    if key in _FAMILY_ALIASES:
        return _FAMILY_ALIASES[key]
    raise InputError(
        f"unknown model family {family!r}",
        hint=f"choose one of: {', '.join(FAMILIES)} (or a model_type such as qwen3, kimi_k25)",
    )


def family_from_config(config: dict) -> str:
    """The model-family rule a target ``config.json`` selects (``model_type``; ``num_loops`` > 1: looped)."""
    model_type = str(config.get("model_type", "")).lower()
    text_cfg = config.get("text_config")
    if isinstance(text_cfg, dict) and text_cfg.get("model_type"):
        model_type = str(text_cfg["model_type"]).lower() if model_type in ("", "kimi_k25") else model_type
    loops = config.get("num_loops") or (text_cfg.get("num_loops") if isinstance(text_cfg, dict) else None)
    if isinstance(loops, int) and loops > 1:
        return "looped"
    best, length = "llama", 0
    for key, (names, prefixes) in FAMILIES.items():
        for prefix in prefixes + tuple(n for n in names if n == model_type):
            if model_type.startswith(prefix) and len(prefix) > length:
                best, length = key, len(prefix)
    return best


# --------------------------------------------------------------------------- the row that applies

@functools.lru_cache(maxsize=256)  # a pure function of its arguments, asked ~100 times per compare
def applied(engine: str, model_family: str | None = None, version: str | None = None) -> Rule:
    """The table row ``engine`` (at ``version``, default the newest) applies for ``model_family``.

    >>> applied("sglang", "kimi_k25", "0.5.13").label
    'SGLang ≥ 0.5.13, DeepSeek rule'
    """
    info = rule(engine)
    ver = parse_version(info.key, version)
    if info.captures_through:  # it captures through another engine's own setter, so that one's family rules apply
        own = _lookup(info.key, "llama", ver)
        sg = _lookup(info.captures_through, normalize_family(model_family), ver)
        return replace(sg, engine=info.key, label=f"{info.title} through {rule(sg.engine).title} {ver}: {sg.label}",
                       min_boundary=max(sg.min_boundary, own.min_boundary), source=f"{own.source}; {sg.source}")
    return _lookup(info.key, normalize_family(model_family), ver)


def _lookup(engine: str, family: str, version: str) -> Rule:
    rows = [r for r in RULES if r.engine == engine and _in(r, version)]
    own = [r for r in rows if family in r.families]
    general = [r for r in rows if not r.families]
    return (own or general)[0]


def _usable(r: Rule) -> Rule:
    if r.reading == NONE:
        raise InputError(f"{r.label}: {r.note}", hint=f"source: {r.source}")
    return r


def final_boundary(num_layers: int) -> int:
    """The boundary hsdiff gives the final hidden state *after* the norm (TensorRT-LLM -1, HF index L)."""
    return num_layers + 1


def _needs_layers(num_layers: int | None, what: str) -> int:
    if num_layers is None:
        raise InputError(f"{what} depends on the number of target layers",
                         hint="pass --num-layers or --model-config (the target's config.json)")
    return num_layers


def _check_range(boundaries: Iterable[int], num_layers: int | None, *, final: bool = True, rule_label: str = "") -> None:
    """Boundaries lie in 0..L or are the final post-norm state (``final``: L + 1); never below 0, whatever L."""
    top = None if num_layers is None else final_boundary(num_layers) if final else num_layers
    for b in boundaries:
        if b < 0 or (top is not None and b > top):
            span = "below 0" if num_layers is None else f"outside 0..{num_layers} for a {num_layers}-layer target"
            read = f" (the ids read by {rule_label})" if rule_label else ""
            raise InputError(f"layer id names boundary {b}, {span}{read}",
                             hint="check the ids, the engine version and model family (their rule), and --num-layers")


def _shift(r: Rule, ids: Sequence[int], num_layers: int | None) -> int:
    if r.reading == DEEPSEEK:
        return 1 if ids[0] == 1 else 0
    if r.reading == GPT_OSS:
        L = _needs_layers(num_layers, "SGLang's gpt-oss rule")
        return 0 if max(ids) == L else 1
    return 1 if r.reading == OUTPUT else 0


def to_boundary(
    ids: Sequence[int],
    engine: str,
    *,
    num_layers: int | None = None,
    model_family: str | None = None,
    version: str | None = None,
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
    >>> to_boundary([-1, 2, 30], "trtllm", num_layers=61)    # -1: the final post-norm state, in slot 0
    [62, 3, 31]
    """
    info = rule(engine)
    r = _usable(applied(info.key, info.family_for(model_family), version))
    ids = [int(i) for i in ids]
    if not ids:
        return []
    shift = _shift(r, ids, num_layers)
    out = []
    plain = []  # boundaries of the residual stream; only an id that names the final state may go past L
    for i in ids:
        if r.names_final and info.final_id == FINAL_MINUS_ONE and i == -1:
            out.append(final_boundary(_needs_layers(num_layers, f"{info.title}'s id -1 (the final post-norm state)")))
        elif r.names_final and info.final_id == FINAL_L and num_layers is not None and i == num_layers:
            out.append(final_boundary(num_layers))
        else:
            out.append(i + shift)
            plain.append(i + shift)
    if check_range:
        _check_range(out, num_layers, rule_label=r.label)
        _check_range(plain, num_layers, final=False, rule_label=r.label)
    if info.sorts and not keep_order:
        out = slot_order(out, info.key, num_layers, version)
    return out


def capturable(b: int, engine: str, num_layers: int | None, model_family: str | None = None,
               version: str | None = None) -> bool:
    """Whether ``engine`` has an id that captures boundary ``b``."""
    info = rule(engine)
    r = _usable(applied(info.key, info.family_for(model_family), version))
    if b < r.min_boundary:
        return False
    if num_layers is None:
        return True
    if b == final_boundary(num_layers):
        return r.names_final
    return b < num_layers or (b == num_layers and r.captures_last)


def from_boundary(
    boundaries: Sequence[int | None],
    engine: str,
    *,
    num_layers: int | None = None,
    model_family: str | None = None,
    version: str | None = None,
) -> list[int | None]:
    """The ids to configure on ``engine`` so that it captures ``boundaries``.

    An entry is ``None`` where the boundary is unknown or the engine cannot capture it (B = L on
    SGLang's llama rule, the embeddings on TensorRT-LLM, B1 alone on SGLang's DeepSeek rule, which writes
    B1 after another id...). Whether the engine delivers them in this order: :func:`hsdiff.serving.serve`.

    >>> from_boundary([3, 31, 59], "sglang")
    [2, 30, 58]
    >>> from_boundary([2, 15, 30], "sglang", num_layers=30)
    [1, 14, None]
    """
    info = rule(engine)
    fam = info.family_for(model_family)
    r = _usable(applied(info.key, fam, version))
    known = [b for b in boundaries if b is not None]
    _check_range(known, num_layers)
    ok = [b for b in known if capturable(b, info.key, num_layers, fam, version)]
    if r.reading == DEEPSEEK:
        first = ok[0] if ok else None
        if first == 1:  # id 1 first adds 1 to every id: another goes first (deepseek_v2.py:3176-3194 captures in order)
            j = next((j for j, b in enumerate(boundaries) if b not in (None, 1) and b in ok), None)
            if j is None:
                return [None for _ in boundaries]  # B1 alone can be written neither way
            i = list(boundaries).index(1)
            boundaries = [boundaries[j] if k == i else boundaries[i] if k == j else b for k, b in enumerate(boundaries)]
        shift = 1 if first == 2 else 0  # conventional O-index form [1, ...]: ids[0] == 1 triggers +1
    elif r.reading == GPT_OSS:
        L = _needs_layers(num_layers, "SGLang's gpt-oss rule")
        shift = 0 if ok and max(ok) == L else 1
    else:
        shift = 1 if r.reading == OUTPUT else 0
    out: list[int | None] = []
    for b in boundaries:
        if b is None or not capturable(b, info.key, num_layers, fam, version):
            out.append(None)
        elif num_layers is not None and b == final_boundary(num_layers):
            out.append(-1 if info.final_id == FINAL_MINUS_ONE else num_layers)
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
    src_version: str | None = None,
    dst_version: str | None = None,
) -> list[int | None]:
    """The ids that make ``dst`` capture the same tensors as ``ids`` on ``src``."""
    return from_boundary(
        to_boundary(ids, src, num_layers=num_layers, model_family=src_family, version=src_version),
        dst, num_layers=num_layers, model_family=dst_family, version=dst_version,
    )


def default_boundaries(num_layers: int, engine: str | None = None, model_family: str | None = None,
                       version: str | None = None) -> list[int]:
    """The EAGLE-3 default as boundary indices: ``[2, L//2, L-3]`` (SGLang's minimax_m3_vl: ``[3, L//2+1, L-2]``)."""
    standard = sorted({2, num_layers // 2, num_layers - 3})
    if engine is None:
        return standard
    info = rule(engine)
    r = _usable(applied(info.key, info.family_for(model_family), version))
    return [b + 1 for b in standard] if r.default == "shifted" else standard


def default_ids(engine: str, num_layers: int, model_family: str | None = None, version: str | None = None) -> list[int]:
    """The ids ``engine`` uses when the draft config names none (most name B ``[2, L//2, L-3]``)."""
    bs = default_boundaries(num_layers, engine, model_family, version)
    ids = from_boundary(bs, engine, num_layers=num_layers, model_family=model_family, version=version)
    return [i for i in ids if i is not None]


def needs_num_layers(engine: str, model_family: str | None = None, version: str | None = None) -> bool:
    """Whether reading ids on ``engine`` depends on the target's ``num_hidden_layers`` (SGLang's gpt-oss rule)."""
    info = rule(engine)
    fam = info.family_for(model_family, shifts=True)
    return applied(info.key, fam, version).reading == GPT_OSS


def slot_order(boundaries: Sequence[int], engine: str, num_layers: int | None = None,
               version: str | None = None) -> list[int]:
    """The slots ``engine`` fills for boundaries read in list order: ascending and once each if it sorts.

    TensorRT-LLM sorts its ids, -1 (the final post-norm state) first; its default one-model path
    keeps that order, so -1 fills slot 0 (tensorrt_llm/_torch/speculative/eagle3.py
    Eagle3OneModelSpecMetadata.__post_init__), while the deprecated two-model path (version label
    ``two-model``) moves it to the last slot (Eagle3SpecMetadata.__post_init__).

    >>> slot_order([3, 31, 62], "trtllm", 61)      # for a 61-layer target, B 62 is the final post-norm state
    [62, 3, 31]
    >>> slot_order([3, 31, 62], "trtllm", 61, "two-model")
    [3, 31, 62]
    """
    info = rule(engine)
    if not info.sorts:
        return list(boundaries)
    out = sorted(set(boundaries))
    if info.final_first and version not in info.final_last_in and num_layers is not None and final_boundary(num_layers) in out:
        out = [final_boundary(num_layers)] + out[:-1]
    return out


# --------------------------------------------------------------------------- words

def describe_boundary(b: int | None, num_layers: int | None = None) -> str:
    """Words for a boundary index: ``"embeddings"``, ``"output of layer 2 (input of layer 3)"``..."""
    if b is None:
        return "unknown"
    if b == 0:
        return "embeddings (input of layer 0)"
    if num_layers is not None and b == num_layers:
        return f"output of the last layer {b - 1}, before the final norm"
    if num_layers is not None and b == final_boundary(num_layers):
        return "the final hidden state, after the final norm"
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
    if num_layers is not None and b == final_boundary(num_layers):
        return "the final hidden state after the norm"
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


# --------------------------------------------------------------------------- config keys

def config_keys(engine: str, *, vllm_runner: str = DEFAULT_RUNNER) -> tuple[tuple[str, ...], ...]:
    """Where ``engine`` reads the ids in a draft (or run) config, first match wins.

    >>> config_keys("vllm")
    (('eagle_aux_hidden_state_layer_ids',), ('eagle_config', 'layer_ids'))
    """
    info = rule(engine)
    if info.runners:
        if vllm_runner not in info.runners:
            raise InputError(f"unknown {info.title} runner {vllm_runner!r}", hint=f"choose one of: {', '.join(info.runners)}")
        return CONFIG_KEYS[f"{info.key}-{vllm_runner}"]
    return CONFIG_KEYS[info.key]


def write_key(engine: str) -> tuple[str, ...]:
    """The key ``hsdiff fix-config`` writes for ``engine``: its profile's ``writes`` (a key it reads)."""
    r = rule(engine)
    if not r.writes:
        readers = [e for e in ENGINES if config_keys(e)]
        raise InputError(
            f"{r.title} reads no layer ids from a draft config.json (it reads {ENGINE_INFO[r.key].reads})",
            hint=f"set them there, or choose an engine that reads the draft config: {', '.join(readers)}",
        )
    return r.writes


def key_name(path: Sequence[str]) -> str:
    """``("eagle_config", "eagle_aux_hidden_state_layer_ids")`` -> ``"eagle_config.eagle_aux_hidden_state_layer_ids"``."""
    return ".".join(path)
