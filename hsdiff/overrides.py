"""What overrides the verdict the slots give, once they are decided (:mod:`hsdiff.decide`): dumper runs
in one directory that disagree, tensor-parallel ranks that hold different values for one tensor, and a
match that holds on most tokens but not on a tenth of them. Each returns the verdict and the finding,
its ``overrides`` recording what changed; :mod:`hsdiff.explain` then puts the records into words.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import NamedTuple

from .decide import MAX_LABEL_OFFSET, recommend
from .model import Configured, Evidence, LabelSource, NormFinding, Report, Settings, SlotResult, Verdict
from .model.diagnosis import Diagnosis, Override

__all__ = [
    "Found",
    "runs_disagree",
    "rank_conflict",
    "torn_tokens",
    "norms_only",
    "slot_count",
    "undescribed",
    "NormFinding",
    "TORN_FACTOR",
    "TORN_MIN_TOKENS",
]


class Found(NamedTuple):
    """A comparison's outcome while the overrides are weighed: the verdict and the finding (its
    ``overrides`` say what changed the verdict the slots gave; :mod:`hsdiff.explain` words them)."""

    verdict: Verdict
    diagnosis: Diagnosis


def _overridden(
    d: Diagnosis, why: Override, *, torn: tuple[int, ...] = (), conflicts: tuple[str, ...] = ()
) -> Diagnosis:
    return replace(d, overrides=(*d.overrides, why), torn=d.torn + torn, conflicts=d.conflicts + conflicts)


def runs_disagree(reports: Mapping[str, Report], run: str, doubt: Collection[int], settings: Settings) -> Report:
    """The report on dumper run ``run`` when the inference side holds several runs that disagree (another
    verdict, or slots ``doubt`` whose layer another run puts elsewhere): those slots are left open and an
    OK becomes inconclusive (the cause, from :func:`hsdiff.explain.runs_disagree`, says the configured
    ids describe at most one run)."""
    report = reports[run]
    results = tuple(
        replace(
            s,
            boundary_index=None,
            layer_id=None,
            evidence=Evidence.NONE,
            confidence=0.0,
            note=f"{s.note}; the other runs captured another layer under the same configured ids".lstrip("; "),
        )
        if s.slot in doubt
        else s
        for s in report.slots
    )
    recommended, _ = recommend(settings, [s.boundary_index for s in results])
    verdict = report.verdict if report.verdict == Verdict.MISMATCH else Verdict.INCONCLUSIVE
    return replace(
        report,
        verdict=verdict,
        slots=results,
        recommended=recommended,
        diagnosis=None if report.diagnosis is None else _overridden(report.diagnosis, Override.RUNS_DISAGREE),
    )


def rank_conflict(found: Found, conflicts: Sequence[str]) -> Found:
    """Tensor-parallel ranks that hold different values for one tensor make the verdict a mismatch:
    one rank is wrong, and the draft on that rank is fed wrong states whatever the compared rank shows."""
    if not conflicts:
        return found
    return Found(Verdict.MISMATCH, _overridden(found.diagnosis, Override.RANK_CONFLICT, conflicts=tuple(conflicts)))


#: A match whose 90th-percentile token error exceeds this multiple of the tolerance, over at least
#: :data:`TORN_MIN_TOKENS` ordinary tokens, holds another tensor on part of the sequence: the median
#: (a majority of tokens) matched, a tenth or more of the tokens did not.
TORN_FACTOR = 2.0
TORN_MIN_TOKENS = 10


def torn_tokens(found: Found, results: Sequence[SlotResult], tolerance: float) -> Found:
    """A slot that matches on most ordinary tokens but differs far beyond noise on a tenth or more of
    them (a later prefill chunk or a cached prefix captured at another layer) is not OK: the draft is
    fed wrong states on those tokens whatever the median says."""
    torn = tuple(
        r.slot
        for r in results
        if r.match is not None
        and not r.match.metrics.sink_only
        and r.match.metrics.tokens >= TORN_MIN_TOKENS
        and r.match.metrics.p90_err > TORN_FACTOR * tolerance
    )
    if not torn:
        return found
    verdict = Verdict.INCONCLUSIVE if found.verdict == Verdict.OK else found.verdict
    return Found(verdict, _overridden(found.diagnosis, Override.TORN_TOKENS, torn=torn))


def norms_only(found: Found, findings: Sequence[NormFinding], tolerance: float) -> Found:
    """An inference side that printed only per-token norms (:mod:`hsdiff.comparison.norms`): a mismatch
    when the norms of an engine slot rule out the training slot it feeds, else inconclusive (the
    findings go into the diagnosis; :mod:`hsdiff.explain` names every layer they rule out)."""
    if not findings:
        return found
    wrong = any(f.slot in f.ruled_out(tolerance) for f in findings)
    return Found(
        Verdict.MISMATCH if wrong else Verdict.INCONCLUSIVE,
        replace(_overridden(found.diagnosis, Override.NORMS_ONLY), norms=tuple(findings)),
    )


def slot_count(found: Found, configured: Configured | None, k: int) -> Found:
    """A draft trained on ``k`` slots must be fed ``k``: configured ids that make the engine capture another
    number of slots (more or fewer ids; vLLM and TensorRT-LLM drop repeated ones) make the verdict a
    mismatch, whatever the slots that are fed show: the draft's fc takes k·H inputs."""
    if configured is None or len(configured.boundary_indices) == k:
        return found
    return Found(Verdict.MISMATCH, _overridden(found.diagnosis, Override.SLOT_COUNT))


def undescribed(found: Found, results: Sequence[SlotResult], label_offset: int | None) -> Found:
    """The slots identified by value rest on labels the configured ids gave the captures, and the training
    labels put those same tensors ``label_offset`` layers away, more than any counting convention: one of
    the two labels is wrong, and the configured ids cannot be judged by a dump they may not have made. A
    mismatch or an OK becomes inconclusive (the cause says which way each reading goes)."""
    if label_offset is None or abs(label_offset) <= MAX_LABEL_OFFSET:
        return found
    observed = [r for r in results if r.evidence == Evidence.OBSERVED and r.match is not None]
    if not observed or any(
        r.match is None or r.match.capture.layer is None or r.match.capture.layer.source != LabelSource.CONFIGURED
        for r in observed
    ):
        return found
    return Found(Verdict.INCONCLUSIVE, _overridden(found.diagnosis, Override.UNDESCRIBED))
