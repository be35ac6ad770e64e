"""The records that flow through hsdiff, in the order data flows.

Readers make :class:`Capture` objects grouped in a :class:`Dump` (:mod:`.capture`); the aligner
scores them into :class:`Candidate` and :class:`Score` records; :mod:`hsdiff.decide` turns those into
:class:`SlotDecision` and :class:`SlotResult` records; a :class:`Report` carries the verdict to the
renderers (:mod:`.results`). Records are frozen dataclasses; closed sets are ``str`` enums.

A capture is a *description* of a tensor plus a loader: nothing is read from disk until
:meth:`Capture.load` is called, and torch/safetensors loads are memory-mapped, so a directory of
tens of GB can be opened and scanned cheaply.
"""

from .capture import INFER, TRAIN, Capture, Dump, Index, LabelSource, Layer, NormPrint, Observation, Origin
from .diagnosis import Diagnosis, Direction, Finding, Miss, NormFinding, Override
from .results import (
    Candidate,
    Configured,
    EngineIds,
    Evidence,
    Inputs,
    Metrics,
    NormCheck,
    PrintedEvidence,
    Profiles,
    Recommendation,
    Report,
    Score,
    SlotDecision,
    SlotResult,
    Status,
    Verdict,
    best_of,
    layers_in_words,
    pct,
    ranked,
)
from .settings import EngineVersion, Settings

__all__ = [
    "Diagnosis",
    "Finding",
    "Miss",
    "NormFinding",
    "Direction",
    "Override",
    "TRAIN",
    "INFER",
    "Origin",
    "Index",
    "LabelSource",
    "Layer",
    "Observation",
    "Capture",
    "Dump",
    "NormPrint",
    "Evidence",
    "Status",
    "Verdict",
    "Metrics",
    "NormCheck",
    "PrintedEvidence",
    "Candidate",
    "Score",
    "SlotDecision",
    "SlotResult",
    "Recommendation",
    "EngineIds",
    "EngineVersion",
    "Settings",
    "Configured",
    "Inputs",
    "Profiles",
    "Report",
    "pct",
    "layers_in_words",
    "best_of",
    "ranked",
]
