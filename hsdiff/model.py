"""The records that flow through hsdiff: readers make :class:`Capture` objects, the aligner turns
them into :class:`SlotResult` rows, and a :class:`Report` carries the verdict to the renderers.

A capture is a *description* of a tensor plus a loader: nothing is read from disk until
:meth:`Capture.load` is called, and torch/safetensors loads are memory-mapped, so a directory of
tens of GB can be opened and scanned cheaply.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    import torch

__all__ = [
    "TRAIN",
    "INFER",
    "Origin",
    "Layer",
    "Observation",
    "Capture",
    "Dump",
    "Metrics",
    "Candidate",
    "SlotResult",
    "Recommendation",
    "Configured",
    "Report",
]

TRAIN = "train"
INFER = "infer"


@dataclass(frozen=True)
class Origin:
    """Where a capture came from: a file, a key or tag inside it, and a line for logs."""

    path: str
    key: str | None = None
    line: int | None = None
    format: str = ""

    def __str__(self) -> str:
        text = self.path
        if self.line is not None:
            text += f":{self.line}"
        if self.key:
            text += f" [{self.key}]"
        return text


@dataclass(frozen=True)
class Layer:
    """A layer number as some label states it, and what that number counts.

    ``index`` is ``"boundary"`` (B: residual stream entering layer ``value``) or ``"output"``
    (O: output of layer ``value``; B = O + 1). ``source`` says where the label came from
    (``"tag"``, ``"key"``, ``"filename"``, ``"configured"``, ``"claimed"``, ``"log"``).
    """

    value: int
    index: str = "boundary"
    source: str = "key"

    @property
    def boundary(self) -> int:
        return self.value + 1 if self.index == "output" else self.value

    def __str__(self) -> str:
        return f"B{self.boundary}" if self.index == "boundary" else f"O{self.value} (B{self.boundary})"


@dataclass(frozen=True, eq=False)
class Observation:
    """Printed values: a few rows (tokens) and columns of a tensor, not the whole of it.

    ``rows`` are token positions relative to the start of the printed tensor (negative counts
    from its end; ``None`` when unknown); ``cols`` are column positions (negative from the end).
    ``values`` has shape ``[len(rows), len(cols)]`` and may hold NaN.
    """

    values: np.ndarray
    rows: tuple[int, ...]
    cols: tuple[int, ...]
    rows_known: bool = True

    @property
    def size(self) -> int:
        return int(np.isfinite(self.values).sum())

    def __repr__(self) -> str:
        return f"<Observation {self.values.shape[0]}x{self.values.shape[1]} values>"


@dataclass(frozen=True, eq=False)
class Capture:
    """One hidden-state tensor (or a printed part of one), its labels and its provenance.

    ``width`` is the size of the last dimension as stored; a training ``aux_hidden_state`` holds
    several slots side by side (``concat=True``) until :meth:`split` cuts it by hidden size.
    ``group`` names the sequence the tensor covers (a training sample, an inference forward
    pass); captures of one group share ``token_ids``.
    """

    side: str
    origin: Origin
    shape: tuple[int, ...] | None
    dtype: str
    width: int | None
    group: str | None = None
    slot: int | None = None
    layer: Layer | None = None
    token_ids: tuple[int, ...] | None = None
    concat: bool = False
    post_norm: bool = False
    rank: int | None = None
    norm: float | None = None
    observation: Observation | None = None
    loader: Callable[[], torch.Tensor] | None = field(default=None, repr=False)
    col_start: int = 0
    col_stop: int | None = None

    @property
    def boundary(self) -> int | None:
        return None if self.layer is None else self.layer.boundary

    @property
    def is_partial(self) -> bool:
        return self.observation is not None

    @property
    def tokens(self) -> int | None:
        if self.shape is None or len(self.shape) == 0:
            return None
        if len(self.shape) == 1:
            return 1
        return int(math.prod(self.shape[:-1]))

    def label(self) -> str:
        parts = [self.origin.key or self.origin.path.rsplit("/", 1)[-1]]
        if self.slot is not None:
            parts.append(f"slot {self.slot}")
        if self.layer is not None:
            parts.append(str(self.layer))
        if self.rank is not None:
            parts.append(f"rank {self.rank}")
        return " ".join(parts)

    def load(self) -> torch.Tensor:
        """The tensor as ``[tokens, width]`` (leading batch dims of 1 dropped), not converted."""
        if self.loader is None:
            raise ValueError(f"{self.origin}: a printed observation has no tensor to load")
        t = self.loader()
        if t.dim() == 1:
            t = t.unsqueeze(0)
        elif t.dim() > 2:
            t = t.reshape(-1, t.shape[-1])
        if self.col_start or self.col_stop is not None:
            t = t[:, self.col_start : self.col_stop]
        return t

    def replace(self, **changes: Any) -> Capture:
        return dataclasses.replace(self, **changes)

    def split(self, hidden_size: int, layers: Sequence[Layer | None] | None = None) -> list[Capture]:
        """Cut a concatenated capture into ``width // hidden_size`` slot captures (lazy views)."""
        if self.width is None or self.width % hidden_size:
            raise ValueError(f"width {self.width} is not a multiple of {hidden_size}")
        k = self.width // hidden_size
        out = []
        for s in range(k):
            layer = layers[s] if layers is not None and s < len(layers) else self.layer
            obs = self.observation
            if obs is not None:
                keep = [i for i, c in enumerate(obs.cols) if _col_in(c, s, hidden_size, self.width)]
                cols = tuple(_local_col(obs.cols[i], hidden_size, self.width) for i in keep)
                obs = Observation(obs.values[:, keep], obs.rows, cols, obs.rows_known)
            out.append(
                self.replace(
                    slot=s,
                    layer=layer,
                    width=hidden_size,
                    concat=False,
                    observation=obs,
                    shape=None if self.shape is None else tuple(self.shape[:-1]) + (hidden_size,),
                    col_start=self.col_start + s * hidden_size,
                    col_stop=self.col_start + (s + 1) * hidden_size,
                    norm=None,
                )
            )
        return out

    def __repr__(self) -> str:
        shape = "x".join(map(str, self.shape)) if self.shape else "?"
        return f"<Capture {self.side} {self.label()} {shape} {self.dtype}>"


def _col_in(col: int, slot: int, h: int, width: int) -> bool:
    c = col if col >= 0 else width + col
    return slot * h <= c < (slot + 1) * h


def _local_col(col: int, h: int, width: int) -> int:
    c = col if col >= 0 else width + col
    return c % h


@dataclass(frozen=True, eq=False)
class Dump:
    """What reading one side gave: captures, configs found beside them, and warnings."""

    captures: tuple[Capture, ...]
    configs: tuple[tuple[str, dict], ...] = ()
    warnings: tuple[str, ...] = ()
    files: int = 0

    def __repr__(self) -> str:
        return f"<Dump {len(self.captures)} captures from {self.files} files>"


@dataclass(frozen=True)
class Metrics:
    """How close one inference capture is to one training slot, at a token alignment.

    ``rel_err``: median over compared tokens of ||infer - train|| / ||train|| (per token, on the
    compared columns; attention-sink tokens left out when ordinary tokens are present).
    ``cosine``: median per-token cosine similarity. ``p90_err``: 90th percentile of the per-token
    error. ``norm_ratio``: median per-token norm ratio infer/train. ``sink_only``: only
    attention-sink tokens were compared, which cannot separate neighbouring layers.
    """

    rel_err: float
    cosine: float
    p90_err: float
    norm_ratio: float
    tokens: int
    values: int
    sink_only: bool = False

    def to_dict(self) -> dict:
        return {k: _clean(v) for k, v in dataclasses.asdict(self).items()}


@dataclass(frozen=True, eq=False)
class Candidate:
    """An inference capture scored against a training slot at its best token alignment."""

    capture: Capture
    sample: str | None
    offset: int
    metrics: Metrics
    samples_tied: int = 1

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


@dataclass(frozen=True, eq=False)
class SlotResult:
    """What the evidence says one training slot is."""

    slot: int
    boundary_index: int | None
    layer_id: int | None
    evidence: str  # "observed" | "inferred" | "none"
    confidence: float
    margin: float | None
    match: Candidate | None
    runner_up: Candidate | None
    claimed_boundary: int | None = None
    configured_boundary: int | None = None
    status: str = ""  # "ok" | "mismatch" | "ambiguous" | "unobserved" | "identified"
    note: str = ""

    def to_dict(self) -> dict:
        return {
            "slot": self.slot,
            "boundary_index": self.boundary_index,
            "layer_id": self.layer_id,
            "evidence": self.evidence,
            "confidence": round(self.confidence, 4),
            "margin": _clean(self.margin),
            "status": self.status,
            "claimed_boundary_index": self.claimed_boundary,
            "configured_boundary_index": self.configured_boundary,
            "metrics": None if self.match is None else self.match.metrics.to_dict(),
            "matched": None if self.match is None else self.match.to_dict(),
            "runner_up": None if self.runner_up is None else self.runner_up.to_dict(),
            "note": self.note,
        }


@dataclass(frozen=True)
class Recommendation:
    engine: str
    model_family: str
    ids: tuple[int | None, ...]
    boundary_indices: tuple[int | None, ...]
    by_engine: dict[str, list[int | None]]

    def to_dict(self) -> dict:
        return {
            "engine": self.engine,
            "model_family": self.model_family,
            "eagle_aux_hidden_state_layer_ids": list(self.ids),
            "boundary_indices": list(self.boundary_indices),
            "by_engine": self.by_engine,
        }

    def config_line(self) -> str:
        ids = ", ".join("null" if i is None else str(i) for i in self.ids)
        return f'"eagle_aux_hidden_state_layer_ids": [{ids}]'


@dataclass(frozen=True)
class Configured:
    engine: str
    ids: tuple[int, ...]
    boundary_indices: tuple[int, ...]
    source: str = "--layer-ids"

    def to_dict(self) -> dict:
        return {
            "engine": self.engine,
            "eagle_aux_hidden_state_layer_ids": list(self.ids),
            "boundary_indices": list(self.boundary_indices),
            "source": self.source,
        }


@dataclass(frozen=True, eq=False)
class Report:
    """The outcome of a comparison. ``verdict`` is ``"ok"``, ``"mismatch"`` or ``"inconclusive"``.

    In a notebook: ``report.slots_frame()`` and ``report.scores_frame()`` give pandas frames,
    ``report.plot()`` draws the error of every training slot against every inference capture.
    """

    verdict: str
    cause: str
    slots: tuple[SlotResult, ...]
    recommended: Recommendation
    configured: Configured | None
    num_layers: int | None
    hidden_size: int
    explanation: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    scores: tuple[dict, ...] = ()
    inputs: dict = field(default_factory=dict)

    SCHEMA_VERSION = 1

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == "ok" else 1

    def to_dict(self) -> dict:
        return {
            "schema_version": self.SCHEMA_VERSION,
            "verdict": self.verdict,
            "cause": self.cause,
            "num_hidden_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "recommended": self.recommended.to_dict(),
            "configured": None if self.configured is None else self.configured.to_dict(),
            "slots": [s.to_dict() for s in self.slots],
            "explanation": list(self.explanation),
            "warnings": list(self.warnings),
            "inputs": self.inputs,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    def slots_frame(self) -> pd.DataFrame:
        import pandas as pd

        rows = []
        for s in self.slots:
            m = s.match.metrics if s.match else None
            rows.append(
                {
                    "slot": s.slot,
                    "boundary_index": s.boundary_index,
                    "layer_id": s.layer_id,
                    "evidence": s.evidence,
                    "status": s.status,
                    "confidence": s.confidence,
                    "rel_err": None if m is None else m.rel_err,
                    "cosine": None if m is None else m.cosine,
                    "runner_up_err": None if s.runner_up is None else s.runner_up.metrics.rel_err,
                    "configured_boundary": s.configured_boundary,
                    "matched": None if s.match is None else s.match.capture.label(),
                }
            )
        return pd.DataFrame(rows).set_index("slot")

    def scores_frame(self) -> pd.DataFrame:
        """Every (training slot, inference capture) pair that was scored, one row each."""
        import pandas as pd

        return pd.DataFrame(list(self.scores))

    def plot(self, ax: Any = None) -> Any:
        """Error of each training slot against each inference capture (log scale)."""
        from .report.plot import plot_scores

        return plot_scores(self, ax=ax)

    def __repr__(self) -> str:
        ids = list(self.recommended.ids)
        return f"<Report {self.verdict}: recommend {self.recommended.engine} ids {ids}>"

    def _repr_html_(self) -> str:
        from html import escape

        head = f"<b>hsdiff: {escape(self.verdict)}</b> — {escape(self.cause)}"
        return head + self.slots_frame().to_html() + f"<pre>{escape(self.recommended.config_line())}</pre>"


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, float):
        return round(v, 6)
    return v
