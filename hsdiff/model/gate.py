"""The gate's records: one static :class:`Check`, the :class:`IdsSource` an engine reads from a draft
config, and the :class:`GateResult` of ``hsdiff gate`` / ``hsdiff check-config``.

Plain frozen dataclasses that import nothing heavy (no torch, no comparison pipeline), so that the
renderers in :mod:`hsdiff.report` can render a gate result without loading the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..enums import StrEnum
from ..jsonout import dumps

if TYPE_CHECKING:  # pragma: no cover
    from . import Report, Settings

__all__ = [
    "Severity",
    "ERROR",
    "WARNING",
    "INFO",
    "GateVerdict",
    "SCHEMA_VERSION",
    "fails_gate",
    "warns",
    "Check",
    "IdsSource",
    "GateResult",
]


class Severity(StrEnum):
    """How much a failed check matters."""

    ERROR = "error"  #: fails the gate
    WARNING = "warning"  #: fails the gate only with ``strict``
    INFO = "info"  #: never fails it


ERROR, WARNING, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO


class GateVerdict(StrEnum):
    PASS = "pass"
    FAIL = "fail"


def fails_gate(ok: bool, skipped: bool, severity: str, strict: bool) -> bool:
    """The gate's one pass rule for a check: a failed, not skipped check fails the gate when it is an
    error, or a warning under ``strict``. Used on records and on saved JSON documents alike."""
    return not ok and not skipped and (severity == ERROR or (strict and severity == WARNING))


def warns(ok: bool, skipped: bool, severity: str) -> bool:
    """A failed, not skipped check that only warns (it fails the gate under ``strict``)."""
    return not ok and not skipped and severity == WARNING


#: 4: the gate's own pass/fail is ``gate`` (3 and earlier called it ``verdict``, the key that also holds the
#: embedded report's ``ok``/``mismatch``/``inconclusive``: :func:`hsdiff.report.as_doc` reads them as 4);
#: 3: the embedded report is of schema 3 (``diagnosis``); 2: ``settings`` recorded; 1: not
SCHEMA_VERSION = 4


@dataclass(frozen=True)
class Check:
    """One static check: ``ok`` or not, how much it matters, and what to do about it."""

    name: str
    ok: bool
    severity: Severity
    message: str
    skipped: bool = False
    path: str | None = None

    @property
    def failed(self) -> bool:
        """A failure that fails the gate whatever ``strict`` says (an error)."""
        return fails_gate(self.ok, self.skipped, self.severity, strict=False)

    @property
    def warned(self) -> bool:
        return warns(self.ok, self.skipped, self.severity)

    def fails(self, strict: bool) -> bool:
        """Whether this check fails the gate (:func:`fails_gate`)."""
        return fails_gate(self.ok, self.skipped, self.severity, strict)

    @property
    def status(self) -> str:
        if self.skipped:
            return "skipped"
        if self.ok:
            return "ok"
        return "FAIL" if self.severity == ERROR else "warn"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.ok,
            "severity": self.severity,
            "status": self.status,
            "skipped": self.skipped,
            "message": self.message,
            "path": self.path,
        }

    def __repr__(self) -> str:
        return f"<Check {self.name}: {self.status}>"


@dataclass(frozen=True)
class IdsSource:
    """The ids an engine uses for a draft config, where they came from, and what they capture."""

    engine: str
    ids: tuple[int, ...]
    boundaries: tuple[int, ...]  # in the engine's slot order (ascending for engines that sort)
    key: str | None  # the config key they were read from; None when the engine fell back to its default
    path: str
    fallback: bool
    note: str
    model_family: str | None = None
    vllm_runner: str | None = None
    rule: str | None = None  # the convention-table row that read them ("SGLang ≥ 0.5.13, DeepSeek rule")
    engine_version: str | None = None
    kind: str = "eagle3"  # the draft kind whose rows read them (hsdiff.rules.kinds)
    index: str = ""  # OUTPUT or BOUNDARY where the key read gives the ids a meaning of its own, else ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "engine_version": self.engine_version,
            "rule": self.rule,
            "eagle_aux_hidden_state_layer_ids": list(self.ids),
            "boundary_indices": list(self.boundaries),
            "key": self.key,
            "path": self.path,
            "fallback": self.fallback,
            "note": self.note,
            "model_family": self.model_family,
            "vllm_runner": self.vllm_runner,
        }

    def __repr__(self) -> str:
        return f"<IdsSource {self.engine} {list(self.ids)} from {self.key or 'default'}>"


@dataclass(frozen=True, eq=False)
class GateResult:
    """What the gate (or ``check-config``, with ``report=None``) found.

    ``verdict`` is ``"pass"`` when no error-severity check failed (nor a warning, with ``strict``)
    and the comparison, if one ran, is ``"ok"``; its JSON calls it ``gate``, apart from the comparison's
    own ``report.verdict``.
    """

    command: str  # "gate" or "check-config"
    draft_config: str
    target_config: str | None
    engine: str
    ids: IdsSource | None
    checks: tuple[Check, ...]
    report: Report | None = None
    strict: bool = False
    num_layers: int | None = None
    hidden_size: int | None = None
    model_family: str | None = None
    notes: tuple[str, ...] = ()
    inputs: dict[str, Any] = field(default_factory=dict)  # the paths, and ``sources`` (where each setting came from)
    settings: Settings | None = None  # what the ids and verdict rest on; the comparison's own when it ran

    @property
    def failed_checks(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.fails(self.strict))

    @property
    def passed(self) -> bool:
        if self.failed_checks:
            return False
        if self.command == "gate" and (self.report is None or self.report.verdict != "ok"):
            return False
        return True

    @property
    def verdict(self) -> GateVerdict:
        return GateVerdict.PASS if self.passed else GateVerdict.FAIL

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    @property
    def cause(self) -> str:
        """One paragraph: why the gate failed, or what passed."""
        parts = [f"{c.name}: {c.message}" for c in self.failed_checks]
        if self.report is not None and self.report.verdict != "ok":
            parts.append(f"compare {self.report.verdict}: {self.report.cause}")
        elif self.command == "gate" and self.report is None:
            parts.extend(self.notes or ("the comparison did not run",))
        if parts:
            return " ".join(parts)
        if self.report is not None:
            return self.report.cause
        return "every static check passed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "command": self.command,
            "gate": self.verdict,
            "exit_code": self.exit_code,
            "cause": self.cause,
            "engine": self.engine,
            "engine_version": None if self.ids is None else self.ids.engine_version,
            "rule": None if self.ids is None else self.ids.rule,
            "model_family": self.model_family,
            "draft_config": self.draft_config,
            "target_config": self.target_config,
            "num_hidden_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "strict": self.strict,
            "settings": None if self.settings is None else self.settings.to_dict(),
            "ids": None if self.ids is None else self.ids.to_dict(),
            "checks": [c.to_dict() for c in self.checks],
            "notes": list(self.notes),
            "report": None if self.report is None else self.report.to_dict(),
            "inputs": self.inputs,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return dumps(self.to_dict(), indent)

    def __repr__(self) -> str:
        failed = ", ".join(c.name for c in self.failed_checks) or "-"
        rep = "" if self.report is None else f", compare {self.report.verdict}"
        return f"<GateResult {self.command} {self.verdict}: failed checks {failed}{rep}>"
