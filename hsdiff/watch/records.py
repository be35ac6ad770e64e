"""The records of a watch: what one reading adds (:class:`Increment`), a closed :class:`Window`, the
:class:`Baseline` it is judged against, and the :class:`Event` lines a watch emits."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

__all__ = [
    "Increment",
    "Window",
    "Baseline",
    "Event",
    "pool",
    "WINDOW",
    "BASELINE",
    "ALARM",
    "RECOVERED",
    "RESET",
    "UNREACHABLE",
]

#: Event kinds: a window closed, the baseline learned, a collapse, its end, a restart seen, a read failed.
WINDOW, BASELINE, ALARM, RECOVERED, RESET, UNREACHABLE = (
    "window",
    "baseline",
    "alarm",
    "recovered",
    "reset",
    "unreachable",
)


def _r(x: float | None, n: int = 4) -> float | None:
    return None if x is None else round(x, n)


@dataclass(frozen=True)
class Increment:
    """Acceptance counted between two readings: a scrape's counter deltas, or one log line's interval."""

    drafts: float  # verification steps
    accepted: float  # draft tokens accepted
    accepted_at: tuple[float, ...] | None = None  # accepted tokens per drafted position
    method: str = ""  # how the counts were derived (:data:`hsdiff.rules.metrics.METHODS` kind, or "log")
    estimated: bool = False  # the steps are an estimate, not a count
    spec_tokens: int | None = None  # speculative tokens per step, where the reading says


@dataclass(frozen=True)
class Window:
    """At least ``window_drafts`` verification steps, pooled: the unit a collapse is judged on."""

    index: int  # 1-based, over the whole watch
    segment: int  # 0 until the first restart seen, then 1, ...
    drafts: float
    accepted: float
    accepted_at: tuple[float, ...] | None
    estimated: bool = False
    started: float = 0.0  # time of the first reading in it (seconds since the epoch)
    ended: float = 0.0

    @property
    def acceptance_length(self) -> float:
        """Tokens per verification step, the target's own included: 1 + accepted / drafts."""
        return 1.0 + self.accepted / self.drafts if self.drafts else 1.0

    @property
    def per_position(self) -> tuple[float, ...] | None:
        """P(drafted position j accepted) per step, as vLLM counts it."""
        if self.accepted_at is None or not self.drafts:
            return None
        return tuple(a / self.drafts for a in self.accepted_at)

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "segment": self.segment,
            "drafts": round(self.drafts, 1),
            "accepted_tokens": round(self.accepted, 1),
            "acceptance_length": _r(self.acceptance_length),
            "acceptance_by_position": None if self.per_position is None else [_r(p) for p in self.per_position],
            "drafts_estimated": self.estimated,
            "started": round(self.started, 3),
            "ended": round(self.ended, 3),
        }


@dataclass(frozen=True)
class Baseline:
    """The acceptance a healthy deployment of this draft gets, and where the value comes from.

    >>> Baseline(1.8, (0.5, 0.2, 0.1), "given").gain
    0.8
    """

    acceptance_length: float
    per_position: tuple[float, ...] | None
    source: str  # "given", "report FILE (row training)", "first 3 windows (600 drafts)"
    spec_tokens: int | None = None  # the speculative tokens it was measured or predicted with
    notes: tuple[str, ...] = ()

    @property
    def gain(self) -> float:
        """Accepted draft tokens per step: the acceptance length less the target's own token."""
        return round(self.acceptance_length - 1.0, 12)

    def summary(self) -> str:
        pos = "" if self.per_position is None else f" (per position {', '.join(f'{p:.3f}' for p in self.per_position)})"
        return f"{self.acceptance_length:.3f}{pos} from {self.source}"

    def to_dict(self) -> dict:
        return {
            "acceptance_length": _r(self.acceptance_length),
            "acceptance_by_position": None if self.per_position is None else [_r(p) for p in self.per_position],
            "source": self.source,
            "num_speculative_tokens": self.spec_tokens,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class Event:
    """One line of a watch's event stream (``--events``): what happened, in words and as data."""

    kind: str  # WINDOW, BASELINE, ALARM, RECOVERED, RESET, UNREACHABLE
    time: float
    message: str
    window: Window | None = None
    baseline: Baseline | None = None
    reasons: tuple[str, ...] = ()  # the rules a window broke (collapse.RULES keys)
    streak: int = 0  # consecutive windows that broke a relative rule
    windows: tuple[Window, ...] = ()  # ALARM: the windows it rests on
    extra: dict = field(default_factory=dict)  # the source, the engine, a hook's result...

    @property
    def alarm(self) -> bool:
        return self.kind == ALARM

    def to_dict(self) -> dict:
        doc: dict = {"event": self.kind, "time": round(self.time, 3), "message": self.message}
        if self.window is not None:
            doc["window"] = self.window.to_dict()
        if self.windows:
            pooled = pool(self.windows, self.windows[-1].index)
            doc["measured"] = pooled.to_dict()
            doc["windows"] = [w.index for w in self.windows]
        if self.baseline is not None:
            doc["baseline"] = self.baseline.to_dict()
        if self.reasons:
            doc["reasons"] = list(self.reasons)
        if self.streak:
            doc["streak"] = self.streak
        doc.update(self.extra)
        return doc

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=False)


def pool(windows: tuple[Window, ...] | list[Window], index: int = 0) -> Window:
    """The windows as one: their drafts and accepted tokens summed (per position where all have them)."""
    ws = list(windows)
    at = None
    if ws and all(w.accepted_at is not None for w in ws):
        k = min(len(w.accepted_at or ()) for w in ws)
        at = tuple(sum((w.accepted_at or ())[j] for w in ws) for j in range(k))
    return Window(
        index,
        ws[-1].segment if ws else 0,
        sum(w.drafts for w in ws),
        sum(w.accepted for w in ws),
        at,
        any(w.estimated for w in ws),
        ws[0].started if ws else 0.0,
        ws[-1].ended if ws else 0.0,
    )
