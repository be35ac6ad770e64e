"""The pre-deployment gate: read the layer ids where the engine really reads them, check the draft
config for the known traps, then prove with :func:`hsdiff.comparison.compare` that the engine feeds the
draft the hidden states it was trained on.

This module only orchestrates; each step lives in a module of its own and is usable alone:

* :func:`hsdiff.configs.read_ids` — the ids an engine takes from a draft ``config.json``, falling
  back to the engine's default exactly as the engine does, and recording that it did (a silent
  fallback is a known failure, vLLM #50170);
* :func:`hsdiff.gate.checks.static_checks` — the :class:`~hsdiff.model.gate.Check` records that need no
  dumps (the table :data:`hsdiff.gate.checks.CHECKS`);
* :func:`run_gate` — both of the above plus the value comparison, as one
  :class:`~hsdiff.model.gate.GateResult`; :func:`check_config` — the first two alone.

Example::

    >>> result = run_gate("fixtures/seed/train", "fixtures/seed/infer-wrong",
    ...                   "fixtures/seed/draft-wrong/config.json",
    ...                   target_config="fixtures/seed/model/config.json")   # doctest: +SKIP
    >>> result.verdict, result.exit_code
    ('fail', 1)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..comparison import Options, Progress, compare, options_with
from ..configs import load_config, load_draft, read_ids, target_shape
from ..errors import InputError
from ..fingerprint import check, is_fingerprint
from ..fingerprint import load as load_fingerprint
from ..model import Settings
from ..model.gate import Check, GateResult, IdsSource
from ..rules import conventions as conv
from ..rules.settings import settings_for
from .checks import static_checks

__all__ = ["check_config", "run_gate"]


@dataclass(frozen=True)
class _Setup:
    config: dict[str, Any]
    path: Path
    num_layers: int | None
    hidden_size: int | None
    family: str | None
    family_source: str | None
    version: str
    layers_source: str
    hidden_source: str


def _setup(
    draft_config: str | os.PathLike,
    target_config: str | os.PathLike | None,
    engine: str,
    model_family: str | None,
    num_layers: int | None,
    hidden_size: int | None,
    engine_version: str | None,
    recorded: tuple[int, int] | None = None,
) -> _Setup:
    """``recorded``: the depth and width a fingerprint given as the training side holds (used when neither the
    options nor the target config say them)."""
    cfg, path = load_draft(draft_config)
    target = target_shape(load_config(target_config) if target_config else None)
    fp_L, fp_H = recorded or (None, None)
    L = num_layers or target.num_layers or fp_L
    H = hidden_size or target.hidden_size or fp_H
    layers_source = (
        "--num-layers"
        if num_layers
        else "--target-config"
        if target.num_layers
        else "the fingerprint"
        if fp_L
        else "not known"
    )
    hidden_source = (
        "--hidden-size"
        if hidden_size
        else "--target-config"
        if target.hidden_size
        else "the fingerprint"
        if fp_H
        else "not known"
    )
    family, source = None, None
    version = conv.parse_version(engine, engine_version)
    if conv.rule(engine).family_rule:  # the engines whose reading depends on the model family
        if model_family:
            family, source = conv.normalize_family(model_family), f"--model-family {model_family}"
        elif target.model_type:
            family, source = target.family, f"target model_type {target.model_type}"
        else:
            family, source = "llama", "the default llama rule"
        if conv.rule(engine).family_for(family, own_row=True) is None:
            family, source = None, None  # on vLLM only DeepSeek models read differently (no id 0)
    return _Setup(cfg, path, L, H, family, source, version, layers_source, hidden_source)


def _runner_of(engine: str, vllm_runner: str) -> str | None:
    return vllm_runner if conv.rule(engine).runners else None


def _static_settings(
    s: _Setup, engine: str, given: Sequence[str], vllm_runner: str, kind: str | None = None
) -> Settings:
    """The settings of a result with no comparison (check-config, or a gate that stopped before comparing)."""
    return settings_for(
        engine,
        s.version,
        s.family,
        s.family_source or "the default llama rule",
        given,
        num_layers=s.num_layers,
        num_layers_source=s.layers_source,
        hidden_size=s.hidden_size,
        hidden_size_source=s.hidden_source,
        vllm_runner=_runner_of(engine, vllm_runner),
        kind=kind,
    )


def _checked(s: _Setup, engine: str, vllm_runner: str, kind: str | None = None) -> tuple[IdsSource, list[Check]]:
    ids = read_ids(
        s.config,
        engine,
        path=s.path,
        num_layers=s.num_layers,
        model_family=s.family,
        vllm_runner=vllm_runner,
        version=s.version,
        kind=kind,
    )
    checks = static_checks(
        s.config,
        ids,
        path=s.path,
        num_layers=s.num_layers,
        target_hidden=s.hidden_size,
        model_family=s.family,
        vllm_runner=vllm_runner,
        family_source=s.family_source,
        version=s.version,
    )
    return ids, checks


def check_config(
    draft_config: str | os.PathLike,
    *,
    engine: str = "sglang",
    target_config: str | os.PathLike | None = None,
    model_family: str | None = None,
    vllm_runner: str = conv.DEFAULT_RUNNER,
    num_layers: int | None = None,
    hidden_size: int | None = None,
    strict: bool = False,
    engine_version: str | None = None,
    engine_versions: Sequence[str] = (),
    draft_kind: str | None = None,
) -> GateResult:
    """The static checks alone (``hsdiff check-config``); ``draft_kind`` None: the kind the draft config's
    architectures state.

    >>> check_config("fixtures/configs/unsorted.json",
    ...              target_config="fixtures/configs/targets/llama-61.json").verdict   # doctest: +SKIP
    'fail'
    """
    engine = conv.rule(engine).key
    _runner(vllm_runner)
    s = _setup(draft_config, target_config, engine, model_family, num_layers, hidden_size, engine_version)
    ids, checks = _checked(s, engine, vllm_runner, draft_kind)
    return GateResult(
        "check-config",
        str(s.path),
        None if target_config is None else str(target_config),
        engine,
        ids,
        tuple(checks),
        None,
        strict,
        s.num_layers,
        s.hidden_size,
        s.family,
        settings=_static_settings(s, engine, engine_versions, vllm_runner, ids.kind),
    )


def run_gate(
    train: str | os.PathLike,
    infer: str | os.PathLike,
    draft_config: str | os.PathLike,
    options: Options | None = None,
    *,
    target_config: str | os.PathLike | None = None,
    vllm_runner: str = conv.DEFAULT_RUNNER,
    strict: bool = False,
    engine: str | None = None,
    engine_version: str | None = None,
    model_family: str | None = None,
    num_layers: int | None = None,
    hidden_size: int | None = None,
    infer_index: str | None = None,
    train_index: str | None = None,
    train_layer_ids: Sequence[int] | str | None = None,
    train_engine: str | None = None,
    train_engine_version: str | None = None,
    train_format: str | None = None,
    infer_format: str | None = None,
    tolerance: float | None = None,
    draft_kind: str | None = None,
    log_pattern: str | None = None,
    progress: Progress | None = None,
) -> GateResult:
    """Read the ids from ``draft_config`` as ``options.engine`` does, run the static checks, then compare.

    ``options`` are :class:`~hsdiff.comparison.Options` (its ``layer_ids`` is replaced by the ids read from the
    config); ``target_config`` is the target model's ``config.json`` (gives L, H and the model family). The
    other keyword arguments are the :class:`~hsdiff.comparison.Options` fields of that name and, when given
    (not None), override them in ``options``. ``train`` may be a fingerprint (:mod:`hsdiff.fingerprint`),
    checked against every layer it holds.

    >>> result = run_gate("fixtures/seed/train", "fixtures/seed/infer-wrong",
    ...                   "fixtures/seed/draft-wrong/config.json", engine="sglang")  # doctest: +SKIP
    >>> result.verdict
    'fail'
    """
    opts = options_with(
        options,
        engine=engine,
        engine_version=engine_version,
        model_family=model_family,
        num_layers=num_layers,
        hidden_size=hidden_size,
        infer_index=infer_index,
        train_index=train_index,
        train_layer_ids=train_layer_ids,
        train_engine=train_engine,
        train_engine_version=train_engine_version,
        train_format=train_format,
        infer_format=infer_format,
        tolerance=tolerance,
        draft_kind=draft_kind,
        log_pattern=log_pattern,
        progress=progress,
    )
    engine = conv.rule(opts.engine).key
    _runner(vllm_runner)
    target_config = target_config or opts.model_config
    recorded = None
    if is_fingerprint(train) and not target_config:  # the fingerprint knows the target's depth and width
        held = load_fingerprint(train)
        recorded = (held.num_layers, held.hidden_size)
    s = _setup(
        draft_config,
        target_config,
        engine,
        opts.model_family,
        opts.num_layers,
        opts.hidden_size,
        opts.engine_version,
        recorded,
    )
    ids, checks = _checked(s, engine, vllm_runner, opts.draft_kind)
    blocking = [c for c in checks if c.failed and c.name in ("ids-in-range", "ids-source")]
    notes: list[str] = []
    report = None
    if blocking:
        notes.append(
            f"the comparison did not run: {blocking[0].name} failed, so the engine's captures cannot be labelled"
        )
    else:
        source = f"{s.path} [{ids.key}]" if ids.key else f"{conv.rule(engine).title}'s default (no ids in {s.path})"
        opts = replace(
            opts,
            engine=engine,
            layer_ids=list(ids.ids),
            model_family=s.family if s.family is not None else opts.model_family,
            engine_version=s.version,
            model_family_source=s.family_source,
            vllm_runner=_runner_of(engine, vllm_runner),
            model_config=None if target_config is None else str(target_config),
            configured_source=source,
            draft_kind=ids.kind,
            configured_boundaries=list(ids.boundaries),
        )
        report = (check if is_fingerprint(train) else compare)(train, infer, opts)
    settings = (
        report.settings
        if report is not None and report.settings is not None
        else _static_settings(s, engine, opts.engine_versions, vllm_runner, ids.kind)
    )
    return GateResult(
        "gate",
        str(s.path),
        None if target_config is None else str(target_config),
        engine,
        ids,
        tuple(checks),
        report,
        strict,
        s.num_layers,
        s.hidden_size,
        s.family,
        tuple(notes),
        {"train": str(train), "infer": str(infer)},
        settings,
    )


def _runner(vllm_runner: str) -> None:
    if vllm_runner not in conv.VLLM_RUNNERS:
        raise InputError(f"unknown vLLM runner {vllm_runner!r}", hint=f"choose one of: {', '.join(conv.VLLM_RUNNERS)}")
