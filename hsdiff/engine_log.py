"""An engine's own log as evidence: the layers it chose and the acceptance it measured.

``--engine-log FILE`` on ``compare`` and ``gate``. The lines read are data
(:data:`hsdiff.rules.traces.LOG_LINES`, each citing the engine's logging call):

* vLLM's ``Using auxiliary layers from speculative config: (1, 14, 26)`` — the ids the engine took
  from the draft config, as written (the engine sorts them afterwards); the line is absent when it
  fell back to its default;
* vLLM's ``SpecDecoding metrics: Mean acceptance length: …, Accepted: N tokens, Drafted: N tokens,
  Per-position acceptance rate: …`` — one line per logging interval, each counting only that
  interval, so the lines are summed back into the run's totals (drafts = drafted / positions);
* SGLang's ``Decode batch. … accept len: X`` — per interval too, with no counts: their plain mean.

>>> log = read_engine_log("server.log")     # doctest: +SKIP
>>> log.aux_layers, round(log.acceptance.acceptance_length, 2)
((1, 14, 26), 1.19)
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from .errors import InputError
from .rules.traces import LOG_LINES

__all__ = ["EngineLog", "MeasuredAcceptance", "read_engine_log"]

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


_PATTERNS = [(r.engine, r.kind, re.compile(r.pattern), r.boundaries) for r in LOG_LINES]


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
    counted: list[tuple[int, int, list[float]]] = []  # (accepted, drafted, per-position rates) per line (vLLM)
    means: list[float] = []  # the mean alone per line (SGLang)
    measured_by = ""
    with fh:
        for n, line in enumerate(fh, 1):
            for engine, kind, rx, as_b in _PATTERNS:
                m = rx.search(line)
                if m is None:
                    continue
                engines.add(engine)
                if kind == "aux_layers":
                    aux = tuple(int(x) for x in re.findall(r"-?\d+", m["ids"]))
                    aux_line, aux_b = n, as_b
                elif kind == "default_layers":
                    default = tuple(int(x) for x in re.findall(r"-?\d+", m["ids"]))
                    default_line = n
                elif "accepted" in rx.groupindex:  # the line counts tokens: summed back into the run's totals
                    rates = [float(x) for x in re.findall(r"[\d.]+", m["per_pos"])]
                    counted.append((int(m["accepted"]), int(m["drafted"]), rates))
                    measured_by = engine
                else:
                    means.append(float(m["mean"]))
                    measured_by = engine
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


def _counted(lines: list[tuple[int, int, list[float]]], engine: str, path: str) -> MeasuredAcceptance | None:
    k = max(len(r) for _, _, r in lines)
    drafts = accepted = drafted = 0
    per = [0.0] * k
    for acc, dr, rates in lines:
        if not rates or dr == 0:
            continue
        n = round(dr / len(rates))  # every draft proposes one token per position
        drafts, accepted, drafted = drafts + n, accepted + acc, drafted + dr
        for j, r in enumerate(rates):
            per[j] += r * n
    if drafts == 0:
        return None
    return MeasuredAcceptance(
        engine, 1.0 + accepted / drafts, tuple(p / drafts for p in per), drafts, accepted, drafted, len(lines), path
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
