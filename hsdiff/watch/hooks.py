"""What a watch does on an alarm beyond saying it: run the user's command with the event on its standard
input (:func:`run_hook`: an argv, never a shell), and write the steps that capture one request for an offline
compare (:func:`capture_recipe`).
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass

from ..errors import InputError
from ..rules.metrics import WATCH_INFO
from ..rules.profile import ENGINE_INFO

__all__ = ["HookResult", "parse_command", "run_hook", "capture_recipe", "HOOK_TIMEOUT"]

#: Seconds an on-alarm command may run before it is stopped.
HOOK_TIMEOUT = 60.0


@dataclass(frozen=True)
class HookResult:
    argv: tuple[str, ...]
    returncode: int | None  # None: it could not start, or was stopped at the timeout
    error: str = ""

    def to_dict(self) -> dict:
        return {"argv": list(self.argv), "returncode": self.returncode, "error": self.error}


def parse_command(command: str) -> tuple[str, ...]:
    """``command`` split as a POSIX shell splits words (quotes kept together), not run by a shell: no pipes,
    no substitutions, no variables.

    >>> parse_command("notify-send 'hsdiff alarm'")
    ('notify-send', 'hsdiff alarm')
    """
    try:
        argv = tuple(shlex.split(command))
    except ValueError as e:
        raise InputError(f"`on_alarm` cannot be split into words ({e})", options=("on_alarm",)) from None
    if not argv:
        raise InputError("`on_alarm` is empty", hint="give a program and its arguments", options=("on_alarm",))
    return argv


def run_hook(argv: tuple[str, ...], payload: str, timeout: float = HOOK_TIMEOUT) -> HookResult:
    """Run ``argv`` with ``payload`` (the event's JSON line) on its standard input."""
    try:
        proc = subprocess.run(  # noqa: S603 - an argv the user gave, no shell
            list(argv),
            input=payload.encode() + b"\n",
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return HookResult(argv, None, f"stopped after {timeout:.0f} s")
    except OSError as e:
        return HookResult(argv, None, e.strerror or str(e))
    err = proc.stderr.decode("utf-8", errors="replace").strip().splitlines()
    return HookResult(argv, proc.returncode, err[-1] if proc.returncode and err else "")


def capture_recipe(
    engine: str, server: str, *, train: str | None = None, sample: str | None = None, model: str | None = None
) -> str:
    """The commands that capture one request and compare it offline with the training side, in words.

    >>> print(capture_recipe("vllm", "http://10.0.0.5:8000", train="train/", sample="data_1", model="tgt"))
    ... # doctest: +ELLIPSIS
    to see which layers the draft is fed, capture one request and compare it offline:
      1. ... hsdiff request train/ --sample data_1 --engine vllm --model tgt --url http://10.0.0.5:8000 > ask.sh
    ...
    """
    info = ENGINE_INFO.get(engine)
    watch = WATCH_INFO.get(engine)
    dump = shlex.quote(train) if train else "TRAIN_DUMP"
    lines = ["to see which layers the draft is fed, capture one request and compare it offline:"]
    if info is not None and info.request:
        req = ["hsdiff", "request", dump]
        req += ["--sample", shlex.quote(sample)] if sample else []
        req += ["--engine", engine] + (["--model", shlex.quote(model)] if model else [])
        req += ["--url", shlex.quote(server)]
        lines.append(
            "  1. the request, a training sample's exact token ids (no chat template; "
            f"{info.cache_flag} on the server that captures, or a cached prefix is not captured): "
            + " ".join(req)
            + " > ask.sh"
        )
    else:
        lines.append(
            f"  1. the request: {info.title if info else engine} has no token-id request hsdiff writes; send a "
            "training sample's text with temperature 0"
        )
    if watch is not None:
        lines.append(f"  2. run it where the capture is on: {watch.capture}")
    lines.append(
        f"  3. compare: hsdiff gate {dump} DUMP_DIR --engine {engine} --draft-config DRAFT/config.json "
        "--target-config TARGET/config.json"
    )
    lines.append("  (re-sending a fingerprint's probes to this server comes with the draft fingerprint)")
    return "\n".join(lines)
