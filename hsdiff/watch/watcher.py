"""The watch's state: increments pooled into windows, each judged against the baseline, alarms raised once
per collapse. :class:`Watcher` takes what a reading adds (:meth:`Watcher.add`) and a restart
(:meth:`Watcher.restart`) and returns the :class:`~hsdiff.watch.records.Event` records that follow; it never
reads, prints or sleeps, so a cron job can keep it in a state file (:meth:`Watcher.state`).

>>> from hsdiff.watch.records import Baseline, Increment
>>> w = Watcher(Settings(window_drafts=100), Baseline(1.19, None, "given"))
>>> [e.kind for e in w.add(Increment(100, 3), at=1.0)]
['window']
>>> [e.kind for e in w.add(Increment(100, 3), at=2.0) + w.add(Increment(100, 3), at=3.0)]
['window', 'window', 'alarm']
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from .collapse import BASELINE_WINDOWS, CONSECUTIVE_WINDOWS, DEFAULT_WINDOW_DRAFTS, explain, judge
from .records import ALARM, BASELINE, RECOVERED, RESET, WINDOW, Baseline, Event, Increment, Window, pool

__all__ = ["Settings", "Watcher"]


@dataclass(frozen=True)
class Settings:
    """How a watch pools and judges: window size, windows learned into a baseline, windows in a row."""

    window_drafts: float = DEFAULT_WINDOW_DRAFTS
    baseline_windows: int = BASELINE_WINDOWS
    consecutive: int = CONSECUTIVE_WINDOWS
    spec_tokens: int | None = None  # speculative tokens per step, when the metrics do not say it


class Watcher:
    """Pools increments into windows of at least ``settings.window_drafts`` steps and judges each."""

    def __init__(self, settings: Settings, baseline: Baseline | None = None) -> None:
        self.settings = settings
        self.baseline = baseline
        self.segment = 0
        self.index = 0
        self.open: Window | None = None
        self.learned: list[Window] = []
        self.recent: list[Window] = []  # the streak's windows
        self.streak = 0
        self.healthy = 0  # windows in a row that broke no rule: as many as an alarm needs end it
        self.alarmed = False
        self.spec_tokens = settings.spec_tokens

    # -- input -----------------------------------------------------------------------------------------
    def add(self, inc: Increment, at: float) -> list[Event]:
        """Pool ``inc``; the events of the window it closes (if it closes one)."""
        if inc.spec_tokens:
            self.spec_tokens = inc.spec_tokens
        w = self.open
        at_sum = _add(w.accepted_at if w else None, inc.accepted_at, first=w is None)
        self.open = Window(
            0,
            self.segment,
            (w.drafts if w else 0.0) + inc.drafts,
            (w.accepted if w else 0.0) + inc.accepted,
            at_sum,
            (w.estimated if w else False) or inc.estimated,
            w.started if w else at,
            at,
        )
        if self.open.drafts < self.settings.window_drafts:
            return []
        self.index += 1
        closed, self.open = replace(self.open, index=self.index), None
        return self._judge(closed, at)

    def restart(self, reason: str, at: float) -> list[Event]:
        """The server restarted: a new segment. The open window (two processes' counts) and the streak are
        dropped; the baseline is kept, since a restart is when a deployment changes (a draft swapped, a plugin
        left out); a baseline still being learned is learned anew from the new process."""
        self.segment += 1
        self.open, self.recent, self.streak, self.healthy, self.alarmed = None, [], 0, 0, False
        if self.baseline is None:
            self.learned = []
        kept = (
            "the baseline is learned from it"
            if self.baseline is None
            else f"the baseline stays {self.baseline_summary()}"
        )
        return [Event(RESET, at, f"the server restarted ({reason}): segment {self.segment} begins; {kept}")]

    def baseline_summary(self) -> str:
        return "not learned yet" if self.baseline is None else self.baseline.summary()

    # -- judging ---------------------------------------------------------------------------------------
    def _judge(self, window: Window, at: float) -> list[Event]:
        learning = self.baseline is None
        reasons = judge(window, self.baseline, self.spec_tokens)
        relative = tuple(r for r in reasons if r != "floor")
        self.streak = self.streak + 1 if relative else 0
        self.recent = (self.recent + [window])[-self.settings.consecutive :] if relative else []
        events = [
            Event(
                WINDOW,
                at,
                f"window {window.index}: acceptance length {window.acceptance_length:.3f} over "
                f"{window.drafts:.0f} drafts{' (estimated)' if window.estimated else ''}",
                window=window,
                baseline=self.baseline,
                reasons=reasons,
                streak=self.streak,
            )
        ]
        alarm_on: tuple[Window, ...] = ()
        if "floor" in reasons:
            alarm_on = (window,)
        elif self.streak >= self.settings.consecutive:
            alarm_on = tuple(self.recent)
        if alarm_on and not self.alarmed:
            self.alarmed = True
            events.append(self._alarm(alarm_on, reasons, at))
        self.healthy = 0 if reasons else self.healthy + 1
        if self.alarmed and self.healthy >= self.settings.consecutive:
            self.alarmed = False
            first = window.index - self.healthy + 1
            span = f"windows {first}-{window.index} read" if first < window.index else f"window {window.index} reads"
            events.append(Event(RECOVERED, at, f"{span} healthy again"))
        if learning and not reasons:
            self.learned.append(window)
            if len(self.learned) >= self.settings.baseline_windows:
                events.append(self._learn(at))
        return events

    def _learn(self, at: float) -> Event:
        p = pool(self.learned)
        n = len(self.learned)
        self.baseline = Baseline(
            p.acceptance_length,
            p.per_position,
            f"the first {n} windows of segment {self.segment} ({p.drafts:.0f} drafts)",
            self.spec_tokens,
        )
        return Event(BASELINE, at, f"baseline learned: {self.baseline.summary()}", baseline=self.baseline)

    def _alarm(self, windows: tuple[Window, ...], reasons: tuple[str, ...], at: float) -> Event:
        measured = pool(windows, windows[-1].index)
        span = f"window {windows[0].index}" + (f"-{windows[-1].index}" if len(windows) > 1 else "")
        pos = measured.per_position
        pos_words = "" if not pos else f" (position 1 {pos[0]:.3f})"
        base = self.baseline
        if base is None:
            against = "no baseline yet"
        else:
            p1 = "" if not base.per_position else f" (position 1 {base.per_position[0]:.3f})"
            against = f"baseline {base.acceptance_length:.3f}{p1} from {base.source}"
        why = explain(reasons, measured, base)
        message = (
            f"acceptance collapsed: measured acceptance length {measured.acceptance_length:.3f}{pos_words} over "
            f"{span} ({measured.drafts:.0f} drafts) against {against}: {why}"
        )
        return Event(ALARM, at, message, baseline=base, reasons=reasons, streak=self.streak, windows=windows)

    # -- state (a cron job's memory between runs) -------------------------------------------------------
    def state(self) -> dict:
        def w(x: Window | None) -> dict | None:
            return None if x is None else asdict(x)

        return {
            "settings": asdict(self.settings),
            "baseline": None if self.baseline is None else asdict(self.baseline),
            "segment": self.segment,
            "index": self.index,
            "open": w(self.open),
            "learned": [w(x) for x in self.learned],
            "recent": [w(x) for x in self.recent],
            "streak": self.streak,
            "healthy": self.healthy,
            "alarmed": self.alarmed,
            "spec_tokens": self.spec_tokens,
        }

    @classmethod
    def from_state(cls, doc: dict, settings: Settings) -> Watcher:
        """A watcher as :meth:`state` left it, with today's ``settings``."""

        def w(x: dict | None) -> Window | None:
            if x is None:
                return None
            at = x.get("accepted_at")
            return Window(**{**x, "accepted_at": None if at is None else tuple(at)})

        b = doc.get("baseline")
        baseline = None
        if b is not None:
            pp = b.get("per_position")
            baseline = Baseline(**{**b, "per_position": None if pp is None else tuple(pp), "notes": tuple(b["notes"])})
        self = cls(settings, baseline)
        self.segment, self.index = int(doc["segment"]), int(doc["index"])
        self.open = w(doc.get("open"))
        self.learned = [x for x in map(w, doc.get("learned") or []) if x is not None]
        self.recent = [x for x in map(w, doc.get("recent") or []) if x is not None]
        self.streak, self.alarmed = int(doc["streak"]), bool(doc["alarmed"])
        self.healthy = int(doc.get("healthy", 0))
        self.spec_tokens = doc.get("spec_tokens") or settings.spec_tokens
        return self


def _add(a: tuple[float, ...] | None, b: tuple[float, ...] | None, *, first: bool) -> tuple[float, ...] | None:
    """Per-position sums; None once any reading lacked them (a window is counted per position or not at all)."""
    if b is None or (a is None and not first):
        return None
    if a is None:
        return b
    n = max(len(a), len(b))
    return tuple((a[j] if j < len(a) else 0.0) + (b[j] if j < len(b) else 0.0) for j in range(n))
