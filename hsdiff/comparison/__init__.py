"""``compare``: from two dumps to a :class:`~hsdiff.model.Report`, as a pipeline of named steps.

Data flows one way: read both sides (:mod:`hsdiff.readers`) → :mod:`.shape` (L and H) →
:mod:`.slots` (training tensors cut into slots, inference captures labelled) → :mod:`.scoring`
(every slot against every capture, with :mod:`.validate` on each tensor read) →
:mod:`hsdiff.decide` (what each slot is, against labels and configuration; verdict; ids) →
:mod:`hsdiff.explain` (the words).
"""

from __future__ import annotations

import dataclasses
import logging
import numbers
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import decide, diagnose, explain, overrides
from ..configs import load_config
from ..errors import AlignmentError, InputError
from ..model import INFER, TRAIN, Dump, Report, Settings
from ..readers import scan
from ..rules import conventions as conv
from ..rules.settings import settings_for
from . import norms, printed, profiles, scoring, shape, slots, tags, validate

__all__ = ["compare", "Options", "options_with", "read_infer"]

log = logging.getLogger("hsdiff")

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Options:
    """Everything ``compare`` can be told; the CLI options map one to one. Frozen: derive a variant
    with ``dataclasses.replace(options, engine="vllm")``."""

    layer_ids: Sequence[int] | None = None
    engine: str = "sglang"
    model_family: str | None = None
    infer_index: str = "boundary"
    train_index: str = "boundary"
    hidden_size: int | None = None
    num_layers: int | None = None
    model_config: str | None = None
    train_layer_ids: Sequence[int] | None = None
    train_engine: str = "specforge"
    train_format: str | None = None
    infer_format: str | None = None
    tolerance: float = decide.NOISE_TOLERANCE
    configured_source: str = "--layer-ids"
    engine_version: str | None = None  # of ``engine``; None: the newest the convention table knows
    train_engine_version: str | None = None  # of ``train_engine`` (SpecForge: the SGLang it captures through)
    engine_versions: Sequence[str] = ()  # every --engine-version as given (other engines' versions: by_engine)
    model_family_source: str | None = None  # where the model family came from (default: the option, else llama)
    vllm_runner: str | None = None  # the gate's vLLM runner, recorded in the settings
    draft_kind: str | None = None  # the draft kind whose rows read the ids (hsdiff.rules.kinds); None: EAGLE-3
    #: the boundaries the engine captures for ``layer_ids``, when the caller read them itself (the gate: by the
    #: key they sit in, vLLM's DFlash keys + 1); None: read from ``layer_ids`` with the engine's rule
    configured_boundaries: Sequence[int] | None = None
    log_pattern: str | None = None
    progress: Progress | None = field(default=None, repr=False, compare=False)


def compare(
    train: str | os.PathLike | Dump,
    infer: str | os.PathLike | Dump,
    options: Options | None = None,
    *,
    layer_ids: Sequence[int] | str | None = None,
    engine: str | None = None,
    engine_version: str | None = None,
    model_family: str | None = None,
    model_config: str | os.PathLike | None = None,
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
) -> Report:
    """Compare a training-side dump with an inference-side dump.

    Each keyword argument is the :class:`Options` field of that name and, when given (not None), overrides
    it in ``options`` (which is not changed); ids may be a list or a string such as ``"-1,2,30"``.

    >>> report = compare("fixtures/seed/train", "fixtures/seed/infer-wrong", layer_ids=[-1, 2, 30])  # doctest: +SKIP
    >>> report.verdict, report.recommended.ids
    ('mismatch', (2, 30, 58))
    """
    opts = options_with(
        options,
        layer_ids=layer_ids,
        engine=engine,
        engine_version=engine_version,
        model_family=model_family,
        model_config=None if model_config is None else os.fspath(model_config),
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
    info = conv.ENGINE_INFO.get(opts.engine)  # the engine whose table of model families names the rule key
    family = conv.normalize_family(opts.model_family) if info and info.family_table else (opts.model_family or "llama")
    train_dump = (
        train
        if isinstance(train, Dump)
        else scan(
            train,
            TRAIN,
            fmt=opts.train_format,
            index=opts.train_index,
            progress=_reading(opts, "training"),
            format_name="train_format",
        )
    )
    return _pipeline(train_dump, read_infer(infer, opts), opts, family, str(train), str(infer))


def read_infer(infer: str | os.PathLike | Dump, opts: Options) -> Dump:
    """The inference side: ``infer`` itself when it is a :class:`Dump`, else what its files hold, read as
    ``opts`` say (format, index, log pattern, progress)."""
    if isinstance(infer, Dump):
        return infer
    return scan(
        infer,
        INFER,
        fmt=opts.infer_format,
        index=opts.infer_index,
        progress=_reading(opts, "inference"),
        log_pattern=opts.log_pattern,
        format_name="infer_format",
    )


def options_with(options: Options | None, **given: Any) -> Options:
    """``options`` (default: ``Options()``) with each field named in ``given`` replaced, unless its value is
    None (not given: the field stays); ids may be a list or a string such as ``"-1,2,30"``."""
    return _options(options, {k: v for k, v in given.items() if v is not None})


def _options(options: Options | None, kwargs: dict[str, Any]) -> Options:
    opts = options or Options()
    for k in ("layer_ids", "train_layer_ids"):
        if isinstance(kwargs.get(k), str):
            kwargs[k] = conv.parse_ids(kwargs[k], what=k)
        elif kwargs.get(k) is not None:
            kwargs[k] = _int_list(kwargs[k], k)
    opts = dataclasses.replace(opts, **kwargs)
    conv.rule(opts.engine)
    for name, value in (("infer_index", opts.infer_index), ("train_index", opts.train_index)):
        if value not in (conv.BOUNDARY, conv.OUTPUT):
            raise InputError(f"`{name}` must be 'boundary' or 'output', not {value!r}", options=(name,))
    return opts


def _int_list(value: Any, name: str) -> list[int]:
    """``value`` as a list of ints; a TypeError naming ``name`` and the accepted types otherwise."""
    items = list(value) if isinstance(value, Sequence) else None
    if items is None or not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in items):
        raise TypeError(f'{name} must be a list of ints or a string such as "1,14,26", not {value!r}')
    return [int(i) for i in items]


def _reread_connector(root: str, rel: str) -> Dump | None:
    """One inference file read again in vLLM's connector layout (None if it is not on disk)."""
    base = Path(root)
    path = base / rel if base.is_dir() else base
    if not path.is_file():
        return None
    return scan(path, INFER, fmt="vllm", format_name="infer_format")


def _reading(opts: Options, side: str) -> Callable[[int, int, Path], None] | None:
    progress = opts.progress
    if progress is None:
        return None
    return lambda i, n, path: progress(f"reading {side} files", i + 1, n)


def _pipeline(train: Dump, infer: Dump, opts: Options, family: str, train_path: str, infer_path: str) -> Report:
    model_cfg = load_config(opts.model_config) if opts.model_config else None
    infer = shape.layout(
        infer,
        train,
        opts.num_layers,
        model_cfg,
        opts.layer_ids,
        opts.infer_format is not None,
        lambda rel: _reread_connector(infer_path, rel),
    )
    by_run = slots.runs(infer)
    if not by_run:
        return _compare(train, infer, opts, family, train_path, infer_path, model_cfg)
    reports: dict[str, Report] = {}
    failed: list[AlignmentError] = []
    for run, dump in by_run.items():
        try:
            reports[run] = _compare(train, dump, opts, family, train_path, infer_path, model_cfg)
        except AlignmentError as e:  # a run without usable captures: the others may have them
            failed.append(e)
    if not reports:
        raise failed[0]
    run, warning = slots.pick_run(reports)
    chosen = reports[run]
    reports[run] = dataclasses.replace(
        chosen,
        warnings=(warning, *chosen.warnings),
        diagnosis=dataclasses.replace(chosen.diagnosis, run=run) if chosen.diagnosis is not None else None,
    )
    doubt = slots.unsettled_by_runs(reports, run)
    if all(r.verdict == reports[run].verdict for r in reports.values()) and not doubt:
        return reports[run]
    settings = reports[run].settings
    assert settings is not None
    return dataclasses.replace(
        overrides.runs_disagree(reports, run, doubt, settings), cause=explain.runs_disagree(reports, run)
    )


def _compare(
    train: Dump, infer: Dump, opts: Options, family: str, train_path: str, infer_path: str, model_cfg: dict | None
) -> Report:
    warnings = list(train.warnings) + list(infer.warnings)
    train, w_train = validate.with_values(train, "training", train_path)
    infer, w_infer = validate.with_values(infer, "inference", infer_path) if infer.captures else (infer, [])
    infer, w_joined = slots.join_rank_parts(infer, train)
    infer, w_tags = tags.arbitrate(infer)
    warnings += w_train + w_infer + w_joined + w_tags

    num_layers, layers_from = shape.num_layers(opts.num_layers, model_cfg, train, infer)
    hidden, hidden_from = shape.hidden_size(opts.hidden_size, model_cfg, train, infer, opts.layer_ids)
    settings = settings_of(opts, family, num_layers, layers_from, hidden, hidden_from)
    configured = slots.configured(
        opts.layer_ids,
        opts.engine,
        family,
        opts.configured_source,
        num_layers,
        opts.engine_version,
        opts.draft_kind,
        opts.configured_boundaries,
    )
    train_slots = slots.label_final(slots.split_train(train, hidden), num_layers)
    k = len(train_slots)
    finals = slots.final_slots(train_slots)
    infer, w_concat = printed.concatenated(infer, train_slots, hidden, configured, opts.tolerance)
    labelled, w_label = slots.label_infer(infer, hidden, configured)
    warnings += w_concat + w_label
    usable = slots.with_final(labelled, num_layers)
    if not usable and not infer.norm_prints:
        widths = sorted({c.width for c in infer.captures if c.width})
        raise AlignmentError(
            f"the inference side holds no capture of width {hidden} (or a multiple of it); widths found: {widths}",
            path=infer_path,
            hint="check `hidden_size`, or that INFER is the inference-side dump",
            options=("hidden_size",),
        )

    claims, claim_src = slots.claims(
        k,
        train_slots,
        train,
        opts.train_layer_ids,
        opts.train_engine,
        num_layers,
        opts.model_family,
        opts.train_engine_version,
        opts.draft_kind,
    )
    named = _named(k, configured.boundary_indices if configured else (), claims)
    scores = scoring.score_all(train_slots, usable, opts.tolerance, opts.progress, verify=named)
    warnings += scores.warnings
    decisions = [decide.decide_slot(s, scores.candidates.get(s, []), opts.tolerance, num_layers) for s in range(k)]
    warnings += validate.training_set(train_slots, train)

    resolution = decide.resolve(
        decisions,
        claims,
        claim_src,
        configured,
        scores.candidates,
        opts.tolerance,
        opts.engine,
        family,
        num_layers,
        opts.engine_version,
        finals,
    )
    warnings += resolution.warnings
    results = resolution.slots
    found_miss = diagnose.miss(results, configured, scores.candidates, num_layers, family)
    if found_miss is not None and configured is not None:
        results = diagnose.with_miss(
            results, found_miss, configured, opts.engine, family, num_layers, opts.engine_version
        )
    results = diagnose.with_slot_shift(results, configured)
    warnings += explain.norm_warnings(results)
    recommended, w_rec = decide.recommend(settings, decide.to_recommend(results), finals)
    warnings += w_rec
    verdict = decide.verdict(results, configured, recommended)
    diagnosis = diagnose.diagnose(verdict, results, configured, recommended, found_miss)
    found = overrides.torn_tokens(overrides.Found(verdict, diagnosis), results, opts.tolerance)
    found = overrides.rank_conflict(found, train.rank_conflicts + infer.rank_conflicts)
    found = overrides.slot_count(found, configured, k)
    found = overrides.undescribed(found, results, resolution.label_offset)
    if not usable:
        found = overrides.norms_only(
            found, norms.findings(train_slots, infer.norm_prints, opts.tolerance), opts.tolerance
        )
    words = explain.explain(
        results,
        verdict,
        found.diagnosis,
        configured,
        claims,
        claim_src,
        resolution.label_offset,
        recommended,
        num_layers,
        printed_evidence=any(c.is_partial for c in infer.captures),
        tolerance=opts.tolerance,
    )
    verdict, diagnosis = found
    report = Report(
        verdict=verdict,
        cause=words.cause,
        slots=results,
        recommended=recommended,
        configured=configured,
        diagnosis=diagnosis,
        num_layers=num_layers,
        hidden_size=hidden,
        explanation=words.walkthrough,
        warnings=tuple(dict.fromkeys(warnings)),
        scores=scores.rows,
        inputs={"train": train_path, "infer": infer_path, "engine": opts.engine, "model_family": family},
        tolerance=opts.tolerance,
        settings=settings,
    )
    return profiles.measure(report, train_slots, usable, scores.norms, scores.errors)  # what the pictures draw


def settings_of(
    opts: Options, family: str, num_layers: int | None, layers_from: str, hidden: int, hidden_from: str
) -> Settings:
    """The record of what a comparison's answers rest on (:mod:`hsdiff.rules.settings`): ``opts`` with the
    resolved ``family``, and the depth and width with where each came from."""
    source = opts.model_family_source or (
        f"--model-family {opts.model_family}" if opts.model_family else "the default llama rule"
    )
    return settings_for(
        opts.engine,
        opts.engine_version,
        family,
        source,
        opts.engine_versions,
        train_engine=opts.train_engine,
        train_version=opts.train_engine_version,
        infer_index=opts.infer_index,
        train_index=opts.train_index,
        tolerance=opts.tolerance,
        num_layers=num_layers,
        num_layers_source=layers_from,
        hidden_size=hidden,
        hidden_size_source=hidden_from,
        vllm_runner=opts.vllm_runner,
        kind=opts.draft_kind,
    )


def _named(k: int, configured: Sequence[int | None], claims: Sequence[int | None]) -> dict[int, set[int]]:
    """Per training slot, the boundaries the configured ids and the training labels name for it (verified
    in full on large dumps whatever their sampled error); configured ids beyond the slots name a
    boundary for every slot."""
    extra = {b for b in configured[k:] if b is not None}
    return {s: extra | {b for b in (_at(configured, s), _at(claims, s)) if b is not None} for s in range(k)}


def _at(seq: Sequence[int | None], i: int) -> int | None:
    return seq[i] if i < len(seq) else None
