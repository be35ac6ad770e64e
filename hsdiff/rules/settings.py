"""Decide the :class:`~hsdiff.model.settings.Settings` of a comparison or gate once, from the options
and the convention table: the version of every engine (the one given with ``--engine-version``, else
the newest the table knows) and the row each applies for the model family.

Every command that names ids (``compare``, ``gate``, ``check-config``, ``fix-config``, ``ids`` and the
acceptance prediction's what-if rows) reads the version of an engine from this record, so that one
engine never gets two answers in one report.

>>> s = settings_for("sglang", "0.5.12", "kimi_k25", "--model-family kimi_k25", ["sglang==0.5.12"])
>>> s.words()
'for SGLang 0.5.12, rule: SGLang ≤ 0.5.12, DeepSeek family (+1 always)'
>>> s.version_of("vllm").version
'0.33'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..errors import InputError
from ..model.capture import Index
from ..model.settings import EngineVersion, Settings
from . import conventions as conv

__all__ = ["engine_version", "assumed_versions", "settings_for", "for_kind", "family_key", "TITLES"]

#: engine key -> its name in sentences ("SGLang"), for reading settings back from JSON
TITLES: dict[str, str] = {e: conv.rule(e).title for e in conv.ENGINES}


def family_key(model_family: str | None) -> str:
    """The model-family rule key of ``model_family``; an unknown name is kept as given (only the engines
    with family rules refuse it, when they read ids)."""
    try:
        return conv.normalize_family(model_family)
    except InputError:
        return str(model_family)


def engine_version(engine: str, version: str | None, model_family: str | None = None) -> EngineVersion:
    """``engine`` at ``version`` (default: the newest known) and the row it applies for ``model_family``."""
    key = conv.rule(engine).key
    ver = conv.parse_version(key, version)
    fam = family_key(model_family)
    return EngineVersion(
        key, TITLES[key], ver, conv.applied(key, fam if fam in conv.MODEL_FAMILIES else None, ver).label
    )


def assumed_versions(
    engine: str,
    version: str | None,
    model_family: str | None,
    given: Sequence[str] = (),
    train_engine: str | None = None,
    train_version: str | None = None,
) -> tuple[EngineVersion, ...]:
    """The version assumed for every engine of the table: ``engine``'s own ``version``, the training
    engine's ``train_version``, and for the others the one ``given`` names (``vllm==0.31``), else the newest."""
    key = conv.rule(engine).key
    named = [v for v in given if "==" in v]
    out = []
    for e in conv.ENGINES:
        if e == key:
            v = version
        elif train_engine is not None and e == conv.rule(train_engine).key and train_version is not None:
            v = train_version
        else:
            v = conv.version_for(e, named)
        out.append(engine_version(e, v, model_family))
    return tuple(out)


def settings_for(
    engine: str,
    version: str | None,
    model_family: str | None,
    family_source: str,
    given: Sequence[str] = (),
    *,
    train_engine: str | None = None,
    train_version: str | None = None,
    infer_index: str = Index.BOUNDARY,
    train_index: str = Index.BOUNDARY,
    tolerance: float | None = None,
    num_layers: int | None = None,
    num_layers_source: str = "",
    hidden_size: int | None = None,
    hidden_size_source: str = "",
    vllm_runner: str | None = None,
    kind: str | None = None,
) -> Settings:
    """The :class:`Settings` record for these options (see the module's example); ``kind``: the draft kind whose
    rows read the ids (None: EAGLE-3), which names the rule of every engine."""
    own = engine_version(engine, version, model_family)
    if not given and own.version != conv.default_version(own.engine):  # a version given through the library
        given = (f"{own.engine}=={own.version}",)
    train = None if train_engine is None else engine_version(train_engine, train_version, model_family)
    k = conv.draft_kind(kind).key
    if conv.draft_kind(k).reading != conv.draft_kind(None).reading:
        own = for_kind(own, model_family, k)
        train = None if train is None else for_kind(train, model_family, k)
    return Settings(
        own,
        family_key(model_family),
        family_source,
        tuple(given),
        tuple(
            v if k == "eagle3" else for_kind(v, model_family, k)
            for v in assumed_versions(
                own.engine, own.version, model_family, given, train_engine, None if train is None else train.version
            )
        ),
        Index(infer_index),
        Index(train_index),
        train,
        tolerance,
        num_layers,
        num_layers_source,
        hidden_size,
        hidden_size_source,
        vllm_runner,
        draft_kind=k,
    )


def for_kind(at: EngineVersion, model_family: str | None, kind: str) -> EngineVersion:
    """``at`` naming the row it applies for a draft of ``kind`` (as it was where it has none for that kind)."""
    try:
        fam = family_key(model_family)
        fam_ = fam if fam in conv.MODEL_FAMILIES else None
        return replace(at, rule=conv.applied(at.engine, fam_, at.version, kind).label)
    except InputError:  # no rows of that kind: the caller's serving says so
        return at
