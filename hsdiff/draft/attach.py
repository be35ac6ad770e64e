"""Putting a prediction into the comparison report and the gate: a ``predicted_acceptance`` block and a check.

The records stay as they are; :func:`with_prediction` returns a copy whose ``to_dict()`` (and so
its JSON) carries the block — and, with an engine log, the ``engine_log`` and ``measured_acceptance``
blocks — and whose gate checks include ``acceptance`` when a minimum was asked for: the engine's
measured acceptance when a log gives one, else the prediction.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..engine_log import EngineLog, MeasuredAcceptance
from .records import PredictedAcceptance

if TYPE_CHECKING:
    from ..model.gate import Check

__all__ = ["with_prediction", "acceptance_check", "prediction_text", "measured_text"]


def _subclass(base: type) -> type:
    @dataclasses.dataclass(frozen=True, eq=False)
    class WithPrediction(base):  # type: ignore[misc, valid-type]
        predicted_acceptance: PredictedAcceptance | None = None
        engine_log: EngineLog | None = None

        def to_dict(self) -> dict:
            d = super().to_dict()
            blocks = {
                "predicted_acceptance": None
                if self.predicted_acceptance is None
                else self.predicted_acceptance.to_dict()
            }
            if self.engine_log is not None:
                blocks["engine_log"] = self.engine_log.to_dict()
                measured = self.engine_log.acceptance
                blocks["measured_acceptance"] = None if measured is None else measured.to_dict()
            d.update(blocks)
            if isinstance(d.get("report"), dict):  # the gate nests the comparison report
                d["report"].update(blocks)
            return d

    WithPrediction.__name__ = WithPrediction.__qualname__ = base.__name__
    return WithPrediction


_CLASSES: dict[type, type] = {}


def with_prediction(
    record: Any, prediction: PredictedAcceptance | None, checks: tuple = (), engine_log: EngineLog | None = None
) -> Any:
    """A copy of a :class:`~hsdiff.model.Report` or gate result that carries ``prediction`` (and ``checks``,
    and what an engine log said)."""
    base = type(record)
    cls = _CLASSES.setdefault(base, _subclass(base))
    values = {f.name: getattr(record, f.name) for f in dataclasses.fields(record) if f.init}
    if checks:
        values["checks"] = tuple(values["checks"]) + tuple(checks)
    return cls(**values, predicted_acceptance=prediction, engine_log=engine_log)


def acceptance_check(
    prediction: PredictedAcceptance | None, minimum: float | None, measured: MeasuredAcceptance | None = None
) -> Check:
    """The gate check: the acceptance length is at least ``minimum`` — the engine's measured value
    when there is one (``--engine-log``), else the deployed setting's prediction."""
    from ..model.gate import ERROR, INFO, Check

    if measured is not None:
        got = measured.summary()
        if prediction is not None and prediction.deployed is not None:
            got += f"; predicted {prediction.deployed.acceptance_length:.2f}"
        if minimum is None:
            return Check("measured-acceptance", True, INFO, got, path=measured.source)
        ok = measured.acceptance_length >= minimum
        return Check(
            "measured-acceptance",
            ok,
            ERROR,
            f"{got} {'>=' if ok else '<'} --min-acceptance {minimum:g}",
            path=measured.source,
        )
    assert prediction is not None
    row = prediction.deployed
    if row is None:
        return Check(
            "predicted-acceptance",
            False,
            ERROR if minimum is not None else INFO,
            "no prediction for the deployed ids: the inference dump holds no aux states the draft can read",
            path=prediction.draft,
        )
    got = f"predicted acceptance length {row.acceptance_length:.2f} tokens/step ({prediction.summary()})"
    if minimum is None:
        return Check("predicted-acceptance", True, INFO, got, path=prediction.draft)
    ok = row.acceptance_length >= minimum
    return Check(
        "predicted-acceptance",
        ok,
        ERROR,
        f"{got} {'>=' if ok else '<'} --min-acceptance {minimum:g}",
        path=prediction.draft,
    )


def prediction_text(prediction: PredictedAcceptance) -> str:
    """The table and the one-line summary, for the text report."""
    head = (
        f"predicted acceptance (draft {prediction.draft}; {prediction.num_steps} steps, top-k {prediction.topk}, "
        f"{prediction.num_draft_tokens} draft tokens; accept len = tokens per verification step, the target's "
        f"own token included; reference: {prediction.reference})"
    )
    lines = [head, prediction.table(), prediction.summary()]
    if prediction.norms:
        lines.append(f"draft norms (EAGLE-3.1): {', '.join(prediction.norms)}")
    if prediction.scales is not None and prediction.scales.differ:
        lines.append(prediction.scales.words())
    lines += [f"warning: {w}" for w in prediction.warnings]
    return "\n".join(lines)


def measured_text(measured: MeasuredAcceptance, prediction: PredictedAcceptance | None) -> str:
    """The engine's measured acceptance, and the prediction's error against it, for the text report."""
    lines = [measured.summary()]
    row = None if prediction is None else prediction.deployed
    if row is not None:
        err = row.acceptance_length / measured.acceptance_length - 1.0
        lines.append(f"predicted {row.acceptance_length:.2f} for the deployed ids: {err:+.1%} against the engine")
    return "\n".join(lines)
