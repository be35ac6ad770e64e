"""Progress of the steps that take time, drawn where someone is watching.

The library never prints: a function that takes time (:func:`hsdiff.audit.audit`, ``--draft``'s
:func:`~hsdiff.draft.predict_acceptance`, :func:`hsdiff.capture.capture_hf`, the comparison's
reading and scoring) accepts a ``progress`` callback, :data:`Progress`, and calls it as it goes:
``progress(what, done, total)`` — ``what`` names the step, ``done`` of ``total`` units are finished;
the call with ``done == total`` ends the step. :func:`bars` makes such a callback that draws one bar
per step on stderr: with tqdm where it is installed (``tqdm.auto``: a widget in a notebook), else a
plain line with the rate and the time left. By default only where someone watches (stderr is a
terminal, or a notebook runs the code), so a piped or CI run prints nothing extra; a step is drawn
once it has taken ``delay`` seconds (1 s; ``HSDIFF_PROGRESS_DELAY`` sets another), so quick runs
print nothing at all.

>>> from hsdiff.audit import audit
>>> from hsdiff.progress import bars
>>> report = audit("train_dump/", progress=bars())          # doctest: +SKIP

Code of its own reports through :func:`track` (an iterable) or by calling the callback itself:

>>> for f in track(["a.ckpt", "b.ckpt"], None, "reading files"):   # None: no progress asked for
...     pass
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO, TypeVar

__all__ = ["Progress", "bars", "track", "step", "close_all", "DELAY"]

#: ``progress(what, done, total)``: ``done`` of ``total`` units of step ``what`` are finished.
Progress = Callable[[str, int, int], None]

#: Seconds a step runs before it is drawn (``HSDIFF_PROGRESS_DELAY`` overrides it).
DELAY = 1.0
#: How often an open step is redrawn while no unit finishes (its elapsed time keeps moving).
_REDRAW = 0.5
#: The units the steps count, by a word of the step's name; else "step".
_UNITS = ("file", "sample", "pair", "layer", "batch", "chunk", "boundary", "probe", "token")

T = TypeVar("T")


def bars(enabled: bool | None = None, *, delay: float | None = None, stream: TextIO | None = None) -> Progress | None:
    """A :data:`Progress` callback drawing each step as a bar on ``stream`` (default stderr), or None
    when progress is not wanted.

    ``enabled``: True always, False never, None (the default) when ``stream`` is a terminal or the code
    runs in a notebook. ``delay``: seconds before a step is drawn (default :data:`DELAY`, or
    ``HSDIFF_PROGRESS_DELAY``).

    >>> bars(enabled=False) is None
    True
    """
    out = stream if stream is not None else sys.stderr
    if enabled is None:
        enabled = _is_terminal(out) or _in_notebook()
    if not enabled:
        return None
    if delay is None:
        delay = _env_delay()
    return _Bars(out, delay)


def track(items: Iterable[T], progress: Progress | None, what: str, total: int | None = None) -> Iterator[T]:
    """Yield ``items``, reporting each one finished to ``progress`` as a unit of step ``what``
    (``total``: their number, when ``items`` has no ``len``).

    >>> seen = []
    >>> list(track("ab", lambda w, i, n: seen.append((w, i, n)), "letters"))
    ['a', 'b']
    >>> seen
    [('letters', 0, 2), ('letters', 1, 2), ('letters', 2, 2)]
    """
    if progress is None:
        yield from items
        return
    n = total if total is not None else len(items)  # type: ignore[arg-type]
    progress(what, 0, n)
    done = 0
    for x in items:
        yield x
        done += 1
        progress(what, min(done, n), n)
    if done < n:  # fewer than announced: end the step all the same
        progress(what, n, n)


class step:
    """A step of one unit whose end is all that is known (loading a model): drawn with its elapsed
    time while it runs, ended when the block ends.

    >>> with step(None, "loading the model"):
    ...     pass
    """

    def __init__(self, progress: Progress | None, what: str):
        self.progress, self.what = progress, what

    def __enter__(self) -> step:
        if self.progress is not None:
            self.progress(self.what, 0, 1)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress(self.what, 1, 1)


def _env_delay() -> float:
    try:
        return max(0.0, float(os.environ.get("HSDIFF_PROGRESS_DELAY", DELAY)))
    except ValueError:
        return DELAY


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed, or not a file
        return False


def _in_notebook() -> bool:
    """Whether an IPython kernel (Jupyter, VS Code) runs this code: its stderr is no terminal, yet shown."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except AttributeError:
        return False
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def unit_of(what: str) -> str:
    """The unit a step counts, from its name ("reading training files" counts files)."""
    words = what.lower().replace("(", " ").replace(")", " ").split()
    for unit in _UNITS:
        if unit in words or unit + "s" in words or unit + "es" in words:
            return unit
    return "step"


def close_all() -> None:
    """Clear every bar still drawn (a step an error cut short), so that the error is printed on a line of its
    own; the CLI calls it before it reports how a command ended."""
    for b in list(_OPEN):
        b.close()


class _Bars:
    """One bar at a time: a new step ends the one before; redrawn while a unit takes long."""

    def __init__(self, stream: TextIO, delay: float):
        self.stream, self.delay = stream, delay
        self.bar: _Bar | None = None
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None
        _OPEN.add(self)

    def close(self) -> None:
        with self.lock:
            if self.bar is not None:
                self.bar.close()
                self.bar = None

    def __call__(self, what: str, done: int, total: int) -> None:
        with self.lock:
            if self.bar is not None and self.bar.what != what:
                self.bar.close()
                self.bar = None
            if self.bar is None:
                if done >= total:  # a step announced finished: nothing to draw
                    return
                self.bar = _make(self.stream, what, done, total, self.delay)
                self._start_redraw()
            else:
                self.bar.to(done, total)
            if done >= total:
                self.bar.close()
                self.bar = None

    def _start_redraw(self) -> None:
        if self.thread is None or not self.thread.is_alive():
            self.thread = threading.Thread(target=self._redraw, name="hsdiff-progress", daemon=True)
            self.thread.start()

    def _redraw(self) -> None:
        while not self.wake.wait(_REDRAW):
            with self.lock:
                if self.bar is None:
                    return
                self.bar.tick()


#: The callbacks :func:`bars` made that are still alive (:func:`close_all`).
_OPEN: weakref.WeakSet[_Bars] = weakref.WeakSet()


class _Bar:
    what: str

    def to(self, done: int, total: int) -> None: ...

    def tick(self) -> None: ...

    def close(self) -> None: ...


def _make(stream: TextIO, what: str, done: int, total: int, delay: float) -> _Bar:
    try:
        from tqdm.auto import tqdm
    except ImportError:  # not installed (the core install has no tqdm): a plain line
        return _Line(stream, what, done, total, delay)
    try:
        return _Tqdm(tqdm, stream, what, done, total, delay)
    except TypeError:  # a tqdm older than 4.60 (no delay)
        return _Line(stream, what, done, total, delay)


class _Tqdm(_Bar):
    def __init__(self, tqdm: Any, stream: TextIO, what: str, done: int, total: int, delay: float):
        self.what, self.delay = what, delay
        self.start = time.monotonic()
        self.bar = tqdm(
            total=total,
            initial=done,
            desc=f"hsdiff {what}",
            unit=" " + unit_of(what),
            file=stream,
            delay=delay,
            leave=False,
            dynamic_ncols=True,
            mininterval=min(0.2, delay),  # HSDIFF_PROGRESS_DELAY=0: every unit drawn
        )

    def to(self, done: int, total: int) -> None:
        if total != self.bar.total:
            self.bar.total = total
        if done > self.bar.n:
            self.bar.update(done - self.bar.n)

    def tick(self) -> None:
        if time.monotonic() - self.start >= self.delay:
            self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


class _Line(_Bar):
    """A line redrawn in place: ``hsdiff audit 32/1024 files (3%), 6.1 files/s, 2:42 left``."""

    def __init__(self, stream: TextIO, what: str, done: int, total: int, delay: float):
        self.stream, self.what, self.delay = stream, what, delay
        self.unit = unit_of(what)
        self.start = time.monotonic()
        self.first, self.done, self.total = done, done, total
        self.shown = 0  # width of the line on screen
        self.last = 0.0

    def to(self, done: int, total: int) -> None:
        self.done, self.total = done, total
        now = time.monotonic()
        if now - self.last >= min(0.2, self.delay):
            self._draw(now)

    def tick(self) -> None:
        self._draw(time.monotonic())

    def _draw(self, now: float) -> None:
        elapsed = now - self.start
        if elapsed < self.delay:
            return
        self.last = now
        text = f"hsdiff {self.what} {self.done}/{self.total}"
        if self.total > 1:
            text += f" {self.unit}s ({100 * self.done // max(1, self.total)}%)"
        rate = (self.done - self.first) / elapsed if elapsed > 0 else 0.0
        if rate > 0:
            text += f", {rate:.3g} {self.unit}s/s, {_clock((self.total - self.done) / rate)} left"
        else:
            text += f", {_clock(elapsed)} so far"
        pad = max(0, self.shown - len(text))
        self._write("\r" + text + " " * pad)
        self.shown = len(text)

    def close(self) -> None:
        if self.shown:
            self._write("\r" + " " * self.shown + "\r")
            self.shown = 0

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: progress is not worth a failure
            pass


def _clock(seconds: float) -> str:
    s = int(seconds + 0.5)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
