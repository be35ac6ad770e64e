"""Printed values whose layout the print does not state: a summarised print of the concatenated aux slots.

``print(torch.cat(aux_hidden_states, -1))`` shows the first and last three columns of a ``[T, k·H]``
tensor, without its shape: the first columns are slot 0's, the last ones slot k-1's. Read as one
slot of width H, those six columns mix two layers and match nothing. A lone printed capture of its
forward pass, with no slot or layer label, no printed width and columns counted from its end, is read
as the engine's k slots side by side (k: the configured ids, else the training slots) unless its
values match a training slot as one tensor (then it was one slot printed whole).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from .. import align
from ..largedump import TrainSlot
from ..model import Capture, Configured, Dump
from .slots import Slots

__all__ = ["concatenated", "MAX_SAMPLES"]

#: Training samples a print is tried against as one slot (the first ones; a print of another sample
#: is then read as the concatenation, the engine's layout).
MAX_SAMPLES = 64


def concatenated(
    infer: Dump, train: Slots, hidden: int, configured: Configured | None, tolerance: float
) -> tuple[Dump, list[str]]:
    """``infer`` with each print of the concatenated slots given the concatenation's width (so that
    :meth:`Capture.split` hands its columns to slot 0 and slot k-1), and a note per print so read."""
    k = len(configured.boundary_indices) if configured is not None else len(train)
    if k < 2:
        return infer, []
    by_group: dict[str | None, list[Capture]] = defaultdict(list)
    for c in infer.captures:
        if c.observation is not None:
            by_group[c.group].append(c)
    cands = [caps[0] for caps in by_group.values() if len(caps) == 1 and _unplaced(caps[0], hidden)]
    if not cands:
        return infer, []
    loaded: list[TrainSlot] | None = None
    changed: dict[int, Capture] = {}
    notes = []
    for c in cands:
        if loaded is None:
            loaded = _load(train)
        if any(_fits(ts, c, tolerance) for ts in loaded):
            continue
        changed[id(c)] = c.replace(width=k * hidden, concat=True)
        between = "" if k == 2 else f"; slot{'s' if k > 3 else ''} {', '.join(map(str, range(1, k - 1)))} not printed"
        notes.append(
            f"{c.origin}: one print without a width, a slot or a layer, whose columns count from its end: read as "
            f"the {k} aux slots side by side ([T, {k}×{hidden}], torch.cat's layout): its first columns are "
            f"slot 0's, its last slot {k - 1}'s{between}"
        )
    if not changed:
        return infer, []
    captures = tuple(changed.get(id(c), c) for c in infer.captures)
    return dataclasses.replace(infer, captures=captures), notes


def _unplaced(c: Capture, hidden: int) -> bool:
    """A printed capture whose columns cannot all be one slot's: counted from an unknown end, or past H."""
    obs = c.observation
    assert obs is not None
    if c.width is not None or c.slot is not None or c.layer is not None or c.post_norm:
        return False
    return any(col < 0 or col >= hidden for col in obs.cols)


def _load(train: Slots) -> list[TrainSlot]:
    """The training slots of the first :data:`MAX_SAMPLES` samples (a sample's slots read together)."""
    slots = [caps[:MAX_SAMPLES] for _, caps in sorted(train.items())]
    out: list[TrainSlot] = []
    for i in range(max(map(len, slots), default=0)):
        out.extend(TrainSlot.load_all([caps[i] for caps in slots if i < len(caps)]))
    return out


def _fits(ts: TrainSlot, c: Capture, tolerance: float) -> bool:
    """Whether the print matches the training slot ``ts`` as one tensor (within ``tolerance``)."""
    _, m = align.best_alignment(ts, c, None, None)
    return m.tokens > 0 and m.rel_err <= tolerance
