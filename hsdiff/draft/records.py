"""What a prediction gives: a :class:`Prediction` per setting the draft was fed, gathered in a
:class:`PredictedAcceptance` (:func:`hsdiff.draft.predict_acceptance` makes them)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..extras import require

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

__all__ = ["Prediction", "PredictedAcceptance", "SlotScales"]


@dataclass(frozen=True)
class Prediction:
    """One predicted setting: which features the draft read and what acceptance follows."""

    name: str
    side: str  # "train" or "infer"
    boundaries: tuple[int, ...] | None
    ids: tuple[int | None, ...] | None
    acceptance_length: float  # tokens per verification step (target's token included)
    top1: float  # step-1 top-1 agreement with the reference, per position
    per_depth: tuple[float | None, ...]  # P(depth j accepted | depth j-1 accepted)
    steps: int  # verification steps replayed
    positions: int  # start positions scored
    samples: int
    #: P(drafted position j accepted) per replayed verification step: vLLM's per-position acceptance rate
    per_position: tuple[float, ...] = ()

    @property
    def accepted_per_step(self) -> float:
        return self.acceptance_length - 1.0

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "side": self.side,
            "boundary_indices": None if self.boundaries is None else list(self.boundaries),
            "eagle_aux_hidden_state_layer_ids": None if self.ids is None else list(self.ids),
            "acceptance_length": round(self.acceptance_length, 4),
            "accepted_per_step": round(self.accepted_per_step, 4),
            "top1_agreement": round(self.top1, 4),
            "acceptance_by_depth": [None if p is None else round(p, 4) for p in self.per_depth],
            "acceptance_by_position": [round(p, 4) for p in self.per_position],
            "verify_steps": self.steps,
            "positions": self.positions,
            "samples": self.samples,
        }


#: A slot's scale counts as the training side's while engine/training norms stay this close to 1 (bf16
#: against fp32 on SmolLM2 moves the median by under 0.5 %; one layer off moves it 3-40 %).
SCALE_MARGIN = 0.02


@dataclass(frozen=True)
class SlotScales:
    """The norm-ratio evidence of a prediction: per aux slot, the median per-token norm of what the engine
    feeds the draft over the training side's on the same tokens, and the norms the draft puts before its fc,
    which decide how much of a scale difference reaches it: a per-chunk ``fc_norm`` erases each slot's scale,
    ``norm_before_fc`` only the scale common to all slots."""

    ratios: tuple[float, ...]  # engine / training, per slot in the draft's order
    fc_norm: bool
    norm_before_fc: bool

    @property
    def reaching(self) -> tuple[float, ...]:
        """The ratios as the fc sees them: all 1 behind a per-chunk norm, relative to their RMS behind one
        norm over the concatenation, as they are otherwise."""
        if self.fc_norm:
            return tuple(1.0 for _ in self.ratios)
        if self.norm_before_fc:
            common = (sum(r * r for r in self.ratios) / len(self.ratios)) ** 0.5
            return tuple(r / common for r in self.ratios)
        return self.ratios

    @property
    def differ(self) -> bool:
        return any(abs(r - 1) > SCALE_MARGIN for r in self.ratios)

    @property
    def weakened(self) -> bool:
        """The draft's norms take away (some of) what the norm ratios say the mismatch costs."""
        return self.differ and any(abs(a - 1) < abs(b - 1) - 1e-9 for a, b in zip(self.reaching, self.ratios))

    def words(self) -> str:
        shown = ", ".join(f"{r:.2f}" for r in self.ratios)
        head = f"norm ratio engine/training per slot {shown}"
        if not self.differ:
            return f"{head}: the scales agree (within {SCALE_MARGIN:.0%})"
        if self.fc_norm:
            return (
                f"{head}: this draft's fc_norm divides each slot by its own RMS, so the scale differences cost it "
                "nothing and the norm ratios are no evidence of cost; only what differs in direction reaches the "
                "fc (the rows above measure it)"
            )
        if self.norm_before_fc:
            seen = ", ".join(f"{r:.2f}" for r in self.reaching)
            return (
                f"{head}: this draft's norm_before_fc divides the concatenation by one RMS, so a scale common to "
                f"all slots cancels; the slots' scales relative to each other ({seen}) still reach the fc"
            )
        return f"{head}: this draft has no norm before its fc, so each slot's scale reaches it as it is"

    def to_dict(self) -> dict:
        return {
            "ratios": [round(r, 4) for r in self.ratios],
            "draft_norms": [n for n, on in (("fc_norm", self.fc_norm), ("norm_before_fc", self.norm_before_fc)) if on],
            "reaching_fc": [round(r, 4) for r in self.reaching],
            "weakened": self.weakened,
            "note": self.words(),
        }


@dataclass(frozen=True)
class PredictedAcceptance:
    """Predicted acceptance for the configured ids, the recommended ids, the training side and what-ifs.

    >>> pa = hsdiff.predict_acceptance(train, infer, report, "draft/", target="target/")  # doctest: +SKIP
    >>> pa.configured.acceptance_length, pa.recommended.acceptance_length
    (1.02, 1.84)
    """

    draft: str
    num_steps: int
    topk: int
    num_draft_tokens: int
    reference: str
    rows: tuple[Prediction, ...]
    warnings: tuple[str, ...] = ()
    ids_for: str = ""  # the engine version the rows' ids are written for: the report's ("SGLang 0.5.12, rule: ...")
    scales: SlotScales | None = None  # the deployed setting's norm ratios, and what the draft's norms leave of them
    norms: tuple[str, ...] = ()  # the EAGLE-3.1 norms the draft runs with (as the report's engine reads its config)

    def row(self, name: str) -> Prediction | None:
        return next((r for r in self.rows if r.name == name), None)

    @property
    def configured(self) -> Prediction | None:
        return self.row("configured")

    @property
    def recommended(self) -> Prediction | None:
        return self.row("recommended")

    @property
    def training(self) -> Prediction | None:
        return self.row("training")

    @property
    def deployed(self) -> Prediction | None:
        """What the engine as configured gets: the configured row, else the recommended one."""
        return self.configured or self.recommended

    def to_dict(self) -> dict:
        def one(p: Prediction | None) -> dict | None:
            return None if p is None else p.to_dict()

        return {
            "draft": self.draft,
            "settings": {"num_steps": self.num_steps, "topk": self.topk, "num_draft_tokens": self.num_draft_tokens},
            "reference": self.reference,
            "ids_for": self.ids_for,
            "configured": one(self.configured),
            "recommended": one(self.recommended),
            "training": one(self.training),
            "what_if": [r.to_dict() for r in self.rows],
            "draft_norms": list(self.norms),
            "scales": None if self.scales is None else self.scales.to_dict(),
            "warnings": list(self.warnings),
        }

    def summary(self) -> str:
        """One line: 'your config: 1.02 tokens/step; recommended: 1.84; training-side ceiling: 1.86'."""
        parts = []
        for label, p in (
            ("your config", self.configured),
            ("recommended", self.recommended),
            ("training-side ceiling", self.training),
        ):
            if p is not None:
                parts.append(f"{label}: {p.acceptance_length:.2f}")
        return "; ".join(parts) + " tokens/step" if parts else "no prediction"

    def table(self) -> str:
        head = f"{'setting':<16} {'layers (B)':<16} {'ids':<16} {'accept len':>10} {'top-1':>7}"
        lines = [head]
        for r in self.rows:
            b = "-" if r.boundaries is None else ",".join(map(str, r.boundaries))
            i = "-" if r.ids is None else ",".join("?" if x is None else str(x) for x in r.ids)
            lines.append(f"{r.name:<16} {b:<16} {i:<16} {r.acceptance_length:>10.2f} {r.top1:>6.1%}")
        if self.ids_for:
            lines.append(f"ids {self.ids_for}")
        return "\n".join(lines)

    def frame(self) -> pd.DataFrame:
        """One row per setting (pandas, the ``frames`` extra)."""
        pd = require("pandas", "frames", "PredictedAcceptance.frame()")
        return pd.DataFrame([r.to_dict() for r in self.rows]).set_index("name")

    def plot(self, ax: Axes | None = None) -> Axes:
        """Bar chart of the predicted acceptance length of every row, its value on each bar, the axis from 1.0
        (no drafted token accepted) so that 1.11 and 1.23 look apart (matplotlib, the ``plot`` extra)."""
        plt = require("matplotlib.pyplot", "plot", "PredictedAcceptance.plot()")

        if ax is None:
            _, ax = plt.subplots(figsize=(8, 3.5))
        names = [r.name for r in self.rows]
        vals = [r.acceptance_length for r in self.rows]
        colors = [
            "tab:red"
            if n == "configured"
            else "tab:green"
            if n == "recommended"
            else "tab:blue"
            if n == "training"
            else "tab:gray"
            for n in names
        ]
        bars = ax.bar(names, vals, color=colors)
        ax.bar_label(bars, labels=[f"{v:.2f}" for v in vals], padding=2, fontsize=9)
        top = max(vals, default=1.0)
        ax.set_ylim(1.0, top + max(0.08 * (top - 1.0), 0.05))  # 1.0: no token accepted, the floor of the scale
        ax.set_ylabel("predicted acceptance length\n(tokens per step; 1 = none accepted)")
        ax.set_title(f"draft {os.path.basename(self.draft.rstrip('/'))}: {self.num_steps} steps, top-k {self.topk}")
        ax.tick_params(axis="x", labelrotation=30)
        return ax

    def __repr__(self) -> str:
        return f"<PredictedAcceptance {self.summary()}>"
