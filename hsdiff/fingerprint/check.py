"""An engine's captures checked against a fingerprint: the same :class:`~hsdiff.model.Report` as ``compare``.

Every capture the engine dumped (the aux tensor the draft receives, per-layer dumps, an all-layer stack)
is read as ``compare`` reads it (:mod:`hsdiff.readers`, labelled with the configured ids by
:mod:`hsdiff.comparison.slots`), placed among the fingerprint's probes by its token ids, projected with
the fingerprint's seed, and identified against *every* stored boundary (:mod:`.identify`); captures of
one engine slot from several requests are pooled. Then, per training slot (its boundary identified by
value when the fingerprint was recorded):

* ``ok`` when the capture the engine feeds that slot is its training boundary, every other boundary
  ruled out by the paired per-token test;
* ``mismatch`` when it is another boundary (or none of the target's), the ids to set recommended from the
  training boundaries as ``compare`` does (:func:`hsdiff.decide.recommend`, the engine's rule at its version);
* open (``inconclusive``) when the test cannot rule out a neighbour: more probe tokens settle it.

What the verdict, the diagnosis and the words are made of is :mod:`hsdiff.decide`, :mod:`hsdiff.diagnose` and
:mod:`hsdiff.explain`, as for ``compare``: every renderer and the gate work unchanged.

A fingerprint of another target is refused (:class:`WrongTargetError`, exit 2): by the target config
when one is given (depth, width, vocabulary), by its embedding rows when the target's weights sit beside
that config, and by the values when no capture equals any stored boundary. So is an inference side that
holds none of the probes' tokens (another tokenizer, or the probes were not sent), and a debug log's
printed columns, which a sketch of whole rows cannot be checked against.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import decide, diagnose, explain
from ..arrays import dtype_name, row_norms
from ..comparison import Options, options_with, read_infer, shape, slots, validate
from ..configs import load_config
from ..errors import InputError
from ..model import (
    INFER,
    TRAIN,
    Capture,
    Dump,
    Origin,
    Report,
    pct,
)
from ..rules import conventions as conv
from ..sinks import ordinary_mask
from . import file as fpfile
from .align import Placement, place
from .identify import identify, upper_median
from .sketch import errors, project, projection, references
from .target import WrongTargetError, target_check
from .verdict import (
    EngineSlot,
    fp_cause,
    fp_scores,
    fp_settings,
    label_warnings,
    noise_warnings,
    other_weights,
    plain_verdict,
    slot_results,
    walkthrough,
)

__all__ = ["check", "check_dump", "check_arrays", "WrongTargetError", "EngineSlot"]


def check(
    fingerprint: str | os.PathLike | fpfile.Fingerprint,
    infer: str | os.PathLike | Dump,
    options: Options | None = None,
    **kwargs: Any,
) -> Report:
    """Check the inference-side dump ``infer`` against a fingerprint; keyword arguments override fields of
    ``options`` (:class:`hsdiff.comparison.Options`, as for :func:`hsdiff.compare`).

    >>> report = check("draft/hsdiff-fingerprint.safetensors", "sglang_dump/", layer_ids=[2, 30, 58])  # doctest: +SKIP
    >>> report.verdict, report.recommended.ids
    ('ok', (2, 30, 58))
    """
    opts = options_with(options, **kwargs)
    fp = fingerprint if isinstance(fingerprint, fpfile.Fingerprint) else fpfile.load(fingerprint)
    dump = read_infer(infer, opts)
    return check_dump(fp, dump, opts, str(infer) if not isinstance(infer, Dump) else "<dump>")


def check_arrays(
    fingerprint: str | os.PathLike | fpfile.Fingerprint,
    token_ids: Sequence[Sequence[int]] | Sequence[int],
    aux: Sequence[np.ndarray],
    options: Options | None = None,
    **kwargs: Any,
) -> Report:
    """Check aux hidden states held in memory (an engine plugin's tap): ``aux[i]`` is request ``i``'s
    ``[T, k·H]`` array (the slots side by side, as the draft receives them; float32, float16 or numpy's
    tagged bfloat16), ``token_ids[i]`` its token ids; one request: ``token_ids`` a flat list and ``aux`` one
    array. No torch, no files.

    >>> report = check_arrays(fp, [probe_ids], [aux_states], engine="vllm", layer_ids=[2, 15, 27])  # doctest: +SKIP
    """
    ids: list[Any] = list(token_ids)
    if ids and not isinstance(ids[0], (list, tuple, np.ndarray)):
        ids = [ids]
        aux = [aux] if isinstance(aux, np.ndarray) else aux
    if len(ids) != len(aux):
        raise InputError(f"{len(ids)} token id lists for {len(aux)} arrays", options=("token_ids",))
    caps = []
    for i, (t, a) in enumerate(zip(ids, aux)):
        arr: np.ndarray = np.asarray(a)
        if arr.ndim == 3 and arr.shape[0] == 1:
            arr = arr[0]
        if arr.ndim != 2:
            raise InputError(f"request {i}: aux states of shape {list(arr.shape)}, not [T, k·H]", options=("aux",))
        caps.append(
            Capture(
                INFER,
                Origin("<memory>", f"request {i} aux_hidden_states", format="memory"),
                tuple(arr.shape),
                dtype_name(arr),
                int(arr.shape[-1]),
                group=f"request-{i}",
                token_ids=tuple(int(x) for x in t),
                concat=True,
                loader=_const(arr),
            )
        )
    return check_dump(
        fingerprint if isinstance(fingerprint, fpfile.Fingerprint) else fpfile.load(fingerprint),
        Dump(tuple(caps), files=0),
        options_with(options, **kwargs),
        "<memory>",
    )


def _const(arr: np.ndarray) -> Callable[[], np.ndarray]:
    return lambda: arr


def _probe_dump(fp: fpfile.Fingerprint) -> Dump:
    """The probes as training-side descriptions (token ids, no values): what the readers' layout and rank
    joining look at."""
    caps = tuple(
        Capture(
            TRAIN,
            Origin(fp.name(), f"probe {j}"),
            (len(p), fp.hidden_size),
            "float32",
            fp.hidden_size,
            group=str(fp.meta["probes"]["items"][j].get("name") or f"probe-{j}"),
            token_ids=p,
        )
        for j, p in enumerate(fp.probes)
    )
    return Dump(caps)


def _group_key(c: Capture) -> int | str:
    if c.boundary is not None:
        return c.boundary
    if c.slot is not None:
        return f"slot {c.slot}"
    return f"{c.origin.path} [{c.origin.key}]"


def _measure(fp: fpfile.Fingerprint, caps: Sequence[Capture]) -> tuple[dict[int | str, EngineSlot], list[str]]:
    """Every capture placed among the probes, projected, and scored against every stored boundary."""
    p = projection(fp.hidden_size, fp.dim, fp.seed)
    groups: dict[int | str, EngineSlot] = {}
    unplaced = []
    for c in caps:
        at = _place(fp, c, p)
        if at is None:
            unplaced.append(c)
            continue
        g = groups.setdefault(_group_key(c), EngineSlot(_group_key(c)))
        x = c.read_rows(at.start, at.stop)
        stored = fp.starts[at.probe] + at.offset + np.arange(at.start, at.stop)
        norms = row_norms(x)
        keep = ordinary_mask(norms) & np.isfinite(x).all(axis=1)
        same = fp.first_of[stored]  # a token another probe shares with its prefix is compared once per slot
        keep &= np.array([t not in g.seen for t in same.tolist()], dtype=bool)
        if not keep.any():
            continue
        g.seen.update(same[keep].tolist())
        y = project(x[keep], p)
        refs = references(np.asarray(fp.sketches[:, stored[keep]]), np.asarray(fp.norms[:, stored[keep]]))
        g.captures.append(c)
        g.placements.append(at)
        g.errors.append(errors(y, refs))
        den = np.linalg.norm(refs, axis=2) * np.maximum(np.linalg.norm(y, axis=1)[None], 1e-30)
        with np.errstate(divide="ignore", invalid="ignore"):
            g.cosines.append(np.einsum("bnd,nd->bn", refs, y) / den)
            g.ratios.append(norms[keep][None] / np.asarray(fp.norms[:, stored[keep]]))
    notes = []
    if unplaced:
        notes.append(
            f"{len(unplaced)} capture(s) hold none of the fingerprint's probe tokens and were left out: "
            + ", ".join(c.label() for c in unplaced[:3])
        )
    return {k: g for k, g in groups.items() if g.errors}, notes


def _place(fp: fpfile.Fingerprint, c: Capture, p: np.ndarray) -> Placement | None:
    """Where a capture's tokens sit among the probes: by token id, else by value from each probe's start."""
    if c.token_ids:
        return place(c.token_ids, fp.probes)
    n = c.tokens or 0
    best: tuple[float, Placement] | None = None
    for j, probe in enumerate(fp.probes):
        m = min(n, len(probe))
        if m < 2:
            continue
        x = c.read_rows(0, m)
        stored = fp.starts[j] + np.arange(m)
        keep = ordinary_mask(row_norms(x))
        if not keep.any():
            continue
        refs = references(np.asarray(fp.sketches[:, stored[keep]]), np.asarray(fp.norms[:, stored[keep]]))
        e = errors(project(x[keep], p), refs)
        err = min(upper_median(row) for row in e)
        if best is None or err < best[0]:
            best = (err, Placement(j, 0, 0, m))
    return None if best is None else best[1]


def check_dump(fp: fpfile.Fingerprint, infer: Dump, opts: Options, infer_path: str) -> Report:
    """The check on a dump already read (:func:`check` reads it)."""
    L, H = fp.num_layers, fp.hidden_size
    warnings = list(infer.warnings)
    warnings += target_check(fp, opts.model_config, opts)
    info = conv.ENGINE_INFO.get(opts.engine)
    family = conv.normalize_family(opts.model_family) if info and info.family_table else (opts.model_family or "llama")
    probes = _probe_dump(fp)
    model_cfg = load_config(opts.model_config) if opts.model_config else None
    infer = shape.layout(infer, probes, L, model_cfg, opts.layer_ids, opts.infer_format is not None, lambda rel: None)
    if not infer.captures:
        raise _log_only(infer, infer_path)
    infer, w = validate.with_values(infer, "inference", infer_path)
    warnings += w
    infer, w = slots.join_rank_parts(infer, probes)
    warnings += w
    configured = slots.configured(
        opts.layer_ids,
        opts.engine,
        family,
        opts.configured_source,
        L,
        opts.engine_version,
        opts.draft_kind,
        opts.configured_boundaries,
    )
    labelled, w = slots.label_infer(infer, H, configured)
    warnings += w
    whole = [c for c in slots.with_final(labelled, L) if not c.is_partial and c.width == H]
    if not whole:
        if any(c.is_partial for c in labelled) or infer.norm_prints:
            raise _log_only(infer, infer_path)
        widths = sorted({c.width for c in infer.captures if c.width})
        raise WrongTargetError(
            f"the inference side holds no capture of the fingerprint's hidden size {H} (or a multiple of it); "
            f"widths found: {widths}",
            path=infer_path,
            hint="check against the fingerprint of the served target",
        )
    if any(c.is_partial for c in labelled):
        warnings.append(
            "printed values in the inference side were left out: a fingerprint's sketches are checked on whole rows"
        )
    groups, w = _measure(fp, whole)
    warnings += w
    if not groups:
        raise WrongTargetError(
            "the inference side holds none of the fingerprint's probe tokens (by token id, or by value for captures "
            "without ids): another tokenizer, or the probes were not sent",
            path=infer_path,
            hint="send the fingerprint's probes through the engine and dump what the draft receives: by default "
            "they are the first samples of the training dump (hsdiff inspect FINGERPRINT names them; hsdiff "
            "request TRAIN --sample NAME prints the request for one)",
        )
    final_row = L + 1 if fp.has_final else None
    for g in groups.values():
        g.identity = identify(g.pooled())
    matched = [g for g in groups.values() if g.identity is not None and g.identity.error <= opts.tolerance]
    if not matched:
        closest = min(groups.values(), key=lambda g: g.identity.error if g.identity else math.inf)
        ident = closest.identity
        raise WrongTargetError(
            f"no capture equals any of the fingerprint's {fp.boundaries} boundaries on its probe tokens (closest: "
            f"{closest.label()} to B{ident.boundary if ident else '?'} at "
            f"{pct(ident.error if ident else math.inf)}): the fingerprint is of another target or other weights "
            "(a fine-tune, a quantised checkpoint), or the engine feeds no hidden state of this target",
            path=fp.path,
            hint="record the fingerprint on the target the engine serves (hsdiff fingerprint --model TARGET), or "
            "compare against the training dump",
        )
    warnings += label_warnings(groups, L)
    warnings += noise_warnings(fp, groups)
    settings = fp_settings(opts, family, L, H)
    results, claims = slot_results(fp, groups, configured, opts, family, final_row)
    finals = [r.slot for r in results if final_row is not None and r.boundary_index == final_row]
    recommended, w = decide.recommend(settings, decide.to_recommend(results), finals)
    warnings += w
    verdict = decide.verdict(results, configured, recommended) if configured is not None else plain_verdict(results)
    diagnosis = diagnose.diagnose(verdict, results, configured, recommended)
    claim_src = "identified by value against every boundary when the fingerprint was recorded"
    words = explain.explain(
        results,
        verdict,
        diagnosis,
        configured,
        claims,
        claim_src,
        None,
        recommended,
        L,
        printed_evidence=False,
        tolerance=opts.tolerance,
    )
    cause = fp_cause(fp, groups, results, configured, verdict, words.cause, L)
    weights = other_weights(groups, results, configured, opts.tolerance, L)
    if weights is not None:
        cause, warnings = f"{cause} {weights}", [*warnings, weights]
    return Report(
        verdict=verdict,
        cause=cause,
        slots=tuple(results),
        recommended=recommended,
        configured=configured,
        diagnosis=diagnosis,
        num_layers=L,
        hidden_size=H,
        explanation=tuple(walkthrough(fp, groups, results, configured, L)),
        warnings=tuple(dict.fromkeys(warnings)),
        scores=tuple(fp_scores(fp, groups, results)),
        inputs={"train": fp.name(), "infer": infer_path, "engine": opts.engine, "model_family": family},
        tolerance=opts.tolerance,
        settings=settings,
    )


def _log_only(infer: Dump, infer_path: str) -> InputError:
    return InputError(
        "the inference side is printed values (a debug log): a fingerprint holds sketches of whole rows, which a "
        "few printed columns cannot be checked against",
        path=infer_path,
        hint="save the tensors the draft receives (the SGLang dumper, vLLM's extract_hidden_states connector, "
        "torch.save of whole rows), or compare the log against the training dump instead",
    )
