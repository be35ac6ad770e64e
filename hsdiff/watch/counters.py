"""From cumulative counters to what happened between two scrapes: :class:`CounterTracker`.

A counter only grows while its process lives. One that falls, or whose ``_created`` time moves on, belongs
to a new process: the server restarted. Its values then count from zero, so they are the increment since
the restart, never a negative delta; the tracker says so (:class:`Restart`) and the watch starts a new
segment.

>>> t = CounterTracker()
>>> s = lambda d, a: Sample("vllm", {"drafts": float(d), "accepted": float(a)})
>>> t.step(s(100, 20)) is None          # the first scrape only sets the start
True
>>> inc = t.step(s(300, 60)); (inc.drafts, inc.accepted)
(200.0, 40.0)
>>> r = t.step(s(50, 2)); type(r).__name__, r.increment.drafts
('Restart', 50.0)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..rules.metrics import COUNTER_ROLES, METHODS, SPEC_TOKENS, Method
from .records import Increment
from .scrape import MissingMetricsError, Sample

__all__ = ["CounterTracker", "Restart", "increment", "method_for"]


@dataclass(frozen=True)
class Restart:
    """The counters went back (or were made anew): the server restarted between two scrapes."""

    reason: str
    increment: Increment | None  # what the new process counted up to this scrape


def method_for(sample: Sample) -> Method:
    """The first of the engine's :data:`~hsdiff.rules.metrics.METHODS` whose series the scrape holds."""
    have = set(sample.totals) | set(sample.positions) | ({SPEC_TOKENS} if sample.spec_tokens else set())
    rows = [m for m in METHODS if m.engine == sample.engine]
    for m in rows:
        if set(m.needs) <= have:
            return m
    wanted = " or ".join("+".join(m.needs) for m in rows)
    raise MissingMetricsError(
        f"the {sample.engine} metrics hold {', '.join(sorted(have)) or 'none'} of the series needed ({wanted})",
        hint="see docs/watch.md for what each engine exports and the settings that turn it on",
    )


def _delta(new: Sample, old: Sample | None) -> tuple[dict[str, float], dict[str, dict[int, float]]]:
    totals = {k: v - (old.totals.get(k, 0.0) if old else 0.0) for k, v in new.totals.items()}
    pos = {
        role: {j: v - ((old.positions.get(role) or {}).get(j, 0.0) if old else 0.0) for j, v in d.items()}
        for role, d in new.positions.items()
    }
    return totals, pos


def increment(sample: Sample, old: Sample | None) -> Increment | None:
    """What ``sample`` adds to ``old`` (None: since the process started), read by the engine's method."""
    m = method_for(sample)
    totals, pos = _delta(sample, old)
    spec = sample.spec_tokens
    at_acc = pos.get("accepted_at")
    if m.kind == "positions":
        drafted_at = pos.get("drafted_at") or {}
        drafts = drafted_at.get(0, 0.0)
        accepted = sum((at_acc or {}).values())
    elif m.kind == "drafted":
        drafts = totals.get("drafted", 0.0) / spec if spec else 0.0
        accepted = totals.get("accepted", 0.0)
    elif m.kind == "emitted":
        drafts = totals.get("drafts", 0.0)
        accepted = totals.get("emitted", 0.0) - drafts
    else:
        drafts = totals.get("drafts", 0.0)
        accepted = totals.get("accepted", 0.0)
    if drafts <= 0:
        return None
    at = tuple(at_acc.get(j, 0.0) for j in range(max(at_acc) + 1)) if at_acc else None
    return Increment(drafts, max(accepted, 0.0), at, m.kind, m.estimated, spec)


def _fell(new: Sample, old: Sample) -> str | None:
    for role in COUNTER_ROLES:
        if role in new.totals and role in old.totals and new.totals[role] < old.totals[role]:
            return f"{role} went from {old.totals[role]:.0f} to {new.totals[role]:.0f}"
        for j, v in (new.positions.get(role) or {}).items():
            before = (old.positions.get(role) or {}).get(j)
            if before is not None and v < before:
                return f"{role} at position {j} went from {before:.0f} to {v:.0f}"
    if new.created is not None and old.created is not None and new.created > old.created:
        return "the counters were made anew (their _created time moved on)"
    return None


class CounterTracker:
    """Turns successive scrapes into increments, a restart into a :class:`Restart`."""

    def __init__(self, last: Sample | None = None) -> None:
        self.last = last

    def step(self, sample: Sample) -> Increment | Restart | None:
        old, self.last = self.last, sample
        if old is None:
            method_for(sample)  # the series needed are there, or say which are not
            return None
        why = _fell(sample, old)
        if why is not None:
            return Restart(why, increment(sample, None))
        return increment(sample, old)
