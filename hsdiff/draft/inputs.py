"""What a prediction is told, as records: the tree the engine drafts (:class:`Speculation`) and what it
takes from a comparison's report (:class:`ReportLayers`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..model import Report

__all__ = ["Speculation", "ReportLayers"]


@dataclass(frozen=True)
class Speculation:
    """The draft tree the engine verifies: ``num_steps`` drafting steps, ``topk`` branches per step, and
    ``num_draft_tokens`` (drafted tokens + 1; None: a chain's ``num_steps + 1``, else every node + 1).

    >>> Speculation(num_steps=3).checked().num_draft_tokens
    4
    """

    num_steps: int = 5
    topk: int = 1
    num_draft_tokens: int | None = None

    @property
    def max_nodes(self) -> int:
        """Nodes of the full tree: ``topk`` at the first step, ``topk * topk`` candidates at each later one."""
        return self.topk + (self.num_steps - 1) * self.topk * self.topk

    def checked(self) -> Speculation:
        """The same tree with ``num_draft_tokens`` settled; :class:`InputError` when it cannot be drafted."""
        if self.num_steps < 1 or self.topk < 1:
            raise InputError(
                f"`num_steps` ({self.num_steps}) and `topk` ({self.topk}) must be at least 1",
                options=("num_steps", "topk"),
            )
        top = self.max_nodes + 1
        ndt = self.num_draft_tokens
        if ndt is None:
            ndt = self.num_steps + 1 if self.topk == 1 else top
        if not 2 <= ndt <= top:
            raise InputError(
                f"`num_draft_tokens={ndt}` is out of range for {self.num_steps} steps and top-k {self.topk}",
                hint=f"give 2..{top} (the engine sends num_draft_tokens - 1 drafted tokens)",
                options=("num_draft_tokens",),
            )
        return Speculation(self.num_steps, self.topk, ndt)


@dataclass(frozen=True)
class ReportLayers:
    """What a prediction takes from a report: the target's layer count, the boundaries (engine order)
    and ids the engine was configured with, the training side's claimed boundaries when every slot has
    one, the recommended boundaries when every slot has one, and the engine, family and version the
    report's ids are written for."""

    num_layers: int | None = None
    configured: tuple[int, ...] = ()
    configured_ids: tuple[int, ...] | None = None
    claimed: tuple[int, ...] | None = None
    recommended: tuple[int, ...] | None = None
    engine: str = "sglang"
    family: str | None = None
    version: str | None = None

    @classmethod
    def of(cls, report: Report | Mapping[str, Any] | None) -> ReportLayers:
        """From a :class:`~hsdiff.model.Report`, or its JSON (``to_dict()``, read back), or nothing."""
        if report is None:
            return cls()
        rep = report.to_dict() if isinstance(report, Report) else report
        conf = rep.get("configured") or {}
        rec = rep.get("recommended") or {}
        claimed = [s.get("boundary_index") for s in rep.get("slots") or []]
        rb = rec.get("boundary_indices") or []
        ids = conf.get("eagle_aux_hidden_state_layer_ids")
        return cls(
            num_layers=rep.get("num_hidden_layers"),
            configured=tuple(conf.get("boundary_indices") or ()),
            configured_ids=None if ids is None else tuple(ids),
            claimed=tuple(claimed) if claimed and None not in claimed else None,
            recommended=tuple(rb) if rb and None not in rb else None,
            engine=rec.get("engine") or conf.get("engine") or "sglang",
            family=rec.get("model_family"),
            version=rec.get("engine_version"),  # the report's own (None in a report of schema 1: the newest)
        )
