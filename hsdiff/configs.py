"""Model and draft ``config.json`` files: reading them, and what they say about the target's shape,
the draft's layer ids (and where an engine reads them) and the width of the draft's ``fc``.

Every other module asks this one; nothing else parses a JSON config. Conventions (how an engine
*counts* the ids read here, and which keys it reads) live in :mod:`hsdiff.rules.conventions`.

Example::

    >>> target_shape({"num_hidden_layers": 61, "hidden_size": 7168, "model_type": "kimi_k25"}).family
    'deepseek'
    >>> read_ids({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}}, "sglang").boundaries
    (3, 31, 59)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from .errors import ConfigError, InputError
from .model.gate import IdsSource
from .rules import conventions as conv
from .rules.profile import FC_AUX, FINAL_MINUS_ONE
from .rules.serving import ObstacleKind, boundary_list, serve

__all__ = [
    "read_json",
    "load_config",
    "load_draft",
    "is_draft_config",
    "draft_ids",
    "stated_ids",
    "num_aux",
    "stated_hidden_size",
    "config_value",
    "TargetShape",
    "target_shape",
    "read_config_ids",
    "read_ids",
    "boundaries_read",
    "fc_width",
    "built_fc_width",
]


def read_json(
    path: str | os.PathLike,
    *,
    what: str = "config",
    error: type[InputError] = ConfigError,
    missing: str = "no such config file",
    missing_hint: str | None = "give the path of a config.json",
    bad_hint: str | None = "fix the file",
) -> Any:
    """Parse a JSON file; ``error`` (a :class:`InputError`) names the file and says what to do."""
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise error(missing, path=p, hint=missing_hint) from None
    except (OSError, UnicodeDecodeError) as e:
        raise error(f"not a readable JSON {what} ({e})", path=p, hint=bad_hint) from None
    return parse_json(text, p, what=what, error=error, bad_hint=bad_hint)


def parse_json(
    text: str,
    path: str | os.PathLike,
    *,
    what: str = "config",
    error: type[InputError] = ConfigError,
    bad_hint: str | None = "fix the file",
) -> Any:
    """Parse JSON ``text`` read from ``path`` (for callers that keep the raw bytes, as ``fix-config`` does)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        raise error(f"not a readable JSON {what} ({e})", path=path, hint=bad_hint) from None


def load_config(path: str | os.PathLike) -> dict[str, Any]:
    """Read a ``config.json`` (or the one in a folder); :class:`ConfigError` names the file and the problem.

    >>> load_config("fixtures/seed/model")["num_hidden_layers"]   # doctest: +SKIP
    61
    """
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    obj = read_json(p)
    if not isinstance(obj, dict):
        raise ConfigError("config is not a JSON object", path=p)
    return obj


def load_draft(path: str | os.PathLike) -> tuple[dict[str, Any], Path]:
    """A draft ``config.json`` (or the one in a folder) and the file it was read from."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    return load_config(p), p


def is_draft_config(cfg: dict[str, Any]) -> bool:
    """Whether ``cfg`` describes an EAGLE draft rather than a target model."""
    archs = " ".join(str(a) for a in cfg.get("architectures", []) or [])
    return "eagle_config" in cfg or "eagle_aux_hidden_state_layer_ids" in cfg or "Eagle" in archs or "Draft" in archs


def stated_ids(cfg: dict[str, Any], ints_only: bool = False) -> tuple[str, list[Any]] | None:
    """Where a draft config states its aux layer ids (the nested ``eagle_config`` key first), as a dotted
    key, and the list as written; ``ints_only``: the first that is a list of integers. None: neither."""
    for key in (conv.NESTED_KEY, conv.TOP_KEY):
        found, value = config_value(cfg, key)
        if found and isinstance(value, list) and (not ints_only or _is_int_list(value)):
            return ".".join(key), value
    return None


def draft_ids(cfg: dict[str, Any]) -> list[int] | None:
    """The aux layer ids a draft config states (:func:`stated_ids`), as integers."""
    got = stated_ids(cfg)
    return None if got is None else [int(i) for i in got[1]]


def num_aux(config: dict[str, Any]) -> tuple[int, str]:
    """The aux slots a draft config builds its ``fc`` for, and why: ``num_aux_hidden_states``, else the
    number of ids in ``eagle_config.eagle_aux_hidden_state_layer_ids``, else 3 (the EAGLE-3 default)."""
    n_aux = config.get("num_aux_hidden_states")
    found, nested = config_value(config, conv.NESTED_KEY)
    if isinstance(n_aux, int) and not isinstance(n_aux, bool) and n_aux > 0:
        return n_aux, f"num_aux_hidden_states {n_aux}"
    if found and _is_int_list(nested) and nested:
        return len(nested), f"{len(nested)} ids in eagle_config.eagle_aux_hidden_state_layer_ids"
    return 3, "the default of 3 slots"


def stated_hidden_size(
    config: dict[str, Any] | None, keys: Sequence[str] = ("target_hidden_size", "hidden_size")
) -> int | None:
    """The target's hidden size a config states: the first of ``keys`` holding a positive integer (a
    draft's ``target_hidden_size``, else its ``hidden_size``, the target's width for an EAGLE-3 draft)."""
    for key in keys:
        v = (config or {}).get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def config_value(config: dict[str, Any], key: Sequence[str]) -> tuple[bool, Any]:
    """``(True, value)`` when the dotted ``key`` path exists in ``config``, else ``(False, None)``."""
    node: Any = config
    for part in key:
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


# --------------------------------------------------------------------------- the target's shape


@dataclass(frozen=True)
class TargetShape:
    """What a target ``config.json`` says: ``num_hidden_layers``, ``hidden_size``, the model type and
    the SGLang model-family rule that type selects."""

    num_layers: int | None
    hidden_size: int | None
    family: str | None  # SGLang rule key when it came from model_type
    model_type: str | None


def target_shape(config: dict[str, Any] | None) -> TargetShape:
    """``num_hidden_layers``, ``hidden_size`` and the SGLang family rule of a target ``config.json``.

    Multimodal targets keep them under ``text_config``.
    """
    if not config:
        return TargetShape(None, None, None, None)
    sub = config.get("text_config")
    text: dict[str, Any] = sub if isinstance(sub, dict) else {}
    n = config.get("num_hidden_layers") or text.get("num_hidden_layers")
    h = config.get("hidden_size") or text.get("hidden_size")
    mt = config.get("model_type") or text.get("model_type")
    return TargetShape(int(n) if n else None, int(h) if h else None, conv.family_from_config(config), mt)


# --------------------------------------------------------------------------- draft ids


def _is_int_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in value)


def read_config_ids(
    config: dict[str, Any], engine: str, *, vllm_runner: str = conv.DEFAULT_RUNNER, kind: str | None = None
) -> tuple[object, tuple[str, ...] | None]:
    """The raw value ``engine`` reads from a draft config and the key it came from, or ``(None, None)``.

    The value is returned as stored (a list, ``null``, an empty list...): what an engine does with an
    empty or null value differs, see :func:`read_ids`.
    """
    for key in conv.config_keys(engine, vllm_runner=vllm_runner, kind=kind):
        found, node = config_value(config, key)
        if found:
            if conv.rule(engine).skips_empty and not (isinstance(node, (list, tuple)) and node):
                continue  # vLLM: `if layer_ids and isinstance(layer_ids, (list, tuple))`, else the next key / default
            return node, tuple(key)
    return None, None


def boundaries_read(
    ids: Sequence[int],
    engine: str,
    num_layers: int | None,
    family: str | None,
    version: str | None = None,
    kind: str | None = None,
    index: str = "",
) -> list[int]:
    """Boundaries ``engine`` captures for ``ids`` in list order, without the range check; ``index``
    (OUTPUT or BOUNDARY) where the key they were read from has a meaning of its own
    (:func:`hsdiff.rules.conventions.key_index`)."""
    if index:
        return [int(i) + (1 if index == conv.OUTPUT else 0) for i in ids]
    if num_layers is None and (
        conv.needs_num_layers(engine, family, version, kind)
        or (conv.rule(engine).final_id == FINAL_MINUS_ONE and -1 in ids)
    ):
        raise ConfigError(
            f"{conv.applied(engine, family, version).label} depends on the target's num_hidden_layers",
            hint="pass `target_config=path/to/target/config.json`",
            options=("target_config",),
        )
    return conv.to_boundary(
        ids,
        engine,
        num_layers=num_layers,
        model_family=family,
        version=version,
        keep_order=True,
        check_range=False,
        kind=kind,
    )


def _readers() -> str:
    """The engines that read ids from a draft config, for hints: ``"sglang, vllm ... or speculators"``."""
    keys = [e for e in conv.ENGINES if conv.config_keys(e)]
    return ", ".join(keys[:-1]) + " or " + keys[-1]


def read_ids(
    config: dict[str, Any],
    engine: str = "sglang",
    *,
    path: str | os.PathLike = "config.json",
    num_layers: int | None = None,
    model_family: str | None = None,
    vllm_runner: str = conv.DEFAULT_RUNNER,
    version: str | None = None,
    kind: str | None = None,
) -> IdsSource:
    """The ids ``engine`` (at ``version``, default the newest known) takes from a draft config of ``kind``
    (None: the kind its architectures state), or its default when it finds none; the record names the rule
    that read them.

    >>> read_ids({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}}, "sglang").boundaries
    (3, 31, 59)
    >>> read_ids({"eagle_aux_hidden_state_layer_ids": [3, 31, 59]}, "sglang", num_layers=61).fallback
    True
    """
    r = conv.rule(engine)
    engine = r.key
    version = conv.parse_version(engine, version)
    family = conv.normalize_family(model_family) if r.family_rule else None
    kind = conv.draft_kind(kind or conv.kind_from_config(config).key).key
    applied = conv.applied(engine, family, version, kind)
    runner = vllm_runner if r.runners else None
    keys = conv.config_keys(engine, vllm_runner=vllm_runner, kind=kind)
    if not keys and not applied.fixed:  # a fixed row reads no ids anywhere: its own layers, below
        raise ConfigError(
            f"{r.title} takes its layer ids from no draft config: it reads {r.reads}",
            path=path,
            hint=f"compare with `hsdiff compare --engine {engine} --layer-ids IDS` (the ids it is "
            f"configured with), or choose --engine {_readers()}",
        )

    def source(
        ids: Sequence[int], b: Sequence[int], key: str | None, fallback: bool, note: str, index: str = ""
    ) -> IdsSource:
        return IdsSource(
            engine,
            tuple(ids),
            tuple(b),
            key,
            str(path),
            fallback,
            note,
            family,
            runner,
            applied.label,
            version,
            kind,
            index,
        )

    found, use_aux = config_value(config, ("eagle_config", "use_aux_hidden_state"))
    if r.use_aux_flag and found and use_aux is False:  # the profile cites each engine's check
        return source(
            (),
            (),
            "eagle_config.use_aux_hidden_state",
            False,
            f"eagle_config.use_aux_hidden_state is false in {path}: {r.title} captures no aux "
            "hidden state and feeds the draft the final post-norm hidden state (EAGLE-1/2 style), so no "
            "layer ids apply; an EAGLE-3 draft needs it true",
        )
    value, key = read_config_ids(config, engine, vllm_runner=vllm_runner, kind=kind)
    where = " or ".join(conv.key_name(k) for k in keys)
    if key is not None and value is not None:
        if not _is_int_list(value):
            raise ConfigError(
                f"{conv.key_name(key)} is {json.dumps(value)}, not a list of integers",
                path=path,
                hint="write a list such as [2, 30, 58]",
            )
        ids = [int(i) for i in cast(list, value)]
        if not ids:
            return source(
                (),
                (),
                conv.key_name(key),
                False,
                f"{r.title} reads {conv.key_name(key)} = [] and captures no layer at all: the draft "
                "receives no hidden states",
            )
        index = conv.key_index(engine, key, vllm_runner=vllm_runner, model_type=str(config.get("model_type", "")))
        index = "" if index == applied.reading else index
        b = conv.slot_order(
            boundaries_read(ids, engine, num_layers, family, version, kind, index), engine, num_layers, version
        )
        how = (
            f"{'+ 1' if index == conv.OUTPUT else 'as they are'}, that key's meaning"
            if index
            else f"rule: {applied.label}"
        )
        note = (
            f"{r.title} {version} reads {conv.key_name(key)} = {ids} from {path}, i.e. captures "
            f"{_captured(b, engine, num_layers, family, version, kind)} ({how})"
        )
        return source(ids, b, conv.key_name(key), False, note, index)
    if num_layers is None:
        raise ConfigError(
            f"no layer ids in {where}: {r.title} falls back to its default, which depends on the target's "
            "num_hidden_layers",
            path=path,
            hint="pass `target_config=path/to/target/config.json`",
            options=("target_config",),
        )
    count = config.get("num_hidden_layers") if isinstance(config.get("num_hidden_layers"), int) else None
    b = conv.default_boundaries(num_layers, engine, family, version, kind, count)
    ids = conv.default_ids(engine, num_layers, family, version, kind, count)
    why = "is null" if key is not None else "is absent"
    default = conv.kind_default(engine, kind)
    if not keys:  # a fixed row
        note = (
            f"{r.title} {version} reads no layer ids: it captures B{b} whatever {path} says "
            f"(rule: {applied.label}); a draft trained on other layers needs another engine"
        )
        return source(ids, b, None, True, note + r.fallback_note)
    note = (
        f"{where} {why} in {path}: {r.title} {version} silently falls back to its default B{b} "
        f"(ids {ids} in its convention; rule: {applied.label}{'; ' + default if default else ''}); write the ids "
        "the draft was trained with explicitly"
    )
    marks = "".join(f"; {m.note} ({m.source})" for m in conv.WRITER_MARKS if m.key in config)
    return source(ids, b, None, True, note + r.fallback_note + marks)


def _captured(
    b: Sequence[int], engine: str, num_layers: int | None, family: str | None, version: str, kind: str | None = None
) -> str:
    """The boundaries ``engine`` captures, in words; those it cannot (:func:`hsdiff.rules.serving.serve`) are
    named apart, not listed as captured."""
    plain = "B[" + ", ".join(map(str, b)) + "]"
    final = conv.applied(engine, family, version, kind).names_final
    if num_layers is not None and any(x < 0 or x > num_layers and not (final and x == num_layers + 1) for x in b):
        return plain  # out of range: the ids-in-range check says so
    try:
        served = serve(b, engine, num_layers=num_layers, model_family=family, version=version, kind=kind)
    except InputError:  # a rule that needs what is not known
        return plain
    lost = [x for o in served.obstacles if o.kind == ObstacleKind.UNCAPTURABLE for x in o.boundaries]
    kept = [x for x in b if x not in lost]
    if not lost:
        return boundary_list(b, num_layers)
    return f"{boundary_list(kept, num_layers)} only: it cannot capture " + ", ".join(
        conv.name_boundary(x, num_layers) for x in dict.fromkeys(lost)
    )


# --------------------------------------------------------------------------- the draft's fc width


def fc_width(
    config: dict[str, Any],
    engine: str,
    path: Path,
    version: str | None = None,
    header: Callable[[Path], dict[str, tuple[int, ...]]] | None = None,
) -> tuple[int | None, str]:
    """The input width of the draft's ``fc`` and how it was found: from ``fc.weight`` in the draft's
    safetensors beside ``path`` (tensor shapes by ``header``, a safetensors header reader), else from how
    the engine builds it, else ``(None, "")``."""
    if header is not None:
        found = _fc_from_weights(path.parent, header)
        if found is not None:
            return found
    return built_fc_width(config, engine, version)


def built_fc_width(config: dict[str, Any], engine: str, version: str | None = None) -> tuple[int | None, str]:
    """The ``fc`` input width ``engine`` builds from the draft config alone, and why; ``(None, "")`` when
    the engine does not size it from the draft config."""
    info = conv.rule(engine)
    th = stated_hidden_size(config)
    if not th:
        return None, ""
    title = info.title
    ver = conv.parse_version(info.key, version)
    if info.fc_three_before and conv.version_tuple(ver) < conv.version_tuple(info.fc_three_before):
        return 3 * int(th), f"{title} {ver} builds it as 3 × target_hidden_size {th}"
    if info.fc_rule == FC_AUX:
        n, why = num_aux(config)
        return n * int(th), f"{title} {ver} builds it as {why} × target_hidden_size {th}"
    return None, ""


def _fc_from_weights(folder: Path, header: Callable[[Path], dict[str, tuple[int, ...]]]) -> tuple[int, str] | None:
    files: list[Path] = []
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            obj = read_json(index)
            weight_map = obj.get("weight_map", {}) if isinstance(obj, dict) else {}
        except InputError:
            weight_map = {}
        files = [folder / f for k, f in weight_map.items() if k.split(".")[-2:] == ["fc", "weight"]]
    if not files:
        files = sorted(folder.glob("*.safetensors"))
    for f in files[:8]:
        for key, shape in header(f).items():
            if key.split(".")[-2:] == ["fc", "weight"] and len(shape) == 2:
                return int(shape[1]), f"{f.name} [{key}] has shape {list(shape)}"
    return None
