"""Live watch: notice an acceptance collapse in production from the engine's own metrics or log.

``hsdiff watch --metrics URL`` reads the engine's speculative-decoding counters (the series of
:data:`hsdiff.rules.metrics.SERIES`), pools what they add into windows of at least ``window_drafts``
verification steps, and judges each against a baseline with the rule of :mod:`.collapse`.

    >>> from hsdiff.watch import Reader, Source, Settings, Watcher, watch_loop   # doctest: +SKIP
    >>> src = Source(metrics="http://127.0.0.1:8000/metrics")     # doctest: +SKIP
    >>> watch_loop(Reader(src), Watcher(Settings()), print)          # doctest: +SKIP

Modules: :mod:`.records` (Increment, Window, Baseline, Event), :mod:`.scrape` (one URL, prometheus-client's
parser), :mod:`.counters` (deltas, restarts), :mod:`.follow` (a log), :mod:`.collapse` (the rule and its
thresholds), :mod:`.watcher` (windows, alarms, state), :mod:`.baseline`, :mod:`.hooks` (on-alarm command,
capture recipe), :mod:`.run` (the loop and the one-shot check).
"""

from .baseline import fit_to, from_report, given
from .collapse import (
    BASELINE_WINDOWS,
    CONSECUTIVE_WINDOWS,
    DEFAULT_WINDOW_DRAFTS,
    FLOOR_ACCEPTANCE,
    FLOOR_MIN_SPEC_TOKENS,
    GAIN_SHARE,
    POSITION1_SHARE,
    judge,
)
from .counters import CounterTracker, Restart
from .follow import LogFollower
from .hooks import capture_recipe, parse_command, run_hook
from .records import Baseline, Event, Increment, Window
from .run import Outcome, Reader, Source, check_once, watch_loop
from .scrape import MetricsError, MissingMetricsError, Sample, fetch, parse_metrics, server_of
from .watcher import Settings, Watcher

__all__ = [
    "Baseline",
    "Event",
    "Increment",
    "Window",
    "Sample",
    "Settings",
    "Watcher",
    "Source",
    "Reader",
    "Outcome",
    "CounterTracker",
    "Restart",
    "LogFollower",
    "MetricsError",
    "MissingMetricsError",
    "watch_loop",
    "check_once",
    "fetch",
    "parse_metrics",
    "server_of",
    "given",
    "from_report",
    "fit_to",
    "judge",
    "capture_recipe",
    "parse_command",
    "run_hook",
    "GAIN_SHARE",
    "POSITION1_SHARE",
    "CONSECUTIVE_WINDOWS",
    "FLOOR_ACCEPTANCE",
    "FLOOR_MIN_SPEC_TOKENS",
    "DEFAULT_WINDOW_DRAFTS",
    "BASELINE_WINDOWS",
]
