"""Whether a dumper's layer tags count boundaries or layer outputs, told by value where the dump allows it.

A tag is a label like any other: a dumper called after each decoder layer but tagged with the loop index
holds B(i+1) under tag i, and reading its tags as boundary indices puts every capture one layer shallow.
The values can tell: the boundary B0 is the embedding lookup, a function of the token id alone, so two
positions that hold the same token hold the same row there, bit for bit (up to the engine's noise); after
any layer the rows differ (attention mixes in the context). Tag 0 of a run, weighed against tag 1 (the
next layer, whatever the counting), therefore settles it:

* its rows of a repeated token are equal, or differ by a small fraction of tag 1's: it is B0, and the tags
  count boundaries, as read (the labels are marked checked: a training label that disagrees with them is
  the one that is wrong);
* they differ as much as tag 1's: it is no embedding lookup, so tag 0 is the output of layer 0 (B1) and
  every tag of the run counts layer outputs (B = tag + 1): the captures are relabelled and the report says
  why.

Where no token repeats (or the tokens are not known, or the run does not start at 0), nothing is told and
the tags stay as read; a disagreement with the training labels then lowers the confidence of the slots
they decide (:mod:`hsdiff.decide`).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np

from ..arrays import as_f32
from ..model import Capture, Dump, Index, LabelSource, Layer

__all__ = ["arbitrate", "EQUAL", "DIFFERENT", "LOOKUP_FRACTION", "SIMILAR"]

#: Rows of one token at two positions within this relative difference are the same row (an embedding
#: lookup is bit for bit the same; a dtype round trip of the whole tensor keeps it within rounding).
EQUAL = 1e-3
#: With no other tag to weigh it against, rows that differ by more than this (median over the repeated
#: tokens) are not an embedding lookup plus noise: the aligner's tolerance is 10 %, and after SmolLM2's
#: first layer one token's rows differ by a median of 29 % (bf16, the fixture samples' repeated tokens).
DIFFERENT = 0.2
#: Tag 0 is the embedding lookup when its rows of a repeated token differ by less than this fraction of
#: tag 1's (noise alone there, context after a layer: SmolLM2 B0 0 %, B1 29 %, B2 35 % in median), and
#: no lookup when by more than :data:`SIMILAR` of it (two layer outputs differ alike).
LOOKUP_FRACTION = 0.25
SIMILAR = 0.5


def arbitrate(infer: Dump) -> tuple[Dump, list[str]]:
    """``infer`` with the tags of each run whose counting the values tell marked checked, those that count
    layer outputs relabelled (B = tag + 1), and a sentence per run relabelled."""
    runs: dict[str | None, list[Capture]] = defaultdict(list)
    for c in infer.captures:
        if c.layer is not None and c.layer.source == LabelSource.TAG and c.layer.index == Index.BOUNDARY:
            runs[c.group].append(c)
    relabel: dict[int, Capture] = {}
    notes = []
    for group, caps in runs.items():
        index, spread = _counting(caps)
        if index is None:
            continue
        for c in caps:
            assert c.layer is not None
            relabel[id(c)] = c.replace(layer=Layer(c.layer.value, index, LabelSource.TAG, checked=True))
        if index == Index.BOUNDARY:
            continue
        zero = next(c for c in caps if c.layer is not None and c.layer.value == 0)
        notes.append(
            f"{zero.origin}: the dumper's tag 0 holds no embedding lookup (one token's rows differ by "
            f"{spread:.0%} between its positions, in median, where the embeddings repeat them), so its tags "
            f"count layer outputs: tag i is read as B(i+1) for the {len(caps)} tagged captures of "
            f"{group or 'the dump'}"
        )
    if not relabel:
        return infer, []
    captures = tuple(relabel.get(id(c), c) for c in infer.captures)
    return dataclasses.replace(infer, captures=captures), notes


def _counting(caps: list[Capture]) -> tuple[Index | None, float]:
    """How a run's tags count, from tag 0 against tag 1 (None: not told), and tag 0's repeat spread."""
    by_tag = {c.layer.value: c for c in caps if c.layer is not None and not c.is_partial}
    zero = by_tag.get(0)
    e = None if zero is None else _repeat_spread(zero)
    if e is None:
        return None, 0.0
    if e <= EQUAL:
        return Index.BOUNDARY, e
    n = None if 1 not in by_tag else _repeat_spread(by_tag[1])
    if n is None or n <= EQUAL:
        return (Index.OUTPUT if e > DIFFERENT else None), e
    if e < LOOKUP_FRACTION * n:
        return Index.BOUNDARY, e
    if e > SIMILAR * n and e > EQUAL:
        return Index.OUTPUT, e
    return None, e


def _repeat_spread(c: Capture) -> float | None:
    """The median relative difference between the rows of one token id at two positions (over the tokens
    that repeat), or None when no token repeats within the rows the capture holds."""
    ids = c.token_ids
    n = c.tokens
    if ids is None or n is None or len(ids) != n:
        return None
    where: dict[int, list[int]] = defaultdict(list)
    for pos, t in enumerate(ids):
        where[t].append(pos)
    pairs = [(ps[0], p) for ps in where.values() if len(ps) > 1 for p in ps[1:]]
    if not pairs:
        return None
    x = as_f32(c.array())
    spreads = []
    for a, b in pairs[:64]:
        ref = float(np.linalg.norm(x[a]))
        if ref > 0:
            spreads.append(float(np.linalg.norm(x[a] - x[b])) / ref)
    return float(np.median(spreads)) if spreads else None
