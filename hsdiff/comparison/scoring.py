"""Scoring: every training slot against every inference capture, minimised over training samples and
token offsets (:mod:`hsdiff.align`), plus the evidence a walk-through needs, computed while the
training tensors are loaded so that nothing is read twice."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from .. import align
from ..model import Candidate, Capture, NormCheck, PrintedEvidence, Score
from . import validate
from .slots import Slots

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Scores:
    """Per training slot, the best candidate of each inference capture (best first); every scored
    pair; and the warnings that reading and validating the tensors raised."""

    candidates: dict[int, list[Candidate]]
    rows: tuple[Score, ...]
    warnings: tuple[str, ...]


def score_all(slots: Slots, infer: list[Capture], tolerance: float, progress: Progress | None = None) -> Scores:
    """Score every slot of every training sample against every inference capture; a training sample
    whose token ids rule it out is never loaded."""
    warnings: list[str] = []
    infer_tensors: dict[int, torch.Tensor | None] = {}
    for c in infer:
        x = None
        if c.observation is None:
            x, w = validate.inference_tensor(c, c.load())
            warnings += w
        infer_tensors[id(c)] = x
    samples: dict[str | None, dict[int, Capture]] = defaultdict(dict)
    for s, caps in slots.items():
        for c in caps:
            samples[c.group][s] = c
    best: dict[tuple[int, int], list[tuple[Candidate, float]]] = defaultdict(list)
    rows: list[Score] = []
    ids_failed = set()
    n = len(samples)
    sample_ids = {g: next((c.token_ids for c in caps.values() if c.token_ids), None) for g, caps in samples.items()}
    homes: dict[str | None, set] = {}  # inference group -> training samples whose ids contain its ids
    for c in infer:
        if c.token_ids and c.group not in homes:
            homes[c.group] = {g for g, ids in sample_ids.items() if ids and align.id_offsets(c.token_ids, ids)}
    for si, (sample, slot_caps) in enumerate(samples.items()):
        if progress:
            progress("scoring samples", si, n)
        train_ids = next((c.token_ids for c in slot_caps.values() if c.token_ids), None)
        plan = []
        for c in infer:
            offsets = None
            if c.token_ids and train_ids:
                offsets = align.id_offsets(c.token_ids, train_ids)
                if not offsets:
                    ids_failed.add(c.group)
                    if homes.get(c.group):
                        continue  # another training sample holds these tokens
            plan.append((c, offsets))
        if not plan:
            continue  # token ids rule this sample out: its tensors are never loaded
        loaded = {s: align.TrainSlot.load(c) for s, c in slot_caps.items()}
        for s, ts in loaded.items():
            warnings += validate.training_tensor(ts.capture, s, ts.tensor, ts.tokens)
        for c, offsets in plan:
            x = infer_tensors[id(c)]
            if c.observation is None and x is None:
                continue
            for s, ts in loaded.items():
                if x is not None and x.shape[1] != ts.tensor.shape[1]:
                    continue
                off, m = align.best_alignment(ts, c, x, offsets)
                seen = best[(s, id(c))]
                cand = Candidate(c, sample, off, m)
                if (c.is_partial or c.norm is not None) and (not seen or m.rel_err < min(e for _, e in seen)):
                    cand = _with_evidence(cand, ts)
                seen.append((cand, m.rel_err))
                label_source = None if c.layer is None else c.layer.source
                rows.append(Score(s, sample, c.label(), c.boundary, label_source, off, m))
    if progress:
        progress("scoring samples", n, n)
    for g in sorted(x for x in ids_failed if x is not None):
        if not homes.get(g):
            warnings.append(f"{g}: its token ids appear in no training sample; tokens were aligned by value instead")
    out: dict[int, list[Candidate]] = defaultdict(list)
    for (s, _), cands in best.items():
        cands.sort(key=lambda x: x[1])
        top = cands[0][0]
        tol = max(tolerance * 0.1, top.metrics.rel_err * 1.02 + 1e-6)
        tied = sum(1 for _, e in cands if e <= tol)
        out[s].append(Candidate(top.capture, top.sample, top.offset, top.metrics, tied, top.printed, top.norm_check))
    for s in out:
        out[s].sort(key=lambda c: c.metrics.rel_err)
    return Scores(dict(out), tuple(rows), tuple(warnings))


def _with_evidence(cand: Candidate, ts: align.TrainSlot) -> Candidate:
    """``cand`` with where its printed values sat and how a printed norm compares."""
    c = cand.capture
    toks = align.observation_tokens(ts, c, cand.offset) if c.is_partial else []
    printed = _printed(ts, c, toks) if c.is_partial else None
    norm = _norm_check(ts, c, toks) if c.norm is not None else None
    return Candidate(c, cand.sample, cand.offset, cand.metrics, cand.samples_tied, printed, norm)


def _printed(ts: align.TrainSlot, c: Capture, toks: list[int | None]) -> PrintedEvidence:
    vals, _, cols = align.observation_arrays(c, ts.tensor.shape[1])
    placed = [(i, t) for i, t in enumerate(toks) if t is not None]
    ordinary = [(i, t) for i, t in placed if not bool(ts.sinks[t])]
    sinks = tuple(sorted({t for _, t in placed if bool(ts.sinks[t])}))
    used = tuple(sorted({t for _, t in (ordinary or placed)}))
    shown = (ordinary or placed)[:1]
    if not shown:
        return PrintedEvidence(used, sinks, not ordinary)
    i, t = shown[0]
    row = vals[i].numpy()
    keep = [k for k in range(len(cols)) if np.isfinite(row[k])][:5]
    return PrintedEvidence(
        used, sinks, not ordinary, token=t, cols=tuple(cols[k] for k in keep),
        printed=tuple(float(row[k]) for k in keep), training=tuple(float(ts.tensor[t, cols[k]]) for k in keep),
    )


def _norm_check(ts: align.TrainSlot, c: Capture, toks: list[int | None]) -> NormCheck | None:
    """A printed norm against the training slot's norms: which one it equals, or the likely reason."""
    printed = float(c.norm)  # type: ignore[arg-type]
    norms = ts.norms[torch.isfinite(ts.norms)]
    if norms.numel() == 0:
        return None
    refs = {
        "the per-token norm (median)": float(norms.median()),
        "the per-token norm (mean)": float(norms.mean()),
        "the first token's norm": float(ts.norms[0]),
        "the last token's norm": float(ts.norms[-1]),
        "the whole tensor's norm": float(ts.tensor.norm()),
    }
    if c.observation is not None:
        vals = np.asarray(c.observation.values, dtype=float)
        refs["the norm of the printed values"] = float(np.sqrt(np.nansum(vals**2)))
        for t in sorted({t for t in toks if t is not None})[:8]:
            refs[f"token {t}'s norm"] = float(ts.norms[t])
    agree = next((f"{k} ({v:.4g})" for k, v in refs.items() if v > 0 and abs(printed / v - 1) <= 0.1), None)
    lo, hi = float(norms.min()), float(ts.tensor.norm())
    if printed < 0.9 * lo:
        reason = (
            f"it is smaller than the norm of every training token (smallest {lo:.4g}): probably the norm of "
            "hidden_states before the residual add (engines that fuse add+norm carry the residual separately; the "
            "captured stream is their sum), or of some columns only"
        )
    elif printed > 1.1 * hi:
        reason = (
            "it is larger than the whole training tensor's norm: probably taken over more tokens (a batch, padding) "
            "or another tensor"
        )
    else:
        reason = (
            "it lies between one token's norm and the whole tensor's: probably another reduction (a mean or sum over "
            "tokens, which includes the attention sink) or another token"
        )
    return NormCheck(printed, tuple(refs.items()), agree, reason)
