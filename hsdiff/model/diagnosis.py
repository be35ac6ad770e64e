"""What a comparison found, as a record: the kind of finding, the offset it comes to, the slots it
concerns and what overrode the verdict the slots gave. Decided by :mod:`hsdiff.diagnose`, put into
words by :mod:`hsdiff.explain`, written in the JSON report as ``diagnosis``.

    >>> d = Diagnosis(Finding.SLOT_SHIFT, offset=1, slots=(0, 1, 2), missing=(59,))
    >>> d.to_dict()["kind"], d.to_dict()["offset"], d.to_dict()["missing_boundaries"]
    ('slot-shift', 1, [59])
"""

from __future__ import annotations

from dataclasses import dataclass

from .results import _StrEnum

__all__ = ["Finding", "Override", "Miss", "Diagnosis"]


class Finding(_StrEnum):
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


class Override(_StrEnum):
    """What changed the verdict the slots gave, after they were decided (:mod:`hsdiff.overrides`)."""

    TORN_TOKENS = "torn-tokens"  #: a match holds on most tokens, not on a tenth of them
    RANK_CONFLICT = "rank-conflict"  #: tensor-parallel ranks hold different values for one tensor
    RUNS_DISAGREE = "runs-disagree"  #: the dumper runs in one directory disagree
    NORMS_ONLY = "norms-only"  #: the inference side printed per-token norms only (weak evidence)


@dataclass(frozen=True)
class Miss:
    """Which way the configured captures miss their training slots when none equals one: every
    capture's norm on the same tokens below (``direction`` -1: shallower) or above (+1: deeper) its
    training slot's, at errors and cosines neighbouring layers show. ``layers``: 1 when reading the
    configured ids by another engine's rule (``explained_by``, titles) captures exactly the training
    layers one step away, else None (the distance is not known). Ranges are (lowest, highest)."""

    direction: int
    layers: int | None
    explained_by: tuple[str, ...]
    ratios: tuple[float, float]
    errors: tuple[float, float]
    cosines: tuple[float, float]

    def to_dict(self) -> dict:
        return {"direction": "shallower" if self.direction < 0 else "deeper", "layers": self.layers,
                "explained_by": list(self.explained_by), "norm_ratios": [round(x, 4) for x in self.ratios],
                "errors": [round(x, 4) for x in self.errors], "cosines": [round(x, 4) for x in self.cosines]}


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

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "offset": self.offset,
            "slots": list(self.slots),
            "missing_boundaries": list(self.missing),
            "overrides": list(self.overrides),
            "run": self.run,
            "miss": None if self.miss is None else self.miss.to_dict(),
        }
