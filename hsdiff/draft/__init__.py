"""Predicted acceptance: run the deployed EAGLE-3 draft on both sides' hidden states.

    from hsdiff.draft import Speculation, predict_acceptance
    pa = predict_acceptance("train/", "infer/", report, "draft/", target="target/", tree=Speculation(num_steps=5))
    pa.summary()    # 'your config: 1.02; recommended: 1.84; training-side ceiling: 1.86 tokens/step'
    pa.frame()      # one row per setting (pandas)

:mod:`.checkpoint` reads the draft as SGLang and vLLM load it, :mod:`.run` is its CPU forward
(teacher-forced prefix, multi-step drafting on its own hidden state), :mod:`.predict` replays
greedy verification; :mod:`.inputs` holds what it is told (the draft tree, the report's layers),
:mod:`.records` what it gives. The parts that run the draft need torch (the ``draft`` extra) and load
on first use, so that reading a saved prediction (:mod:`.records`, :mod:`.attach`) does not.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .inputs import ReportLayers, Speculation
from .records import PredictedAcceptance, Prediction

if TYPE_CHECKING:  # pragma: no cover
    from .checkpoint import Draft, TargetHead, load_draft, load_target_head
    from .predict import predict_acceptance

__all__ = [
    "Draft",
    "TargetHead",
    "load_draft",
    "load_target_head",
    "PredictedAcceptance",
    "Prediction",
    "ReportLayers",
    "Speculation",
    "predict_acceptance",
]

#: What runs the draft (torch), loaded on first use.
_LAZY = {
    "Draft": "checkpoint",
    "TargetHead": "checkpoint",
    "load_draft": "checkpoint",
    "load_target_head": "checkpoint",
    "predict_acceptance": "predict",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
