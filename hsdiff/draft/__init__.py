"""Predicted acceptance: run the deployed EAGLE-3 draft on both sides' hidden states.

    from hsdiff.draft import Speculation, predict_acceptance
    pa = predict_acceptance("train/", "infer/", report, "draft/", target="target/", tree=Speculation(num_steps=5))
    pa.summary()    # 'your config: 1.02; recommended: 1.84; training-side ceiling: 1.86 tokens/step'
    pa.frame()      # one row per setting (pandas)

:mod:`.checkpoint` reads the draft as SGLang and vLLM load it, :mod:`.run` is its CPU forward
(teacher-forced prefix, multi-step drafting on its own hidden state), :mod:`.predict` replays
greedy verification; :mod:`.inputs` holds what it is told (the draft tree, the report's layers),
:mod:`.records` what it gives.
"""

from __future__ import annotations

from .checkpoint import Draft, TargetHead, load_draft, load_target_head
from .inputs import ReportLayers, Speculation
from .predict import predict_acceptance
from .records import PredictedAcceptance, Prediction

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
