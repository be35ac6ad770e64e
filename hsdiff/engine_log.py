"""An engine's own log as evidence: the layers it chose and the acceptance it measured.

``--engine-log FILE`` on ``compare`` and ``gate``. The lines read are data
(:data:`hsdiff.rules.traces.LOG_LINES`, each citing the engine's logging call):

* vLLM's ``Using auxiliary layers from speculative config: (1, 14, 26)`` — the ids the engine took
  from the draft config, as written (the engine sorts them afterwards); the line is absent when it
  fell back to its default;
* vLLM's ``SpecDecoding metrics: Mean acceptance length: …, Accepted: N tokens, Drafted: N tokens,
  Per-position acceptance rate: …`` — one line per logging interval, each counting only that
  interval, so the lines are summed back into the run's totals (drafts = drafted / positions);
* SGLang's ``Decode batch. … accept len: X`` — per interval too, with no counts: their plain mean;
* TensorRT-LLM's iteration statistics as JSON (``"specDecodingStats": {...}``, what its ``/metrics`` route
  returns), each iteration counting its drafts, drafted and accepted tokens: summed like vLLM's.

:func:`logged_acceptance` reads one such line; ``hsdiff watch --log`` follows a log with it.

>>> log = read_engine_log("server.log")     # doctest: +SKIP
>>> log.aux_layers, round(log.acceptance.acceptance_length, 2)      # doctest: +SKIP
((1, 14, 26), 1.19)
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from .errors import InputError
from .rules.traces import LOG_LINES

__all__ = ["EngineLog", "MeasuredAcceptance", "LoggedAcceptance", "read_engine_log", "logged_acceptance"]

#: Largest log read (bytes): a server log is text, read line by line.
MAX_LOG_BYTES = 2 << 30


@dataclass(frozen=True)
class MeasuredAcceptance:
    """The acceptance an engine measured: tokens per verification step, the target's own token included."""

    engine: str
    acceptance_length: float
    per_position: tuple[float, ...] | None  # P(position j accepted) per verification step (vLLM)
    drafts: int | None  # verification steps counted (vLLM)
    accepted_tokens: int | None
    drafted_tokens: int | None
    lines: int  # log lines summed
    source: str  # the log file

    def to_dict(self) -> dict:
        return {
            "engine": self.engine,
            "acceptance_length": round(self.acceptance_length, 4),
            "acceptance_by_position": None if self.per_position is None else [round(p, 4) for p in self.per_position],
            "verify_steps": self.drafts,
            "accepted_tokens": self.accepted_tokens,
            "drafted_tokens": self.drafted_tokens,
            "log_lines": self.lines,
            "file": self.source,
        }

    def summary(self) -> str:
        pos = "" if self.per_position is None else f"; per position {', '.join(f'{p:.3f}' for p in self.per_position)}"
        steps = "" if self.drafts is None else f" over {self.drafts} verification steps"
        return (
            f"measured by {self.engine} ({self.source}): acceptance length {self.acceptance_length:.2f} "
            f"tokens/step{steps}{pos}"
        )


@dataclass(frozen=True)
class EngineLog:
    """What an engine log says: the ids it configured (with the line) and the acceptance it measured."""

    path: str
    engine: str | None
    aux_layers: tuple[int, ...] | None
    aux_line: int | None
    acceptance: MeasuredAcceptance | None
    default_layers: tuple[int, ...] | None = None  #: the engine said it found no ids and took these (vLLM V2)
    default_line: int | None = None
    aux_boundaries: bool = False  #: ``aux_layers`` are the boundaries captured (vLLM V2), not the ids as written

    def to_dict(self) -> dict:
        return {
            "file": self.path,
            "engine": self.engine,
            "eagle_aux_hidden_state_layer_ids": None if self.aux_layers is None else list(self.aux_layers),
            "line": self.aux_line,
            "default_layers": None if self.default_layers is None else list(self.default_layers),
            "default_line": self.default_line,
            "measured_acceptance": None if self.acceptance is None else self.acceptance.to_dict(),
        }


@dataclass(frozen=True)
class LoggedAcceptance:
    """One logged interval of acceptance: what the engine counted since its previous line.

    ``drafts`` (verification steps) is counted where the line counts it (vLLM: drafted tokens / positions;
    TensorRT-LLM: requests with draft tokens), else ``estimated`` (SGLang: running requests x the steps one
    line covers) or None; ``accepted`` likewise (SGLang: (mean - 1) x the estimated steps).

    >>> a = logged_acceptance("accept len: 1.50, accept rate: 0.25")
    >>> a is None
    True
    """

    engine: str
    mean: float | None  # the acceptance length the line prints (or implies)
    drafts: float | None
    accepted: float | None
    drafted: int | None
    per_position: tuple[float, ...] | None  # P(position j accepted) per step, as printed (vLLM)
    estimated: bool = False
    line: int = 0

    @property
    def accepted_at(self) -> tuple[float, ...] | None:
        """Accepted tokens per position (the printed rates times the steps)."""
        if self.per_position is None or self.drafts is None:
            return None
        return tuple(r * self.drafts for r in self.per_position)


_PATTERNS = [(r, re.compile(r.pattern)) for r in LOG_LINES]
_ACCEPTANCE = [(r, rx) for r, rx in _PATTERNS if r.kind == "acceptance"]


def logged_acceptance(text: str, number: int = 0) -> LoggedAcceptance | None:
    """The acceptance a log line reports (:data:`hsdiff.rules.traces.LOG_LINES`), or None.

    >>> a = logged_acceptance("SpecDecoding metrics: Mean acceptance length: 1.20, Accepted throughput: 1.00 "
    ...     "tokens/s, Drafted throughput: 5.00 tokens/s, Accepted: 20 tokens, Drafted: 500 tokens, "
    ...     "Per-position acceptance rate: 0.150, 0.050, 0.000, 0.000, 0.000, Avg Draft acceptance rate: 4.0%")
    >>> a.engine, a.drafts, a.accepted, a.per_position[:2]
    ('vllm', 100.0, 20.0, (0.15, 0.05))
    """
    for row, rx in _ACCEPTANCE:
        m = rx.search(text)
        if m is None:
            continue
        if row.form == "json":
            return _iteration_json(row.engine, text[m.start() :], text, number)
        if "accepted" in rx.groupindex:  # counted: drafts = drafted / positions (one token per position per step)
            rates = tuple(float(x) for x in re.findall(r"[\d.]+", m["per_pos"]))
            drafted, accepted = int(m["drafted"]), int(m["accepted"])
            drafts = float(round(drafted / len(rates))) if rates else None
            mean = 1.0 + accepted / drafts if drafts else None
            return LoggedAcceptance(row.engine, mean, drafts, float(accepted), drafted, rates or None, line=number)
        mean = float(m["mean"])
        running = m.groupdict().get("running")
        steps = float(int(running) * row.steps_per_request) if running and row.steps_per_request else None
        gained = None if steps is None else (mean - 1.0) * steps
        return LoggedAcceptance(row.engine, mean, steps, gained, None, None, steps is not None, number)
    return None


def _iteration_json(engine: str, tail: str, text: str, number: int) -> LoggedAcceptance | None:
    """Sum the ``specDecodingStats`` of the iteration objects a line holds (one object, or a list of them)."""
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    try:
        doc = json.loads(text[start:]) if start >= 0 else None
    except ValueError:
        return None
    items = doc if isinstance(doc, list) else [doc]
    stats = [
        d["specDecodingStats"] for d in items if isinstance(d, dict) and isinstance(d.get("specDecodingStats"), dict)
    ]
    try:
        drafts = sum(float(s.get("numRequestsWithDraftTokens", 0)) for s in stats)
        accepted = sum(float(s.get("numAcceptedTokens", 0)) for s in stats)
        drafted = sum(int(s.get("numDraftTokens", 0)) for s in stats)
    except (TypeError, ValueError):
        return None
    if not stats:
        return None
    return LoggedAcceptance(
        engine, 1.0 + accepted / drafts if drafts else None, drafts, accepted, drafted, None, line=number
    )


def read_engine_log(path: str | os.PathLike) -> EngineLog:
    """Read an engine's log for its aux-layer line and its acceptance lines; raises :class:`InputError`
    when the file cannot be read or holds neither."""
    p = os.fspath(path)
    try:
        if os.path.getsize(p) > MAX_LOG_BYTES:
            raise InputError(
                f"the engine log is larger than {MAX_LOG_BYTES >> 30} GiB",
                path=p,
                hint="give the part of the log around the run (grep 'SpecDecoding|accept len|auxiliary')",
            )
        fh = open(p, encoding="utf-8", errors="replace")
    except OSError as e:
        raise InputError(
            f"cannot read the engine log: {e.strerror or e}", path=p, hint="give the file the engine wrote its log to"
        ) from None
    aux: tuple[int, ...] | None = None
    aux_line = None
    aux_b = False
    default: tuple[int, ...] | None = None
    default_line = None
    engines: set[str] = set()
    counted: list[LoggedAcceptance] = []  # lines that count steps and tokens (vLLM, TensorRT-LLM): summed
    means: list[float] = []  # the mean alone per line (SGLang)
    measured_by = ""
    with fh:
        for n, line in enumerate(fh, 1):
            for row, rx in _PATTERNS:
                m = rx.search(line)
                if m is None:
                    continue
                if row.kind == "aux_layers":
                    aux = tuple(int(x) for x in re.findall(r"-?\d+", m["ids"]))
                    aux_line, aux_b = n, row.boundaries
                elif row.kind == "default_layers":
                    default = tuple(int(x) for x in re.findall(r"-?\d+", m["ids"]))
                    default_line = n
                else:
                    got = logged_acceptance(line, n)
                    if got is None:
                        continue
                    if got.estimated or got.drafts is None:
                        if got.mean is not None:
                            means.append(got.mean)
                    else:
                        counted.append(got)
                    measured_by = row.engine
                engines.add(row.engine)
    if aux is None and default is None and not counted and not means:
        raise InputError(
            "no engine line found in the log (vLLM's 'Using auxiliary layers from speculative config' "
            "or 'SpecDecoding metrics', SGLang's 'Decode batch … accept len')",
            path=p,
            hint="give the engine's own log, with stats logging on (vLLM: not --disable-log-stats)",
        )
    if len(engines) > 1:
        raise InputError(
            f"the log holds lines of several engines ({', '.join(sorted(engines))})",
            path=p,
            hint="give one engine's log",
        )
    measured = _counted(counted, measured_by, p) if counted else _means(means, measured_by, p) if means else None
    return EngineLog(p, next(iter(engines)), aux, aux_line, measured, default, default_line, aux_b)


def _counted(lines: list[LoggedAcceptance], engine: str, path: str) -> MeasuredAcceptance | None:
    k = max(len(a.per_position or ()) for a in lines)
    drafts = accepted = drafted = 0
    per = [0.0] * k
    for a in lines:
        if not a.drafts or a.accepted is None:
            continue
        n = int(a.drafts)
        drafts, accepted, drafted = drafts + n, accepted + int(a.accepted), drafted + (a.drafted or 0)
        for j, r in enumerate(a.per_position or ()):
            per[j] += r * n
    if drafts == 0:
        return None
    return MeasuredAcceptance(
        engine,
        1.0 + accepted / drafts,
        tuple(p / drafts for p in per) if k else None,
        drafts,
        accepted,
        drafted,
        len(lines),
        path,
    )


def _means(values: list[float], engine: str, path: str) -> MeasuredAcceptance:
    return MeasuredAcceptance(engine, sum(values) / len(values), None, None, None, None, len(values), path)


def configured_ids(
    log: EngineLog | None, layer_ids: str | None, engine: str, engine_given: bool
) -> tuple[str | None, str]:
    """``(--layer-ids, --engine)`` for ``compare``: the ids the engine log names when none were given.

    The log's ids are its engine's (vLLM's, as configured); given ``--layer-ids`` must say the same.
    """
    chosen, line = (
        (log.aux_layers, log.aux_line)
        if log is not None and log.aux_layers is not None
        else ((log.default_layers, log.default_line) if log is not None else (None, None))
    )
    if log is None or chosen is None or log.engine is None:
        return layer_ids, engine
    logged = ",".join(map(str, chosen))
    where = f"{log.path}:{line}"
    if engine_given and engine != log.engine:
        raise InputError(
            f"the engine log is {log.engine}'s ({where}) but `engine` is {engine}",
            hint=f"pass `engine={log.engine}`, or leave `engine_log` out",
            options=("engine", "engine_log"),
        )
    if layer_ids is not None:
        from .rules.conventions import parse_ids

        if parse_ids(layer_ids) != list(chosen):
            raise InputError(
                f"`layer_ids={layer_ids}` differ from the ids the engine logged, ({logged}) at {where}",
                hint="leave `layer_ids` out to use the engine's, or give the log of the run you mean",
                options=("layer_ids",),
            )
    return logged, log.engine


def _logs_ids(engine: str) -> bool:
    """Whether ``engine`` logs the ids it took from the draft config (an ``aux_layers`` line of the table)."""
    return any(r.engine == engine and r.kind == "aux_layers" for r in LOG_LINES)


def ids_check(log: EngineLog, ids: object) -> object | None:
    """The gate check ``engine-log-ids``: the engine chose the ids the gate read from the draft config.

    ``ids`` is the gate's :class:`~hsdiff.model.gate.IdsSource`. vLLM logs the ids only when it took
    them from the draft config, so a log with acceptance lines and no such line means its default.
    """
    from .model.gate import ERROR, Check

    if log.engine is None or getattr(ids, "engine", None) != log.engine or not _logs_ids(log.engine):
        return None
    read = tuple(getattr(ids, "ids", ()))
    fallback = bool(getattr(ids, "fallback", False))
    captured = tuple(sorted(getattr(ids, "boundaries", ())))
    if log.aux_layers is None and log.default_layers is not None:  # the V2 runner says it took its default
        said = f"the engine logged its default layers {list(log.default_layers)} (line {log.default_line})"
        ok = fallback and (not captured or tuple(sorted(log.default_layers)) == captured)
        if not fallback:
            msg = (
                f"{said}, not the ids {list(read)} the draft config gives (vLLM #50170: read from a key this runner "
                "ignores?)."
            )
        elif not ok:
            msg = f"{said}, but its default for this target is B{list(captured)}: the log is of another model."
        else:
            msg = f"{said}: it found no ids in the draft config, as hsdiff reads it."
        return Check("engine-log-ids", ok, ERROR, msg, path=log.path)
    if log.aux_layers is None:
        if log.acceptance is None:
            return None
        ok = fallback
        msg = "the engine log has no 'Using auxiliary layers' line: vLLM used its default layers" + (
            ""
            if ok
            else f", not the ids {list(read)} the draft config gives (vLLM #50170: read from a key "
            "this runner ignores?)"
        )
        return Check("engine-log-ids", ok, ERROR, msg, path=log.path)
    if log.aux_boundaries:  # the layers captured: compared with what the config's ids name
        ok, gives = not fallback and tuple(sorted(log.aux_layers)) == captured, f"B{list(captured)}"
    else:
        ok, gives = not fallback and read == log.aux_layers, str(list(read))
    said = f"the engine logged {'layers' if log.aux_boundaries else 'ids'} {list(log.aux_layers)} (line {log.aux_line})"
    msg = (
        f"{said}, as read from the draft config."
        if ok
        else f"{said}, but the draft config read as vLLM reads it gives {'its default ' if fallback else ''}"
        f"{gives}: the log is of another config, or vLLM read it otherwise."
    )
    return Check("engine-log-ids", ok, ERROR, msg, path=log.path)
