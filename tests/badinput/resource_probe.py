"""Measure what reading a file costs, in a fresh process (used by ``tests/test_resources.py``).

A long test session leaves freed memory resident in the allocator, and a new allocation can reuse it
without the process growing: measured there, a 200 MiB allocation can look free. A fresh process has
no such pool, so its resident set shows what a read really takes.

    python -m tests.badinput.resource_probe TASKS.json     # prints one JSON list of results

Each task is ``{"kind": "sanity" | "read" | "log", "path": ...}``. Memory is the rise of the resident
set over the call: its high-water mark (``VmHWM``, reset through ``/proc/self/clear_refs``) and its size
sampled every millisecond, whichever is larger.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path


def _status(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def peak_growth(fn: Callable[[], object]) -> tuple[object, int, str]:
    """``fn()``'s result (or the exception it raised), how far the resident set rose, and how that was measured."""
    rss = _status("VmRSS")
    if rss is None:
        import tracemalloc

        tracemalloc.start()
        try:
            try:
                out: object = fn()
            except Exception as e:  # noqa: BLE001 - returned for the caller to check
                out = e
            return out, tracemalloc.get_traced_memory()[1], "tracemalloc"
        finally:
            tracemalloc.stop()
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        how = "VmHWM+sampled VmRSS"
    except OSError:
        how = "sampled VmRSS"
    peak = [rss]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _status("VmRSS") or 0)
            done.wait(0.001)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out = fn()
    except Exception as e:  # noqa: BLE001 - returned for the caller to check
        out = e
    finally:
        done.set()
        sampler.join()
    hwm = (_status("VmHWM") or rss) if how.startswith("VmHWM") else rss
    return out, max(0, hwm - rss, peak[0] - rss), how


def _outcome(out: object) -> dict:
    from hsdiff.errors import HsdiffError

    if isinstance(out, HsdiffError):
        return {"outcome": "error", "message": str(out)}
    if isinstance(out, BaseException):
        return {"outcome": "crash", "message": f"{type(out).__name__}: {out}"}
    return {"outcome": "ok", "message": f"{len(out) if isinstance(out, list) else out}"}


def probe_sanity() -> dict:
    import numpy as np

    _, big, how = peak_growth(lambda: float(np.ones(200 * 2**20 // 8).sum()))
    _, small, _ = peak_growth(lambda: float(np.ones(1000).sum()))
    return {"big": big, "small": small, "how": how}


def probe_read(path: str) -> dict:
    from hsdiff.readers import ReadContext, read_file

    p = Path(path)

    def read() -> object:
        caps = read_file(p, ReadContext(side="infer", root=p.parent))
        for c in caps:
            if c.loader is not None:
                c.load()
        return caps

    t0 = time.monotonic()
    out, grew, how = peak_growth(read)
    return {**_outcome(out), "growth": grew, "how": how, "seconds": time.monotonic() - t0}


class _CountingFile:
    """A binary file that counts the bytes it hands out and the times it is asked to go elsewhere."""

    def __init__(self, f, counter: dict):
        self._f, self._c = f, counter

    def _count(self, data):
        self._c["bytes"] += len(data)
        return data

    def read(self, *a):
        return self._count(self._f.read(*a))

    def readline(self, *a):
        return self._count(self._f.readline(*a))

    def readinto(self, b):
        n = self._f.readinto(b)
        self._c["bytes"] += n or 0
        return n

    def __iter__(self):
        for line in self._f:
            yield self._count(line)

    def seek(self, offset, whence=0):
        if not (whence == 1 and offset == 0):
            self._c["seeks"] += 1
        return self._f.seek(offset, whence)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()

    def __getattr__(self, name):
        return getattr(self._f, name)


def probe_log(path: str) -> dict:
    """Read a log with the debug-log reader, counting how it reads the file."""
    from hsdiff.readers import ReadContext, debuglog

    p = Path(path)
    counter = {"opens": 0, "bytes": 0, "seeks": 0}

    def counting_open(file, mode="r", *a, **k):
        f = open(file, mode, *a, **k)
        if Path(file) == p:
            counter["opens"] += 1
            return _CountingFile(f, counter)
        return f

    debuglog.open = counting_open  # type: ignore[attr-defined]  # shadows the builtin inside the module
    try:
        t0 = time.monotonic()
        out, grew, how = peak_growth(lambda: debuglog.read(p, ReadContext(side="infer", root=p.parent)))
        took = time.monotonic() - t0
    finally:
        del debuglog.open  # type: ignore[attr-defined]
    return {**_outcome(out), **counter, "size": p.stat().st_size, "growth": grew, "how": how, "seconds": took}


def main(argv: list[str]) -> int:
    tasks = json.loads(Path(argv[0]).read_text())
    import numpy  # noqa: F401
    import torch  # noqa: F401

    import hsdiff.readers  # noqa: F401 - imported before any measurement

    results = []
    for t in tasks:
        if t["kind"] == "sanity":
            results.append(probe_sanity())
        elif t["kind"] == "read":
            results.append(probe_read(t["path"]))
        else:
            results.append(probe_log(t["path"]))
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
