"""The records an audit returns, and their JSON and text forms."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..jsonout import dumps

__all__ = ["Problem", "Group", "AuditReport", "KINDS", "render_text"]

#: Problem kinds, worst first (the text output lists files in this order).
KINDS = ("unreadable", "non_finite", "shape_mismatch", "layer_mapping_outlier", "duplicate")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one file: ``kind`` is one of :data:`KINDS`."""

    file: str
    kind: str
    detail: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Group:
    """Files whose slots hold the same layers, as told by their values.

    ``evidence`` says how members were tied together: ``"prefix values"`` (equal hidden states on a
    shared token prefix), ``"norm profile"`` (no shared prefix; per-slot norms alike) or ``"none"``.
    ``relation`` says what an outlier group holds compared with the majority.
    """

    id: str
    files: int
    majority: bool
    slots: int
    hidden_size: int
    dtype: str
    median_norms: tuple[float, ...]
    evidence: str
    example: str
    relation: str = ""
    claimed: str = ""
    members: tuple[str, ...] = field(default=(), repr=False)

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "files": self.files,
            "majority": self.majority,
            "slots": self.slots,
            "hidden_size": self.hidden_size,
            "dtype": self.dtype,
            "median_norms": [round(v, 3) for v in self.median_norms],
            "evidence": self.evidence,
            "example": self.example,
            "relation": self.relation or None,
            "claimed": self.claimed or None,
        }


@dataclass(frozen=True)
class AuditReport:
    """What an audit found. ``exit_code`` is 0 when no problem was found, 1 otherwise.

    >>> report = hsdiff.audit.audit("train_dump/", workers=2)   # doctest: +SKIP
    >>> report.exit_code, [p.kind for p in report.problems][:2]
    (1, ['unreadable', 'layer_mapping_outlier'])
    """

    dataset: str
    files_listed: int
    files_scanned: int
    bytes_read: int
    groups: tuple[Group, ...]
    problems: tuple[Problem, ...]
    majority: str | None
    warnings: tuple[str, ...] = ()
    sample: int | None = None
    files_resumed: int = 0
    checkpoint: str | None = None
    execution: dict = field(default_factory=dict)
    tolerance: tuple[float, ...] = ()
    tolerance_source: str = ""

    SCHEMA_VERSION = 1

    @property
    def exit_code(self) -> int:
        return 1 if self.problems else 0

    def to_dict(self) -> dict:
        return {
            "schema_version": self.SCHEMA_VERSION,
            "dataset": self.dataset,
            "files_listed": self.files_listed,
            "files_scanned": self.files_scanned,
            "bytes_read": self.bytes_read,
            "sample": self.sample,
            "majority_group": self.majority,
            "groups": [g.to_dict() for g in self.groups],
            "problems": [p.to_dict() for p in self.problems],
            "warnings": list(self.warnings),
            "tolerance": {"per_slot": [round(t, 4) for t in self.tolerance], "source": self.tolerance_source},
            "files_resumed": self.files_resumed,
            "checkpoint": self.checkpoint,
            "execution": self.execution,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return dumps(self.to_dict(), indent)

    def __repr__(self) -> str:
        return f"<AuditReport {self.files_scanned} files, {len(self.problems)} problems>"


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


def render_text(report: AuditReport, worst: int = 10) -> str:
    """A summary table of the groups and problem kinds, then the worst files."""
    bad_files = len({p.file for p in report.problems})
    lines = [
        f"hsdiff audit: {report.dataset} — {report.files_scanned} files"
        + (f" (a sample of {report.files_listed})" if report.sample else "")
        + f", {_size(report.bytes_read)}; {len(report.problems)} problem(s) in {bad_files} file(s)",
        "",
        f"{'group':<6} {'files':>6}  {'slots x hidden':<15} {'dtype':<9} {'median norm per slot':<24} status",
    ]
    for g in report.groups:
        norms = " / ".join(f"{v:.4g}" for v in g.median_norms)
        status = "majority" if g.majority else g.relation.split(":")[0].split(" — ")[0]
        if g.majority and g.claimed:
            status += f" ({g.claimed})"
        lines.append(f"{g.id:<6} {g.files:>6}  {f'{g.slots} x {g.hidden_size}':<15} {g.dtype:<9} {norms:<24} {status}")
    if report.tolerance:
        tol = " / ".join(f"{t:.1%}" for t in report.tolerance)
        lines += ["", f"grouping tolerance per slot: {tol} ({report.tolerance_source})"]
    counts = {k: sum(p.kind == k for p in report.problems) for k in KINDS}
    lines += ["", "problems: " + (", ".join(f"{k} {n}" for k, n in counts.items() if n) or "none")]
    if report.problems:
        pos = {id(p): i for i, p in enumerate(report.problems)}  # problems come in file order
        order = sorted(report.problems, key=lambda p: (KINDS.index(p.kind), pos[id(p)]))
        lines += ["", f"worst files (first {min(worst, len(order))} of {len(order)}):"]
        for p in order[:worst]:
            lines.append(f"  {p.file}  {p.kind}: {p.detail}")
    for w in report.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines)
