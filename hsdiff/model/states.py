"""The closed sets a comparison's records are stated in — what a slot's answer rests on
(:class:`Evidence`), its state (:class:`Status`), the verdict — and the one rule for whether a
report's ids can be written into a config (:func:`why_not_writable`)."""

from __future__ import annotations

from collections.abc import Sequence

from ..enums import StrEnum

__all__ = ["Evidence", "Status", "Verdict", "UNSETTLED", "why_not_writable"]


class Evidence(StrEnum):
    """What a slot's answer rests on."""

    OBSERVED = "observed"  #: the values match one capture and rule out its neighbours
    #: the values match the labelled layer within noise but cannot rule out a neighbour (sink tokens
    #: only, a few printed values, neighbours not captured): the answer is the labels', confidence capped
    CONSISTENT = "consistent"
    INFERRED = "inferred"  #: no value evidence: the training labels and the offset seen on other slots
    NONE = "none"  #: nothing determines it


class Status(StrEnum):
    """A slot's state: against the configuration when ids are configured, else what the values showed."""

    OK = "ok"  #: the engine captures exactly this slot's layer
    MISMATCH = "mismatch"  #: the engine captures another layer for this slot
    AMBIGUOUS = "ambiguous"  #: a match that cannot be told from a neighbouring layer
    UNVERIFIED = "unverified"  #: the configured id agrees with what is known, but was not observed
    UNOBSERVED = "unobserved"  #: no inference capture could be compared with this slot
    UNMATCHED = "unmatched"  #: no inference capture equals this slot
    IDENTIFIED = "identified"  #: (no configuration) identified by value
    INFERRED = "inferred"  #: (no configuration) inferred from the training labels
    UNLABELLED = "matched-unlabelled"  #: matched a capture that carries no layer number


class Verdict(StrEnum):
    OK = "ok"
    MISMATCH = "mismatch"
    INCONCLUSIVE = "inconclusive"


#: Slot statuses whose layer is not settled enough to be written into a config.
UNSETTLED = (Status.AMBIGUOUS, Status.UNOBSERVED, Status.UNMATCHED, Status.UNLABELLED)


def why_not_writable(
    verdict: str, slots: Sequence[tuple[int | None, str, str]], recommended: Sequence[int | None]
) -> list[str]:
    """Why a report's recommended ids would be a guess (``[]``: they can be written, as ``hsdiff
    fix-config --from-report`` does and the renderers offer): the one rule, on records and on saved
    JSON alike. ``slots``: per slot, its layer (boundary index), status and evidence.

    >>> why_not_writable("mismatch", [(3, "mismatch", "observed"), (16, "mismatch", "inferred")], [3, 16])
    []
    >>> why_not_writable("inconclusive", [(3, "ok", "observed"), (None, "ambiguous", "none")], [3, None])
    ["verdict 'inconclusive'", 'slot 1 ambiguous', 'the recommendation has unknown layers']
    """
    problems = [] if verdict in (Verdict.OK, Verdict.MISMATCH) else [f"verdict {str(verdict)!r}"]
    for i, (b, status, evidence) in enumerate(slots):
        if (
            b is None
            or status in UNSETTLED
            or evidence not in (Evidence.OBSERVED, Evidence.CONSISTENT, Evidence.INFERRED)
        ):
            problems.append(f"slot {i} {status or 'unidentified'}")
    if not any(e == Evidence.OBSERVED for _, _, e in slots):
        problems.append("no slot was observed")
    if not recommended or any(b is None for b in recommended):
        problems.append("the recommendation has unknown layers")
    return problems
