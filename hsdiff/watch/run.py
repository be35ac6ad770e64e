"""Running a watch: a reader for the source (a metrics URL, or an engine log), the loop that feeds a
:class:`~hsdiff.watch.watcher.Watcher`, and the one-shot check (:func:`check_once`) a cron job or a
Kubernetes probe runs, its memory between runs in a state file.

Nothing here prints: every event goes to the ``emit`` callback the caller gives.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from ..errors import InputError
from .baseline import fit_to
from .counters import CounterTracker, Restart, increment
from .follow import LogFollower
from .records import UNREACHABLE, Event, Increment
from .scrape import MetricsError, MissingMetricsError, Sample, fetch, parse_metrics
from .watcher import Settings, Watcher

__all__ = ["Source", "Reader", "watch_loop", "check_once", "Outcome"]

log = logging.getLogger(__name__)
STATE_VERSION = 1


@dataclass(frozen=True)
class Source:
    """Where the acceptance is read: ``metrics`` (a URL) or ``log`` (a file), and how hard to try."""

    metrics: str | None = None
    log: str | None = None
    engine: str | None = None
    timeout: float = 10.0
    retries: int = 3
    backoff: float = 1.0

    @property
    def name(self) -> str:
        return self.metrics or self.log or ""


class Reader:
    """The source's readings: increments and restarts since the last :meth:`poll`."""

    def __init__(self, source: Source, sleep: Callable[[float], None] = time.sleep, from_end: bool = False) -> None:
        if (source.metrics is None) == (source.log is None):
            raise InputError("give one of `metrics` or `log`", options=("metrics", "log"))
        self.source, self.sleep = source, sleep
        self.tracker = CounterTracker()
        self.follower = LogFollower(source.log, from_end=from_end) if source.log else None
        self.engine: str | None = source.engine
        self.spec_tokens: int | None = None

    def sample(self) -> Sample:
        s = self.source
        text = fetch(s.metrics or "", timeout=s.timeout, retries=s.retries, backoff=s.backoff, sleep=self.sleep)
        sample = parse_metrics(text, s.engine, at=time.time())
        self.engine = sample.engine
        self.spec_tokens = sample.spec_tokens or self.spec_tokens
        return sample

    def poll(self) -> list[Increment | Restart]:
        if self.follower is not None:
            got = self.follower.poll()
            self.engine = self.follower.engine or self.engine
            for g in got:
                if isinstance(g, Increment) and g.spec_tokens:
                    self.spec_tokens = g.spec_tokens
            return got
        r = self.tracker.step(self.sample())
        return [] if r is None else [r]


def _feed(watcher: Watcher, got: list[Increment | Restart], at: float) -> list[Event]:
    events: list[Event] = []
    for g in got:
        if isinstance(g, Restart):
            events += watcher.restart(g.reason, at)
            if g.increment is not None:
                events += watcher.add(g.increment, at)
        else:
            events += watcher.add(g, at)
    return events


def _fit(watcher: Watcher, spec_tokens: int | None) -> None:
    if watcher.baseline is not None and spec_tokens:
        watcher.baseline = fit_to(watcher.baseline, spec_tokens)


def watch_loop(
    reader: Reader,
    watcher: Watcher,
    emit: Callable[[Event], None],
    *,
    interval: float = 15.0,
    max_failures: int = 20,
    max_windows: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Read every ``interval`` seconds until ``max_windows`` windows have closed (None: until interrupted);
    1 if an alarm was raised, else 0. ``max_failures`` reads failing in a row end it with the last error."""
    failures, alarmed, fitted = 0, False, False
    while max_windows is None or watcher.index < max_windows:
        try:
            got = reader.poll()
            failures = 0
        except MetricsError as e:
            if isinstance(e, MissingMetricsError) or failures + 1 >= max_failures:
                raise
            failures += 1
            emit(Event(UNREACHABLE, time.time(), f"{e} ({failures} of {max_failures} reads failed in a row)"))
            sleep(interval)
            continue
        if not fitted and reader.spec_tokens:
            _fit(watcher, reader.spec_tokens)
            watcher.spec_tokens = watcher.spec_tokens or reader.spec_tokens
            fitted = True
        for event in _feed(watcher, got, time.time()):
            alarmed |= event.alarm
            emit(event)
        if max_windows is not None and watcher.index >= max_windows:
            break
        sleep(interval)
    return 1 if alarmed else 0


@dataclass(frozen=True)
class Outcome:
    """A one-shot check: the events of this run, and whether the deployment reads as collapsed now."""

    events: tuple[Event, ...]
    collapsed: bool
    windows: int  # windows closed so far (over every run sharing the state file)
    pending: float  # drafts in the open window, not judged yet
    engine: str | None = None

    @property
    def exit_code(self) -> int:
        return 1 if self.collapsed else 0


def check_once(
    source: Source,
    settings: Settings,
    baseline,
    *,
    state: str | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:
    """One reading. With ``state`` (a file), what changed since the previous run sharing it, pooled into
    windows as a running watch would; without, the server's lifetime counts judged as one window of
    ``settings.consecutive`` windows' evidence."""
    reader = Reader(source, sleep=sleep)
    doc = _load(state, source) if state else None
    if doc is None:
        settings_now = (
            settings
            if state
            else replace(settings, window_drafts=settings.window_drafts * settings.consecutive, consecutive=1)
        )
        watcher = Watcher(settings_now, baseline)
    else:
        watcher = Watcher.from_state(doc["watcher"], settings)
        watcher.baseline = baseline or watcher.baseline  # one given today wins over the state's
    now = time.time()
    if source.metrics:
        sample = reader.sample()
        if doc is not None and doc.get("last"):
            reader.tracker.last = _sample_from(doc["last"])
            got = [r] if (r := reader.tracker.step(sample)) is not None else []
        else:
            inc = increment(sample, None)
            got = [inc] if (inc is not None and not state) else []
            reader.tracker.last = sample
    else:
        if doc is not None:
            reader.follower.offset, reader.follower.inode = doc["offset"], doc["inode"]  # type: ignore[union-attr]
            reader.follower.number = doc.get("line", 0)  # type: ignore[union-attr]
        got = reader.poll()
    _fit(watcher, reader.spec_tokens)
    watcher.spec_tokens = watcher.spec_tokens or reader.spec_tokens
    events = _feed(watcher, got, now)
    if state:
        _save(state, source, watcher, reader)
    pending = watcher.open.drafts if watcher.open else 0.0
    return Outcome(tuple(events), watcher.alarmed, watcher.index, pending, reader.engine)


def _sample_from(d: dict) -> Sample:
    pos = {k: {int(j): float(v) for j, v in m.items()} for k, m in (d.get("positions") or {}).items()}
    return Sample(d["engine"], dict(d["totals"]), pos, d.get("created"), d.get("spec_tokens"), d.get("time", 0.0))


def _load(path: str, source: Source) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise InputError(f"cannot read the state file ({e})", path=path, hint="delete it to start afresh") from None
    if doc.get("version") != STATE_VERSION or doc.get("source") != source.name:
        raise InputError(
            f"the state file is of another watch ({doc.get('source')!r})",
            path=path,
            hint="give each watched server its own state file, or delete this one",
        )
    return doc


def _save(path: str, source: Source, watcher: Watcher, reader: Reader) -> None:
    doc: dict = {"version": STATE_VERSION, "source": source.name, "watcher": watcher.state()}
    last = reader.tracker.last
    doc["last"] = None if last is None else asdict(last)
    if reader.follower is not None:
        doc.update(offset=reader.follower.offset, inode=reader.follower.inode, line=reader.follower.number)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
    except OSError as e:
        raise InputError(f"cannot write the state file ({e.strerror or e})", path=path) from None
