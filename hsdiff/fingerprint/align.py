"""Where a capture's tokens sit among a fingerprint's probes: by token id when the capture has them,
else by value (:func:`hsdiff.fingerprint.check` tries every probe from its first token)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["MIN_OVERLAP", "Placement", "place"]

#: Fewest consecutive tokens a capture must share with a probe to be compared with it.
MIN_OVERLAP = 4


@dataclass(frozen=True)
class Placement:
    """Capture rows ``[start, stop)`` are tokens ``[start + offset, stop + offset)`` of probe ``probe``."""

    probe: int
    offset: int
    start: int
    stop: int

    @property
    def tokens(self) -> int:
        return self.stop - self.start


def place(ids: Sequence[int], probes: Sequence[Sequence[int]]) -> Placement | None:
    """The longest run of ``ids`` that equals a run of one probe, at least :data:`MIN_OVERLAP` tokens and
    reaching the end of the shorter of the two (a capture of the whole request holds the probe as its
    prefix; a later prefill chunk holds a later part); ties go to the first probe, then offset 0."""
    a = np.asarray(ids, dtype=np.int64)
    best: Placement | None = None
    for j, p in enumerate(probes):
        b = np.asarray(p, dtype=np.int64)
        if a.size == 0 or b.size == 0:
            continue
        offsets = {int(k) for k in np.flatnonzero(b == a[0])} | {-int(k) for k in np.flatnonzero(a == b[0])}
        for o in sorted(offsets, key=abs):
            i0 = max(0, -o)
            i1 = min(a.size, b.size - o)
            if i1 - i0 < MIN_OVERLAP or not np.array_equal(a[i0:i1], b[i0 + o : i1 + o]):
                continue
            if best is None or i1 - i0 > best.tokens:
                best = Placement(j, o, i0, i1)
    return best
