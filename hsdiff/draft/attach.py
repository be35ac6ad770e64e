"""Putting a prediction into the comparison report and the gate: a ``predicted_acceptance`` block and a check.

The records stay as they are; :func:`with_prediction` returns a copy whose ``to_dict()`` (and so
its JSON) carries the block, and whose gate checks include ``predicted-acceptance`` when a minimum
was asked for.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .predict import PredictedAcceptance

__all__ = ["with_prediction", "acceptance_check", "prediction_text"]


def _subclass(base: type) -> type:
    @dataclasses.dataclass(frozen=True, eq=False)
    class WithPrediction(base):  # type: ignore[misc, valid-type]
        predicted_acceptance: PredictedAcceptance | None = None

        def to_dict(self) -> dict:
            d = super().to_dict()
            block = None if self.predicted_acceptance is None else self.predicted_acceptance.to_dict()
            d["predicted_acceptance"] = block
            if isinstance(d.get("report"), dict):  # the gate nests the comparison report
                d["report"]["predicted_acceptance"] = block
            return d

    WithPrediction.__name__ = WithPrediction.__qualname__ = base.__name__
    return WithPrediction


_CLASSES: dict[type, type] = {}


def with_prediction(record: Any, prediction: PredictedAcceptance | None, check: Any = None) -> Any:
    """A copy of a :class:`~hsdiff.model.Report` or gate result that carries ``prediction`` (and ``check``)."""
    base = type(record)
    cls = _CLASSES.setdefault(base, _subclass(base))
    values = {f.name: getattr(record, f.name) for f in dataclasses.fields(record) if f.init}
    if check is not None:
        values["checks"] = tuple(values["checks"]) + (check,)
    return cls(**values, predicted_acceptance=prediction)


def acceptance_check(prediction: PredictedAcceptance, minimum: float | None) -> Any:
    """The gate check: the deployed setting's predicted acceptance length is at least ``minimum``."""
    from ..gate_model import ERROR, INFO, Check

    row = prediction.deployed
    if row is None:
        return Check("predicted-acceptance", False, ERROR if minimum is not None else INFO,
                     "no prediction for the deployed ids: the inference dump holds no aux states the draft can read",
                     path=prediction.draft)
    got = f"predicted acceptance length {row.acceptance_length:.2f} tokens/step ({prediction.summary()})"
    if minimum is None:
        return Check("predicted-acceptance", True, INFO, got, path=prediction.draft)
    ok = row.acceptance_length >= minimum
    return Check("predicted-acceptance", ok, ERROR, f"{got} {'>=' if ok else '<'} --min-acceptance {minimum:g}",
                 path=prediction.draft)


def prediction_text(prediction: PredictedAcceptance) -> str:
    """The table and the one-line summary, for the text report."""
    head = (f"predicted acceptance (draft {prediction.draft}; {prediction.num_steps} steps, top-k {prediction.topk}, "
            f"{prediction.num_draft_tokens} draft tokens; accept len = tokens per verification step, the target's "
            f"own token included; reference: {prediction.reference})")
    lines = [head, prediction.table(), prediction.summary()]
    lines += [f"warning: {w}" for w in prediction.warnings]
    return "\n".join(lines)
