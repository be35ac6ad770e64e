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
:mod:`hsdiff.rules.profile` (each row cites the source line it encodes); the default version is
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
from typing import cast

from ..errors import InputError
from .dflash import DFLASH_DEFAULTS, DFLASH_KEYS, DFLASH_RULES, DFLASH_WRITES
from .kinds import DFLASH, DRAFT_KINDS, EAGLE3, EAGLE3_KINDS, DraftKind, kind_from_config
from .profile import (
    BOUNDARY,
    CONFIG_KEYS,
    DEEPSEEK,
    DEFAULT_RUNNER,
    ENGINE_INFO,
    FAMILIES,
    FINAL_L,
    FINAL_MINUS_ONE,
    GPT_OSS,
    KEY_INDEX,
    KEY_INDEX_RAW_FOR,
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
from .traces import WRITER_MARKS
from .versions import (
    ENGINES,
    default_version,
    in_range,
    parse_version,
    rule,
    version_for,
    version_tuple,
    versions,
)
from .words import describe_boundary, final_boundary, name_boundary, parse_ids

__all__ = [
    "BOUNDARY",
    "OUTPUT",
    "ENGINES",
    "MODEL_FAMILIES",
    "VLLM_RUNNERS",
    "WRITER_MARKS",
    "DEFAULT_RUNNER",
    "NESTED_KEY",
    "TOP_KEY",
    "EngineInfo",
    "Rule",
    "rule",
    "applied",
    "parse_version",
    "default_version",
    "version_tuple",
    "version_for",
    "versions",
    "normalize_family",
    "family_from_config",
    "to_boundary",
    "from_boundary",
    "translate",
    "default_ids",
    "default_boundaries",
    "final_boundary",
    "capturable",
    "needs_num_layers",
    "slot_order",
    "describe_boundary",
    "name_boundary",
    "parse_ids",
    "config_keys",
    "write_key",
    "key_name",
    "VERSIONS",
    "DRAFT_KINDS",
    "draft_kind",
    "kind_from_config",
    "key_index",
    "kind_default",
    "id_keys",
    "readers_of",
]

NESTED_KEY, TOP_KEY = NESTED, TOP

#: SGLang model-family rules: key -> the model types that select it.
MODEL_FAMILIES: dict[str, str] = {k: ", ".join(names[:6]) for k, (names, _) in FAMILIES.items()}
_FAMILY_ALIASES = {name: key for key, (names, _) in FAMILIES.items() for name in names}


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

# --------------------------------------------------------------------------- draft kinds


def draft_kind(kind: str | None) -> DraftKind:
    """The :class:`~hsdiff.rules.kinds.DraftKind` of ``--draft-kind`` (None: EAGLE-3); refuses a kind that
    takes no aux ids (MTP) and an unknown one, naming the choices.

    >>> draft_kind("dspark").title
    'DSpark'
    """
    found = DRAFT_KINDS.get((kind or EAGLE3).strip().lower())
    if found is None:
        raise InputError(f"unknown draft kind {kind!r}", hint=f"choose one of: {', '.join(DRAFT_KINDS)}")
    if not found.reading:
        raise InputError(f"{found.title}: {found.note}", hint=f"source: {found.source}")
    return found


def kind_default(engine: str, kind: str | None) -> str:
    """What ``engine`` captures for a ``kind`` draft whose config names no ids, in words ("" for EAGLE-3)."""
    k = draft_kind(kind)
    return "" if k.reading == EAGLE3 else cast(str, _kind_entry(DFLASH_DEFAULTS, engine, kind) or "")


@functools.lru_cache(maxsize=256)  # a pure function of its arguments, asked ~100 times per compare
def applied(engine: str, model_family: str | None = None, version: str | None = None, kind: str | None = None) -> Rule:
    """The table row ``engine`` (at ``version``, default the newest) applies for ``model_family`` and a draft
    of ``kind`` (default EAGLE-3).

    >>> applied("sglang", "kimi_k25", "0.5.13").label
    'SGLang ≥ 0.5.13, DeepSeek rule'
    """
    info = rule(engine)
    ver = parse_version(info.key, version)
    k = draft_kind(kind).key
    if info.captures_through and k in RULES_KINDS:  # it captures through another engine's setter: its family rules
        own = _lookup(info.key, "llama", ver, k)
        sg = _lookup(info.captures_through, normalize_family(model_family), ver, k)
        return replace(
            sg,
            engine=info.key,
            label=f"{info.title} through {rule(sg.engine).title} {ver}: {sg.label}",
            min_boundary=max(sg.min_boundary, own.min_boundary),
            source=f"{own.source}; {sg.source}",
        )
    return _lookup(info.key, normalize_family(model_family), ver, k)


TABLE: tuple[Rule, ...] = RULES + DFLASH_RULES
RULES_KINDS = set(EAGLE3_KINDS)  # the kinds the rows of the profile table read


def _reads_kind(r: Rule, kind: str) -> bool:
    return kind in (r.kinds or EAGLE3_KINDS)


def _lookup(engine: str, family: str, version: str, kind: str = EAGLE3) -> Rule:
    rows = [r for r in TABLE if r.engine == engine and in_range(r, version) and _reads_kind(r, kind)]
    own = [r for r in rows if family in r.families]
    general = [r for r in rows if not r.families]
    if not own and not general:
        title, which = rule(engine).title, DRAFT_KINDS[kind].title
        readers = sorted({r.engine for r in TABLE if _reads_kind(r, kind)})
        raise InputError(
            f"hsdiff's table has no row for {which} drafts on {title}",
            hint=f"choose an engine it has rows for: {', '.join(readers)}",
        )
    return (own or general)[0]


def _usable(r: Rule) -> Rule:
    if r.reading == NONE:
        raise InputError(f"{r.label}: {r.note}", hint=f"source: {r.source}")
    return r


def _needs_layers(num_layers: int | None, what: str) -> int:
    if num_layers is None:
        raise InputError(
            f"{what} depends on the number of target layers",
            hint="pass --num-layers or --model-config (the target's config.json)",
        )
    return num_layers


def _check_range(
    boundaries: Iterable[int], num_layers: int | None, *, final: bool = True, rule_label: str = ""
) -> None:
    """Boundaries lie in 0..L or are the final post-norm state (``final``: L + 1); never below 0, whatever L."""
    top = None if num_layers is None else final_boundary(num_layers) if final else num_layers
    for b in boundaries:
        if b < 0 or (top is not None and b > top):
            span = "below 0" if num_layers is None else f"outside 0..{num_layers} for a {num_layers}-layer target"
            read = f" (the ids read by {rule_label})" if rule_label else ""
            raise InputError(
                f"layer id names boundary {b}, {span}{read}",
                hint="check the ids, the engine version and model family (their rule), and --num-layers",
            )


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
    kind: str | None = None,
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
    r = _usable(applied(info.key, info.family_for(model_family), version, kind))
    ids = [int(i) for i in ids]
    if not ids:
        return []
    if r.fixed:  # reads no id: its own layers, whatever these say
        L = _needs_layers(num_layers, f"{info.title}'s own layers ({r.label})")
        return sorted(default_boundaries(L, info.key, model_family, version, kind))
    shift = _shift(r, ids, num_layers)
    out = []
    plain = []  # boundaries of the residual stream; only an id that names the final state may go past L
    for i in ids:
        if r.names_final and info.final_id == FINAL_MINUS_ONE and i == -1:
            out.append(final_boundary(_needs_layers(num_layers, f"{info.title}'s id -1 (the final post-norm state)")))
        elif r.names_final and info.final_id == FINAL_L and num_layers is not None and i == num_layers:
            out.append(final_boundary(num_layers))
        elif r.final_is_last and num_layers is not None and i + shift == num_layers:
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


def capturable(
    b: int,
    engine: str,
    num_layers: int | None,
    model_family: str | None = None,
    version: str | None = None,
    kind: str | None = None,
) -> bool:
    """Whether ``engine`` has an id that captures boundary ``b`` (for a draft of ``kind``)."""
    info = rule(engine)
    r = _usable(applied(info.key, info.family_for(model_family), version, kind))
    if b < r.min_boundary:
        return False
    if num_layers is None:
        return True
    if b == final_boundary(num_layers):
        return r.names_final
    return b < num_layers or (b == num_layers and r.captures_last and not r.final_is_last)


def from_boundary(
    boundaries: Sequence[int | None],
    engine: str,
    *,
    num_layers: int | None = None,
    model_family: str | None = None,
    version: str | None = None,
    kind: str | None = None,
) -> list[int | None]:
    """The ids to configure on ``engine`` so that it captures ``boundaries`` (for a draft of ``kind``).

    An entry is ``None`` where the boundary is unknown or the engine cannot capture it (B = L on
    SGLang's llama rule, the embeddings on TensorRT-LLM, B1 alone on SGLang's DeepSeek rule, which writes
    B1 after another id...). Whether the engine delivers them in this order: :func:`hsdiff.rules.serving.serve`.

    >>> from_boundary([3, 31, 59], "sglang")
    [2, 30, 58]
    >>> from_boundary([2, 15, 30], "sglang", num_layers=30)
    [1, 14, None]
    """
    info = rule(engine)
    fam = info.family_for(model_family)
    r = _usable(applied(info.key, fam, version, kind))
    known = [b for b in boundaries if b is not None]
    _check_range(known, num_layers)
    ok = [b for b in known if capturable(b, info.key, num_layers, fam, version, kind)]
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
    own = (  # a row that reads no ids captures its own layers: any other boundary has no id
        set(default_boundaries(num_layers, info.key, model_family, version, kind))
        if r.fixed and num_layers is not None
        else None
    )
    out: list[int | None] = []
    for b in boundaries:
        if (
            b is None
            or not capturable(b, info.key, num_layers, fam, version, kind)
            or (own is not None and b not in own)
        ):
            out.append(None)
        elif num_layers is not None and b == final_boundary(num_layers):
            out.append(num_layers - 1 if r.final_is_last else -1 if info.final_id == FINAL_MINUS_ONE else num_layers)
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
    kind: str | None = None,
) -> list[int | None]:
    """The ids that make ``dst`` capture the same tensors as ``ids`` on ``src`` (for a draft of ``kind``).

    >>> translate([1, 9, 17, 25, 33], "specforge", "vllm", num_layers=48, kind="dflash")
    [1, 9, 17, 25, 33]
    """
    return from_boundary(
        to_boundary(ids, src, num_layers=num_layers, model_family=src_family, version=src_version, kind=kind),
        dst,
        num_layers=num_layers,
        model_family=dst_family,
        version=dst_version,
        kind=kind,
    )


def default_boundaries(
    num_layers: int,
    engine: str | None = None,
    model_family: str | None = None,
    version: str | None = None,
    kind: str | None = None,
    count: int | None = None,
) -> list[int]:
    """The default as boundary indices: EAGLE-3's ``[2, L//2, L-3]`` (SGLang's minimax_m3_vl: ``[3, L//2+1, L-2]``);
    a DFlash engine's ``count`` output indices evenly spaced over 1..L-3 (``count``: the draft's layers).

    >>> default_boundaries(48, "sglang", kind="dflash", count=5)
    [2, 13, 24, 35, 46]
    """
    standard = sorted({2, num_layers // 2, num_layers - 3})
    if engine is None:
        return standard
    info = rule(engine)
    r = _usable(applied(info.key, info.family_for(model_family), version, kind))
    if r.default == "spaced":
        if count is None:
            raise InputError(
                f"the default of {r.label} depends on the number of draft layers",
                hint="give the draft config (its num_hidden_layers)",
            )
        if count == 1:
            return [num_layers // 2 + 1]
        span = num_layers - 3 - 1  # dflash_utils.py:348-385 (sglang 0.5.23): round(start + i * span / (k - 1))
        return [int(round(1 + i * span / (count - 1))) + 1 for i in range(count)]
    return [b + 1 for b in standard] if r.default == "shifted" else standard


def default_ids(
    engine: str,
    num_layers: int,
    model_family: str | None = None,
    version: str | None = None,
    kind: str | None = None,
    count: int | None = None,
) -> list[int]:
    """The ids ``engine`` uses when the draft config names none (most name B ``[2, L//2, L-3]``)."""
    bs = default_boundaries(num_layers, engine, model_family, version, kind, count)
    ids = from_boundary(bs, engine, num_layers=num_layers, model_family=model_family, version=version, kind=kind)
    return [i for i in ids if i is not None]


def needs_num_layers(
    engine: str, model_family: str | None = None, version: str | None = None, kind: str | None = None
) -> bool:
    """Whether reading ids on ``engine`` depends on the target's ``num_hidden_layers`` (SGLang's gpt-oss rule)."""
    info = rule(engine)
    fam = info.family_for(model_family, shifts=True)
    return applied(info.key, fam, version, kind).reading == GPT_OSS


def slot_order(
    boundaries: Sequence[int], engine: str, num_layers: int | None = None, version: str | None = None
) -> list[int]:
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
    if (
        info.final_first
        and version not in info.final_last_in
        and num_layers is not None
        and final_boundary(num_layers) in out
    ):
        out = [final_boundary(num_layers)] + out[:-1]
    return out


# --------------------------------------------------------------------------- config keys


def _kind_entry(table: dict, engine: str, kind: str | None) -> object:
    """A DFlash-family table's entry for ``engine``: its ``engine:kind`` entry, else its own, else None."""
    key = rule(engine).key
    return table.get(f"{key}:{draft_kind(kind).key}", table.get(key))


def config_keys(
    engine: str, *, vllm_runner: str = DEFAULT_RUNNER, kind: str | None = None
) -> tuple[tuple[str, ...], ...]:
    """Where ``engine`` reads the ids in a draft (or run) config for a draft of ``kind``, first match wins.

    >>> config_keys("vllm")[:2]
    (('eagle_aux_hidden_state_layer_ids',), ('dflash_config', 'target_layer_ids'))
    >>> config_keys("sglang", kind="dspark")[0]
    ('dspark_target_layer_ids',)
    """
    info = rule(engine)
    if info.runners:
        if vllm_runner not in info.runners:
            raise InputError(
                f"unknown {info.title} runner {vllm_runner!r}", hint=f"choose one of: {', '.join(info.runners)}"
            )
        return CONFIG_KEYS[f"{info.key}-{vllm_runner}"]  # one reading function for every method
    if draft_kind(kind).reading == DFLASH:
        return cast(tuple, _kind_entry(DFLASH_KEYS, info.key, kind) or ())
    return CONFIG_KEYS[info.key]


def key_index(engine: str, key: Sequence[str], *, vllm_runner: str = DEFAULT_RUNNER, model_type: str = "") -> str:
    """What an id in ``key`` means where ``engine`` gives that key a meaning of its own (vLLM: + 1 for the DFlash
    keys, raw for the others): OUTPUT or BOUNDARY; "" where the applied row decides.

    >>> key_index("vllm", ("dflash_config", "target_layer_ids")), key_index("sglang", ("target_layer_ids",))
    ('output', '')
    """
    info = rule(engine)
    where = (f"{info.key}-{vllm_runner}" if info.runners else info.key, tuple(key))
    if model_type and model_type in KEY_INDEX_RAW_FOR.get(where, ()):
        return BOUNDARY
    return KEY_INDEX.get(where, "")


def write_key(engine: str, kind: str | None = None) -> tuple[str, ...]:
    """The key ``hsdiff fix-config`` writes for ``engine`` and a draft of ``kind``: its profile's ``writes``
    (a key it reads), or the DFlash-family key it reads.

    >>> write_key("vllm", "dflash")
    ('dflash_config', 'target_layer_ids')
    """
    r = rule(engine)
    writes = (
        r.writes if draft_kind(kind).reading == EAGLE3 else cast(tuple, _kind_entry(DFLASH_WRITES, r.key, kind) or ())
    )
    if not writes:
        readers = [e for e in ENGINES if config_keys(e)]
        raise InputError(
            f"{r.title} reads no layer ids from a draft config.json (it reads {ENGINE_INFO[r.key].reads})",
            hint=f"set them there, or choose an engine that reads the draft config: {', '.join(readers)}",
        )
    return writes


def key_name(path: Sequence[str]) -> str:
    """``("eagle_config", "eagle_aux_hidden_state_layer_ids")`` ->
    ``"eagle_config.eagle_aux_hidden_state_layer_ids"``."""
    return ".".join(path)


def id_keys(kind: str | None = None) -> tuple[tuple[str, ...], ...]:
    """Every draft-config key some engine or trainer reads ids from for a draft of ``kind``, in table order."""
    keys = [
        k
        for e in ENGINES
        for r in (rule(e).runners or (DEFAULT_RUNNER,))
        for k in config_keys(e, vllm_runner=r, kind=kind)
    ]
    return tuple(dict.fromkeys(keys))


def readers_of(key: Sequence[str], kind: str | None = None) -> list[str]:
    """The engines and trainers that read ids from ``key`` for a draft of ``kind`` (any of their runners).

    >>> readers_of(("target_layer_ids",), "dflash")
    ['sglang', 'vllm', 'tokenspeed', 'deepspec']
    """
    return [
        e
        for e in ENGINES
        if any(tuple(key) in config_keys(e, vllm_runner=r, kind=kind) for r in (rule(e).runners or (DEFAULT_RUNNER,)))
    ]
