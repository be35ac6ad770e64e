"""What a comparison found, as a record: the kind of finding, the offset it comes to, the slots it
concerns and what overrode the verdict the slots gave. Decided by :mod:`hsdiff.diagnose`, put into
words by :mod:`hsdiff.explain`, written in the JSON report as ``diagnosis``.

    >>> d = Diagnosis(Finding.SLOT_SHIFT, offset=1, slots=(0, 1, 2), missing=(59,))
    >>> d.to_dict()["kind"], d.to_dict()["offset"], d.to_dict()["missing_boundaries"]
    ('slot-shift', 1, [59])
"""

from __future__ import annotations

from dataclasses import dataclass

from ..enums import StrEnum
from .capture import NormPrint

__all__ = ["Finding", "Override", "NormFinding", "Direction", "Miss", "Diagnosis"]


class Finding(StrEnum):
    """The kind of finding; ``offset`` says how far, where the kind has one."""

    MATCH = "match"  #: every slot is what the engine captures
    IDENTIFIED = "identified"  #: no configuration given: every slot identified by value
    #: every compared slot is captured ``offset`` layers off (positive: deeper than training)
    LAYER_SHIFT = "layer-shift"
    #: the configured ids name the training layers ``offset`` slots late: slot s receives training slot s-offset
    SLOT_SHIFT = "slot-shift"
    SLOTS_DIFFER = "slots-differ"  #: ``slots`` are not what the engine captures, by no single shift
    #: no capture equals any training slot; ``offset``: configured minus the training labels, when one
    #: offset relates them
    NO_MATCH = "no-match"
    UNSERVABLE = "unservable"  #: no id list makes the engine capture the training layers
    OPEN = "open"  #: the evidence does not settle ``slots``


class Override(StrEnum):
    """What changed the verdict the slots gave, after they were decided (:mod:`hsdiff.overrides`)."""

    TORN_TOKENS = "torn-tokens"  #: a match holds on most tokens, not on a tenth of them
    RANK_CONFLICT = "rank-conflict"  #: tensor-parallel ranks hold different values for one tensor
    RUNS_DISAGREE = "runs-disagree"  #: the dumper runs in one directory disagree
    NORMS_ONLY = "norms-only"  #: the inference side printed per-token norms only (weak evidence)
    #: the configured ids feed the draft another number of slots than the training side holds
    SLOT_COUNT = "slot-count"
    #: the training labels and the labels the configured ids give the captures the values match are further
    #: apart than any counting convention: the configured ids cannot describe the dump
    UNDESCRIBED = "labels-disagree"


@dataclass(frozen=True)
class Direction:
    """Which way captures that equal no slot they are weighed against miss it, decided once by
    :func:`hsdiff.align.separation.miss_direction` for ``compare``, ``gate`` and ``audit``: ``sign`` -1
    shallower, +1 deeper; the ranges (lowest, highest) over the slots of the figures it rests on, on
    the same tokens."""

    sign: int
    ratios: tuple[float, float]
    errors: tuple[float, float]
    cosines: tuple[float, float]

    @property
    def way(self) -> str:
        return "shallower" if self.sign < 0 else "deeper"

    @property
    def norms(self) -> str:
        return "lower" if self.sign < 0 else "higher"


@dataclass(frozen=True)
class Miss:
    """Which way the configured captures miss their training slots when none equals one: ``seen``,
    every capture's norm on the same tokens below (shallower) or above (deeper) its training slot's,
    at errors and cosines neighbouring layers show. ``layers``: 1 when the distance is that of
    neighbouring layers, else None (not known). ``explained_by`` (titles): the engines whose reading
    of the configured ids captures exactly the training layers one step away; empty when the distance
    was read from the errors against the separation expected between neighbours (``separation``)."""

    seen: Direction
    layers: int | None
    explained_by: tuple[str, ...]
    #: the least error one layer gives (the largest over the slots) that the errors were weighed against
    separation: float | None = None

    @property
    def direction(self) -> int:
        return self.seen.sign

    def to_dict(self) -> dict:
        s = self.seen
        return {
            "direction": s.way,
            "layers": self.layers,
            "explained_by": list(self.explained_by),
            "norm_ratios": [round(x, 4) for x in s.ratios],
            "errors": [round(x, 4) for x in s.errors],
            "cosines": [round(x, 4) for x in s.cosines],
        }


@dataclass(frozen=True)
class NormFinding:
    """What one printed norm series says of every training slot: the median relative difference of its
    norms from each slot's on the same token positions (the closest training sample), by training slot."""

    slot: int  #: the engine's slot the print belongs to
    printed: NormPrint
    differences: dict[int, float]  #: training slot -> median relative norm difference

    def ruled_out(self, tolerance: float) -> list[int]:
        """The training slots these norms cannot be: a median difference over the tolerance."""
        return [s for s, d in self.differences.items() if d > tolerance]

    def to_dict(self) -> dict:
        return {
            "slot": self.slot,
            "tokens": len(self.printed.norms),
            "differences": {str(s): round(d, 4) for s, d in sorted(self.differences.items())},
        }


@dataclass(frozen=True)
class Diagnosis:
    """One comparison's finding. ``slots``: the training slots it concerns (the ones that differ, or
    are open); ``missing``: training boundaries the engine never captures; ``run``: the dumper run the
    report is on, when the inference side held several."""

    kind: Finding
    offset: int | None = None
    slots: tuple[int, ...] = ()
    missing: tuple[int, ...] = ()
    overrides: tuple[Override, ...] = ()
    run: str | None = None
    miss: Miss | None = None  #: nothing matched: which way the captures miss (norms, errors, cosines)
    torn: tuple[int, ...] = ()  #: slots that match on most tokens, not on a tenth of them (torn-tokens)
    conflicts: tuple[str, ...] = ()  #: tensors the tensor-parallel ranks disagree on (rank-conflict)
    norms: tuple[NormFinding, ...] = ()  #: what printed per-token norms rule out (norms-only)

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "offset": self.offset,
            "slots": list(self.slots),
            "missing_boundaries": list(self.missing),
            "overrides": list(self.overrides),
            "run": self.run,
            "miss": None if self.miss is None else self.miss.to_dict(),
            "torn_slots": list(self.torn),
            "rank_conflicts": list(self.conflicts),
            "norm_findings": [f.to_dict() for f in self.norms],
        }
