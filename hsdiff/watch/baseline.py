"""Where a watch's baseline comes from: a value given, or a saved hsdiff report (``compare --draft ... --json``,
its ``predicted_acceptance``; else the ``measured_acceptance`` an ``--engine-log`` put in it). Without
either, the watch learns it from its first windows (:class:`~hsdiff.watch.watcher.Watcher`).

>>> given(1.8).summary()
'1.800 from the value given'
"""

from __future__ import annotations

import json
import os

from ..errors import InputError
from .records import Baseline

__all__ = ["given", "from_report", "fit_to"]

#: The prediction rows a baseline is taken from, first found first: the draft fed its training layers
#: (what a healthy deployment gets), then the ids hsdiff recommends, then the ids as deployed.
ROWS = ("training", "recommended", "configured")


def given(value: float) -> Baseline:
    """A baseline acceptance length given by hand (tokens per step, the target's own token included)."""
    if not value > 1.0:
        raise InputError(
            f"`baseline={value}` is not an acceptance length above 1",
            hint="give tokens per verification step, the target's own included (e.g. 2.4)",
            options=("baseline",),
        )
    return Baseline(float(value), None, "the value given")


def from_report(path: str | os.PathLike) -> Baseline:
    """The baseline a saved hsdiff JSON report holds (see the module docstring)."""
    p = os.fspath(path)
    try:
        with open(p, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise InputError(f"cannot read the report: {e.strerror or e}", path=p) from None
    except ValueError as e:
        raise InputError(f"not a JSON report ({e})", path=p, hint="give a report written by --json") from None
    pa = doc.get("predicted_acceptance") if isinstance(doc, dict) else None
    if isinstance(pa, dict):
        for name in ROWS:
            row = pa.get(name)
            if isinstance(row, dict) and row.get("acceptance_length"):
                per = row.get("acceptance_by_position") or None
                k = (pa.get("settings") or {}).get("num_steps")
                return Baseline(
                    float(row["acceptance_length"]),
                    None if per is None else tuple(float(x) for x in per),
                    f"the prediction in {os.path.basename(p)} (row {name})",
                    int(k) if k else None,
                )
    measured = doc.get("measured_acceptance") if isinstance(doc, dict) else None
    if isinstance(measured, dict) and measured.get("acceptance_length"):
        per = measured.get("acceptance_by_position") or None
        return Baseline(
            float(measured["acceptance_length"]),
            None if per is None else tuple(float(x) for x in per),
            f"the acceptance the engine measured in {os.path.basename(p)}",
            len(per) if per else None,
        )
    raise InputError(
        "the report holds no predicted or measured acceptance",
        path=p,
        hint="write it with `hsdiff compare TRAIN INFER --draft DRAFT --target-model TARGET --json FILE` "
        "(or --engine-log), or give `baseline` as a value",
        options=("baseline",),
    )


def fit_to(baseline: Baseline, spec_tokens: int | None) -> Baseline:
    """The baseline for an engine drafting ``spec_tokens`` per step: a prediction over more positions is cut
    to the engine's (AL = 1 + the sum of the per-position rates); over fewer it is kept, and said.

    >>> fit_to(Baseline(1.6, (0.4, 0.15, 0.05), "r", 3), 2).acceptance_length
    1.55
    """
    k = baseline.spec_tokens
    if spec_tokens is None or k is None or k == spec_tokens:
        return baseline
    if baseline.per_position and len(baseline.per_position) >= spec_tokens:
        per = baseline.per_position[:spec_tokens]
        return Baseline(
            round(1.0 + sum(per), 6),
            per,
            baseline.source,
            spec_tokens,
            baseline.notes + (f"cut from {k} to the engine's {spec_tokens} speculative tokens",),
        )
    note = f"predicted for {k} speculative tokens, the engine drafts {spec_tokens}: " + (
        "the baseline is low, so a collapse is called later" if k < spec_tokens else "kept as it is"
    )
    return Baseline(baseline.acceptance_length, baseline.per_position, baseline.source, k, baseline.notes + (note,))
