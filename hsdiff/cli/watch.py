"""``hsdiff watch --metrics URL`` (or ``--log FILE``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace

import click

from ..errors import InputError
from ..rules.metrics import WATCH_INFO
from ..watch import (
    BASELINE_WINDOWS,
    DEFAULT_WINDOW_DRAFTS,
    Event,
    Reader,
    Settings,
    Source,
    Watcher,
    capture_recipe,
    check_once,
    from_report,
    given,
    parse_command,
    run_hook,
    server_of,
    watch_loop,
)
from ._group import cli

EPILOG = """\b
Examples:
  hsdiff watch --metrics http://127.0.0.1:8000/metrics --baseline report.json --events watch.jsonl
  hsdiff watch --metrics http://sglang:30000/metrics --baseline 2.6 --on-alarm 'notify-oncall --team llm'
  hsdiff watch --log /var/log/vllm.log
  hsdiff watch --once --metrics http://127.0.0.1:8000/metrics --baseline 2.4 --state /var/lib/hsdiff/watch.json
\b
--baseline: a value (tokens per verification step), or an hsdiff JSON report written by
`compare --draft ... --json` (its predicted acceptance); none: learned from the first windows.
\b
Exit status: 0 healthy (or no verdict yet), 1 acceptance collapsed, 2 the metrics cannot be read
(or bad input), 3 a bug in hsdiff. docs/watch.md has the rule, its thresholds and why.
"""


class _Output:
    """Where events go: stderr in words, JSON lines to --events and to stdout with --json; on an alarm the
    capture recipe and the --on-alarm command."""

    def __init__(self, src: Source, kw: dict, engine: Callable[[], str | None]) -> None:
        events = kw["events"]
        self.events = open(events, "a", encoding="utf-8") if events else None  # noqa: SIM115 - held for the run
        self.as_json, self.quiet, self.recipe_for = kw["as_json"], kw["quiet"], kw["recipe"]
        self.src, self.engine = src, engine
        self.hook = parse_command(kw["hook"]) if kw["hook"] else None

    def __call__(self, event: Event) -> None:
        where = {"engine": self.engine(), "source": self.src.name} if self.engine() else {"source": self.src.name}
        event = replace(event, extra={**where, **event.extra})
        if event.alarm and self.hook is not None:
            event = replace(event, extra={**event.extra, "on_alarm": run_hook(self.hook, event.to_json()).to_dict()})
        line = event.to_json()
        if self.events is not None:
            self.events.write(line + "\n")
            self.events.flush()
        if self.as_json:
            click.echo(line)
        if event.alarm or event.kind != "window" or not self.quiet:
            click.echo(f"hsdiff: {event.message}", err=True)
        if event.alarm:
            server = server_of(self.src.metrics) if self.src.metrics else "http://HOST:PORT"
            train, sample, model = self.recipe_for
            recipe = capture_recipe(self.engine() or "vllm", server, train=train, sample=sample, model=model)
            click.echo(f"hsdiff: {recipe}", err=True)


def _baseline(value: str | None):
    if value is None:
        return None
    try:
        return given(float(value))
    except ValueError:
        pass
    if not os.path.isfile(value):
        raise InputError(f"`baseline={value}` is neither a number nor a report file", options=("baseline",))
    return from_report(value)


def _run(src: Source, settings: Settings, baseline, kw: dict, once: bool, state, loop: dict) -> int:
    if once:
        outcome = check_once(src, settings, baseline, state=state)
        out = _Output(src, kw, lambda: outcome.engine)
        for e in outcome.events:
            out(e)
        verdict = "collapsed" if outcome.collapsed else "healthy" if outcome.windows else "no verdict yet"
        click.echo(
            f"hsdiff: {verdict}: {outcome.windows} windows judged, {outcome.pending:.0f} drafts pending", err=True
        )
        return outcome.exit_code
    reader = Reader(src)
    watcher = Watcher(settings, baseline)
    what = "learned from the first windows" if baseline is None else baseline.summary()
    click.echo(
        f"hsdiff: watching {src.name}; windows of {settings.window_drafts:.0f} drafts; baseline {what}", err=True
    )
    return watch_loop(reader, watcher, _Output(src, kw, lambda: reader.engine), **loop)


@cli.command("watch", epilog=EPILOG)
@click.option("--metrics", default=None, metavar="URL", help="The engine's Prometheus metrics URL (the only URL read).")
@click.option("--log", "log_path", default=None, type=click.Path(path_type=str), help="Follow this engine log instead.")
@click.option("--engine", type=click.Choice(list(WATCH_INFO)), default=None, help="Default: told from the page.")
@click.option("--baseline", default=None, metavar="VALUE|REPORT", help="The healthy acceptance length (see below).")
@click.option("--window-drafts", type=click.IntRange(min=1), default=DEFAULT_WINDOW_DRAFTS, show_default=True)
@click.option("--baseline-windows", type=click.IntRange(min=1), default=BASELINE_WINDOWS, show_default=True)
@click.option("--num-speculative-tokens", "spec_tokens", type=click.IntRange(min=1), default=None)
@click.option(
    "--interval", type=click.FloatRange(min=0.0), default=15.0, show_default=True, help="Seconds between reads."
)
@click.option("--once", is_flag=True, help="Read once, judge, exit 0 healthy / 1 collapsed / 2 unreadable.")
@click.option("--state", default=None, type=click.Path(path_type=str), help="--once: memory between runs.")
@click.option("--events", default=None, type=click.Path(path_type=str), help="Append every event as a JSON line.")
@click.option("--json", "as_json", is_flag=True, help="Print every event as a JSON line on stdout.")
@click.option("--on-alarm", default=None, metavar="CMD", help="Run CMD (no shell) with the alarm's JSON on stdin.")
@click.option("--max-windows", type=click.IntRange(min=1), default=None, help="Stop after this many windows.")
@click.option("--train", default=None, help="The training dump the capture recipe names.")
@click.option("--sample", default=None, help="Its sample the recipe replays.")
@click.option("--model", default=None, help="vLLM: the served model name, for the recipe's request.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True, help="Seconds per try.")
@click.option(
    "--retries", type=click.IntRange(min=1), default=3, show_default=True, help="Tries per read (back-off 1, 2, 4 s)."
)
@click.option(
    "--max-failures",
    type=click.IntRange(min=1),
    default=40,
    show_default=True,
    help="Failed reads in a row before giving up (exit 2); a restarting server is unreachable for a while.",
)
@click.option("-q", "--quiet", is_flag=True, help="Say only alarms, restarts and the baseline, not every window.")
def watch_cmd(
    metrics,
    log_path,
    engine,
    baseline,
    window_drafts,
    baseline_windows,
    spec_tokens,
    interval,
    once,
    state,
    events,
    as_json,
    on_alarm,
    max_windows,
    train,
    sample,
    model,
    timeout,
    retries,
    max_failures,
    quiet,
) -> None:
    """Watch an engine's speculative-decoding acceptance and raise an alarm when it collapses.

    Pools the engine's own counters into windows of --window-drafts verification steps and compares
    each with the baseline: an alarm when the accepted tokens per step fall below 40% of the
    baseline's (or position 1 below 0.3x) for 3 windows in a row, or below 1.1 tokens per step with
    3 or more speculative tokens in one window.
    """
    if (metrics is None) == (log_path is None):
        raise click.UsageError("give one of --metrics URL or --log FILE")
    if state and not once:
        raise click.UsageError("--state keeps a --once check's memory between runs; add --once")
    src = Source(metrics, log_path, engine, timeout=timeout, retries=retries)
    settings = Settings(window_drafts, baseline_windows, spec_tokens=spec_tokens)
    out_kw = {"events": events, "as_json": as_json, "quiet": quiet, "hook": on_alarm, "recipe": (train, sample, model)}
    loop = {"interval": interval, "max_windows": max_windows, "max_failures": max_failures}
    code = _run(src, settings, _baseline(baseline), out_kw, once, state, loop)
    click.get_current_context().exit(code)
