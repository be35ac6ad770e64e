"""The pre-deployment gate: read the layer ids where the engine really reads them, check the draft
config for the known traps, then prove with :func:`hsdiff.comparison.compare` that the engine feeds the
draft the hidden states it was trained on.

Three steps, each usable alone:

* :func:`read_ids` — the ids an engine takes from a draft ``config.json`` (SGLang: only the nested
  ``eagle_config.eagle_aux_hidden_state_layer_ids``; vLLM: the top-level key, and the nested key on the
  V1 runner only), falling back to the engine's default exactly as the engine does, and recording
  that it did (a silent fallback is a known failure, vLLM #50170);
* :func:`static_checks` — :class:`Check` records that need no dumps: ids unsorted, duplicated, out
  of range, not capturable, the draft's ``fc`` width, ids in a key the engine ignores, ids a
  model-family rule reads differently;
* :func:`run_gate` — both of the above plus the value comparison, as one :class:`GateResult`.

Example::

    >>> result = run_gate("fixtures/seed/train", "fixtures/seed/infer-wrong",
    ...                   "fixtures/seed/draft-wrong/config.json",
    ...                   target_config="fixtures/seed/model/config.json")   # doctest: +SKIP
    >>> result.verdict, result.exit_code
    ('fail', 1)
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from . import conventions as conv
from .comparison import Options, compare
from .configs import load_config
from .errors import ConfigError, InputError
from .model import Report

__all__ = [
    "ERROR",
    "WARNING",
    "INFO",
    "Check",
    "IdsSource",
    "GateResult",
    "read_ids",
    "static_checks",
    "check_config",
    "run_gate",
    "target_info",
]

ERROR, WARNING, INFO = "error", "warning", "info"
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Check:
    """One static check: ``ok`` or not, how much it matters, and what to do about it."""

    name: str
    ok: bool
    severity: str  # ERROR, WARNING or INFO: how much a failure matters
    message: str
    skipped: bool = False
    path: str | None = None

    @property
    def failed(self) -> bool:
        """A failure that fails the gate (warnings fail it only with ``strict``)."""
        return not self.ok and not self.skipped and self.severity == ERROR

    @property
    def warned(self) -> bool:
        return not self.ok and not self.skipped and self.severity == WARNING

    @property
    def status(self) -> str:
        if self.skipped:
            return "skipped"
        if self.ok:
            return "ok"
        return "FAIL" if self.severity == ERROR else "warn"

    def to_dict(self) -> dict:
        return {"name": self.name, "ok": self.ok, "severity": self.severity, "status": self.status,
                "skipped": self.skipped, "message": self.message, "path": self.path}

    def __repr__(self) -> str:
        return f"<Check {self.name}: {self.status}>"


@dataclass(frozen=True)
class IdsSource:
    """The ids an engine uses for a draft config, where they came from, and what they capture."""

    engine: str
    ids: tuple[int, ...]
    boundaries: tuple[int, ...]  # in the engine's slot order (ascending for engines that sort)
    key: str | None  # the config key they were read from; None when the engine fell back to its default
    path: str
    fallback: bool
    note: str
    model_family: str | None = None
    vllm_runner: str | None = None

    def describe(self) -> str:
        return self.note

    def to_dict(self) -> dict:
        return {"engine": self.engine, "eagle_aux_hidden_state_layer_ids": list(self.ids),
                "boundary_indices": list(self.boundaries), "key": self.key, "path": self.path,
                "fallback": self.fallback, "note": self.note, "model_family": self.model_family,
                "vllm_runner": self.vllm_runner}

    def __repr__(self) -> str:
        return f"<IdsSource {self.engine} {list(self.ids)} from {self.key or 'default'}>"


@dataclass(frozen=True, eq=False)
class GateResult:
    """What the gate (or ``check-config``, with ``report=None``) found.

    ``verdict`` is ``"pass"`` when no error-severity check failed (nor a warning, with ``strict``)
    and the comparison, if one ran, is ``"ok"``.
    """

    command: str  # "gate" or "check-config"
    draft_config: str
    target_config: str | None
    engine: str
    ids: IdsSource | None
    checks: tuple[Check, ...]
    report: Report | None = None
    strict: bool = False
    num_layers: int | None = None
    hidden_size: int | None = None
    model_family: str | None = None
    notes: tuple[str, ...] = ()
    inputs: dict = field(default_factory=dict)

    @property
    def failed_checks(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.failed or (self.strict and c.warned))

    @property
    def passed(self) -> bool:
        if self.failed_checks:
            return False
        if self.command == "gate" and (self.report is None or self.report.verdict != "ok"):
            return False
        return True

    @property
    def verdict(self) -> str:
        return "pass" if self.passed else "fail"

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    @property
    def cause(self) -> str:
        """One paragraph: why the gate failed, or what passed."""
        parts = [f"{c.name}: {c.message}" for c in self.failed_checks]
        if self.report is not None and self.report.verdict != "ok":
            parts.append(f"compare {self.report.verdict}: {self.report.cause}")
        elif self.command == "gate" and self.report is None:
            parts.extend(self.notes or ("the comparison did not run",))
        if parts:
            return " ".join(parts)
        if self.report is not None:
            return self.report.cause
        return "every static check passed"

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "command": self.command,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "cause": self.cause,
            "engine": self.engine,
            "model_family": self.model_family,
            "draft_config": self.draft_config,
            "target_config": self.target_config,
            "num_hidden_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "strict": self.strict,
            "ids": None if self.ids is None else self.ids.to_dict(),
            "checks": [c.to_dict() for c in self.checks],
            "notes": list(self.notes),
            "report": None if self.report is None else self.report.to_dict(),
            "inputs": self.inputs,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    def __repr__(self) -> str:
        failed = ", ".join(c.name for c in self.failed_checks) or "-"
        rep = "" if self.report is None else f", compare {self.report.verdict}"
        return f"<GateResult {self.command} {self.verdict}: failed checks {failed}{rep}>"


# --------------------------------------------------------------------------- configs

@dataclass(frozen=True)
class _Target:
    num_layers: int | None
    hidden_size: int | None
    family: str | None  # SGLang rule key when it came from model_type
    model_type: str | None


def target_info(config: dict | None) -> _Target:
    """``num_hidden_layers``, ``hidden_size`` and the SGLang family rule of a target ``config.json``."""
    if not config:
        return _Target(None, None, None, None)
    sub = config.get("text_config")
    text: dict = sub if isinstance(sub, dict) else {}
    n = config.get("num_hidden_layers") or text.get("num_hidden_layers")
    h = config.get("hidden_size") or text.get("hidden_size")
    mt = config.get("model_type") or text.get("model_type")
    return _Target(int(n) if n else None, int(h) if h else None, conv.family_from_config(config), mt)


def _load_draft(path: str | os.PathLike) -> tuple[dict, Path]:
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    return load_config(p), p


def _is_int_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in value)


def _get(config: dict, path: Sequence[str]) -> tuple[bool, Any]:
    node: Any = config
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


_NESTED = ("eagle_config", "eagle_aux_hidden_state_layer_ids")
_TOP = ("eagle_aux_hidden_state_layer_ids",)


def _family(engine: str, model_family: str | None) -> str | None:
    return conv.normalize_family(model_family) if engine == "sglang" else None


def _reading(ids: Sequence[int], engine: str, num_layers: int | None, family: str | None) -> list[int]:
    """Boundaries ``engine`` captures for ``ids`` in list order, without the range check."""
    if engine == "sglang" and family == "gpt-oss":
        if num_layers is None:
            raise ConfigError(
                "SGLang's gpt-oss rule depends on the target's num_hidden_layers",
                hint="pass --target-config path/to/target/config.json",
            )
        return [i + (0 if max(ids) == num_layers else 1) for i in ids]  # SGLang PR #32334
    return conv.to_boundary(ids, engine, num_layers=None, model_family=family, keep_order=True)


def _slot_order(boundaries: Sequence[int], engine: str) -> list[int]:
    return sorted(set(boundaries)) if conv.rule(engine).sorts else list(boundaries)


def read_ids(
    config: dict,
    engine: str = "sglang",
    *,
    path: str | os.PathLike = "config.json",
    num_layers: int | None = None,
    model_family: str | None = None,
    vllm_runner: str = "v1",
) -> IdsSource:
    """The ids ``engine`` takes from a draft config, or its default when it finds none.

    >>> read_ids({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}}, "sglang").boundaries
    (3, 31, 59)
    >>> read_ids({"eagle_aux_hidden_state_layer_ids": [3, 31, 59]}, "sglang", num_layers=61).fallback
    True
    """
    r = conv.rule(engine)
    engine = r.key
    family = _family(engine, model_family)
    runner = vllm_runner if engine == "vllm" else None
    keys = conv.config_keys(engine, vllm_runner=vllm_runner)
    if not keys:
        raise ConfigError(
            f"{r.title} takes its layer ids from no config file",
            path=path, hint="choose --engine sglang, vllm, trtllm, modelopt or specforge",
        )
    value, key = conv.read_config_ids(config, engine, vllm_runner=vllm_runner)
    where = " or ".join(conv.key_name(k) for k in keys)
    if key is not None and value is not None:
        if not _is_int_list(value):
            raise ConfigError(
                f"{conv.key_name(key)} is {json.dumps(value)}, not a list of integers",
                path=path, hint='write a list such as [2, 30, 58]',
            )
        ids = [int(i) for i in cast(list, value)]
        if not ids:
            return IdsSource(engine, (), (), conv.key_name(key), str(path), False,
                             f"{r.title} reads {conv.key_name(key)} = [] and captures no layer at all: the draft "
                             "receives no hidden states", family, runner)
        b = _slot_order(_reading(ids, engine, num_layers, family), engine)
        note = f"{r.title} reads {conv.key_name(key)} = {ids} from {path}, i.e. captures B{b}"
        return IdsSource(engine, tuple(ids), tuple(b), conv.key_name(key), str(path), False, note, family, runner)
    if num_layers is None:
        raise ConfigError(
            f"no layer ids in {where}: {r.title} falls back to its default, which depends on the target's "
            "num_hidden_layers", path=path, hint="pass --target-config path/to/target/config.json",
        )
    b = conv.default_boundaries(num_layers)
    ids = conv.default_ids(engine, num_layers, family)
    why = "is null" if key is not None else "is absent"
    note = (f"{where} {why} in {path}: {r.title} silently falls back to its default B{b} "
            f"(ids {ids} in its convention); write the ids the draft was trained with explicitly")
    if engine == "vllm":
        note += " (a silent fallback like this cost vLLM #50170 nearly all acceptance)"
    return IdsSource(engine, tuple(ids), tuple(b), None, str(path), True, note, family, runner)


# --------------------------------------------------------------------------- static checks

def static_checks(
    config: dict,
    ids: IdsSource,
    *,
    path: str | os.PathLike = "config.json",
    num_layers: int | None = None,
    target_hidden: int | None = None,
    model_family: str | None = None,
    vllm_runner: str = "v1",
    family_source: str | None = None,
) -> list[Check]:
    """Every check that needs no dumps, in a fixed order (the names are stable, used by JUnit/CI).

    ``family_source`` says where the SGLang model family came from (for the messages).
    """
    p = str(path)
    engine = ids.engine
    family = _family(engine, model_family)
    out = [_check_source(ids, p), _check_ignored_key(config, engine, p, num_layers, family, vllm_runner)]
    written = list(ids.ids)
    out.append(_check_sorted(written, engine, num_layers, family, ids.fallback, p))
    out.append(_check_unique(written, engine, ids.fallback, p))
    reading = _reading(written, engine, num_layers, family) if written else []
    out.append(_check_range(written, reading, engine, num_layers, p))
    out.append(_check_capturable(written, reading, engine, num_layers, family, p))
    out.append(_check_embeddings(written, reading, engine, p))
    out.append(_check_family(written, engine, num_layers, family, family_source or f"model family {family}", p))
    out.append(_check_target_hidden(config, target_hidden, p))
    out.append(_check_fc(config, ids, engine, target_hidden, Path(p)))
    return out


def _check_source(ids: IdsSource, p: str) -> Check:
    if ids.fallback:
        return Check("ids-source", False, WARNING, ids.note, path=p)
    if not ids.ids:
        return Check("ids-source", False, ERROR, ids.note + f" — write the trained ids into {ids.key}", path=p)
    return Check("ids-source", True, INFO, ids.note, path=p)


def _check_ignored_key(config: dict, engine: str, p: str, L: int | None, family: str | None, runner: str) -> Check:
    has_top, top = _get(config, _TOP)
    has_nested, nested = _get(config, _NESTED)
    top_ok = _is_int_list(top) and bool(top)
    nested_ok = _is_int_list(nested) and bool(nested)
    name = "ignored-key"
    if engine == "sglang":
        if top_ok and not has_nested:
            return Check(name, False, ERROR,
                         f"the ids {top} are in the top-level eagle_aux_hidden_state_layer_ids, which SGLang never "
                         "reads: it falls back to its default layers. Move them under "
                         "eagle_config.eagle_aux_hidden_state_layer_ids (SGLang counts them as layer outputs; "
                         "`hsdiff ids` translates).", path=p)
        if top_ok and nested_ok:
            b_top = _safe_reading(top, "vllm", L, None)
            b_sg = _safe_reading(nested, "sglang", L, family)
            if b_top is not None and b_sg is not None and sorted(set(b_top)) != sorted(set(b_sg)):
                return Check(name, False, WARNING,
                             f"SGLang ignores the top-level eagle_aux_hidden_state_layer_ids {top} (it reads the nested "
                             f"{nested}, i.e. B{sorted(set(b_sg))}); vLLM would read the top-level key and capture "
                             f"B{sorted(set(b_top))}: the same draft gets different layers on the two engines.", path=p)
        return Check(name, True, INFO, "SGLang reads eagle_config.eagle_aux_hidden_state_layer_ids; no ids sit in a "
                     "key it ignores", path=p)
    if engine == "vllm":
        if nested_ok and not top_ok:
            if runner == "v2":
                return Check(name, False, ERROR,
                             f"the ids {nested} are only in eagle_config.eagle_aux_hidden_state_layer_ids, which vLLM's "
                             "V2 model runner ignores: it falls back to the default layers (vLLM #50170). Write them "
                             "to the top-level eagle_aux_hidden_state_layer_ids (boundary indices; `hsdiff ids` "
                             "translates).", path=p)
            return Check(name, False, WARNING,
                         f"the ids {nested} are only in eagle_config.eagle_aux_hidden_state_layer_ids: vLLM's V1 runner "
                         "reads them, but the V2 runner (VLLM_USE_V2_MODEL_RUNNER=1) ignores that key and falls back "
                         "to the default layers. Write them to the top-level eagle_aux_hidden_state_layer_ids too.",
                         path=p)
        if top_ok and nested_ok:
            b_top = _safe_reading(top, "vllm", L, None)
            b_sg = _safe_reading(nested, "sglang", L, family)
            if b_top is not None and b_sg is not None and sorted(set(b_top)) != sorted(set(b_sg)):
                return Check(name, False, WARNING,
                             f"vLLM reads the top-level {top} (B{sorted(set(b_top))}) and ignores the nested {nested}, "
                             f"which SGLang and SpecForge read as B{sorted(set(b_sg))}: the two keys name different "
                             "layers.", path=p)
        return Check(name, True, INFO, "vLLM reads the top-level eagle_aux_hidden_state_layer_ids; no ids sit in a "
                     "key it ignores", path=p)
    return Check(name, True, INFO, f"{conv.rule(engine).title} reads "
                 f"{' or '.join(conv.key_name(k) for k in conv.config_keys(engine))}", skipped=False, path=p)


def _safe_reading(ids: Sequence[int], engine: str, L: int | None, family: str | None) -> list[int] | None:
    try:
        return _reading(ids, engine, L, family)
    except InputError:
        return None


def _check_sorted(ids: list[int], engine: str, L: int | None, family: str | None, fallback: bool, p: str) -> Check:
    if fallback or not ids or ids == sorted(ids):
        return Check("ids-sorted", True, INFO, "the ids are in ascending order", path=p)
    title = conv.rule(engine).title
    b = _safe_reading(ids, engine, L, family) or []
    return Check("ids-sorted", False, ERROR,
                 f"{ids} is not ascending: {title} captures in layer order, so its slots hold B{sorted(set(b))} while "
                 f"the list names B{b}; a trainer that concatenated in list order fed the draft's fc permuted blocks. "
                 f"Write them ascending ({sorted(ids)}) after checking the training order with hsdiff compare.", path=p)


def _check_unique(ids: list[int], engine: str, fallback: bool, p: str) -> Check:
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if fallback or not dup:
        return Check("ids-unique", True, INFO, "no id is repeated", path=p)
    title = conv.rule(engine).title
    return Check("ids-unique", False, ERROR,
                 f"{ids} repeats {dup}: {title} captures each layer once, so it delivers {len(set(ids))} slots where "
                 f"the list (and the draft's fc) has {len(ids)}. Remove the duplicates and retrain or fix the list.",
                 path=p)


def _check_range(ids: list[int], reading: list[int], engine: str, L: int | None, p: str) -> Check:
    if L is None:
        return Check("ids-in-range", True, INFO, "skipped: the target's num_hidden_layers is unknown "
                     "(pass --target-config)", skipped=True, path=p)
    bad = [(i, b) for i, b in zip(ids, reading) if b < 0 or b > L]
    if not bad:
        return Check("ids-in-range", True, INFO, f"every id names a boundary within 0..{L}", path=p)
    title = conv.rule(engine).title
    what = ", ".join(f"id {i} → B{b}" for i, b in bad)
    return Check("ids-in-range", False, ERROR,
                 f"{what}: outside 0..{L} for the {L}-layer target as {title} counts. Check the ids against the "
                 "target's num_hidden_layers and the engine's convention (`hsdiff ids --explain`).", path=p)


def _check_capturable(ids: list[int], reading: list[int], engine: str, L: int | None, family: str | None, p: str) -> Check:
    if L is None:
        return Check("ids-capturable", True, INFO, "skipped: the target's num_hidden_layers is unknown "
                     "(pass --target-config)", skipped=True, path=p)
    top = conv.max_capturable(engine, L, family)
    bad = [(i, b) for i, b in zip(ids, reading) if top < b <= L]
    if not bad:
        return Check("ids-capturable", True, INFO, f"every boundary is one {conv.rule(engine).title} can capture", path=p)
    title = conv.rule(engine).title + (f" ({family} rule)" if family else "")
    what = ", ".join(f"id {i} → B{b}" for i, b in bad)
    return Check("ids-capturable", False, ERROR,
                 f"{what} ({conv.describe_boundary(L, L)}): {title} captures before each layer runs, so nothing "
                 f"captures B{L} and the slot stays empty (the fc concat fails or the draft gets garbage, as in SGLang "
                 "#32334). Use an engine that captures the last layer (vLLM) or retrain on capturable layers.", path=p)


def _check_embeddings(ids: list[int], reading: list[int], engine: str, p: str) -> Check:
    slots = [j for j, b in enumerate(reading) if b == 0]
    if not slots:
        return Check("ids-embeddings", True, INFO, "no slot receives the embeddings", path=p)
    i = ids[slots[0]]
    return Check("ids-embeddings", False, WARNING,
                 f"id {i} makes {conv.rule(engine).title} feed the embeddings (B0) into a slot; EAGLE-3 drafts are "
                 "trained on decoder-layer outputs, and ids like [-1, 2, 30] (the case behind hsdiff) shift every "
                 "slot by one. Confirm with hsdiff gate on real dumps.", path=p)


def _check_family(ids: list[int], engine: str, L: int | None, family: str | None, src: str, p: str) -> Check:
    name = "family-rule"
    if engine != "sglang" or family in (None, "llama", "deepseek-legacy") or not ids:
        return Check(name, True, INFO, "no model-family rule changes how these ids are read", path=p)
    own = _safe_reading(ids, "sglang", L, family)
    plain = [i + 1 for i in ids]
    if family == "deepseek":
        rule_text = "adds 1 only when the first id is 1 (SGLang PR #25454)"
    else:
        rule_text = f"uses the ids as boundary indices when their maximum is num_hidden_layers ({L}) (SGLang PR #32334)"
    if own is None or own == plain:
        return Check(name, True, INFO, f"SGLang's {family} rule ({src}) {rule_text}: {ids} are shifted by +1 as under "
                     f"the llama rule, B{plain}", path=p)
    return Check(name, False, WARNING,
                 f"SGLang's {family} rule ({src}) {rule_text}, so {ids} are used as they are: B{own}. Read as layer "
                 f"outputs (+1), as the llama rule and SGLang before that PR do, they name B{plain}: a draft trained "
                 "through the other reading gets every slot one layer off. Check which layers it was trained on "
                 "(hsdiff gate) before deploying.", path=p)


def _check_target_hidden(config: dict, target_hidden: int | None, p: str) -> Check:
    draft_th = config.get("target_hidden_size")
    if target_hidden is None or draft_th is None:
        return Check("target-hidden-size", True, INFO, "skipped: needs the draft's target_hidden_size and the "
                     "target's hidden_size", skipped=True, path=p)
    if int(draft_th) == int(target_hidden):
        return Check("target-hidden-size", True, INFO, f"target_hidden_size {draft_th} equals the target's hidden_size",
                     path=p)
    return Check("target-hidden-size", False, ERROR,
                 f"the draft's target_hidden_size is {draft_th} but the target's hidden_size is {target_hidden}: this "
                 "draft was built for another target model.", path=p)


def _check_fc(config: dict, ids: IdsSource, engine: str, target_hidden: int | None, path: Path) -> Check:
    name = "fc-width"
    h = target_hidden or config.get("target_hidden_size") or config.get("hidden_size")
    if not h or not ids.boundaries:
        return Check(name, True, INFO, "skipped: the target hidden size is unknown (pass --target-config)",
                     skipped=True, path=str(path))
    slots = len(ids.boundaries)
    feeds = slots * int(h)
    width, how = _fc_width(config, engine, path)
    if width is None:
        return Check(name, True, INFO, f"skipped: no draft weights beside {path.name} and {conv.rule(engine).title} "
                     "does not fix the fc width from the config", skipped=True, path=str(path))
    if width == feeds:
        return Check(name, True, INFO, f"the draft's fc takes {width} inputs = {slots} slots × {h} ({how})", path=str(path))
    return Check(name, False, ERROR,
                 f"the draft's fc takes {width} inputs ({how}) but {conv.rule(engine).title} feeds it {slots} slots × "
                 f"{h} = {feeds}: the matmul fails at load or first request. The number of ids must match the number of "
                 f"aux slots the draft was trained with ({width // int(h) if width % int(h) == 0 else '?'} × {h}).",
                 path=str(path))


def _fc_width(config: dict, engine: str, path: Path) -> tuple[int | None, str]:
    found = _fc_from_weights(path.parent)
    if found is not None:
        return found
    th = config.get("target_hidden_size") or config.get("hidden_size")
    if engine in ("sglang", "vllm") and th:
        # llama_eagle3.py in both engines: fc = Linear(target_hidden_size * 3, hidden_size)
        return 3 * int(th), f"{conv.rule(engine).title} builds it as 3 × target_hidden_size {th}"
    return None, ""


def _fc_from_weights(folder: Path) -> tuple[int, str] | None:
    files: list[Path] = []
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {})
        except (OSError, ValueError):
            weight_map = {}
        files = [folder / f for k, f in weight_map.items() if k.split(".")[-2:] == ["fc", "weight"]]
    if not files:
        files = sorted(folder.glob("*.safetensors"))
    for f in files[:8]:
        header = _safetensors_header(f)
        for key, meta in header.items():
            if key.split(".")[-2:] == ["fc", "weight"] and isinstance(meta, dict) and len(meta.get("shape", [])) == 2:
                return int(meta["shape"][1]), f"{f.name} [{key}] has shape {meta['shape']}"
    return None


def _safetensors_header(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > 100_000_000:
                return {}
            return json.loads(f.read(n))
    except (OSError, ValueError, struct.error):
        return {}


# --------------------------------------------------------------------------- entry points

def _setup(draft_config: str | os.PathLike, target_config: str | os.PathLike | None, engine: str,
           model_family: str | None, num_layers: int | None, hidden_size: int | None):
    cfg, path = _load_draft(draft_config)
    target = target_info(load_config(target_config) if target_config else None)
    L = num_layers or target.num_layers
    H = hidden_size or target.hidden_size
    family, source = None, None
    if engine == "sglang":  # the only engine whose reading depends on the model family
        if model_family:
            family, source = conv.normalize_family(model_family), f"--model-family {model_family}"
        elif target.model_type:
            family, source = target.family, f"target model_type {target.model_type}"
        else:
            family, source = "llama", "the default llama rule"
    return cfg, path, L, H, family, source


def check_config(
    draft_config: str | os.PathLike,
    *,
    engine: str = "sglang",
    target_config: str | os.PathLike | None = None,
    model_family: str | None = None,
    vllm_runner: str = "v1",
    num_layers: int | None = None,
    hidden_size: int | None = None,
    strict: bool = False,
) -> GateResult:
    """The static checks alone (``hsdiff check-config``).

    >>> check_config("fixtures/configs/unsorted.json",
    ...              target_config="fixtures/configs/targets/llama-61.json").verdict   # doctest: +SKIP
    'fail'
    """
    engine = conv.rule(engine).key
    _runner(vllm_runner)
    cfg, path, L, H, family, fsrc = _setup(draft_config, target_config, engine, model_family, num_layers, hidden_size)
    ids = read_ids(cfg, engine, path=path, num_layers=L, model_family=family, vllm_runner=vllm_runner)
    checks = static_checks(cfg, ids, path=path, num_layers=L, target_hidden=H, model_family=family,
                           vllm_runner=vllm_runner, family_source=fsrc)
    return GateResult("check-config", str(path), None if target_config is None else str(target_config), engine, ids,
                      tuple(checks), None, strict, L, H, family)


def run_gate(
    train: str | os.PathLike,
    infer: str | os.PathLike,
    draft_config: str | os.PathLike,
    options: Options | None = None,
    *,
    target_config: str | os.PathLike | None = None,
    vllm_runner: str = "v1",
    strict: bool = False,
) -> GateResult:
    """Read the ids from ``draft_config`` as ``options.engine`` does, run the static checks, then compare.

    ``options`` are :class:`~hsdiff.comparison.Options` (its ``layer_ids`` is replaced by the ids read from the
    config); ``target_config`` is the target model's ``config.json`` (gives L, H and the model family).
    """
    opts = options if options is not None else Options()
    engine = conv.rule(opts.engine).key
    _runner(vllm_runner)
    target_config = target_config or opts.model_config
    cfg, path, L, H, family, fsrc = _setup(draft_config, target_config, engine, opts.model_family, opts.num_layers,
                                           opts.hidden_size)
    ids = read_ids(cfg, engine, path=path, num_layers=L, model_family=family, vllm_runner=vllm_runner)
    checks = static_checks(cfg, ids, path=path, num_layers=L, target_hidden=H, model_family=family,
                           vllm_runner=vllm_runner, family_source=fsrc)
    blocking = [c for c in checks if c.failed and c.name in ("ids-in-range", "ids-source")]
    notes: list[str] = []
    report = None
    if blocking:
        notes.append(f"the comparison did not run: {blocking[0].name} failed, so the engine's captures cannot be labelled")
    else:
        source = f"{path} [{ids.key}]" if ids.key else f"{conv.rule(engine).title}'s default (no ids in {path})"
        report = compare(train, infer, replace(
            opts, engine=engine, layer_ids=list(ids.ids), model_family=family if engine == "sglang" else opts.model_family,
            model_config=None if target_config is None else str(target_config), configured_source=source))
    return GateResult("gate", str(path), None if target_config is None else str(target_config), engine, ids,
                      tuple(checks), report, strict, L, H, family, tuple(notes),
                      {"train": str(train), "infer": str(infer)})


def _runner(vllm_runner: str) -> None:
    if vllm_runner not in conv.VLLM_RUNNERS:
        raise InputError(f"unknown vLLM runner {vllm_runner!r}", hint=f"choose one of: {', '.join(conv.VLLM_RUNNERS)}")
