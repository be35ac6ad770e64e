"""The static checks of a draft config: everything ``hsdiff check-config`` and ``hsdiff gate`` find
without dumps, as a table of ``(name, check)`` rows in a fixed order.

The names are stable: they are the JUnit testcase names and ``checks[].name`` in the JSON, so a CI
history can follow one check across runs. Each check looks at one :class:`CheckInput` (the draft
config, the ids the engine reads from it, the target's shape) and returns a finding;
:func:`static_checks` turns the findings into :class:`~hsdiff.model.gate.Check` records.

>>> [name for name, _ in CHECKS][:3]
['ids-source', 'ignored-key', 'ids-sorted']
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from ..configs import boundaries_read, built_fc_width, config_value, fc_width
from ..errors import HsdiffError, InputError
from ..model.gate import ERROR, INFO, WARNING, Check, IdsSource, Severity
from ..rules import conventions as conv
from ..rules.kinds import DRAFT_NORMS, EAGLE31_FLAGS, draft_norms
from ..rules.profile import DEEPSEEK, FAMILY_READING, KEYS_NESTED, KEYS_TOP
from ..rules.serving import as_written, boundary_list, serve

__all__ = ["CHECKS", "CHECK_NAMES", "CheckInput", "static_checks"]


@dataclass(frozen=True)
class CheckInput:
    """What every check looks at."""

    config: dict[str, Any]
    ids: IdsSource
    path: str
    num_layers: int | None
    target_hidden: int | None
    family: str | None  # the SGLang model-family rule key (None on other engines)
    family_source: str  # where that family came from, for the messages
    vllm_runner: str
    version: str  # the engine version whose rules apply
    written: list[int]  # the ids the engine uses, as written (its default ids on a fallback)
    reading: list[int]  # the boundaries the engine captures for ``written``, in list order
    kind: str = "eagle3"  # the draft kind whose rows read the ids (hsdiff.rules.kinds)

    @property
    def eagle3(self) -> bool:
        """Whether the ids feed an EAGLE-3 draft (the checks of its fc, keys and model-family rules apply)."""
        return conv.draft_kind(self.kind).reading == conv.draft_kind(None).reading


class Finding(NamedTuple):
    ok: bool
    severity: Severity
    message: str
    skipped: bool = False


def _ok(message: str, skipped: bool = False) -> Finding:
    return Finding(True, INFO, message, skipped)


def _fail(severity: Severity, message: str) -> Finding:
    return Finding(False, severity, message)


def static_checks(
    config: dict[str, Any],
    ids: IdsSource,
    *,
    path: str | os.PathLike = "config.json",
    num_layers: int | None = None,
    target_hidden: int | None = None,
    model_family: str | None = None,
    vllm_runner: str = conv.DEFAULT_RUNNER,
    family_source: str | None = None,
    version: str | None = None,
) -> list[Check]:
    """Every check that needs no dumps, in the order of :data:`CHECKS`.

    ``family_source`` says where the SGLang model family came from (for the messages).
    """
    p = str(path)
    family = conv.normalize_family(model_family) if conv.rule(ids.engine).family_rule else None
    version = conv.parse_version(ids.engine, version or ids.engine_version)
    written = list(ids.ids)
    index = "" if ids.fallback else ids.index
    reading = boundaries_read(written, ids.engine, num_layers, family, version, ids.kind, index) if written else []
    c = CheckInput(
        config,
        ids,
        p,
        num_layers,
        target_hidden,
        family,
        family_source or f"model family {family}",
        vllm_runner,
        version,
        written,
        reading,
        ids.kind,
    )
    out = []
    for name, check in CHECKS:
        f = (
            check(c)
            if c.eagle3 or name not in EAGLE3_ONLY
            else _ok(f"not checked for draft kind {conv.draft_kind(c.kind).title} (an EAGLE-3 check)", skipped=True)
        )
        out.append(Check(name, f.ok, f.severity, f.message, skipped=f.skipped, path=p))
    return out


def _is_int_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in value)


def _source(c: CheckInput) -> Finding:
    ids = c.ids
    if ids.fallback:
        return _fail(WARNING, ids.note)
    if not ids.ids:
        if ids.key and ids.key.endswith("use_aux_hidden_state"):
            return _fail(ERROR, ids.note)
        return _fail(ERROR, ids.note + f" — write the trained ids into {ids.key}")
    return _ok(ids.note)


class _Keys(NamedTuple):
    """The draft config's two id keys, as an ignored-key check sees them."""

    has_top: bool
    top: Any
    has_nested: bool
    nested: Any
    top_ok: bool  # a non-empty list of ints
    nested_ok: bool
    both: tuple[list[int], list[int]] | None  # both hold ids, read differently: (vLLM's top-level, SGLang's nested)


def _ignored_key(c: CheckInput) -> Finding:
    has_top, top = config_value(c.config, conv.TOP_KEY)
    has_nested, nested = config_value(c.config, conv.NESTED_KEY)
    top_ok, nested_ok = _is_int_list(top) and bool(top), _is_int_list(nested) and bool(nested)
    both = _both_keys(top, nested, c.num_layers, c.family) if top_ok and nested_ok else None
    k = _Keys(has_top, top, has_nested, nested, top_ok, nested_ok, both)
    kind = conv.rule(c.ids.engine).key_check
    if not kind:
        return _other_reader(c, k)
    lost = (_nested_lost if kind == KEYS_NESTED else _top_lost)(c, k)
    if lost is not None:
        return lost
    if k.both is not None:
        return _fail(WARNING, _BOTH_KEYS[kind].format(top=top, nested=nested, b_top=k.both[0], b_nested=k.both[1]))
    return _ok(_READS_ONE_KEY[kind])


#: Per key check: both keys hold ids that name different layers; and what it reads when nothing is lost.
_BOTH_KEYS = {
    KEYS_NESTED: "SGLang ignores the top-level eagle_aux_hidden_state_layer_ids {top} (it reads the nested {nested}, "
    "i.e. B{b_nested}); vLLM would read the top-level key and capture B{b_top}: the same draft gets "
    "different layers on the two engines.",
    KEYS_TOP: "vLLM reads the top-level {top} (B{b_top}) and ignores the nested {nested}, which SGLang and SpecForge "
    "read as B{b_nested}: the two keys name different layers.",
}
_READS_ONE_KEY = {
    KEYS_NESTED: "SGLang reads eagle_config.eagle_aux_hidden_state_layer_ids; no ids sit in a key it ignores",
    KEYS_TOP: "vLLM reads the top-level eagle_aux_hidden_state_layer_ids; no ids sit in a key it ignores",
}


def _nested_lost(c: CheckInput, k: _Keys) -> Finding | None:
    """An engine that reads only the nested key (SGLang): ids only in the top-level key are lost."""
    if k.top_ok and not k.has_nested:
        return _fail(
            ERROR,
            f"the ids {k.top} are in the top-level eagle_aux_hidden_state_layer_ids, which SGLang never "
            "reads: it falls back to its default layers. Move them under "
            "eagle_config.eagle_aux_hidden_state_layer_ids (SGLang counts them as layer outputs; "
            "`hsdiff ids` translates).",
        )
    return None


def _top_lost(c: CheckInput, k: _Keys) -> Finding | None:
    """An engine that reads the top-level key first and the nested one by model runner (vLLM)."""
    if not (k.nested_ok and not k.top_ok):
        return None
    if c.vllm_runner == "v2":
        return _fail(
            ERROR,
            f"the ids {k.nested} are only in eagle_config.eagle_aux_hidden_state_layer_ids, which vLLM's "
            "V2 model runner (the default) ignores: it falls back to the default layers (vLLM #50170). Write them "
            "to the top-level eagle_aux_hidden_state_layer_ids (boundary indices; `hsdiff ids` "
            "translates).",
        )
    return _fail(
        WARNING,
        f"the ids {k.nested} are only in eagle_config.eagle_aux_hidden_state_layer_ids: vLLM's V1 runner "
        "reads them, but the default V2 runner ignores that key and falls back to the default layers "
        "(vllm==0.33.0 eagle3_utils.py:113-150). Write them to the top-level "
        "eagle_aux_hidden_state_layer_ids too.",
    )


def _other_reader(c: CheckInput, k: _Keys) -> Finding:
    """Any other engine: the keys it reads, from :func:`hsdiff.rules.conventions.config_keys`."""
    engine, top, nested = c.ids.engine, k.top, k.nested
    keys = conv.config_keys(engine)
    read = [conv.key_name(path) for path in keys]
    if not keys:
        return _reads_none(c, k)
    if conv.TOP_KEY not in keys and k.top_ok and not k.has_nested:
        return _fail(
            ERROR,
            f"the ids {top} are in the top-level eagle_aux_hidden_state_layer_ids, which "
            f"{conv.rule(engine).title} never reads (it reads {' or '.join(read)}): it falls back to its "
            "default layers. Move them where it reads them (`hsdiff ids` translates).",
        )
    if conv.TOP_KEY in keys and conv.NESTED_KEY not in keys and k.nested_ok and not k.top_ok:
        return _fail(
            ERROR,
            f"the ids {nested} are only in eagle_config.eagle_aux_hidden_state_layer_ids, which "
            f"{conv.rule(engine).title} never reads (it reads {' or '.join(read)}): it falls back to its "
            "default layers. Write them to the top-level key (`hsdiff ids` translates).",
        )
    return _ok(f"{conv.rule(engine).title} reads {' or '.join(read)}")


def _reads_none(c: CheckInput, k: _Keys) -> Finding:
    """An engine that reads no id from the draft config: where it captures layers of its own whatever the config
    says (vLLM's TPU JAX models), ids in the config that name other layers (as vLLM or SGLang read them) fail."""
    title = conv.rule(c.ids.engine).title
    applied = conv.applied(c.ids.engine, c.family, c.version, c.kind)
    if not applied.fixed:
        return _ok(f"{title} reads no ids from the draft config (it reads {conv.rule(c.ids.engine).reads})")
    own = sorted(c.ids.boundaries)
    named = [
        (f"{where} {ids}", b)
        for where, ids, ok, reader, fam in (
            ("top-level", k.top, k.top_ok, KEYS_TOP, None),
            ("eagle_config's", k.nested, k.nested_ok, KEYS_NESTED, c.family),
        )
        if ok and (b := _safe_reading(ids, _reader_of(reader), c.num_layers, fam)) is not None
    ]
    other = [(w, b) for w, b in named if sorted(set(b)) != own]
    if not other:
        return _ok(f"{title} captures B{own} whatever the config says ({applied.label})")
    what = "; ".join(f"the {w} names B{sorted(set(b))}" for w, b in other)
    return _fail(
        ERROR,
        f"{title} captures B{own} whatever the config says ({applied.label}), but {what}: a draft trained on those "
        f"gets other layers there. What would work: {applied.note or 'another engine'}.",
    )


def _both_keys(
    top: list[int], nested: list[int], L: int | None, family: str | None
) -> tuple[list[int], list[int]] | None:
    """The layers the engine that reads the top-level key first (vLLM) takes from the top-level ids and
    the one that reads only the nested key (SGLang) takes from the nested ones, when they differ."""
    b_top = _safe_reading(top, _reader_of(KEYS_TOP), L, None)
    b_sg = _safe_reading(nested, _reader_of(KEYS_NESTED), L, family)
    if b_top is None or b_sg is None or sorted(set(b_top)) == sorted(set(b_sg)):
        return None
    return sorted(set(b_top)), sorted(set(b_sg))


def _reader_of(key_check: str) -> str:
    """The engine whose profile runs the key check ``key_check`` (:attr:`EngineInfo.key_check`)."""
    return next(k for k, e in conv.ENGINE_INFO.items() if e.key_check == key_check)


def _safe_reading(
    ids: Sequence[int], engine: str, L: int | None, family: str | None, version: str | None = None
) -> list[int] | None:
    try:
        return boundaries_read(ids, engine, L, family, version)
    except InputError:
        return None


def _sorted(c: CheckInput) -> Finding:
    ids, engine = c.written, c.ids.engine
    if c.ids.fallback or not ids or ids == sorted(ids):
        return _ok("the ids are in ascending order")
    title = conv.rule(engine).title
    b = _safe_reading(ids, engine, c.num_layers, c.family, c.version) or []
    if b and as_written(ids, engine, num_layers=c.num_layers, model_family=c.family, version=c.version, kind=c.kind):
        return _ok(
            f"{ids} is written with id {ids[0]} first, as {conv.applied(engine, c.family, c.version).label} "
            f"needs for B1 (id 1 first would add 1 to every id); {title} captures "
            f"{boundary_list(sorted(set(b)), c.num_layers)} in layer order"
        )
    return _fail(
        ERROR,
        f"{ids} is not ascending: {title} captures in layer order, so its slots hold B{sorted(set(b))} while "
        f"the list names B{b}; a trainer that concatenated in list order fed the draft's fc permuted blocks. "
        f"Write them ascending ({sorted(ids)}) after checking the training order with hsdiff compare.",
    )


def _unique(c: CheckInput) -> Finding:
    ids, engine = c.written, c.ids.engine
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if c.ids.fallback or not dup:
        return _ok("no id is repeated")
    title = conv.rule(engine).title
    return _fail(
        ERROR,
        f"{ids} repeats {dup}: {title} captures each layer once, so it delivers {len(set(ids))} slots where "
        f"the list (and the draft's fc) has {len(ids)}. Remove the duplicates and retrain or fix the list.",
    )


def _count(c: CheckInput) -> Finding:
    """A trainer that takes an exact number of ids (SpecForge: three, its profile cites the source); the
    engines take any number, sized by the draft's fc."""
    info = conv.rule(c.ids.engine)
    n = info.id_count
    if not n or c.ids.fallback or len(c.written) == n:
        return _ok(f"{len(c.written)} ids")
    words = _NUMBERS.get(n, str(n))
    return _fail(
        ERROR,
        f"{c.written} has {len(c.written)} ids, but {info.title} takes exactly {words} (it raises "
        f"ValueError before capturing anything): capture the training data with {words} layers, or with "
        "another trainer",
    )


_NUMBERS = {2: "two", 3: "three", 4: "four"}


def _in_range(c: CheckInput) -> Finding:
    ids, reading, engine, L = c.written, c.reading, c.ids.engine, c.num_layers
    if L is None:
        return _ok("skipped: the target's num_hidden_layers is unknown (pass --target-config)", skipped=True)
    final = conv.applied(engine, c.family, c.version, c.kind).names_final
    bad = [(i, b) for i, b in zip(ids, reading) if b < 0 or b > L and not (final and b == conv.final_boundary(L))]
    if not bad:
        return _ok(f"every id names a boundary within 0..{L}")
    title = conv.rule(engine).title
    what = ", ".join(f"id {i} → B{b}" for i, b in bad)
    return _fail(
        ERROR,
        f"{what}: outside 0..{L} for the {L}-layer target as {title} counts. Check the ids against the "
        "target's num_hidden_layers and the engine's convention (`hsdiff ids --explain`).",
    )


def _capturable(c: CheckInput) -> Finding:
    ids, reading, engine, L, family = c.written, c.reading, c.ids.engine, c.num_layers, c.family
    if L is None:
        return _ok("skipped: the target's num_hidden_layers is unknown (pass --target-config)", skipped=True)
    title = conv.rule(engine).title
    applied = conv.applied(engine, family, c.version, c.kind)
    inside = [(i, b) for i, b in zip(ids, reading) if 0 <= b <= L or (applied.names_final and b == L + 1)]
    served = serve([b for _, b in inside], engine, num_layers=L, model_family=family, version=c.version, kind=c.kind)
    lost = {b: o for o in served.obstacles if o.kind == "uncapturable" for b in o.boundaries}
    bad = [(i, b) for i, b in inside if b in lost]
    if not bad:
        return _ok(f"every boundary is one {title} can capture")
    what = ", ".join(f"id {i} → B{b}" if b <= L else f"id {i} (the final post-norm state)" for i, b in bad)
    why = " ".join(dict.fromkeys(lost[b].sentence() for _, b in bad))
    return _fail(
        ERROR,
        f"{what}: the slot stays empty or the engine raises (the fc concat fails or the draft gets "
        f"garbage, as in SGLang #32334). {why}",
    )


def _embeddings(c: CheckInput) -> Finding:
    ids, reading, engine = c.written, c.reading, c.ids.engine
    slots = [j for j, b in enumerate(reading) if b == 0]
    if not slots:
        return _ok("no slot receives the embeddings")
    i = ids[slots[0]]
    return _fail(
        WARNING,
        f"id {i} makes {conv.rule(engine).title} feed the embeddings (B0) into a slot; EAGLE-3 drafts are "
        "trained on decoder-layer outputs, and ids like [-1, 2, 30] (the case behind hsdiff) shift every "
        "slot by one. Confirm with hsdiff gate on real dumps.",
    )


def _family_rule(c: CheckInput) -> Finding:
    ids, engine, L, family, src = c.written, c.ids.engine, c.num_layers, c.family, c.family_source
    if conv.rule(engine).family_rule != FAMILY_READING or not ids:
        return _ok("no model-family rule changes how these ids are read")
    applied = conv.applied(engine, family, c.version)
    if applied.reading not in ("deepseek", "gpt-oss"):
        return _ok(f"no model-family rule changes how these ids are read ({applied.label})")
    own = _safe_reading(ids, engine, L, family, c.version)
    plain = [i + 1 for i in ids]
    if applied.reading == DEEPSEEK:
        rule_text = "adds 1 only when the first id is 1"
    else:
        rule_text = f"uses the ids as boundary indices when their maximum is num_hidden_layers ({L})"
    where = f"{applied.label}, {src}"
    if own is None or own == plain:
        return _ok(f"{where}: {rule_text}, so {ids} are shifted by +1 as under the llama rule, B{plain}")
    return _fail(
        WARNING,
        f"{where}: {rule_text}, so {ids} are used as they are: B{own}. Read as layer outputs (+1), as "
        f"the llama rule and older SGLang versions do, they name B{plain}: a draft trained through the other "
        f"reading gets every slot one layer off. Check which layers it was trained on (hsdiff gate) before "
        f"deploying. Source: {applied.source}",
    )


def _target_hidden(c: CheckInput) -> Finding:
    target_hidden = c.target_hidden
    draft_th = c.config.get("target_hidden_size")
    if target_hidden is None or draft_th is None:
        return _ok("skipped: needs the draft's target_hidden_size and the target's hidden_size", skipped=True)
    if int(draft_th) == int(target_hidden):
        return _ok(f"target_hidden_size {draft_th} equals the target's hidden_size")
    return _fail(
        ERROR,
        f"the draft's target_hidden_size is {draft_th} but the target's hidden_size is {target_hidden}: this "
        "draft was built for another target model.",
    )


def _fc(c: CheckInput) -> Finding:
    config, ids, engine, path = c.config, c.ids, c.ids.engine, Path(c.path)
    h = c.target_hidden or config.get("target_hidden_size") or config.get("hidden_size")
    if not h or not ids.boundaries:
        return _ok("skipped: the target hidden size is unknown (pass --target-config)", skipped=True)
    h = int(h)
    title = conv.rule(engine).title
    slots = len(ids.boundaries)
    feeds = slots * h
    width, how = fc_width(config, engine, path, c.version, _weight_shapes)
    if width is None:
        return _ok(
            f"skipped: no draft weights beside {path.name} and {title} does not size the fc from the draft config",
            skipped=True,
        )
    built, built_how = built_fc_width(config, engine, c.version)
    weights = (width, how) != (built, built_how)  # the width was read from fc.weight
    trained = width // h if width % h == 0 else None
    if built is not None and built != width:
        if width == feeds:  # the ids fit the weights: the config sizes the fc wrong
            fix = f"The {slots} ids fit the weights: {_resize(c, slots)}."
        else:
            fix = _fc_fix(c, slots, trained, h, weights=True)
        return _fail(
            ERROR,
            f"the draft's fc takes {width} inputs ({how}) but {built_how} = {built}: loading the weights fails"
            + ("" if width == feeds else f", and {slots} slots would not fit them either")
            + f". {fix}",
        )
    if width == feeds:
        return _ok(f"the draft's fc takes {width} inputs = {slots} slots × {h} ({how})")
    return _fail(
        ERROR,
        f"the draft's fc takes {width} inputs ({how}) but {title} feeds it {slots} slots × {h} = {feeds}: the "
        f"matmul fails at load or first request. {_fc_fix(c, slots, trained, h, weights=weights)}",
    )


def _fc_fix(c: CheckInput, slots: int, trained: int | None, h: int, *, weights: bool) -> str:
    """How to make ``slots`` ids fit an fc of ``trained`` slots: as many ids as the fc has slots (and an fc
    the engine builds that wide); when the width comes from the config alone, the draft may instead have
    been trained on ``slots``, and its fc.weight says which."""
    if trained is None:
        return (
            f"Its width is not a multiple of the target hidden size {h}: the draft was built for another target model."
        )
    which = "the layers the draft was trained on (its training config, or hsdiff compare on dumps, says which)"
    if slots > trained:
        ids = f"Configure {trained} ids, as many as the fc has slots: keep {which} and drop the other {slots - trained}"
    else:
        ids = f"Configure {trained} distinct ids, as many as the fc has slots: {which}"
    if weights:
        resize = _resize(c, trained) if _built_for(c, trained) != trained * h else ""
        return f"{ids}{f'; and {resize}' if resize else ''}."
    if slots < len(c.ids.ids):  # repeated ids: the list the fc was sized by is not what the draft needs
        return f"{ids}."
    return (
        f"{ids}; or, if the draft was trained on {slots} slots, {_resize(c, slots)}. The fc.weight in the "
        "draft's safetensors says which: put them beside the config and run this again."
    )


def _resize(c: CheckInput, n: int) -> str:
    """What makes the engine build the fc for ``n`` slots (:attr:`~hsdiff.rules.profile.EngineInfo.fc_rule`)."""
    info = conv.rule(c.ids.engine)
    ver = conv.parse_version(info.key, c.version)
    if info.fc_three_before and conv.version_tuple(ver) < conv.version_tuple(info.fc_three_before):
        return (
            f"serve it with {info.title} ≥ {info.fc_three_before}: {info.title} {ver} builds the fc for 3 slots "
            "whatever the config says"
        )
    return f"set num_aux_hidden_states to {n}"


def _built_for(c: CheckInput, n: int) -> int | None:
    """The fc width the engine would build once the key it reads ids from holds ``n`` of them."""
    config = c.config
    if c.ids.key:
        config = copy.deepcopy(config)
        *parents, last = c.ids.key.split(".")
        node = config
        for k in parents:
            node = node.setdefault(k, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node[last] = list(range(n))
    return built_fc_width(config, c.ids.engine, c.version)[0]


def _draft_kind(c: CheckInput) -> Finding:
    """The draft kind the ids were read for, and the EAGLE-3.1 norms its config switches on."""
    kind = conv.draft_kind(c.kind)
    stated = conv.kind_from_config(c.config)
    nested = c.config.get("eagle_config")
    eagle: dict[str, Any] = nested if isinstance(nested, dict) else {}
    flags = [f"{f} ({what})" for f, what in EAGLE31_FLAGS.items() if c.config.get(f) or eagle.get(f)]
    said = f"; norms: {', '.join(flags)}" if flags else ""
    lost = _norms_not_read(c, eagle)
    if lost:
        return _fail(WARNING, lost)
    if stated.key != kind.key:
        return _fail(
            WARNING,
            f"the ids were read for draft kind {kind.title} (--draft-kind), but the config's "
            f"architectures say {stated.title}{said}: an engine picks its method from the draft, so check "
            "which it is",
        )
    archs = ", ".join(map(str, c.config.get("architectures") or [])) or "no architectures"
    return _ok(f"draft kind {kind.title} ({archs}){said}")


def _norms_not_read(c: CheckInput, eagle: dict[str, Any]) -> str:
    """What the config sets of the EAGLE-3.1 norms where this engine does not read it ("" nothing): the draft
    then runs without a norm it was trained with, and the weights of that norm are not loaded."""
    on = draft_norms(c.config, c.ids.engine)
    rows = {n.name: n for n in DRAFT_NORMS.get(conv.rule(c.ids.engine).key, DRAFT_NORMS["sglang"])}
    lost = []
    for name, n in rows.items():
        flags = {"fc_norm": ("fc_norm", "use_aux_norm")}.get(name, (name,))
        set_ = [
            f"{where}{f}" for f in flags for where, node in (("", c.config), ("eagle_config.", eagle)) if node.get(f)
        ]
        if set_ and not on[name]:
            lost.append(f"{' and '.join(set_)} (its {name}; {n.source})")
    if not lost:
        return ""
    title = conv.rule(c.ids.engine).title
    return (
        f"{title} does not read {'; '.join(lost)}: it runs the draft without that norm and does not load its "
        "weights, so a draft trained with it drafts from other inputs. Write the flag where it reads it "
        "(fc_norm at the top level; norm_before_fc in eagle_config or at the top level)."
    )


def _silent_fallback(c: CheckInput) -> Finding:
    """An engine that finds no ids where it reads them takes its default layers without a word: loud here,
    above all when the ids sit in a key that only another engine reads."""
    if not c.ids.fallback:
        return _ok(f"{conv.rule(c.ids.engine).title} finds the ids in {c.ids.key or 'no key'}")
    if conv.applied(c.ids.engine, c.family, c.version, c.kind).fixed:
        return _ok(f"{conv.rule(c.ids.engine).title} reads no ids at all (ignored-key judges the config's)")
    title = conv.rule(c.ids.engine).title
    covered = (conv.TOP_KEY, conv.NESTED_KEY) if c.eagle3 else ()  # the ignored-key check speaks of these two
    elsewhere = [
        (k, v)
        for k in conv.id_keys(c.kind)
        if k not in covered and _is_int_list(v := config_value(c.config, k)[1]) and v
    ]
    default = conv.kind_default(c.ids.engine, c.kind)
    what = f" ({default})" if default else ""
    if elsewhere:
        held = ", ".join(f"{conv.key_name(k)} = {v}" for k, v in elsewhere)
        readers = sorted({e for k, _ in elsewhere for e in conv.readers_of(k, c.kind)} - {c.ids.engine})
        by = (
            f", which {', '.join(conv.rule(e).title for e in readers)} read{'s' if len(readers) == 1 else ''}"
            if readers
            else ""
        )
        return _fail(
            ERROR,
            f"{title} reads none of the keys holding ids ({held}{by}): it silently captures its "
            f"default layers{what}, and the draft gets other layers than it was trained on. Write the ids "
            f"where {title} reads them (`hsdiff fix-config --engine {c.ids.engine}`).",
        )
    judged = [conv.key_name(k) for k in covered if _is_int_list(v := config_value(c.config, k)[1]) and v]
    if judged:
        return _ok(f"the ids sit in {' and '.join(judged)}, which the ignored-key check judges")
    return _ok(
        f"no key of the draft config holds ids, so nothing sits where only another engine looks (ids-source "
        f"warns of {title}'s fallback)"
    )


def _weight_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Tensor shapes from a safetensors header, read by the readers' validating parser; ``{}`` when
    the file is missing or damaged (the fc-width check is then skipped, not failed)."""
    from ..readers._container import open_table

    try:
        table = open_table(path, "safetensors")
    except (HsdiffError, OSError):
        return {}
    return {name: entry.shape for name, entry in table.entries.items()}


#: The checks in the order they run and are reported; the names are the stable JUnit testcase names.
CHECKS: tuple[tuple[str, Callable[[CheckInput], Finding]], ...] = (
    ("ids-source", _source),
    ("ignored-key", _ignored_key),
    ("ids-sorted", _sorted),
    ("ids-unique", _unique),
    ("ids-in-range", _in_range),
    ("ids-capturable", _capturable),
    ("ids-embeddings", _embeddings),
    ("family-rule", _family_rule),
    ("target-hidden-size", _target_hidden),
    ("fc-width", _fc),
    ("ids-count", _count),  # added after the others: the names before it keep their places in JUnit
    ("draft-kind", _draft_kind),
    ("silent-fallback", _silent_fallback),
)
#: The checks that only an EAGLE-3 draft's config answers (its two keys, fc, family rules, SpecForge's count).
EAGLE3_ONLY = ("ignored-key", "family-rule", "fc-width", "ids-count")
CHECK_NAMES: tuple[str, ...] = tuple(name for name, _ in CHECKS)
