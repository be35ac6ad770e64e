"""Scoring: every training slot against every inference capture, minimised over training samples and
token offsets (:mod:`hsdiff.align`), plus the evidence a walk-through needs, computed while the
training tensors are loaded so that nothing is read twice."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from .. import align
from ..arrays import lower_median
from ..enums import StrEnum
from ..largedump import NormsRead, PairKey, SampleCache, TrainSlot, score_many, sketch, sketch_all
from ..largedump.rows import RowStats, chunks, extent, read, source
from ..model import Candidate, Capture, Metrics, NormCheck, PrintedEvidence, Score, best_of, ranked
from ..rowio import files_held
from . import validate
from .slots import Slots

Progress = Callable[[str, int, int], None]
#: Per inference capture, what its rows are read from (None: not a hidden state, skipped).
Sources = dict[Capture, "np.ndarray | Capture | None"]


@dataclass(frozen=True)
class Scores:
    """Per training slot, the best candidate of each inference capture (best first); every scored
    pair; the warnings that reading and validating the tensors raised; by capture, the per-token norms
    of the rows read; by pair, the per-token errors of pairs verified in one pass (both for the
    profiles); and the strategy the pairs were scored by."""

    candidates: dict[int, list[Candidate]]
    rows: tuple[Score, ...]
    warnings: tuple[str, ...]
    norms: dict[Capture, NormsRead] = field(default_factory=dict)
    errors: dict[PairKey, np.ndarray] = field(default_factory=dict)
    strategy: Strategy | None = None


#: Above this many bytes of full-precision work (float32, both sides, every pair), pairs are first
#: scored on a sample of tokens and only a shortlist is verified on every token.
SKETCH_ABOVE = 256 * 2**20
#: With one token offset per pair from the ids, pairs are all scored on every token in one walk up to
#: this much work instead: with the C loop, reading each capture whole then cost less than sampling
#: every pair on the 0.2 GB benchmark pair (the 1 GB one is past the crossing). The numpy backend
#: walks too, slower but to the same answer: the strategy, and the rows the warnings rest on, never
#: depend on which backend was built.
WHOLE_WALK_BELOW = 4 * 2**30
#: Ordinary tokens per pair in that sample.
SKETCH_TOKENS = 64
#: Per training slot, pairs are verified in full, best first by their current error (the full one
#: once verified, else the sample's), until the best pairs of this many layers are all verified.
VERIFY_LAYERS = 3


class Strategy(StrEnum):
    """How the pairs of a comparison are scored."""

    EACH = "each"  # every token of every pair, pair by pair (small dumps)
    WALK = "walk"  # every token of every pair, in one walk over the rows
    SKETCH = "sketch"  # a sample of tokens per pair, then a shortlist on every token


def strategy(work: int, one_offset: bool) -> Strategy:
    """The strategy for ``work`` bytes of full-precision work (:data:`SKETCH_ABOVE`,
    :data:`WHOLE_WALK_BELOW`), ``one_offset`` when the ids give every pair one token offset."""
    if work <= SKETCH_ABOVE:
        return Strategy.EACH
    if one_offset and work <= WHOLE_WALK_BELOW:
        return Strategy.WALK
    return Strategy.SKETCH


@dataclass(eq=False)
class _Job:
    """One training slot of one sample against one inference capture."""

    sample: str | None
    slot: int
    train: TrainSlot
    capture: Capture
    offsets: list[int] | None
    order: int = 0
    #: the inference rows compared when only a prefix shared with the training sample is evidence
    source: np.ndarray | None = None
    result: tuple[int, Metrics] | None = None
    verified: bool = False


def score_all(
    slots: Slots,
    infer: list[Capture],
    tolerance: float,
    progress: Progress | None = None,
    verify: Mapping[int, Collection[int]] | None = None,
) -> Scores:
    """Score every slot of every training sample against every inference capture; a training sample
    whose token ids rule it out is never loaded.

    Above :data:`SKETCH_ABOVE` with one offset per pair from the ids, every pair is scored on every
    token in one walk over the rows (up to :data:`WHOLE_WALK_BELOW`). On larger dumps every pair is
    first scored on a sample of ordinary tokens read as row slices, and only the pairs that can
    matter are verified on every token: per slot the best :data:`VERIFY_LAYERS` layers (repeated
    until the verified errors settle) and the captures at the boundaries ``verify`` names for its
    slot (the configured and the labelled one). Decisions rest on verified pairs only; the other
    pairs keep their sample's metrics (``tokens`` says how many were compared)."""
    sources, stats, warnings = _open_sources(infer)
    jobs, partial, ids_failed, homes, prefixes, train_warn = _plan(slots, infer, sources, progress)
    warnings += train_warn
    errors: dict[PairKey, np.ndarray] = {}
    how = _score_pairs(jobs, sources, stats, verify, progress, errors)
    for c, st in stats.items():
        warnings += validate.inference_rows(c, st, st.tokens or 0)
    best, rows = _collect(jobs + partial)
    warnings += _unmatched_warnings(ids_failed, homes, prefixes)
    out = _best_candidates(best, tolerance)
    return Scores(out, tuple(rows), tuple(warnings), _norms(jobs + partial, stats), errors, how)


def _open_sources(infer: list[Capture]) -> tuple[Sources, dict[Capture, RowStats], list[str]]:
    """What each inference capture's rows are read from, and an empty row tally for each hidden
    state; integer tensors are not hidden states: skipped with a warning. Printed values
    (observations) have no rows."""
    warnings: list[str] = []
    sources: Sources = {}
    stats: dict[Capture, RowStats] = {}
    for c in infer:
        if c.observation is not None:
            continue
        if not c.dtype.startswith(("float", "bfloat")):
            warnings.append(f"{c.origin}: integer tensor ({c.dtype}) is not a hidden state; skipped")
            sources[c] = None
            continue
        src = sources[c] = source(c)
        stats[c] = RowStats(extent(src)[0])
    return sources, stats, warnings


def _score_pairs(
    jobs: list[_Job],
    sources: Sources,
    stats: dict[Capture, RowStats],
    verify: Mapping[int, Collection[int]] | None,
    progress: Progress | None,
    errors: dict[PairKey, np.ndarray],
) -> Strategy:
    """Decide the strategy from the work and the offsets, and score every job by it: one walk over
    the rows, a sketch then a verified shortlist, or every pair on every token. Fills each job's
    result, the row tallies and (walk and shortlist) ``errors``; returns the strategy."""
    how = strategy(sum(_work(j, sources) for j in jobs), all(j.offsets and len(j.offsets) == 1 for j in jobs))
    if how is Strategy.WALK:
        if progress:
            progress("verifying pairs", 0, len(jobs))
        _verify_at([(j, j.offsets[0]) for j in jobs], sources, stats, progress, errors)  # type: ignore[index]
        if progress:
            progress("verifying pairs", len(jobs), len(jobs))
    elif how is Strategy.SKETCH:
        _sketch(jobs, sources, stats, progress)
        _verify_shortlist(jobs, sources, stats, verify or {}, progress, errors)
    else:
        for c, st in stats.items():
            whole = sources[c]
            assert whole is not None  # a capture with stats has a source
            for a, x in _chunked(whole):
                st.add(x, a)
        _verify_all(jobs, sources, stats, progress)
    return how


def _collect(
    jobs: list[_Job],
) -> tuple[dict[tuple[int, Capture], list[tuple[Candidate, TrainSlot]]], list[Score]]:
    """Read the scored jobs in report order: per (slot, capture) the candidate of every training
    sample, and one report row per pair."""
    best: dict[tuple[int, Capture], list[tuple[Candidate, TrainSlot]]] = defaultdict(list)
    rows: list[Score] = []
    for j in sorted(jobs, key=lambda j: j.order):
        assert j.result is not None
        off, m = j.result
        c, s = j.capture, j.slot
        best[(s, c)].append((Candidate(c, j.sample, off, m), j.train))
        label_source = None if c.layer is None else c.layer.source
        rows.append(Score(s, j.sample, c.label(), c.boundary, label_source, off, m))
    return best, rows


def _unmatched_warnings(ids_failed: set, homes: dict, prefixes: dict[str | None, int]) -> list[str]:
    """A warning per capture group whose token ids placed it in no training sample: compared on the
    prefix it shares with one, or aligned by value."""
    warnings: list[str] = []
    for g in sorted(x for x in ids_failed if x is not None):
        if homes.get(g):
            continue
        if g in prefixes:
            warnings.append(
                f"{g}: a different prompt from every training sample; only its first {prefixes[g]} tokens, a prefix it "
                "shares with a training sample, were compared (identical tokens give identical hidden states in a "
                "causal model)"
            )
        else:
            warnings.append(f"{g}: its token ids appear in no training sample; tokens were aligned by value instead")
    return warnings


def _best_candidates(
    best: dict[tuple[int, Capture], list[tuple[Candidate, TrainSlot]]], tolerance: float
) -> dict[int, list[Candidate]]:
    """Per slot, each capture's best training sample (with how many samples tie with it and, for
    partial or normed captures, the evidence), the captures ranked best first."""
    out: dict[int, list[Candidate]] = defaultdict(list)
    for (s, _), cands in best.items():
        # the same tokens in two samples score alike up to rounding: the sample the capture is read
        # against must not depend on which CPU summed the rows
        top, ts = best_of(cands, lambda x: x[0].metrics.rel_err, lambda x: _tie_key(x[0]))
        tol = max(tolerance * 0.1, top.metrics.rel_err * 1.02 + 1e-6)
        tied = sum(1 for x, _ in cands if x.metrics.rel_err <= tol)
        if top.capture.is_partial or top.capture.norm is not None:
            top = _with_evidence(top, ts)
        out[s].append(replace(top, samples_tied=tied))
    for s in out:  # captures of one tensor (replicas, a layer dumped twice) tie: not ordered by rounding
        out[s] = ranked(out[s], lambda c: c.metrics.rel_err, _tie_key)
    return dict(out)


def _norms(jobs: list[_Job], stats: dict[Capture, RowStats]) -> dict[Capture, NormsRead]:
    """The per-token norms read, by capture: every training slot scored and every inference capture
    whose rows were tallied."""
    norms = {j.train.capture: NormsRead(j.train.norms, np.arange(j.train.tokens), j.train.tokens) for j in jobs}
    for c, st in stats.items():
        got = st.norms_read()
        if got is not None and st.tokens is not None:
            norms[c] = NormsRead(got[0], got[1], st.tokens)
    return norms


def _plan(
    slots: Slots, infer: list[Capture], sources: Sources, progress: Progress | None
) -> tuple[list[_Job], list[_Job], set, dict, dict[str | None, int], list[str]]:
    """Every pair to score, in report order (printed values scored at once); training slots are read
    here (their norms, sinks and data-quality warnings, in one pass each). A capture whose token ids
    place it in no training sample but which shares its first tokens with one (a system prompt, a chat
    template) is compared on that prefix alone: identical token prefixes give identical hidden states
    in a causal model, the tokens after it are a different prompt."""
    warnings: list[str] = []
    samples: dict[str | None, dict[int, Capture]] = defaultdict(dict)
    for s, caps in slots.items():
        for c in caps:
            samples[c.group][s] = c
    ids_failed = set()
    prefixes: dict[str | None, int] = {}  # inference group -> longest prefix shared with a training sample
    n = len(samples)
    sample_ids = {g: next((c.token_ids for c in caps.values() if c.token_ids), None) for g, caps in samples.items()}
    homes: dict[str | None, set] = {}  # inference group -> training samples whose ids contain its ids
    for c in infer:
        if c.token_ids and c.group not in homes:
            homes[c.group] = {g for g, ids in sample_ids.items() if ids and align.id_offsets(c.token_ids, ids)}
    jobs: list[_Job] = []
    partial: list[_Job] = []
    for si, (sample, slot_caps) in enumerate(samples.items()):
        if progress:
            progress("reading training samples", si, n)
        train_ids = next((c.token_ids for c in slot_caps.values() if c.token_ids), None)
        plan = []
        known: dict[tuple[int, ...], list[int]] = {}  # captures of one forward pass share their ids
        for c in infer:
            offsets = None
            prefix = None
            if c.token_ids and train_ids:
                if c.token_ids not in known:
                    known[c.token_ids] = align.id_offsets(c.token_ids, train_ids)
                offsets = list(known[c.token_ids])
                if not offsets:
                    ids_failed.add(c.group)
                    if homes.get(c.group):
                        continue  # another training sample holds these tokens
                    prefix = align.shared_prefix(c.token_ids, train_ids)
            plan.append((c, offsets, prefix))
        if not plan:
            continue  # token ids rule this sample out: its tensors are never loaded
        loaded = dict(zip(slot_caps, TrainSlot.load_all(list(slot_caps.values()))))
        for s, ts in loaded.items():
            warnings += validate.training_rows(ts.capture, s, ts.stats, ts.tokens)
        for c, offsets, prefix in plan:
            src = sources.get(c)
            if c.observation is None and src is None:
                continue
            head = None
            if prefix is not None and src is not None:  # a different prompt: only the shared prefix is evidence
                head, offsets = read(src, 0, min(prefix[1], extent(src)[0])), [prefix[0]]
                prefixes[c.group] = max(prefixes.get(c.group, 0), prefix[1])
            for s, ts in loaded.items():
                if src is not None and extent(src)[1] != ts.width:
                    continue
                job = _Job(sample, s, ts, c, offsets, len(jobs) + len(partial), head)
                if c.observation is not None:
                    job.result = align.best_alignment(ts, c, None, offsets)
                    partial.append(job)
                else:
                    jobs.append(job)
    if progress:
        progress("reading training samples", n, n)
    return jobs, partial, ids_failed, homes, prefixes, warnings


def _src(j: _Job, sources: Sources) -> np.ndarray | Capture:
    src = j.source if j.source is not None else sources[j.capture]
    assert src is not None
    return src


def _work(j: _Job, sources: Sources) -> int:
    ti, width = extent(_src(j, sources))
    return 8 * min(ti, j.train.tokens) * width


def _chunked(src: np.ndarray | Capture) -> Iterator[tuple[int, np.ndarray]]:
    a = 0
    for x in chunks(src, 0, extent(src)[0]):
        yield a, x
        a += int(x.shape[0])


def _verify(j: _Job, sources: Sources, stats: dict[Capture, RowStats]) -> None:
    j.result = align.best_alignment(j.train, j.capture, _src(j, sources), j.offsets, stats[j.capture])
    j.verified = True


def _verify_all(jobs: list[_Job], sources: Sources, stats: dict[Capture, RowStats], progress: Progress | None) -> None:
    for i, j in enumerate(jobs):
        if progress:
            progress("scoring pairs", i, len(jobs))
        _verify(j, sources, stats)
    if progress:
        progress("scoring pairs", len(jobs), len(jobs))


def _sketch(jobs: list[_Job], sources: Sources, stats: dict[Capture, RowStats], progress: Progress | None) -> None:
    """Every pair's metrics on a sample of :data:`SKETCH_TOKENS` ordinary tokens (rows read alone, from
    files held open while sampling). A capture's pairs are consecutive and share the rows it read; its
    pairs at the same offsets are sampled together (:func:`~hsdiff.largedump.sketch_all`). Sampling
    captures on a second thread, or reading the next capture's rows ahead there, was slower here: the
    reads are short, and the threads contend for the interpreter."""
    done = 0
    with files_held():
        for group in _by_capture(jobs):
            if progress:
                progress("sampling pairs", done, len(jobs))
            cache = SampleCache()  # rows read of the capture, and its samples
            columns: dict = {}  # its columns and norms read for the search by value, shared by its training slots
            # by rows compared (the capture's, or the prefix it shares with one sample) and offsets
            together: dict[tuple[bool, str | None, tuple[int, ...]], list[_Job]] = {}
            for j in group:
                if j.offsets:
                    prefix = j.source is not None
                    together.setdefault((prefix, j.sample if prefix else None, tuple(j.offsets)), []).append(j)
                    continue
                src = _src(j, sources)
                o = align.search_offset(j.train, src, columns)
                j.result = (o, sketch(j.train, src, o, SKETCH_TOKENS, cache))
            for js in together.values():
                src, offsets = _src(js[0], sources), js[0].offsets or []
                tried = [sketch_all([j.train for j in js], src, o, SKETCH_TOKENS, cache) for o in offsets]
                for k, j in enumerate(js):
                    j.result = best_of(
                        [(o, m[k]) for o, m in zip(offsets, tried)], lambda r: r[1].rel_err, lambda r: abs(r[0])
                    )
            for rows, xs, norms in cache.sampled():  # what the rows sampled of the capture hold
                stats[group[0].capture].add_at(xs, rows, norms)
            done += len(group)
    if progress:
        progress("sampling pairs", len(jobs), len(jobs))


def _by_capture(jobs: list[_Job]) -> list[list[_Job]]:
    """Runs of consecutive jobs of one capture."""
    groups: list[list[_Job]] = []
    for i, j in enumerate(jobs):
        if i and jobs[i - 1].capture is j.capture:
            groups[-1].append(j)
        else:
            groups.append([j])
    return groups


def _verify_shortlist(
    jobs: list[_Job],
    sources: Sources,
    stats: dict[Capture, RowStats],
    verify: Mapping[int, Collection[int]],
    progress: Progress | None,
    errors: dict[PairKey, np.ndarray],
) -> None:
    """Verify, per slot, the pairs of the best :data:`VERIFY_LAYERS` layers by current error until they
    are all verified, and every pair whose capture sits at a boundary ``verify`` names for its slot; ``errors`` receives
    their per-token errors (the pictures' curves)."""
    by_slot: dict[int, list[_Job]] = defaultdict(list)
    for j in jobs:
        by_slot[j.slot].append(j)
    done = 0
    while True:
        todo = [
            j
            for j in jobs
            if not j.verified and j.capture.boundary is not None and j.capture.boundary in verify.get(j.slot, ())
        ]
        for slot_jobs in by_slot.values():
            layers: set[int | Capture] = set()  # boundaries, or the capture when it has none
            for j in sorted(slot_jobs, key=lambda j: _err(j.result[1])):  # type: ignore[index]
                if len(layers) >= VERIFY_LAYERS and j.capture.boundary not in layers:
                    break
                layers.add(j.capture.boundary if j.capture.boundary is not None else j.capture)
                if not j.verified and j not in todo:
                    todo.append(j)
        if not todo:
            break
        if progress:
            progress("verifying pairs", done, done + len(todo))
        one = [j for j in todo if j.result is not None and (not j.offsets or len(j.offsets) == 1)]
        for j in todo:
            if j not in one:  # several offsets the ids allow: each is scored in full
                _verify(j, sources, stats)
        # one offset (from the ids, or the value search the sample already ran): verified together
        _verify_at([(j, j.result[0]) for j in one], sources, stats, progress, errors)  # type: ignore[index]
        done += len(todo)
    if progress:
        progress("verifying pairs", done, done)


def _verify_at(
    pairs: list[tuple[_Job, int]],
    sources: Sources,
    stats: dict[Capture, RowStats],
    progress: Progress | None,
    errors: dict[PairKey, np.ndarray],
) -> None:
    """Each job scored on every token at its offset, all in one walk over the rows
    (:func:`~hsdiff.largedump.score_many`); ``errors`` receives their per-token errors."""
    errs: list[np.ndarray | None] = [None] * len(pairs)
    found = score_many(
        [(j.train, _src(j, sources), o) for j, o in pairs],
        [stats[j.capture] for j, _ in pairs],
        errs,
        None if progress is None else lambda i, n: progress("verifying pairs (chunks)", i, n),
    )
    for (j, o), m, e in zip(pairs, found, errs):
        j.result, j.verified = (o, m), True
        if e is not None:
            errors[PairKey(j.train.capture, j.capture, o)] = e


def _tie_key(c: Candidate) -> tuple[int, int]:
    """Between candidates whose errors tie: the one compared on more tokens, then nearer offset 0."""
    return -c.metrics.tokens, abs(c.offset)


def _err(m: Metrics) -> float:
    return m.rel_err if math.isfinite(m.rel_err) else math.inf


def _with_evidence(cand: Candidate, ts: TrainSlot) -> Candidate:
    """``cand`` with where its printed values sat and how a printed norm compares."""
    c = cand.capture
    toks = align.observation_tokens(ts, c, cand.offset) if c.is_partial else []
    printed = _printed(ts, c, toks) if c.is_partial else None
    norm = _norm_check(ts, c, toks) if c.norm is not None else None
    return Candidate(c, cand.sample, cand.offset, cand.metrics, cand.samples_tied, printed, norm)


def _printed(ts: TrainSlot, c: Capture, toks: list[int | None]) -> PrintedEvidence:
    vals, _, cols = align.observation_arrays(c, ts.width)
    placed = [(i, t) for i, t in enumerate(toks) if t is not None]
    ordinary = [(i, t) for i, t in placed if not bool(ts.sinks[t])]
    sinks = tuple(sorted({t for _, t in placed if bool(ts.sinks[t])}))
    used = tuple(sorted({t for _, t in (ordinary or placed)}))
    shown = (ordinary or placed)[:1]
    if not shown:
        return PrintedEvidence(used, sinks, not ordinary)
    i, t = shown[0]
    row = vals[i]
    keep = [k for k in range(len(cols)) if np.isfinite(row[k])][:5]
    return PrintedEvidence(
        used,
        sinks,
        not ordinary,
        token=t,
        cols=tuple(cols[k] for k in keep),
        printed=tuple(float(row[k]) for k in keep),
        training=tuple(float(ts.tensor[t, cols[k]]) for k in keep),
    )


def _norm_check(ts: TrainSlot, c: Capture, toks: list[int | None]) -> NormCheck | None:
    """A printed norm against the training slot's norms: which one it equals, or the likely reason."""
    printed = float(c.norm)  # type: ignore[arg-type]
    norms = ts.norms[np.isfinite(ts.norms)]
    if norms.size == 0:
        return None
    whole = float(np.linalg.norm(ts.tensor))
    refs = {
        "the per-token norm (median)": lower_median(norms),
        "the per-token norm (mean)": float(norms.mean()),
        "the first token's norm": float(ts.norms[0]),
        "the last token's norm": float(ts.norms[-1]),
        "the whole tensor's norm": whole,
    }
    if c.observation is not None:
        vals = np.asarray(c.observation.values, dtype=float)
        refs["the norm of the printed values"] = float(np.sqrt(np.nansum(vals**2)))
        for t in sorted({t for t in toks if t is not None})[:8]:
            refs[f"token {t}'s norm"] = float(ts.norms[t])
    agree = next((f"{k} ({v:.4g})" for k, v in refs.items() if v > 0 and abs(printed / v - 1) <= 0.1), None)
    lo, hi = float(norms.min()), whole
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
