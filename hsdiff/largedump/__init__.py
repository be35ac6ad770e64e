"""The large-dump engine: rows read a block at a time on the row threads, training slots summarised
in one pass, and inference-training pairs scored on every token in one walk or on a sample.

- :mod:`.rows`: reading rows in bounded memory, the row threads (one per CPU of the process), and
  :class:`RowStats`, what the rows read hold (NaN/Inf, all-zero rows) for the data-quality warnings;
- :mod:`.trainslot`: :class:`TrainSlot`, a training slot's norms and sinks from one pass;
- :mod:`.pairs`: the pair-scoring interface, :func:`score_many` (every token of many pairs in one
  walk) and :func:`sketch_all` (a sample of tokens, :class:`SampleCache` holding what it read);
- :mod:`.metrics`: per-token metrics from the norms, and their summary;
- :mod:`.backend`: how rows are summed, numpy or the C loop, chosen once (:data:`BACKEND`).

Which pairs to score, and by which strategy, is decided above it (:mod:`hsdiff.comparison.scoring`),
never by the backend.
"""

from .backend import Backend
from .pairs import NormsRead, PairKey, SampleCache, read_sample, score_many, sketch, sketch_all
from .rows import THREADS, RowStats
from .trainslot import TrainSlot

__all__ = [
    "THREADS",
    "Backend",
    "NormsRead",
    "PairKey",
    "RowStats",
    "SampleCache",
    "TrainSlot",
    "read_sample",
    "score_many",
    "sketch",
    "sketch_all",
]
