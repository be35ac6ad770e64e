"""Predicted acceptance: run the deployed EAGLE-3 draft on both sides' hidden states.

    from hsdiff.draft import predict_acceptance
    pa = predict_acceptance("train/", "infer/", report, "draft/", target="target/", num_steps=5)
    pa.summary()    # 'your config: 1.02; recommended: 1.84; training-side ceiling: 1.86 tokens/step'
    pa.frame()      # one row per setting (pandas)

:mod:`.checkpoint` reads the draft as SGLang and vLLM load it, :mod:`.run` is its CPU forward
(teacher-forced prefix, multi-step drafting on its own hidden state), :mod:`.predict` replays
greedy verification.
"""

from __future__ import annotations

from .checkpoint import Draft, TargetHead, load_draft, load_target_head
from .predict import PredictedAcceptance, Prediction, predict_acceptance

__all__ = ["Draft", "TargetHead", "load_draft", "load_target_head", "PredictedAcceptance", "Prediction",
           "predict_acceptance"]
