"""What a comparison finds: scores of inference captures against training slots, the decision for
each slot, and the :class:`Report` that carries the verdict to the renderers.

Closed sets are ``str``-valued enums (:class:`Evidence`, :class:`Status`, :class:`Verdict`), so the
JSON keeps plain strings and ``report.verdict == "ok"`` reads as before.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from ..extras import require
from ..jsonout import dumps
from .capture import Capture
from .settings import EngineVersion, Settings
from .states import UNSETTLED, Evidence, Status, Verdict, why_not_writable

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from .diagnosis import Diagnosis

__all__ = [
    "config_line",
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
    "Configured",
    "Report",
    "Inputs",
    "Profiles",
    "pct",
    "layers_in_words",
    "UNSETTLED",
    "why_not_writable",
    "TIE_REL",
    "best_of",
    "ranked",
]

_T = TypeVar("_T")

#: Two errors closer than this (relative) are a tie. Per-token errors come from float32 sums of
#: squares over a row of H values, whose rounding moves with the order a BLAS kernel sums in: by at
#: most H * 2**-24 relative (4e-4 at H = 7168, 3e-5 at H = 576), in practice far less. A smaller
#: difference says which CPU ran, not which candidate is better.
TIE_REL = 1e-3


def best_of(items: Sequence[_T], error: Callable[[_T], float], prefer: Callable[[_T], Any]) -> _T:
    """The item of smallest ``error``; items within :data:`TIE_REL` of it are a tie, settled by the
    smallest ``prefer`` key, then by order. The choice does not depend on the last bits of the errors
    (a NaN error counts as infinite)."""
    return ranked(items, error, prefer)[0]


def ranked(items: Sequence[_T], error: Callable[[_T], float], prefer: Callable[[_T], Any]) -> list[_T]:
    """``items`` by ``error``, smallest first; a run of items within :data:`TIE_REL` of the run's
    first is a tie, ordered by ``prefer``, then by order (so the first is :func:`best_of`'s choice)."""
    errs = [e if math.isfinite(e := error(x)) else math.inf for x in items]
    by_err = sorted(range(len(items)), key=errs.__getitem__)
    out: list[_T] = []
    i = 0
    while i < len(by_err):
        low = errs[by_err[i]]
        cut = low + TIE_REL * abs(low) if math.isfinite(low) else math.inf
        j = i + 1
        while j < len(by_err) and errs[by_err[j]] <= cut:
            j += 1
        out += [items[k] for k in sorted(by_err[i:j], key=lambda k: (prefer(items[k]), k))]
        i = j
    return out


def pct(x: float | None, *, table: bool = False) -> str:
    """A relative error as a percentage, the one formatter of the project.

    In prose two significant digits below 10 % (``0.0059`` → ``0.59%``, ``0.00123`` → ``0.12%``), in a
    table (``table=True``) two decimals (``0.12%``); whole percents from 10 % (``85%``). ``n/a`` (``-``
    in a table) when there is no finite value.
    """
    if x is None or not math.isfinite(x):
        return "-" if table else "n/a"
    if x >= 0.1:
        return f"{x * 100:.0f}%"
    return f"{x * 100:.2f}%" if table else f"{x * 100:.2g}%"


def layers_in_words(n: int) -> str:
    """A layer offset in words, sign dropped: ``1`` -> "one layer", ``-2`` -> "two layers", ``5`` -> "5 layers"."""
    n = abs(n)
    return f"{ {1: 'one', 2: 'two', 3: 'three'}.get(n, str(n)) } layer{'s' if n != 1 else ''}"


@dataclass(frozen=True)
class Metrics:
    """How close one inference capture is to one training slot, at a token alignment.

    ``rel_err``: upper median over compared tokens of ||infer - train|| / ||train|| (per token, on
    the compared columns; attention-sink tokens left out when ordinary tokens are present), so that
    a minority of tokens cannot carry a match. ``cosine``: lower median per-token cosine similarity.
    ``p90_err``: 90th percentile of the per-token error. ``norm_ratio``: median per-token norm ratio
    infer/train. ``sink_only``: only attention-sink tokens were compared, which cannot separate
    neighbouring layers.
    """

    rel_err: float
    cosine: float
    p90_err: float
    norm_ratio: float
    tokens: int
    values: int
    sink_only: bool = False

    @classmethod
    def empty(cls, sink_only: bool = False) -> Metrics:
        """Nothing could be compared: infinite error."""
        return cls(math.inf, math.nan, math.inf, math.nan, 0, 0, sink_only)

    def to_dict(self) -> dict:
        return {k: _clean(v) for k, v in dataclasses.asdict(self).items()}


@dataclass(frozen=True)
class NormCheck:
    """A norm printed beside matching values, against the training slot's own norms.

    ``refs``: (what, value) pairs of training-side norms; ``agree`` names the one the printed norm
    equals within 10 %, or is ``None``; ``reason`` the likely cause when none agrees.
    """

    printed: float
    refs: tuple[tuple[str, float], ...]
    agree: str | None
    reason: str


@dataclass(frozen=True)
class PrintedEvidence:
    """Where printed values sat in the training slot they matched: tokens used, sink tokens left
    out, and one row of printed values next to the training values they equal."""

    tokens: tuple[int, ...]
    sinks: tuple[int, ...]
    sinks_only: bool
    token: int | None = None
    cols: tuple[int, ...] = ()
    printed: tuple[float, ...] = ()
    training: tuple[float, ...] = ()


@dataclass(frozen=True, eq=False)
class Candidate:
    """An inference capture scored against a training slot at its best token alignment.

    ``printed`` and ``norm_check`` hold the evidence a walk-through needs, computed while the
    training tensor was loaded (printed-value captures only).
    """

    capture: Capture
    sample: str | None
    offset: int
    metrics: Metrics
    samples_tied: int = 1
    printed: PrintedEvidence | None = None
    norm_check: NormCheck | None = None

    @property
    def boundary(self) -> int | None:
        return self.capture.boundary

    def to_dict(self) -> dict:
        c = self.capture
        return {
            "file": c.origin.path,
            "key": c.origin.key,
            "line": c.origin.line,
            "label": c.label(),
            "capture_boundary_index": c.boundary,
            "label_source": None if c.layer is None else c.layer.source,
            "sample": self.sample,
            "samples_tied": self.samples_tied,
            "token_offset": self.offset,
            "metrics": self.metrics.to_dict(),
        }


@dataclass(frozen=True)
class Score:
    """One scored (training slot, training sample, inference capture) pair: a row of ``scores_frame``."""

    slot: int
    sample: str | None
    capture: str
    capture_boundary: int | None
    label_source: str | None
    token_offset: int
    metrics: Metrics

    def to_dict(self) -> dict:
        m = self.metrics
        return {
            "slot": self.slot,
            "sample": self.sample,
            "capture": self.capture,
            "capture_boundary": self.capture_boundary,
            "label_source": self.label_source,
            "token_offset": self.token_offset,
            "rel_err": m.rel_err,
            "cosine": m.cosine,
            "p90_err": m.p90_err,
            "norm_ratio": m.norm_ratio,
            "tokens": m.tokens,
            "values": m.values,
            "sink_only": m.sink_only,
        }


@dataclass(frozen=True, eq=False)
class SlotDecision:
    """What the values alone say one training slot is (before labels and configuration are weighed).

    ``status`` is IDENTIFIED, UNLABELLED, AMBIGUOUS, UNMATCHED or UNOBSERVED; ``candidate_boundary``
    the layer an ambiguous match pointed at; ``separation`` how far its neighbouring layers were
    judged to be (median per-token error), ``measured`` when every neighbour was captured.
    """

    slot: int
    status: Status
    boundary: int | None
    confidence: float
    margin: float | None
    match: Candidate | None
    runner_up: Candidate | None
    note: str
    candidate_boundary: int | None = None
    separation: float | None = None
    measured: bool = False

    @property
    def identified(self) -> bool:
        return self.status == Status.IDENTIFIED


@dataclass(frozen=True, eq=False)
class SlotResult:
    """What the evidence says one training slot is, and how it stands against the configuration."""

    slot: int
    boundary_index: int | None
    layer_id: int | None
    evidence: Evidence
    confidence: float
    margin: float | None
    match: Candidate | None
    runner_up: Candidate | None
    claimed_boundary: int | None = None
    configured_boundary: int | None = None
    status: Status = Status.UNOBSERVED
    note: str = ""
    #: How the slot stands against the configured ids, in words (the last part of ``note``; "" when
    #: nothing is configured or the note says it all)
    against_config: str = ""
    #: How far the match's neighbouring layers were judged to be (median per-token error), and whether
    #: every neighbour was captured (else estimated); None where no separation was weighed.
    separation: float | None = None
    separation_measured: bool = False

    def to_dict(self) -> dict:
        return {
            "slot": self.slot,
            "boundary_index": self.boundary_index,
            "layer_id": self.layer_id,
            "evidence": self.evidence,
            "confidence": round(self.confidence, 4),
            "margin": _clean(self.margin),
            "separation": _clean(self.separation),
            "separation_measured": self.separation_measured,
            "status": self.status,
            "claimed_boundary_index": self.claimed_boundary,
            "configured_boundary_index": self.configured_boundary,
            "metrics": None if self.match is None else self.match.metrics.to_dict(),
            "matched": None if self.match is None else self.match.to_dict(),
            "runner_up": None if self.runner_up is None else self.runner_up.to_dict(),
            "note": self.note,
            "against_config": self.against_config,
        }


@dataclass(frozen=True)
class EngineIds:
    """The recommended layers as ids of one engine, at the version (and convention-table row) assumed."""

    at: EngineVersion
    ids: tuple[int | None, ...]

    def to_dict(self) -> dict:
        return {"version": self.at.version, "rule": self.at.rule, "ids": list(self.ids)}

    def __repr__(self) -> str:
        return f"<{self.at.title} {self.at.version}: {list(self.ids)}>"


def config_line(ids: Sequence[int | None], key: str = "") -> str:
    """The line of a draft config.json that states ``ids`` (``null`` for an id no convention gives) under the
    last part of ``key`` (default ``eagle_aux_hidden_state_layer_ids``; the objects it sits in are said apart)."""
    shown = ", ".join("null" if i is None else str(i) for i in ids)
    name = key.rsplit(".", 1)[-1] if key else "eagle_aux_hidden_state_layer_ids"
    return f'"{name}": [{shown}]'


@dataclass(frozen=True)
class Recommendation:
    """The ids for ``engine`` at ``version`` (the report's own), and the same layers on every engine
    (``by_engine``: each at the version its :class:`EngineVersion` names; the report's engine at its own)."""

    engine: str
    model_family: str
    ids: tuple[int | None, ...]
    boundary_indices: tuple[int | None, ...]
    by_engine: dict[str, EngineIds]
    #: why ``engine`` cannot feed the draft these slots whatever its ids (hsdiff.rules.serving); () when it can
    unservable: tuple[str, ...] = field(default=(), compare=False)
    version: str | None = None
    rule: str = ""
    kind: str = "eagle3"  #: the draft kind the ids are written for (hsdiff.rules.kinds)
    config_key: str = ""  #: where the engine reads them in the draft config.json ("" nowhere)
    #: the slots that hold the training file's final post-norm state (a slot like the others, fed to the fc)
    finals: tuple[int, ...] = ()

    def to_dict(self) -> dict:
        return {
            "engine": self.engine,
            "engine_version": self.version,
            "rule": self.rule,
            "model_family": self.model_family,
            "draft_kind": self.kind,
            "config_key": self.config_key,
            "eagle_aux_hidden_state_layer_ids": list(self.ids),
            "boundary_indices": list(self.boundary_indices),
            "final_post_norm_slots": list(self.finals),
            "by_engine": {e: v.to_dict() for e, v in self.by_engine.items()},
        }

    def config_line(self) -> str:
        return config_line(self.ids, self.config_key)


@dataclass(frozen=True)
class Configured:
    engine: str
    ids: tuple[int, ...]
    boundary_indices: tuple[int, ...]
    source: str = "--layer-ids"
    rule: str = ""  # the convention-table row that read the ids, with the engine version

    def to_dict(self) -> dict:
        return {
            "engine": self.engine,
            "eagle_aux_hidden_state_layer_ids": list(self.ids),
            "boundary_indices": list(self.boundary_indices),
            "source": self.source,
            "rule": self.rule,
        }


class Inputs(TypedDict, total=False):
    """What a report compared: the two paths, the engine and the model family; ``sources``: where each
    setting of the command came from (``flag``, the settings file's path, ``default``)."""

    train: str
    infer: str
    engine: str
    model_family: str
    sources: dict[str, str]


class Profiles(TypedDict, total=False):
    """What the pictures draw (:mod:`hsdiff.comparison.profiles`): per-capture norm rows and per-token
    error curves, as JSON rows."""

    norms: list[dict[str, Any]]
    tokens: list[dict[str, Any]]


@dataclass(frozen=True, eq=False)
class Report:
    """The outcome of a comparison. ``verdict`` is ``"ok"``, ``"mismatch"`` or ``"inconclusive"``.

    In a notebook: ``report.slots_frame()`` and ``report.scores_frame()`` give pandas frames;
    :mod:`hsdiff.report.pictures` draws the heatmap of every training slot against every inference
    capture, the norm trajectory and the per-token errors (``profiles``: see
    :mod:`hsdiff.comparison.profiles`).
    ``tolerance`` is the largest median per-token error that was read as "the same tensor".
    """

    verdict: Verdict
    cause: str
    slots: tuple[SlotResult, ...]
    recommended: Recommendation
    configured: Configured | None
    num_layers: int | None
    hidden_size: int
    explanation: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    scores: tuple[Score, ...] = ()
    inputs: Inputs = field(default_factory=lambda: Inputs())
    tolerance: float = 0.10
    profiles: Profiles = field(default_factory=lambda: Profiles())
    settings: Settings | None = None  # what the verdict and ids rest on (hsdiff.rules.settings)
    diagnosis: Diagnosis | None = None  # what the slots come to as one finding (hsdiff.diagnose)

    #: 3: ``diagnosis`` recorded; 2: ``settings`` recorded, ``by_engine`` states the version assumed per
    #: engine (1: neither)
    SCHEMA_VERSION = 3

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == Verdict.OK else 1

    @property
    def not_writable(self) -> list[str]:
        """Why the recommended ids would be a guess; ``[]`` when they can be written (:func:`why_not_writable`)."""
        return why_not_writable(
            self.verdict,
            [(s.boundary_index, s.status, s.evidence) for s in self.slots],
            self.recommended.boundary_indices,
        )

    def to_dict(self) -> dict:
        return {
            "schema_version": self.SCHEMA_VERSION,
            "verdict": self.verdict,
            "cause": self.cause,
            "num_hidden_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "tolerance": self.tolerance,
            "settings": None if self.settings is None else self.settings.to_dict(),
            "diagnosis": None if self.diagnosis is None else self.diagnosis.to_dict(),
            "recommended": self.recommended.to_dict(),
            "configured": None if self.configured is None else self.configured.to_dict(),
            "slots": [s.to_dict() for s in self.slots],
            "explanation": list(self.explanation),
            "warnings": list(self.warnings),
            "inputs": self.inputs,
            "scores": best_scores(self.scores),
            "profiles": self.profiles,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return dumps(self.to_dict(), indent)

    def slots_frame(self) -> pd.DataFrame:
        """One row per training slot (pandas, the ``frames`` extra)."""
        return require("pandas", "frames", "report.slots_frame()").DataFrame(self._slot_rows()).set_index("slot")

    def _slot_rows(self) -> list[dict]:
        rows = []
        for s in self.slots:
            m = s.match.metrics if s.match else None
            rows.append(
                {
                    "slot": s.slot,
                    "boundary_index": s.boundary_index,
                    "layer_id": s.layer_id,
                    "evidence": str(s.evidence),
                    "status": str(s.status),
                    "confidence": s.confidence,
                    "rel_err": None if m is None else m.rel_err,
                    "cosine": None if m is None else m.cosine,
                    "runner_up_err": None if s.runner_up is None else s.runner_up.metrics.rel_err,
                    "configured_boundary": s.configured_boundary,
                    "matched": None if s.match is None else s.match.capture.label(),
                }
            )
        return rows

    def scores_frame(self) -> pd.DataFrame:
        """Every (training slot, inference capture) pair that was scored, one row each (pandas, the
        ``frames`` extra)."""
        return require("pandas", "frames", "report.scores_frame()").DataFrame([s.to_dict() for s in self.scores])

    def plot(self, metric: str = "rel_err", ax: Any = None) -> Any:
        """The heatmap of every training slot against every inference capture, as a matplotlib ``Figure``
        (:func:`hsdiff.report.pictures.heatmap`; ``metric``: ``"rel_err"`` or ``"cosine"``), as pandas
        keeps ``DataFrame.plot``. The renderer is looked up by name, as pandas looks up its plotting
        backend, so that the records import no renderer."""
        pictures = importlib.import_module("hsdiff.report.pictures")
        return pictures.heatmap(self, metric=metric, ax=ax)

    def __repr__(self) -> str:
        ids = list(self.recommended.ids)
        return f"<Report {self.verdict}: recommend {self.recommended.engine} ids {ids}>"

    def _repr_html_(self) -> str:
        from html import escape

        head = f"<b>hsdiff: {escape(self.verdict)}</b> — {escape(self.cause)}"
        rows = self._slot_rows()
        table = "<table><tr>" + "".join(f"<th>{escape(k)}</th>" for k in rows[0]) + "</tr>" if rows else "<table>"
        for r in rows:  # the slots' table without pandas, which a notebook may not have
            table += "<tr>" + "".join(f"<td>{escape(_cell(v))}</td>" for v in r.values()) + "</tr>"
        return head + table + "</table>" + f"<pre>{escape(self.recommended.config_line())}</pre>"


def _cell(v: Any) -> str:
    return "" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)


_SCORE_KEYS = (
    "slot",
    "capture",
    "capture_boundary",
    "label_source",
    "sample",
    "token_offset",
    "rel_err",
    "cosine",
    "tokens",
    "sink_only",
)


def best_scores(scores: Sequence[Score]) -> list[dict]:
    """One row per (training slot, inference capture): its best-scoring sample and token offset (a tie,
    as :func:`best_of` reads one, goes to the row compared on more tokens, then nearer offset 0, then
    the first)."""
    rows: dict[tuple[int, str], list[Score]] = {}
    for r in scores:
        rows.setdefault((r.slot, r.capture), []).append(r)
    best = (best_of(rs, lambda r: r.metrics.rel_err, _tie_key) for rs in rows.values())
    return [{k: _clean(v) for k, v in r.to_dict().items() if k in _SCORE_KEYS} for r in best]


def _tie_key(r: Score) -> tuple[int, int]:
    return -r.metrics.tokens, abs(r.token_offset or 0)


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, float):
        return round(v, 6)
    return v
