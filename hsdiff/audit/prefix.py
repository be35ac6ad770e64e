"""Comparing two files by value on their shared token prefix, and the tolerance a capture run needs.

In a causal model the hidden states of a shared token prefix depend only on that prefix, so two
files of one capture run that start alike hold the same values there, up to the rounding of the run
(an engine computes requests in batches, in bf16: batch shape, padding and partners change the
summation order, more at deeper layers). Comparisons use each file's prefix fingerprint
(:mod:`.fingerprint`), leaving out attention-sink tokens.

**Tolerance from the run's own spread.** :func:`calibrate` takes, for a bounded sample of files,
the per-slot errors to the nearest (by value) of the earlier files sharing a prefix. Pairs computed
alike are bit-identical and tell nothing; the others are either rounding (one run: batch shape,
padding and partners change the summation order) or other layers, which lie beyond a gap: adjacent
boundaries differ by 22-60% on SmolLM2-135M and by 4-5% on its 61-layer depth-up-scaled variant,
where the bf16 noise is 0.5-0.9% (``fixtures/README.md``); files of one bf16 run of SmolLM2 differ
by up to 0.3%, 1.3% and 2.2% at B 2, 15 and 27 (``tests/audit/test_noisy.py``). Pairs are ranked by
their worst slot; the run's rounding is the pairs reached from the smallest by steps of at most
:data:`GAP` times (none when even the smallest is over :data:`MAX_SPREAD`), and the tolerance of a
slot is :data:`SPREAD_FACTOR` times the largest error of those pairs in it, within
[:data:`MIN_TOLERANCE`, :data:`MAX_TOLERANCE`].
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

from ..sinks import usable
from .fingerprint import FileSummary

#: Step between two errors of one run's continuum of rounding errors, at most (a larger step is a gap).
GAP = 3.0
#: The tolerance is this many times the run's measured spread in the slot ...
SPREAD_FACTOR = 3.0
#: ... and at least this (the spread of an fp32 run, whose shared prefixes are equal, is 0) ...
MIN_TOLERANCE = 0.015
#: ... and at most this.
MAX_TOLERANCE = 0.10
#: A pair differing by more than this in its worst slot is not rounding.
MAX_SPREAD = 0.05
#: Files of the sample the tolerance is measured on (the first that share a prefix with an earlier file).
CALIBRATION_FILES = 2048
#: A group holds *another model* when none of its slots points the way any majority slot does (median
#: cosine on shared tokens below this). One model's boundaries keep a direction: on SmolLM2-135M each
#: of B 1-29 has a cosine of at least 0.73 with the nearest of B 2, 15, 27 (B 30, the last layer's
#: output, 0.44: one slot may fall below, so every slot must); the states of a model of the same width
#: in another basis have cosine ~0 (the 32-number fingerprint estimates it to ~0.2 per token, less over
#: a median).
OTHER_MODEL_COSINE = 0.5
_REPS = 8


def lcp(a: FileSummary, b: FileSummary) -> int:
    """Tokens of the shared prefix both fingerprints cover."""
    n = 0
    limit = min(
        len(a.prefix_ids),
        len(b.prefix_ids),
        0 if a.prefix_proj is None else a.prefix_proj.shape[0],
        0 if b.prefix_proj is None else b.prefix_proj.shape[0],
    )
    while n < limit and a.prefix_ids[n] == b.prefix_ids[n]:
        n += 1
    return n


def key(s: FileSummary) -> tuple[int, ...]:
    """Files are compared with earlier files of the same key: their first two token ids."""
    return s.prefix_ids[:2]


def _usable(s: FileSummary, n: int, slot: int) -> np.ndarray:
    assert s.prefix_norms is not None
    return usable(s.prefix_norms[:n, slot], s.median_norms[slot])


def slot_errors(a: FileSummary, b: FileSummary, sa: int, sb: int, n: int) -> tuple[float, float, int, float] | None:
    """(median relative error of a's slot ``sa`` to b's slot ``sb``, median norm ratio, tokens, median
    cosine) on the first n tokens, sink tokens left out; None when no ordinary token is shared."""
    assert a.prefix_proj is not None and b.prefix_proj is not None and b.prefix_norms is not None
    assert a.prefix_norms is not None
    keep = _usable(a, n, sa) & _usable(b, n, sb)
    if not keep.any():
        return None
    pa, pb = a.prefix_proj[:n, sa][keep], b.prefix_proj[:n, sb][keep]
    diff = np.linalg.norm(pa - pb, axis=1)
    ref = b.prefix_norms[:n, sb][keep]
    ratio = a.prefix_norms[:n, sa][keep] / ref
    with np.errstate(all="ignore"):
        cos = np.sum(pa * pb, axis=1) / (np.linalg.norm(pa, axis=1) * np.linalg.norm(pb, axis=1))
    return float(np.median(diff / ref)), float(np.median(ratio)), int(keep.sum()), float(np.nanmedian(cos))


def same_slots(a: FileSummary, b: FileSummary, n: int) -> list[float] | None:
    """Per-slot median relative errors of a against b, slot for slot, on the first n tokens (sink
    tokens left out; one vectorised pass: it runs for every file); None when a slot shares only sinks."""
    assert a.prefix_proj is not None and b.prefix_proj is not None and a.prefix_norms is not None
    assert b.prefix_norms is not None
    k = a.slots or 0
    keep = _usable_all(a, n, k) & _usable_all(b, n, k)  # [n, k]
    counts = keep.sum(axis=0)
    if not counts.all():
        return None
    with np.errstate(all="ignore"):
        rel = np.linalg.norm(a.prefix_proj[:n, :k] - b.prefix_proj[:n, :k], axis=2) / b.prefix_norms[:n, :k]
    rel = np.where(keep, rel, np.inf)
    rel.sort(axis=0)
    cols = np.arange(k)
    return (
        ((rel[(counts - 1) // 2, cols] + rel[counts // 2, cols]) / 2).astype(float).tolist()
    )  # the median of kept tokens


def _usable_all(s: FileSummary, n: int, k: int) -> np.ndarray:
    assert s.prefix_norms is not None
    return usable(s.prefix_norms[:n, :k], np.asarray(s.median_norms[:k], dtype=np.float64))


def within(errs: Sequence[float], tol: Sequence[float]) -> bool:
    return all(e <= t for e, t in zip(errs, tol))


def calibrate(
    files: Iterable[FileSummary], slots: int, limit: int = CALIBRATION_FILES
) -> tuple[tuple[float, ...], int]:
    """(per-slot tolerance, files measured) from the spread of the run (module docstring)."""
    reps: dict[tuple, list[FileSummary]] = defaultdict(list)
    errs: list[list[float]] = []
    for f in files:
        if f.slots != slots or f.prefix_proj is None:
            continue
        k = key(f)
        found = [e for e in (same_slots(f, r, lcp(f, r)) for r in reps[k] if lcp(f, r)) if e is not None]
        if found:  # the nearest earlier file by value: a rep of other layers is not this file's run
            errs.append(min(found, key=max))
            if len(errs) >= limit:
                break
        if len(reps[k]) < _REPS:
            reps[k].append(f)
    if not errs:
        return (MIN_TOLERANCE,) * slots, 0
    table = np.array(errs, dtype=np.float64)
    run = rounding(table)
    top = run.max(axis=0) if len(run) else np.zeros(slots)
    return tuple(float(min(MAX_TOLERANCE, max(MIN_TOLERANCE, SPREAD_FACTOR * t))) for t in top), len(errs)


def rounding(table: np.ndarray) -> np.ndarray:
    """The rows of ``table`` (pairs x slots) that differ by rounding alone (module docstring)."""
    worst = table.max(axis=1)
    order = np.argsort(worst, kind="stable")
    order = order[np.isfinite(worst[order]) & (worst[order] > 0)]
    keep: list[int] = []
    for i in order:
        if (not keep and worst[i] > MAX_SPREAD) or (keep and worst[i] > GAP * worst[keep[-1]]):
            break
        keep.append(int(i))
    return table[keep]


def embedding_slots(group: Sequence[FileSummary]) -> set[int]:
    """Slots whose vectors for a repeated token id are identical at different positions (position-free: B0)."""
    out: set[int] = set()
    f = group[0]
    if f.prefix_proj is None or f.prefix_norms is None:
        return out
    ids = f.prefix_ids[: f.prefix_proj.shape[0]]
    where: dict[int, list[int]] = defaultdict(list)
    for t, tok in enumerate(ids):
        where[tok].append(t)
    repeats = [v for v in where.values() if len(v) > 1]
    if not repeats:
        return out
    for s in range(f.slots or 0):
        errs = []
        for pos in repeats:
            a, b = pos[0], pos[1]
            ref = float(f.prefix_norms[b, s])
            if ref > 0:
                errs.append(float(np.linalg.norm(f.prefix_proj[a, s] - f.prefix_proj[b, s])) / ref)
        if errs and max(errs) < 1e-3:
            out.add(s)
    return out
