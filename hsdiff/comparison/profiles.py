"""What the pictures need beyond the verdict: per-capture norm profiles and per-token errors.

Computed once, after the decisions, from tensors the comparison already reads (memory-mapped), and
stored in the report as plain numbers so that a saved JSON report can be drawn without torch:

* ``norms``: for every training slot (the sample of its match, else its first sample) and every
  inference capture, the median per-token L2 norm, the token count and the attention-sink tokens
  (norm > 8x the median);
* ``tokens``: for every training slot whose match is a whole tensor, the per-token relative error
  ``||x_t - y_t|| / ||y_t||`` along the training sequence, for the matched capture and, when it
  differs, for the capture the configured ids give that slot.

Arrays are cut at :data:`MAX_TOKENS` positions and rounded to four significant digits.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable

import numpy as np

from ..arrays import lower_median, row_norms
from ..largedump import NormsRead, PairKey
from ..largedump.rows import chunks, extent, read, source
from ..model import Capture, LabelSource, Profiles, Report, SlotResult
from ..model.results import Score
from ..sinks import sink_mask

__all__ = ["measure", "MAX_TOKENS", "MAX_CAPTURES"]

log = logging.getLogger("hsdiff")

#: Longest per-token curve kept in a report (positions beyond it are left out and counted).
MAX_TOKENS = 4096
#: Most inference captures given a norm profile (the first ones in layer order).
MAX_CAPTURES = 512


Norms = dict[Capture, NormsRead]
Errors = dict[PairKey, np.ndarray]


def measure(
    report: Report,
    train_slots: dict[int, list[Capture]],
    infer: Iterable[Capture],
    norms: Norms | None = None,
    errors: Errors | None = None,
) -> Report:
    """``report`` with its ``profiles`` filled in (see the module docstring). ``norms`` holds, by
    capture, the per-token norms the comparison already read, their token positions and the token
    count, and ``errors`` the per-token errors of pairs already compared, by pair (training and
    inference capture, offset); what they do not cover is read here. When only some rows were read (a large dump
    checked on a sample of tokens), the row says how many in ``sampled_tokens``."""
    import dataclasses

    infer = [c for c in infer if c.observation is None and not c.post_norm]
    profiles = Profiles(
        norms=_norms(report, train_slots, infer, norms or {}),
        tokens=_tokens(report, train_slots, infer, norms or {}, errors or {}),
    )
    return dataclasses.replace(report, profiles=profiles)


def _norms(report: Report, train_slots: dict[int, list[Capture]], infer: list[Capture], known: Norms) -> list[dict]:
    out: list[dict] = []
    matched = [s.match.sample for s in report.slots if s.match is not None]
    usual = max(dict.fromkeys(matched), key=matched.count) if matched else None  # a tie: the first
    for s in report.slots:
        cap = _train_capture(train_slots, s, usual)
        if cap is None:
            continue
        row = _norm_row(cap, "train", known)
        if row is not None:
            row.update(slot=s.slot, boundary=s.boundary_index, claimed_boundary=s.claimed_boundary)
            out.append(row)
    seen: set[str] = set()
    ordered = sorted(infer, key=lambda c: (c.boundary is None, c.boundary or 0, c.slot or 0))
    for c in ordered:
        label = c.label()
        if label in seen or len(seen) >= MAX_CAPTURES:
            continue
        seen.add(label)
        row = _norm_row(c, "infer", known)
        if row is not None:
            row.update(slot=c.slot, boundary=c.boundary, label_source=None if c.layer is None else c.layer.source)
            out.append(row)
    return out


def _norm_row(cap: Capture, side: str, known: Norms) -> dict | None:
    if cap in known:
        norms, pos, tokens = known[cap]
    else:
        if cap.loader is None or not cap.dtype.startswith(("float", "bfloat")):
            return None
        src = source(cap)
        tokens = extent(src)[0]
        norms = _every_norm(src, tokens)
        pos = np.arange(tokens)
    if norms.size == 0:
        return None
    finite = norms[np.isfinite(norms)]
    if finite.size == 0:
        return None
    sinks = pos[sink_mask(norms)].tolist()
    row = {
        "side": side,
        "capture": cap.label(),
        "sample": cap.group,
        "tokens": int(tokens),
        "median_norm": _sig(lower_median(finite)),
        "max_norm": _sig(float(finite.max())),
        "sink_tokens": [int(i) for i in sinks[:64]],
    }
    if norms.size < tokens:
        row["sampled_tokens"] = int(norms.size)
    return row


def _train_capture(train_slots: dict[int, list[Capture]], s: SlotResult, usual: str | None) -> Capture | None:
    """The slot's tensor in the sample its match came from (else the sample most slots matched)."""
    caps = train_slots.get(s.slot) or []
    sample = s.match.sample if s.match is not None else usual
    return next((c for c in caps if c.group == sample), caps[0] if caps else None)


def _tokens(
    report: Report, train_slots: dict[int, list[Capture]], infer: list[Capture], known: Norms, errors: Errors
) -> list[dict]:
    best = _best_rows(report.scores)
    out: list[dict] = []
    for s in report.slots:
        pairs: list[tuple[str, Capture, str | None, int]] = []
        if s.match is not None and s.match.capture.observation is None:
            pairs.append(("match", s.match.capture, s.match.sample, s.match.offset))
        if s.configured_boundary is not None:
            cfg = next(
                (
                    c
                    for c in infer
                    if c.boundary == s.configured_boundary
                    and c.layer is not None
                    and c.layer.source == LabelSource.CONFIGURED
                    and c.slot == s.slot
                ),
                None,
            )
            cfg = cfg or next((c for c in infer if c.boundary == s.configured_boundary), None)
            row = None if cfg is None else best.get((s.slot, cfg.label()))
            if cfg is not None and row is not None and (s.match is None or cfg is not s.match.capture):
                pairs.append(("configured", cfg, row.sample, row.token_offset))
        for role, cap, sample, offset in pairs:
            train = next((c for c in train_slots.get(s.slot, []) if c.group == sample), None)
            if train is None:
                continue
            curve = _curve(train, cap, offset, known, errors.get(PairKey(train, cap, offset)))
            if curve is not None:
                curve.update(
                    slot=s.slot,
                    role=role,
                    capture=cap.label(),
                    capture_boundary=cap.boundary,
                    sample=sample,
                    token_offset=offset,
                )
                out.append(curve)
    return out


def _best_rows(scores: Iterable[Score]) -> dict[tuple[int, str], Score]:
    best: dict[tuple[int, str], Score] = {}
    for r in scores:
        key = (r.slot, r.capture)
        if key not in best or r.metrics.rel_err < best[key].metrics.rel_err:
            best[key] = r
    return best


def _curve(train: Capture, cap: Capture, offset: int, known: Norms, done: np.ndarray | None) -> dict | None:
    if not cap.dtype.startswith(("float", "bfloat")) or not train.dtype.startswith(("float", "bfloat")):
        return None
    x, y_src = source(cap), source(train)
    (ti, width), (tt, train_width) = extent(x), extent(y_src)
    if width != train_width:
        return None
    i0, i1 = max(0, -offset), min(ti, tt - offset)
    if i1 <= i0:
        return None
    kept = min(i1 - i0, MAX_TOKENS)
    errs, norms = [], []
    a = i0
    if done is not None and done.size == i1 - i0:  # computed while the pair was verified
        errs, a = [done[:kept]], i0 + kept
    for xc in chunks(x, a, i0 + kept):  # only the tokens kept are read
        y = read(y_src, a + offset, a + offset + xc.shape[0])
        with np.errstate(all="ignore"):
            ny = row_norms(y)
            errs.append(row_norms(xc - y) / np.maximum(ny, np.float32(1e-12)))
        norms.append(ny)
        a += xc.shape[0]
    err = np.concatenate(errs)
    sinks = _sinks_of(
        train, known, np.concatenate(norms) if norms else np.zeros(0, dtype=np.float32), i0 + offset, i0 + offset + kept
    )
    return {
        "first_token": i0 + offset,
        "error": _sigs(err),
        "sink_tokens": [i0 + offset + int(i) for i in np.flatnonzero(sinks).tolist()],
        "tokens_left_out": (i1 - i0) - kept,
    }


def _sinks_of(train: Capture, known: Norms, norms: np.ndarray, j0: int, j1: int) -> np.ndarray:
    """The sink mask of training tokens ``[j0, j1)`` against the whole slot's median norm (the norms
    the comparison read, else read here when the curve did not cover every token)."""
    got = known.get(train)
    if got is not None and got.norms.size == got.tokens:
        return sink_mask(got.norms)[j0:j1]
    src = source(train)
    tokens = extent(src)[0]
    if j0 == 0 and j1 == tokens:
        return sink_mask(norms)
    return sink_mask(_every_norm(src, tokens))[j0:j1]


def _every_norm(src: np.ndarray | Capture, tokens: int) -> np.ndarray:
    """Every token's norm, read in chunks."""
    if not tokens:
        return np.zeros(0, dtype=np.float32)
    with np.errstate(all="ignore"):
        return np.concatenate([row_norms(x) for x in chunks(src, 0, tokens)])


def _sig(v: float) -> float | None:
    if not math.isfinite(v):
        return None
    return float(f"{v:.4g}")


def _sigs(v: np.ndarray) -> list[float | None]:
    """:func:`_sig` of each value, formatted in one go (a curve is thousands of values)."""
    got: list[float | None] = list(map(float, (("%.4g " * v.size) % tuple(v.tolist())).split()))
    return got if bool(np.isfinite(v).all()) else [x if math.isfinite(x) else None for x in got]  # type: ignore[arg-type]
