"""What overrides the verdict the slots give, once they are decided (:mod:`hsdiff.decide`): dumper runs
in one directory that disagree, tensor-parallel ranks that hold different values for one tensor, and a
match that holds on most tokens but not on a tenth of them. Each returns the verdict and cause to report.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from .decide import recommend
from .model import Evidence, NormPrint, Report, Settings, SlotResult, Verdict, pct
from .model.diagnosis import Diagnosis, Override

__all__ = ["Found", "runs_disagree", "rank_conflict", "torn_tokens", "norms_only", "NormFinding", "TORN_FACTOR",
           "TORN_MIN_TOKENS"]


class Found(NamedTuple):
    """A comparison's outcome while the overrides are weighed: the verdict, its cause, the finding."""

    verdict: Verdict
    cause: str
    diagnosis: Diagnosis


def _overridden(d: Diagnosis, why: Override) -> Diagnosis:
    return replace(d, overrides=(*d.overrides, why))


def runs_disagree(reports: Mapping[str, Report], run: str, doubt: Collection[int], settings: Settings) -> Report:
    """The report on dumper run ``run`` when the inference side holds several runs that disagree (another
    verdict, or slots ``doubt`` whose layer another run puts elsewhere): those slots are left open, an
    OK becomes inconclusive, and the cause says the configured ids describe at most one run."""
    report = reports[run]
    results = tuple(
        replace(s, boundary_index=None, layer_id=None, evidence=Evidence.NONE, confidence=0.0,
                note=f"{s.note}; the other runs captured another layer under the same configured ids".lstrip("; "))
        if s.slot in doubt else s for s in report.slots)
    recommended, _ = recommend(settings, [s.boundary_index for s in results])
    verdict = report.verdict if report.verdict == Verdict.MISMATCH else Verdict.INCONCLUSIVE
    cause = (f"The dumper runs in the inference directory disagree ({', '.join(f'{n}: {r.verdict}' for n, r in reports.items())}); "
             f"the configured ids describe at most one of them. On run {run}: {report.cause}")
    return replace(report, verdict=verdict, cause=cause, slots=results, recommended=recommended,
                   diagnosis=None if report.diagnosis is None else _overridden(report.diagnosis, Override.RUNS_DISAGREE))


def rank_conflict(found: Found, conflicts: Sequence[str]) -> Found:
    """Tensor-parallel ranks that hold different values for one tensor make the verdict a mismatch:
    one rank is wrong, and the draft on that rank is fed wrong states whatever the compared rank shows."""
    if not conflicts:
        return found
    more = f" (and {len(conflicts) - 1} more tensor(s))" if len(conflicts) > 1 else ""
    return Found(Verdict.MISMATCH, (
        f"Tensor-parallel ranks disagree: {conflicts[0]}{more}. Replicated ranks must hold the same hidden states; "
        f"check the all-reduce and that every rank runs the same configuration. On the first rank: {found.cause}"
    ), _overridden(found.diagnosis, Override.RANK_CONFLICT))


#: A match whose 90th-percentile token error exceeds this multiple of the tolerance, over at least
#: :data:`TORN_MIN_TOKENS` ordinary tokens, holds another tensor on part of the sequence: the median
#: (a majority of tokens) matched, a tenth or more of the tokens did not.
TORN_FACTOR = 2.0
TORN_MIN_TOKENS = 10


def torn_tokens(found: Found, results: Sequence[SlotResult], tolerance: float) -> Found:
    """A slot that matches on most ordinary tokens but differs far beyond noise on a tenth or more of
    them (a later prefill chunk or a cached prefix captured at another layer) is not OK: the draft is
    fed wrong states on those tokens whatever the median says."""
    torn = [r for r in results if r.match is not None and not r.match.metrics.sink_only
            and r.match.metrics.tokens >= TORN_MIN_TOKENS and r.match.metrics.p90_err > TORN_FACTOR * tolerance]
    if not torn:
        return found
    verdict, cause = found.verdict, found.cause
    what = "; ".join(f"slot {r.slot}: median error {pct(r.match.metrics.rel_err)}, but the worst tenth of its "
                     f"{r.match.metrics.tokens} ordinary tokens beyond {pct(r.match.metrics.p90_err)}"
                     for r in torn if r.match is not None)
    return Found((Verdict.INCONCLUSIVE if verdict == Verdict.OK else verdict), (
        f"Part of the sequence differs: {what}. The values match on most tokens and differ far beyond "
        f"noise (over {pct(TORN_FACTOR * tolerance)}) on others, so the engine feeds another tensor on part of the "
        f"sequence (a later prefill chunk, a cached prefix, decode steps), or the two sides ran prompts that share only part of their tokens: compare the per-token errors "
        f"(--plot, tokens.png). {cause}"
    ), _overridden(found.diagnosis, Override.TORN_TOKENS))


@dataclass(frozen=True)
class NormFinding:
    """What one printed norm series says of every training slot: the median relative difference of its
    norms from each slot's on the same token positions (the closest training sample), by training slot."""

    slot: int  # the engine's slot the print belongs to
    printed: NormPrint
    differences: dict[int, float]  # training slot -> median relative norm difference

    def ruled_out(self, tolerance: float) -> list[int]:
        """The training slots these norms cannot be: a median difference over the tolerance."""
        return [s for s, d in self.differences.items() if d > tolerance]


def norms_only(found: Found, findings: Sequence[NormFinding], names: Sequence[str], tolerance: float) -> Found:
    """An inference side that printed only per-token norms (:mod:`hsdiff.comparison.norms`): a mismatch
    when the norms of an engine slot rule out the training slot it feeds, else inconclusive; the cause
    names every training layer the norms rule out (``names``: training slot -> its layer in words)."""
    if not findings:
        return found
    said, wrong = [], False
    for f in findings:
        out = f.ruled_out(tolerance)
        where = f"the engine's slot {f.slot} ({f.printed.origin}, {len(f.printed.norms)} tokens)"
        own = f.differences.get(f.slot)
        if f.slot in out:
            wrong = True
            others = [s for s in out if s != f.slot]
            said.append(f"{where} is not training slot {f.slot} ({names[f.slot]}): its norms are {own:.1%} off"
                        + (f"; nor {', '.join(f'{names[s]} ({pct(f.differences[s])})' for s in others)}" if others else ""))
        elif own is not None:
            said.append(f"{where} is within {own:.1%} of training slot {f.slot} ({names[f.slot]}), which norms cannot confirm"
                        + (f"; it is not {', '.join(f'{names[s]} ({pct(f.differences[s])})' for s in out)}" if out else ""))
    tokens = max(len(f.printed.norms) for f in findings)
    cause = (f"The inference side printed only per-token norms ({tokens} tokens × {len(findings)} slots): norms cannot prove "
             f"a layer, but a median norm difference over the {pct(tolerance)} tolerance rules one out (no match can "
             f"differ less in values than in norms). {_sentence('; '.join(said))}. "
             + ("The engine feeds the draft other layers than it was trained on. " if wrong else "")
             + "Print the values of each capture (e.g. h[:4, :16]) to identify the layers.")
    return Found(Verdict.MISMATCH if wrong else Verdict.INCONCLUSIVE, cause,
                 _overridden(found.diagnosis, Override.NORMS_ONLY))


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]
