"""The settings every answer of a comparison or gate rests on, decided once and carried by the
:class:`~hsdiff.model.Report` and the :class:`~hsdiff.model.gate.GateResult`.

An id is only right for one engine at one version reading one model family: the same Kimi-K2.5 layers
are ``[2, 30, 58]`` on SGLang 0.5.12 and ``[3, 31, 59]`` on SGLang 0.5.13. :class:`Settings` records
the engine, its version and the convention-table row applied, every ``--engine-version`` given, the
model family and where it came from, how both sides count layers, the training engine and its
version, the tolerance, and the target's shape with the source of each number; :class:`EngineVersion`
names the version (and row) assumed for each engine a recommendation is translated to. Renderers and
``hsdiff fix-config --from-report`` read the ids beside these, never re-deriving them with other rules.

Plain data: built by :mod:`hsdiff.rules.settings` (which reads the convention table), read back from a
report's JSON by :meth:`Settings.from_doc` — also from a report of schema 1, which did not record them
(``recorded`` is then False and the version is unknown).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .capture import Index

__all__ = ["EngineVersion", "Settings", "by_engine_entries"]


@dataclass(frozen=True)
class EngineVersion:
    """The version of ``engine`` an answer assumed, and the convention-table row that version applies."""

    engine: str
    title: str  # "SGLang"
    version: str | None  # None: not recorded (a report of schema 1)
    rule: str  # the row's label, "SGLang ≤ 0.5.12, DeepSeek family (+1 always)"; "" when not recorded

    def words(self) -> str:
        """``"SGLang 0.5.12, rule: SGLang ≤ 0.5.12, DeepSeek family (+1 always)"``."""
        head = f"{self.title} {self.version}" if self.version else f"{self.title} (version not recorded)"
        return f"{head}, rule: {self.rule}" if self.rule else head

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "version": self.version, "rule": self.rule}

    def __repr__(self) -> str:
        return f"<EngineVersion {self.words()}>"


@dataclass(frozen=True)
class Settings:
    """What a report's verdict and ids rest on. ``engine_versions``: every ``--engine-version`` as given;
    ``versions``: the version assumed for every engine (the report's own engine first)."""

    engine: EngineVersion
    model_family: str
    model_family_source: str
    engine_versions: tuple[str, ...] = ()
    versions: tuple[EngineVersion, ...] = ()
    infer_index: Index = Index.BOUNDARY
    train_index: Index = Index.BOUNDARY
    train_engine: EngineVersion | None = None
    tolerance: float | None = None
    num_layers: int | None = None
    num_layers_source: str = ""
    hidden_size: int | None = None
    hidden_size_source: str = ""
    vllm_runner: str | None = None
    recorded: bool = field(default=True)
    draft_kind: str = "eagle3"  #: the draft kind whose rows read the ids (hsdiff.rules.kinds)

    def __post_init__(self) -> None:
        object.__setattr__(self, "infer_index", Index(self.infer_index))
        object.__setattr__(self, "train_index", Index(self.train_index))

    def __repr__(self) -> str:
        return f"<Settings {self.words()}>"

    def version_of(self, engine: str) -> EngineVersion | None:
        """The version assumed for ``engine`` (None when the report did not translate to it)."""
        if engine == self.engine.engine:
            return self.engine
        return next((v for v in self.versions if v.engine == engine), None)

    def words(self) -> str:
        """``"for SGLang 0.5.12, rule: SGLang ≤ 0.5.12, DeepSeek family (+1 always)"``: beside every id list."""
        return f"for {self.engine.words()}"

    def lines(self) -> list[str]:
        """The settings, one line each, for the text and Markdown reports."""
        out = [
            f"engine: {self.engine.words()}"
            + (
                f" (--engine-version {', '.join(self.engine_versions)})"
                if self.engine_versions
                else " (the newest version hsdiff knows)"
                if self.recorded
                else ""
            )
        ]
        if self.vllm_runner:
            out[0] += f", {self.vllm_runner.upper()} runner"
        if self.draft_kind != "eagle3":
            out.append(f"draft kind: {self.draft_kind} (its ids are read with that kind's rows)")
        out.append(f"model family: {self.model_family} ({self.model_family_source})")
        if self.train_engine is not None:
            out.append(
                f"training side: {self.train_engine.words()}; layer numbers in dumps count as "
                f"{self.train_index} (training), {self.infer_index} (inference)"
            )
        shape = []
        if self.num_layers is not None:
            shape.append(f"{self.num_layers} layers ({self.num_layers_source})")
        elif self.num_layers_source:
            shape.append("number of layers not known")
        if self.hidden_size is not None:
            shape.append(f"hidden size {self.hidden_size} ({self.hidden_size_source})")
        if shape:
            out.append("target: " + ", ".join(shape))
        if self.tolerance is not None:
            out.append(f"tolerance: {self.tolerance:g}")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine.engine,
            "engine_version": self.engine.version,
            "rule": self.engine.rule,
            "engine_versions_given": list(self.engine_versions),
            "versions": {v.engine: {"version": v.version, "rule": v.rule} for v in self.versions},
            "model_family": self.model_family,
            "model_family_source": self.model_family_source,
            "infer_index": self.infer_index,
            "train_index": self.train_index,
            "train_engine": None if self.train_engine is None else self.train_engine.engine,
            "train_engine_version": None if self.train_engine is None else self.train_engine.version,
            "train_rule": None if self.train_engine is None else self.train_engine.rule,
            "tolerance": self.tolerance,
            "num_hidden_layers": self.num_layers,
            "num_hidden_layers_source": self.num_layers_source,
            "hidden_size": self.hidden_size,
            "hidden_size_source": self.hidden_size_source,
            "vllm_runner": self.vllm_runner,
            "draft_kind": self.draft_kind,
        }

    @classmethod
    def from_doc(cls, doc: dict[str, Any], titles: dict[str, str] | None = None) -> Settings:
        """The settings of a report's JSON (``hsdiff compare --json``, or the ``report`` of a gate result).

        A report of schema 1 recorded no settings: they are rebuilt from what it did record (its engine,
        model family, shape and tolerance) with ``recorded=False`` and no version.
        """
        t = titles or {}
        s = doc.get("settings")
        if isinstance(s, dict):
            eng, te = str(s["engine"]), s.get("train_engine")
            train = (
                None
                if te is None
                else EngineVersion(
                    str(te), t.get(str(te), str(te)), s.get("train_engine_version"), s.get("train_rule") or ""
                )
            )
            return cls(
                EngineVersion(eng, t.get(eng, eng), s.get("engine_version"), s.get("rule") or ""),
                s.get("model_family") or "llama",
                s.get("model_family_source") or "",
                tuple(s.get("engine_versions_given") or ()),
                tuple(
                    EngineVersion(e, t.get(e, e), v.get("version"), v.get("rule") or "")
                    for e, v in (s.get("versions") or {}).items()
                ),
                Index(s.get("infer_index") or Index.BOUNDARY),
                Index(s.get("train_index") or Index.BOUNDARY),
                train,
                s.get("tolerance"),
                s.get("num_hidden_layers"),
                s.get("num_hidden_layers_source") or "",
                s.get("hidden_size"),
                s.get("hidden_size_source") or "",
                s.get("vllm_runner"),
                draft_kind=str(s.get("draft_kind") or "eagle3"),
            )
        rec = doc.get("recommended") or {}
        inputs = doc.get("inputs") or {}
        eng = str(rec.get("engine") or doc.get("engine") or inputs.get("engine") or "sglang")
        return cls(
            EngineVersion(eng, t.get(eng, eng), None, ""),
            str(rec.get("model_family") or inputs.get("model_family") or "llama"),
            "recorded in the report",
            tolerance=doc.get("tolerance"),
            num_layers=doc.get("num_hidden_layers"),
            num_layers_source="recorded in the report",
            hidden_size=doc.get("hidden_size"),
            hidden_size_source="recorded in the report",
            recorded=False,
        )


def by_engine_entries(recommended: dict[str, Any]) -> dict[str, tuple[str | None, list[int | None]]]:
    """``recommended.by_engine`` of a report's JSON as engine -> (version assumed, ids); a report of
    schema 1 gave bare id lists, with no version."""
    out: dict[str, tuple[str | None, list[int | None]]] = {}
    for e, v in (recommended.get("by_engine") or {}).items():
        if isinstance(v, dict):
            out[e] = (v.get("version"), list(v.get("ids") or []))
        else:
            out[e] = (None, list(v))
    return out
