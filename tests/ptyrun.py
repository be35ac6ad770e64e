"""Running ``hsdiff`` as a user does: on a terminal (a pseudo-terminal: ``os.openpty``) or piped.

A progress bar is drawn only where someone watches, so the tests of the steps that take time run each
command both ways and compare what it printed. ``HSDIFF_PROGRESS_DELAY=0`` makes the small fixtures'
steps (quicker than the real default delay of a second) draw their bars all the same.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: A tqdm bar of one of hsdiff's steps: ``hsdiff reading training files:  50%|#####     | 1/2 [...]``.
BAR = re.compile(r"hsdiff (?P<what>[^:\r\n|]+?):\s+\d+%\|")
#: The rate and the time left that tqdm prints once a unit is done: ``[00:01<00:03, 2.50 file/s]``.
RATE_ETA = re.compile(r"\d+:\d\d<\d+:\d\d, +[\d.]+ ?[a-z ]*/s\]")
#: The plain line drawn without tqdm: ``hsdiff reading training files 1/2 files (50%), 3.1 files/s, 0:01 left``.
LINE = re.compile(r"hsdiff (?P<what>[^\r\n]+?) \d+/\d+ \w+ \(\d+%\), [\d.]+ \w+/s, \d+:\d\d left")


def _env(extra: dict[str, str] | None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HSDIFF_PROGRESS_DELAY": "0", "TERM": "xterm", "COLUMNS": "120"}
    env.pop("CI", None)  # tqdm and hsdiff behave the same under CI; keep the run as a user's
    env.update(extra or {})
    return env


def command(args: list[str], code: str | None = None) -> list[str]:
    """``python -m hsdiff ARGS``, or ``python -c CODE ARGS`` (CODE runs the CLI after its own setup)."""
    return [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "hsdiff", *args]


def on_tty(
    args: list[str], *, code: str | None = None, env: dict[str, str] | None = None, timeout: float = 300
) -> tuple[int, str]:
    """Run with stdout and stderr on one pseudo-terminal (120 columns); the exit code and all it printed."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(
        command(args, code), stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=_env(env), cwd=ROOT
    )
    os.close(slave)
    chunks: list[bytes] = []
    end = time.monotonic() + timeout
    try:
        while time.monotonic() < end:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError as e:  # EIO: the child closed the terminal
                if e.errno != errno.EIO:
                    raise
                break
            if not data:
                break
            chunks.append(data)
        else:
            proc.kill()
            raise TimeoutError(f"{args} ran over {timeout} s")
    finally:
        os.close(master)
    rc = proc.wait(timeout=60)
    return rc, b"".join(chunks).decode("utf-8", "replace")


def piped(
    args: list[str], *, code: str | None = None, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run with stdout and stderr piped (as in CI or ``| tee``)."""
    return subprocess.run(
        command(args, code), stdin=subprocess.DEVNULL, capture_output=True, text=True, env=_env(env), cwd=ROOT,
        timeout=timeout,
    )  # fmt: skip


def bars(text: str) -> set[str]:
    """The steps drawn as tqdm bars in ``text``."""
    return {m.group("what").strip() for m in BAR.finditer(text)}
