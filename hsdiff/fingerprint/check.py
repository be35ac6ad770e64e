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

import dataclasses
import logging
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import decide, diagnose, explain
from ..arrays import as_f32, dtype_name, row_norms
from ..comparison import Options, shape, slots, validate
from ..configs import load_config, target_shape
from ..errors import InputError
from ..model import (
    INFER,
    TRAIN,
    Candidate,
    Capture,
    Configured,
    Dump,
    Evidence,
    LabelSource,
    Layer,
    Metrics,
    Origin,
    Report,
    Score,
    Settings,
    SlotResult,
    Status,
    Verdict,
    pct,
)
from ..readers import scan
from ..rules import conventions as conv
from ..rules.serving import boundary_list
from ..rules.settings import settings_for
from ..sinks import ordinary_mask
from . import file as fpfile
from .align import Placement, place
from .file import config_digest, embedding_digest
from .identify import Identity, identify, upper_median
from .sketch import errors, project, projection, references

__all__ = ["check", "check_dump", "check_arrays", "WrongTargetError", "EngineSlot"]

log = logging.getLogger("hsdiff.fingerprint")

#: The noise an engine adds may exceed the noise floor measured at recording (other kernels, fp8): past
#: this multiple the report says so (the identification holds; it is the numerics that differ).
NOISE_WARNING = 3.0


class WrongTargetError(InputError):
    """The fingerprint is of another target than the inference side ran (or of another tokenizer)."""


@dataclass
class EngineSlot:
    """The captures of one engine slot (one configured layer, or one label), pooled over the requests:
    per-token errors against every stored boundary and what they identify."""

    key: int | str
    captures: list[Capture] = field(default_factory=list)
    placements: list[Placement] = field(default_factory=list)
    errors: list[np.ndarray] = field(default_factory=list)  # [rows, n] per capture
    cosines: list[np.ndarray] = field(default_factory=list)  # [rows, n]
    ratios: list[np.ndarray] = field(default_factory=list)  # [rows, n] capture norm / stored norm
    seen: set[int] = field(default_factory=set)  # stored tokens compared (each once)
    identity: Identity | None = None

    @property
    def boundary(self) -> int | None:
        """The layer the label says (None for an unlabelled capture)."""
        return self.key if isinstance(self.key, int) else None

    def pooled(self, what: str = "errors") -> np.ndarray:
        parts = getattr(self, what)
        return np.concatenate(parts, axis=1) if parts else np.zeros((0, 0), dtype=np.float32)

    def label(self) -> str:
        return self.captures[0].label() if self.captures else str(self.key)


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
    opts = _options(options, kwargs)
    fp = fingerprint if isinstance(fingerprint, fpfile.Fingerprint) else fpfile.load(fingerprint)
    dump = (
        infer
        if isinstance(infer, Dump)
        else scan(
            infer,
            INFER,
            fmt=opts.infer_format,
            index=opts.infer_index,
            log_pattern=opts.log_pattern,
            format_name="infer_format",
        )
    )
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
        _options(options, kwargs),
        "<memory>",
    )


def _const(arr: np.ndarray) -> Callable[[], np.ndarray]:
    return lambda: arr


def _options(options: Options | None, kwargs: dict[str, Any]) -> Options:
    opts = options or Options()
    names = {f.name for f in dataclasses.fields(Options)}
    for k in kwargs:
        if k not in names:
            raise TypeError(f"check() got an unexpected keyword argument {k!r}")
    if isinstance(kwargs.get("layer_ids"), str):
        kwargs["layer_ids"] = conv.parse_ids(kwargs["layer_ids"], what="layer_ids")
    elif kwargs.get("layer_ids") is not None:
        kwargs["layer_ids"] = [int(i) for i in kwargs["layer_ids"]]
    opts = dataclasses.replace(opts, **kwargs)
    conv.rule(opts.engine)
    return opts


# ---------------------------------------------------------------------------------------------- identity


def target_check(fp: fpfile.Fingerprint, config_path: str | os.PathLike | None, opts: Options) -> list[str]:
    """Refuse a fingerprint the stated target contradicts (depth, width, vocabulary; embedding rows when
    the weights sit beside its config); warnings for what differs without deciding."""
    L, H = fp.num_layers, fp.hidden_size
    if opts.num_layers and opts.num_layers != L:
        raise WrongTargetError(
            f"the fingerprint is of a {L}-layer target, but `num_layers` says {opts.num_layers}",
            path=fp.path,
            hint="check against the fingerprint of the served target, or drop `num_layers`",
            options=("num_layers",),
        )
    if opts.hidden_size and opts.hidden_size != H:
        raise WrongTargetError(
            f"the fingerprint is of a {H}-wide target, but `hidden_size` says {opts.hidden_size}",
            path=fp.path,
            hint="check against the fingerprint of the served target, or drop `hidden_size`",
            options=("hidden_size",),
        )
    if config_path is None:
        return []
    cfg = load_config(config_path)
    shape_ = target_shape(cfg)
    vocab = cfg.get("vocab_size") or (cfg.get("text_config") or {}).get("vocab_size")
    said = [
        (what, mine, theirs)
        for what, mine, theirs in (
            ("layers", L, shape_.num_layers),
            ("hidden size", H, shape_.hidden_size),
            ("vocabulary", fp.vocab_size, vocab),
        )
        if mine is not None and theirs is not None and int(mine) != int(theirs)
    ]
    if said:
        what = ", ".join(f"{w} {a} against {b}" for w, a, b in said)
        raise WrongTargetError(
            f"the fingerprint is of another target than {config_path} ({what})",
            path=fp.path,
            hint="record the fingerprint on the target the engine serves (hsdiff fingerprint --model TARGET)",
        )
    warnings = []
    digest = fp.target.get("config_digest")
    if digest and config_digest(cfg) != digest:
        warnings.append(
            f"the target config {config_path} differs from the one the fingerprint was recorded with (same depth, "
            "width and vocabulary): the values decide whether it is the same target"
        )
    warnings += _embedding_check(fp, Path(config_path))
    return warnings


def _embedding_check(fp: fpfile.Fingerprint, config_path: Path) -> list[str]:
    """The target's embedding rows of the probe tokens, read from safetensors weights beside its config,
    against the fingerprint's B0 (by value) and its digest (bit for bit)."""
    folder = config_path.parent if config_path.is_file() else config_path
    rows = _read_embedding(folder, sorted({int(t) for t in fp.probe_ids.tolist()}))
    if rows is None:
        return []
    ids, emb = rows
    digest = fp.target.get("embedding_digest")
    if digest and embedding_digest(emb) == digest:
        return []
    p = projection(fp.hidden_size, fp.dim, fp.seed)
    index = {t: i for i, t in enumerate(ids)}
    tokens = np.arange(fp.tokens)
    mine = references(np.asarray(fp.sketches[0]), np.asarray(fp.norms[0]))
    theirs = project(emb[[index[int(t)] for t in fp.probe_ids.tolist()]], p)
    unit = mine / np.maximum(np.linalg.norm(mine, axis=1, keepdims=True), 1e-30)
    other = theirs / np.maximum(np.linalg.norm(theirs, axis=1, keepdims=True), 1e-30)
    err = upper_median(np.linalg.norm(unit - other, axis=1)[tokens])
    if err > 0.10:  # a scale (Gemma's sqrt(H)) is no difference; other directions are other weights
        raise WrongTargetError(
            f"the fingerprint is of another target: the embedding rows of its probe tokens in {folder} differ from "
            f"its B0 by {pct(err)}",
            path=fp.path,
            hint="record the fingerprint on the target the engine serves (hsdiff fingerprint --model TARGET)",
        )
    return [f"the embedding rows in {folder} equal the fingerprint's B0 within {pct(err)}, not bit for bit"]


def _read_embedding(folder: Path, ids: list[int]) -> tuple[list[int], np.ndarray] | None:
    from ..readers._container import open_table

    for f in sorted(folder.glob("*.safetensors")):
        if fpfile.is_fingerprint(f):
            continue
        try:
            table = open_table(f, "safetensors")
        except Exception:  # noqa: BLE001 - weights hsdiff cannot read say nothing about the target
            continue
        for name, e in table.entries.items():
            if name.endswith(("embed_tokens.weight", "wte.weight", "word_embeddings.weight")) and len(e.shape) == 2:
                if ids and max(ids) >= e.shape[0]:
                    raise WrongTargetError(
                        f"the fingerprint's probe tokens reach id {max(ids)}, past the {e.shape[0]}-row embedding of "
                        f"{f}: another tokenizer",
                        hint="record the fingerprint on the target the engine serves",
                    )
                return ids, as_f32(np.asarray(e.loader())[ids])
    return None


# ---------------------------------------------------------------------------------------------- the check


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
            hint="send the fingerprint's probes through the engine (hsdiff request FINGERPRINT prints the requests) "
            "and dump what the draft receives",
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
    warnings += _label_warnings(groups, L)
    warnings += _noise_warnings(fp, groups)
    settings = _settings(opts, family, L, H)
    results, claims = _results(fp, groups, configured, opts, family, final_row)
    finals = [r.slot for r in results if final_row is not None and r.boundary_index == final_row]
    recommended, w = decide.recommend(settings, decide.to_recommend(results), finals)
    warnings += w
    verdict = decide.verdict(results, configured, recommended) if configured is not None else _verdict(results)
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
    cause = _cause(fp, groups, results, configured, verdict, words.cause, L)
    return Report(
        verdict=verdict,
        cause=cause,
        slots=tuple(results),
        recommended=recommended,
        configured=configured,
        diagnosis=diagnosis,
        num_layers=L,
        hidden_size=H,
        explanation=tuple(_walkthrough(fp, groups, results, configured, L)),
        warnings=tuple(dict.fromkeys(warnings)),
        scores=tuple(_scores(fp, groups, results)),
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


def _settings(opts: Options, family: str, L: int, H: int) -> Settings:
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
        num_layers=L,
        num_layers_source="the fingerprint",
        hidden_size=H,
        hidden_size_source="the fingerprint",
        vllm_runner=opts.vllm_runner,
        kind=opts.draft_kind,
    )


def _metrics(g: EngineSlot, b: int, hidden: int) -> Metrics:
    """The capture against stored row ``b``: upper median error, lower median cosine (sketch space), 90th
    percentile error and median norm ratio (whole rows against the stored norms) over the tokens compared."""
    e = g.pooled()[b]
    n = int(e.size)
    if not n:
        return Metrics.empty()
    cos = np.sort(g.pooled("cosines")[b])
    return Metrics(
        upper_median(e),
        float(cos[(n - 1) // 2]),
        float(np.quantile(e, 0.9)),
        float(np.median(g.pooled("ratios")[b])),
        n,
        n * hidden,
    )


def _candidate(g: EngineSlot, b: int, fp: fpfile.Fingerprint) -> Candidate:
    at = g.placements[0]
    name = fp.meta["probes"]["items"][at.probe].get("name")
    return Candidate(g.captures[0], name, at.offset, _metrics(g, b, fp.hidden_size))


def _stored(fp: fpfile.Fingerprint, b: int, g: EngineSlot) -> Candidate:
    """A stored boundary as the runner-up of a capture: the fingerprint's row, with the capture's errors to it."""
    cap = Capture(
        TRAIN,
        Origin(fp.name(), "fingerprint", format="fingerprint"),
        None,
        "float16",
        fp.hidden_size,
        layer=Layer(b, source=LabelSource.KEY),
    )
    return Candidate(cap, None, 0, _metrics(g, b, fp.hidden_size))


def _fed(groups: dict[int | str, EngineSlot], cfg: int | None) -> EngineSlot | None:
    return None if cfg is None else groups.get(cfg)


def _share(i: Identity, b: int) -> str:
    k, n = i.share_against(b)
    return f"{k}/{n}"


def _results(
    fp: fpfile.Fingerprint,
    groups: dict[int | str, EngineSlot],
    configured: Configured | None,
    opts: Options,
    family: str,
    final_row: int | None,
) -> tuple[list[SlotResult], list[int | None]]:
    """Per training slot: its boundary (the fingerprint's), and what the capture the engine feeds it is."""
    trained = fp.training
    if not trained:
        draft = fp.draft or {}
        ids = draft.get("ids")
        if not ids:
            raise InputError(
                "the fingerprint holds no training slots and no draft ids to check against",
                path=fp.path,
                hint="record it with the training dump (hsdiff fingerprint --train TRAIN) or the draft (--draft)",
            )
        bs = conv.to_boundary(list(ids), "specforge", num_layers=fp.num_layers, keep_order=True)
        trained = tuple(fpfile.TrainingSlot(i, b, "labelled") for i, b in enumerate(bs))
    cfg_b = list(configured.boundary_indices) if configured else None
    L = fp.num_layers
    out: list[SlotResult] = []
    for ts in trained:
        s, t = ts.slot, ts.boundary
        cfg = None if cfg_b is None or s >= len(cfg_b) else cfg_b[s]
        if configured is not None:
            g = _fed(groups, cfg)
        else:  # no configuration: the capture that holds the training layer, else the nearest to it
            g = _holding(groups, t)
        status, note, against = _status(ts, g, cfg, configured is not None, L)
        ident = None if g is None else g.identity
        evidence = {"observed": Evidence.OBSERVED, "labelled": Evidence.CONSISTENT}.get(ts.evidence, Evidence.NONE)
        conf = ts.confidence if ts.evidence == "observed" else decide.CONSISTENT_CONFIDENCE if t is not None else 0.0
        if status in (Status.OK, Status.IDENTIFIED) and ident is not None:
            conf = min(conf, ident.confidence)
        if evidence == Evidence.CONSISTENT and status == Status.OK:
            status = Status.UNVERIFIED
            note += "; the training slot's layer comes from the draft's ids, not from values: a gate does not pass"
        match = runner = None
        sep = margin = None
        if g is not None and ident is not None and ident.boundary is not None:
            target_row = t if t is not None else ident.boundary
            match = _candidate(g, target_row, fp)
            others = [b for b in range(fp.boundaries) if b != target_row and math.isfinite(ident.medians[b])]
            if others:
                rb = min(others, key=lambda b: ident.medians[b])
                runner = _stored(fp, rb, g)
                sep = runner.metrics.rel_err
                margin = sep - match.metrics.rel_err
        layer_id = None
        if t is not None:
            try:
                layer_id = conv.from_boundary(
                    [t], opts.engine, num_layers=L, model_family=family, version=opts.engine_version
                )[0]
            except InputError:
                layer_id = None
        out.append(
            SlotResult(
                slot=s,
                boundary_index=t,
                layer_id=layer_id,
                evidence=evidence if t is not None else Evidence.NONE,
                confidence=float(conf),
                margin=margin,
                match=match,
                runner_up=runner,
                claimed_boundary=t,
                configured_boundary=cfg,
                status=status,
                note=note,
                against_config=against,
                separation=sep,
                separation_measured=sep is not None,
            )
        )
    return out, [ts.boundary for ts in trained]


def _holding(groups: dict[int | str, EngineSlot], t: int | None) -> EngineSlot | None:
    if t is None or not groups:
        return None
    held = [g for g in groups.values() if g.identity and g.identity.boundary == t and g.identity.decisive]
    if held:
        return held[0]
    return min(groups.values(), key=lambda g: g.identity.medians[t] if g.identity and g.identity.medians else math.inf)


def _name(b: int | None, L: int) -> str:
    return "?" if b is None else boundary_list([b], L).strip("[]") if b == L + 1 else f"B{b}"


def _status(
    ts: fpfile.TrainingSlot, g: EngineSlot | None, cfg: int | None, configured: bool, L: int
) -> tuple[Status, str, str]:
    """The slot's status, its note and how it stands against the configured ids (words)."""
    t = ts.boundary
    trained = (
        f"trained on {_name(t, L)} (identified by value at recording: {ts.share:.0%} of {ts.tokens} tokens nearer it "
        f"than any other boundary)"
        if ts.evidence == "observed"
        else f"trained on {_name(t, L)} as the draft's ids say (not identified by value)"
        if t is not None
        else "its training layer was not identified when the fingerprint was recorded"
    )
    if t is None:
        return Status.UNOBSERVED, trained, ""
    if g is None:
        if not configured:
            return Status.UNVERIFIED, trained + "; no capture holds it", ""
        if cfg is None:
            return Status.MISMATCH, trained, "the engine is configured with fewer ids: this slot gets nothing"
        return (
            Status.UNVERIFIED,
            trained + f"; the inference side holds no capture of the engine's slot for {_name(cfg, L)}",
            f"no capture of {_name(cfg, L)} was dumped",
        )
    i = g.identity
    assert i is not None and i.boundary is not None
    where = f"the engine's capture {g.label()}" if configured else f"{g.label()}"
    if i.error > 0.10:
        return (
            Status.MISMATCH,
            trained + f"; {where} holds no hidden state of the target on the probe tokens (closest "
            f"{_name(i.boundary, L)} at {pct(i.error)})",
            f"the engine's slot holds no hidden state of the target (closest {_name(i.boundary, L)} at {pct(i.error)})",
        )
    if i.boundary == t and i.decisive:
        said = (
            f"{where} holds {_name(t, L)} by value: error {pct(i.error)}, every other boundary ruled out "
            f"(weakest: {_name(i.against, L)}, {_share(i, i.against) if i.against is not None else '-'} tokens nearer "
            f"{_name(t, L)}, at {pct(i.against_error)})"
        )
        if not configured:
            return Status.IDENTIFIED, trained + "; " + said, ""
        if cfg == t:
            return Status.OK, trained + "; " + said, ""
        return (
            Status.UNVERIFIED,
            trained + "; " + said + f", though the configured ids name {_name(cfg, L)} for it",
            f"the values show {_name(t, L)} where the configured ids, as read, capture {_name(cfg, L)}: the dump was "
            "made with other ids, or the engine reads them otherwise",
        )
    if i.decisive:
        said = (
            f"{where} holds {_name(i.boundary, L)} by value (error {pct(i.error)}; "
            f"{_share(i, t)} tokens nearer it than {_name(t, L)})"
        )
        return Status.MISMATCH, trained + "; " + said, f"the engine's slot holds {_name(i.boundary, L)} by value"
    open_ = sorted({i.boundary, *i.open})
    if t not in open_:
        said = (
            f"{where} is nearest {_name(i.boundary, L)} (error {pct(i.error)}) and not {_name(t, L)} "
            f"({_share(i, t)} tokens nearer {_name(i.boundary, L)})"
        )
        return Status.MISMATCH, trained + "; " + said, f"the engine's slot holds {_name(i.boundary, L)} or a neighbour"
    rival = [b for b in open_ if b != t]
    k_n = ", ".join(f"{_name(b, L)} ({_share(i, b)} tokens nearer {_name(i.boundary, L)})" for b in rival[:3])
    said = (
        f"{where} is nearest {_name(i.boundary, L)} (error {pct(i.error)}), but the {i.tokens} ordinary probe tokens "
        f"compared do not rule out {k_n}: send more probe tokens (every probe of the fingerprint, or longer ones)"
    )
    return (Status.AMBIGUOUS if configured else Status.UNVERIFIED), trained + "; " + said, ""


def _verdict(results: Sequence[SlotResult]) -> Verdict:
    """With no configuration: OK when a capture holds every training slot by value."""
    if all(r.status == Status.IDENTIFIED for r in results):
        return Verdict.OK
    return Verdict.INCONCLUSIVE


def _label_warnings(groups: dict[int | str, EngineSlot], L: int) -> list[str]:
    out = []
    for g in groups.values():
        i = g.identity
        b = g.boundary
        if i is None or b is None or not i.decisive or i.error > 0.10 or i.boundary == b:
            continue
        src = g.captures[0].layer.source if g.captures[0].layer is not None else "label"
        out.append(
            f"the capture {g.label()} is labelled {_name(b, L)} ({src}) but holds {_name(i.boundary, L)} by value "
            f"({i.share:.0%} or more of {i.tokens} tokens nearer it than any other boundary)"
            + (
                ": the engine did not capture what the configured ids, as read, name"
                if src == LabelSource.CONFIGURED
                else ": its labels count otherwise (layer outputs? pass --infer-index output)"
            )
        )
    return out


def _noise_warnings(fp: fpfile.Fingerprint, groups: dict[int | str, EngineSlot]) -> list[str]:
    floor = fp.noise_floor
    if not floor:
        return []
    worst = []
    for g in groups.values():
        i = g.identity
        if i is None or i.boundary is None or i.error > 0.10:
            continue
        f = floor[i.boundary] if i.boundary < len(floor) else None
        if f and i.error > NOISE_WARNING * f:
            worst.append((i.error / f, i, f))
    if not worst:
        return []
    ratio, i, f = max(worst, key=lambda w: w[0])
    return [
        f"the engine's captures differ from the fingerprint by up to {ratio:.1f}x the noise floor recorded with it "
        f"(B{i.boundary}: {pct(i.error)} against {pct(f)}): other numerics than the recording's (fp8, a quantised "
        "target, other kernels); the layers are identified all the same, with fewer tokens to spare"
    ]


def _cause(
    fp: fpfile.Fingerprint,
    groups: dict[int | str, EngineSlot],
    results: Sequence[SlotResult],
    configured: Configured | None,
    verdict: Verdict,
    words: str,
    L: int,
) -> str:
    """The cause ``explain`` gives the slots, led by what the engine's slots hold by value."""
    held = []
    for key in (
        configured.boundary_indices
        if configured is not None
        else sorted((k for k in groups if isinstance(k, int)), key=int)
    ):
        g = groups.get(key)
        i = None if g is None else g.identity
        if i is None or i.boundary is None or i.error > 0.10:
            held.append("?")
        elif i.decisive:
            held.append(_name(i.boundary, L).replace("the final post-norm state", "final"))
        else:
            held.append(_name(i.boundary, L) + "~")
    trained = [_name(r.boundary_index, L).replace("the final post-norm state", "final") for r in results]
    n = max((g.identity.tokens for g in groups.values() if g.identity), default=0)
    open_ = " (~: a neighbour not ruled out)" if any(h.endswith("~") for h in held) else ""
    lead = (
        f"Against the fingerprint ({fp.num_layers}-layer target, every boundary, {n} ordinary probe tokens): the "
        f"engine's slots hold [{', '.join(held)}] by value{open_}; training used [{', '.join(trained)}]."
    )
    return f"{lead} {words}"


def _walkthrough(
    fp: fpfile.Fingerprint,
    groups: dict[int | str, EngineSlot],
    results: Sequence[SlotResult],
    configured: Configured | None,
    L: int,
) -> list[str]:
    floor = fp.noise_floor
    lines = [f"Fingerprint: {fp.describe()}."]
    if configured is not None:
        lines.append(
            f"The engine is configured with ids {list(configured.ids)} ({configured.engine}, from "
            f"{configured.source}), which it reads as {boundary_list(list(configured.boundary_indices), L)} "
            f"({configured.rule})."
        )
    for g in groups.values():
        i = g.identity
        if i is None or i.boundary is None:
            continue
        f = floor[i.boundary] if floor and i.boundary < len(floor) else None
        lines.append(
            f"Capture {g.label()} ({len(g.captures)} request(s), {i.tokens} ordinary probe tokens): nearest "
            f"{_name(i.boundary, L)} at {pct(i.error)}"
            + (f" (noise floor {pct(f)})" if f else "")
            + (
                f"; weakest rival {_name(i.against, L)} at {pct(i.against_error)}, {_share(i, i.against)} tokens "
                f"nearer {_name(i.boundary, L)} (sign test p = {i.p:.1e})"
                if i.against is not None
                else ""
            )
            + ("; decisive." if i.decisive else f"; not decisive: {', '.join(_name(b, L) for b in i.open[:4])} open.")
        )
    for r in results:
        lines.append(f"Slot {r.slot} → {r.status}: {r.note}" + (f" ({r.against_config})" if r.against_config else ""))
    return lines


def _scores(fp: fpfile.Fingerprint, groups: dict[int | str, EngineSlot], results: Sequence[SlotResult]) -> list[Score]:
    out = []
    for r in results:
        if r.boundary_index is None:
            continue
        for g in groups.values():
            c = g.captures[0]
            m = _metrics(g, r.boundary_index, fp.hidden_size)
            out.append(
                Score(
                    r.slot,
                    fp.meta["probes"]["items"][g.placements[0].probe].get("name"),
                    c.label(),
                    c.boundary,
                    None if c.layer is None else str(c.layer.source),
                    g.placements[0].offset,
                    m,
                )
            )
    return out
