"""Predicted acceptance: run the deployed draft on each side's hidden states and simulate verification.

What is predicted is the engine's **acceptance length**: tokens emitted per verification step of
greedy speculative decoding, the target's own token included (SGLang's "accept len", vLLM's
"mean acceptance length"), so it lies between 1 and ``num_steps + 1``.

How, for each sample of a dump (token ids plus aux states):

1. the draft runs teacher-forced over the whole sequence (the engine's draft-extend sees the
   target's aux states of every verified position), then drafts from every start position ``t``
   with its own hidden state fed back from the second step on (:mod:`hsdiff.draft.run`);
2. the reference is the target's greedy token at each position: ``argmax(lm_head(final state))``
   when the dump holds the target's final hidden state and the target's ``lm_head`` is known,
   otherwise the dump's next token. A drafted token at depth ``j`` is accepted when it equals the
   reference at ``t + j`` and every shallower one was accepted; on a greedy generation the context
   of depth ``j`` is then exactly the dump's, so nothing is assumed about independence;
3. the verification loop itself is replayed: starting where the engine drafts first — at the
   first generated token, which the prefill produced: where a training file's ``loss_mask`` says the
   reply begins, else one position into the target's greedy run to the end (the dump's text equal
   to the reference from there on; without a mask, a run that begins inside the prompt's
   chat-template tail starts the replay early, on tokens a draft finds easy) — accept ``a(t)``,
   emit ``a(t) + 1`` tokens, continue at ``t + a(t) + 1``. The mean over the steps visited is the
   acceptance length; a mean over all positions would over-weight the easy stretches the engine
   skips through.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..errors import AlignmentError, InputError
from .checkpoint import Draft, TargetHead, load_draft, load_target_head
from .run import draft_tree, prefix_pass

__all__ = ["Prediction", "PredictedAcceptance", "predict_acceptance", "acceptance_from_tree"]

log = logging.getLogger(__name__)

#: Shortest greedy run (positions) read as the target's own generation.
MIN_GENERATION = 8


@dataclass(frozen=True)
class Prediction:
    """One predicted setting: which features the draft read and what acceptance follows."""

    name: str
    side: str                                  # "train" or "infer"
    boundaries: tuple[int, ...] | None
    ids: tuple[int | None, ...] | None
    acceptance_length: float                   # tokens per verification step (target's token included)
    top1: float                                # step-1 top-1 agreement with the reference, per position
    per_depth: tuple[float | None, ...]        # P(depth j accepted | depth j-1 accepted)
    steps: int                                 # verification steps replayed
    positions: int                             # start positions scored
    samples: int
    #: P(drafted position j accepted) per replayed verification step: vLLM's per-position acceptance rate
    per_position: tuple[float, ...] = ()

    @property
    def accepted_per_step(self) -> float:
        return self.acceptance_length - 1.0

    def to_dict(self) -> dict:
        return {
            "name": self.name, "side": self.side,
            "boundary_indices": None if self.boundaries is None else list(self.boundaries),
            "eagle_aux_hidden_state_layer_ids": None if self.ids is None else list(self.ids),
            "acceptance_length": round(self.acceptance_length, 4),
            "accepted_per_step": round(self.accepted_per_step, 4),
            "top1_agreement": round(self.top1, 4),
            "acceptance_by_depth": [None if p is None else round(p, 4) for p in self.per_depth],
            "acceptance_by_position": [round(p, 4) for p in self.per_position],
            "verify_steps": self.steps, "positions": self.positions, "samples": self.samples,
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
            "warnings": list(self.warnings),
        }

    def summary(self) -> str:
        """One line: 'your config: 1.02 tokens/step; recommended: 1.84; training-side ceiling: 1.86'."""
        parts = []
        for label, p in (("your config", self.configured), ("recommended", self.recommended),
                         ("training-side ceiling", self.training)):
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

    def frame(self) -> Any:
        import pandas as pd

        return pd.DataFrame([r.to_dict() for r in self.rows]).set_index("name")

    def plot(self, ax: Any = None) -> Any:
        """Bar chart of the predicted acceptance length of every row."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(8, 3.5))
        names = [r.name for r in self.rows]
        vals = [r.acceptance_length for r in self.rows]
        colors = ["tab:red" if n == "configured" else "tab:green" if n == "recommended" else
                  "tab:blue" if n == "training" else "tab:gray" for n in names]
        ax.bar(names, vals, color=colors)
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_ylabel("predicted acceptance length")
        ax.set_title(f"draft {os.path.basename(self.draft.rstrip('/'))}: {self.num_steps} steps, top-k {self.topk}")
        ax.tick_params(axis="x", labelrotation=30)
        return ax

    def __repr__(self) -> str:
        return f"<PredictedAcceptance {self.summary()}>"


# --------------------------------------------------------------------------- the dumps, per sample

@dataclass
class _Sample:
    name: str
    tokens: torch.Tensor                   # [T]
    concat: Any = None                     # capture of width k*H (what the engine fed the draft)
    layers: dict[int, Any] = field(default_factory=dict)
    final: Any = None                      # post-norm final state capture
    last: Any = None                       # pre-norm B=L capture
    reply_start: int | None = None         # where the last reply begins, from a training file's loss_mask


def _samples(dump: Any, width: int, hidden: int, num_layers: int | None,
             slots: Sequence[int] = ()) -> dict[tuple[int, ...], _Sample]:
    """Per token sequence: its captures. A capture of one slot with no layer of its own (vLLM's
    connector file) holds the boundary the configured ids put in that slot, ``slots`` (engine order)."""
    out: dict[tuple[int, ...], _Sample] = {}
    for c in dump.captures:
        if c.token_ids is None or c.is_partial or c.tokens != len(c.token_ids):
            continue
        s = out.setdefault(tuple(c.token_ids), _Sample(str(c.group), torch.tensor(c.token_ids, dtype=torch.long)))
        boundary = c.boundary
        if boundary is None and c.slot is not None and c.width == hidden and c.slot < len(slots):
            boundary = slots[c.slot]
        if c.width == width and width != hidden:
            s.concat = s.concat or c
            if s.reply_start is None and c.mask_loader is not None:
                s.reply_start = _reply_start(c.mask_loader())
            if c.final_loader is not None and c.final_width == hidden:
                kept = c.replace(loader=c.final_loader, rows=None, width=hidden, shape=None, concat=False,
                                 post_norm=not c.final_pre_norm, col_start=0, col_stop=None, slot_layers=())
                if c.final_pre_norm:  # B = L before the final norm: the head applies the norm (as for ``last``)
                    s.last = s.last or kept
                else:
                    s.final = s.final or kept
        elif c.width == hidden and c.post_norm:
            s.final = s.final or c
        elif c.width == hidden and boundary is not None:
            if num_layers is not None and boundary == num_layers:
                s.last = c
            s.layers.setdefault(boundary, c)
    return out


def _reference(s: _Sample, head: TargetHead | None, others: Sequence[_Sample]) -> tuple[torch.Tensor, torch.Tensor, str]:
    """(reference token per position [T], valid [T], ``greedy`` or ``text``).

    ``greedy`` when the target's greedy tokens are known and the dump's text follows them for at
    least :data:`MIN_GENERATION` positions at its end (a generation); ``text`` otherwise.
    """
    T = len(s.tokens)
    if head is not None and head.lm_head is not None:
        for cand in (s, *others):
            final = None
            if cand.final is not None:
                final = cand.final.load().to(head.lm_head.dtype)
            elif cand.last is not None and head.norm is not None:
                x = cand.last.load().float()
                final = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + head.rms_norm_eps)).to(head.norm.dtype) * head.norm
            if final is not None:
                ref = torch.cat([(final[i : i + 512] @ head.lm_head.T).argmax(-1) for i in range(0, T, 512)])
                if T - 1 - _greedy_run_start(s.tokens, ref) >= MIN_GENERATION:
                    return ref, torch.ones(T, dtype=torch.bool), "greedy"
                break
    ref = torch.cat([s.tokens[1:], s.tokens.new_zeros(1)])
    valid = torch.ones(T, dtype=torch.bool)
    valid[-1] = False
    return ref, valid, "text"


def _greedy_run_start(tokens: torch.Tensor, ref: torch.Tensor) -> int:
    """First position of the run, to the end, where each next token is the reference."""
    bad = (tokens[1:] != ref[:-1]).nonzero()
    return int(bad[-1]) + 1 if len(bad) else 0


def _reply_start(mask: Any) -> int | None:
    """The first position of the last run of ones in a ``loss_mask`` after a zero (the last reply), or None."""
    m = np.asarray(mask).reshape(-1) != 0
    zeros = np.flatnonzero(~m)
    if not m.any() or len(zeros) == 0 or int(zeros[-1]) == len(m) - 1:
        return None
    return int(zeros[-1]) + 1


def _generation_start(tokens: torch.Tensor, ref: torch.Tensor, reply_start: int | None = None) -> int:
    """The first position the engine drafts from: the first generated token's.

    The target's greedy run to the end begins at ``g``; its first token, at ``g + 1``, is the one the
    prefill produced (never drafted), so the engine's first draft starts there at the earliest. A
    greedy run often begins inside the prompt (its chat-template tail is predictable, and easy for
    a draft too); the training file's loss mask says where the reply starts, and then that is the start.
    """
    first = _greedy_run_start(tokens, ref) + 1
    return max(first, reply_start) if reply_start is not None else first


def acceptance_from_tree(tokens: torch.Tensor, parents: torch.Tensor, depth: torch.Tensor, selected: torch.Tensor,
                         refs: torch.Tensor, ref_ok: torch.Tensor) -> torch.Tensor:
    """Accepted drafted tokens per start under greedy verification: walk the selected tree along ``refs``.

    ``refs`` [N, D] holds the reference token at depth 1..D of each start, ``ref_ok`` [N, D] whether it is known.
    """
    N, D = refs.shape
    cur = torch.full((N,), -1)
    acc = torch.zeros(N, dtype=torch.long)
    alive = torch.ones(N, dtype=torch.bool)
    for j in range(1, D + 1):
        m = selected & (depth[None, :] == j) & (parents == cur[:, None]) & (tokens == refs[:, j - 1 : j])
        found = m.any(1) & alive & ref_ok[:, j - 1]
        cur = torch.where(found, m.float().argmax(1), cur)
        acc = acc + found.long()
        alive = found
    return acc


def _score(d: Draft, feats: torch.Tensor, s: _Sample, ref: torch.Tensor, valid: torch.Tensor, mode: str,
           reply_start: int | None, num_steps: int, topk: int, ndt: int) -> tuple[list[int], torch.Tensor, torch.Tensor, torch.Tensor]:
    """(accepted per visited step, per-start accepted, per-start top-1 hit, starts) for one sample."""
    T = len(s.tokens)
    nxt = torch.cat([s.tokens[1:], ref[-1:] if mode == "greedy" else s.tokens[-1:]])
    first = _generation_start(s.tokens, ref, reply_start) if mode == "greedy" else (reply_start or 0)
    starts = torch.arange(first, T)
    starts = starts[valid[torch.clamp(starts + 1, max=T - 1)] & (starts + 1 < T)]
    if len(starts) == 0:
        return [], torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.bool), starts
    pre = prefix_pass(d, feats.to(d.weights["fc.weight"].dtype), nxt)
    tree = draft_tree(d, pre, starts, num_steps, topk, ndt)
    idx = starts[:, None] + torch.arange(1, num_steps + 1)[None, :]
    refs = ref[idx.clamp(max=T - 1)]
    ok_ref = (idx < T) & valid[idx.clamp(max=T - 1)]
    acc = acceptance_from_tree(tree.tokens, tree.parents, tree.depth, tree.selected, refs, ok_ref)
    top1 = tree.tokens[:, 0] == refs[:, 0]
    by_start = dict(zip(starts.tolist(), acc.tolist()))
    visited, t = [], int(starts[0])
    while t in by_start:
        visited.append(by_start[t])
        t += by_start[t] + 1
    return visited, acc, top1, starts


def _predict_row(d: Draft, name: str, side: str, boundaries: Sequence[int] | None, ids: Any,
                 items: list[tuple[_Sample, torch.Tensor, torch.Tensor, torch.Tensor, str, int | None]],
                 num_steps: int, topk: int, ndt: int) -> Prediction | None:
    visited: list[int] = []
    accs, tops = [], []
    n = 0
    for s, feats, ref, valid, mode, reply in items:
        v, acc, top1, starts = _score(d, feats, s, ref, valid, mode, reply, num_steps, topk, ndt)
        if len(starts) == 0:
            continue
        n += 1
        visited += v
        accs.append(acc)
        tops.append(top1)
    if not visited:
        return None
    acc = torch.cat(accs)
    per_depth: list[float | None] = []
    for j in range(1, num_steps + 1):
        reached = int((acc >= j - 1).sum())
        per_depth.append(None if reached == 0 else float((acc >= j).sum()) / reached)
    return Prediction(
        name=name, side=side, boundaries=None if boundaries is None else tuple(boundaries),
        ids=None if ids is None else tuple(ids), acceptance_length=1.0 + sum(visited) / len(visited),
        top1=float(torch.cat(tops).float().mean()), per_depth=tuple(per_depth), steps=len(visited),
        positions=len(acc), samples=n,
        per_position=tuple(sum(a >= j for a in visited) / len(visited) for j in range(1, num_steps + 1)),
    )


def _report_dict(report: Any) -> dict:
    if report is None:
        return {}
    if isinstance(report, dict):
        return report
    return report.to_dict()


def _ids_for(boundaries: Sequence[int], engine: str, num_layers: int | None, family: str | None,
             version: str | None) -> list[int | None] | None:
    """The ids of a what-if row, for the report's engine at the report's version (its settings)."""
    from ..conventions import from_boundary

    try:
        return from_boundary(list(boundaries), engine, num_layers=num_layers, model_family=family, version=version)
    except Exception:  # noqa: BLE001 - a boundary the engine cannot express: no ids
        return None


def _ids_words(engine: str, version: str | None, family: str | None) -> str:
    from ..settings import engine_version

    try:
        return "for " + engine_version(engine, version, family).words()
    except InputError:  # a version this table does not know: say it as the report did
        return f"for {engine} {version or ''}".rstrip()


def predict_acceptance(
    train: Any, infer: Any, report: Any, draft: str | os.PathLike | Draft, *,
    target: str | os.PathLike | TargetHead | None = None, num_steps: int = 5, topk: int = 1,
    num_draft_tokens: int | None = None, dtype: torch.dtype = torch.float32, what_if: bool = True,
) -> PredictedAcceptance:
    """Predict the acceptance length the deployed draft gets from each side's hidden states.

    ``train`` and ``infer`` are dump paths or :class:`~hsdiff.model.Dump` objects; ``report`` (a
    :class:`~hsdiff.model.Report` or its ``to_dict()``) gives the configured and recommended
    boundaries, the engine and L. ``target`` is the target model's folder: its embeddings when the
    draft has none, and its ``lm_head`` for the greedy reference. When the inference side captured
    more layers than configured, every one-layer shift of the recommended ids is predicted too.

    >>> pa = predict_acceptance("train/", "infer/", report, "draft/", target="target/")   # doctest: +SKIP
    >>> print(pa.summary())
    your config: 1.02; recommended: 1.84; training-side ceiling: 1.86 tokens/step
    """
    from ..readers import scan

    if num_steps < 1 or topk < 1:
        raise InputError(f"--num-steps ({num_steps}) and --topk ({topk}) must be at least 1")
    max_nodes = topk + (num_steps - 1) * topk * topk
    ndt = num_draft_tokens if num_draft_tokens is not None else (num_steps + 1 if topk == 1 else max_nodes + 1)
    if not 2 <= ndt <= max_nodes + 1:
        raise InputError(f"--num-draft-tokens {ndt} is out of range for {num_steps} steps and top-k {topk}",
                         hint=f"give 2..{max_nodes + 1} (the engine sends num_draft_tokens - 1 drafted tokens)")
    head = target if isinstance(target, TargetHead) else (None if target is None else load_target_head(target, dtype))
    d = draft if isinstance(draft, Draft) else load_draft(draft, target=head, dtype=dtype)
    if "embed_tokens.weight" not in d.weights and head is not None:
        d.weights["embed_tokens.weight"] = head.embed
    rep = _report_dict(report)
    L = rep.get("num_hidden_layers")
    width, H = d.num_aux * d.target_hidden_size, d.target_hidden_size
    tdump = train if hasattr(train, "captures") else scan(train, "train")
    idump = infer if hasattr(infer, "captures") else scan(infer, "infer")
    configured_slots = sorted((rep.get("configured") or {}).get("boundary_indices") or [])
    tsamples, isamples = _samples(tdump, width, H, L), _samples(idump, width, H, L, configured_slots)
    warnings = list(d.warnings)
    modes: set[str] = set()

    def prepared(samples: dict, other: dict, pick: Any) -> list:
        items = []
        for key, s in samples.items():
            feats = pick(s)
            if feats is None:
                continue
            match = other.get(key)
            ref, valid, mode = _reference(s, head, [match] if match is not None else [])
            modes.add(mode)
            reply = s.reply_start if s.reply_start is not None else None if match is None else match.reply_start
            items.append((s, feats.float() if dtype == torch.float32 else feats.to(dtype), ref, valid, mode, reply))
        return items

    def concat_of(s: _Sample) -> torch.Tensor | None:
        return None if s.concat is None else s.concat.load()

    def layers_of(bs: Sequence[int]) -> Any:
        def pick(s: _Sample) -> torch.Tensor | None:
            if not all(b in s.layers for b in bs):
                return None
            return torch.cat([s.layers[b].load() for b in bs], -1)
        return pick

    rows: list[Prediction] = []
    args = (num_steps, topk, ndt)
    train_items = prepared(tsamples, isamples, concat_of)
    if train_items:
        claimed = rep.get("slots") and [s.get("boundary_index") for s in rep["slots"]]
        row = _predict_row(d, "training", "train", claimed if claimed and None not in claimed else None, None,
                           train_items, *args)
        if row:
            rows.append(row)
    else:
        warnings.append(f"training side: no sample with token ids and a {width}-wide aux tensor; no training-side ceiling")
    conf: dict = rep.get("configured") or {}
    rec = rep.get("recommended") or {}
    engine = rec.get("engine") or conf.get("engine") or "sglang"
    family = rec.get("model_family")
    version = rec.get("engine_version")  # the report's own (None in a report of schema 1: the newest)
    ids_for = _ids_words(engine, version, family)
    cb = list(conf.get("boundary_indices") or [])
    if cb and len(cb) == d.num_aux:
        engine_order = sorted(cb)  # the engines capture in layer order
        items = prepared(isamples, tsamples, layers_of(engine_order))
        src = "layers"
        if not items:
            items, src = prepared(isamples, tsamples, concat_of), "concat"
        row = _predict_row(d, "configured", "infer", engine_order, conf.get("eagle_aux_hidden_state_layer_ids"),
                           items, *args)
        if row:
            rows.append(row)
        log.debug("configured row from %s captures", src)
    elif any(s.concat is not None for s in isamples.values()):
        row = _predict_row(d, "configured", "infer", None, None, prepared(isamples, tsamples, concat_of), *args)
        if row:
            rows.append(row)
    rb = rec.get("boundary_indices") or []
    if rb and None not in rb and len(rb) == d.num_aux:
        candidates: list[tuple[str, list[int]]] = [("recommended", list(rb))]
        if what_if:
            candidates += [(f"all {'+' if s > 0 else '-'}1", [b + s for b in rb]) for s in (-1, 1)]
            candidates += [(f"slot {i} {'+' if s > 0 else '-'}1", [b + s if j == i else b for j, b in enumerate(rb)])
                           for i in range(len(rb)) for s in (-1, 1)]
        for name, bs in candidates:
            if min(bs) < 0 or (L is not None and max(bs) > L) or len(set(bs)) < len(bs):
                continue
            items = prepared(isamples, tsamples, layers_of(bs))
            row = _predict_row(d, name, "infer", bs, _ids_for(bs, engine, L, family, version), items, *args) if items else None
            if row:
                rows.append(row)
    if not any(r.side == "infer" for r in rows):
        warnings.append("inference side: no sample with token ids and the aux states the draft reads "
                        "(a concatenated aux tensor, or per-layer captures at the configured/recommended layers)")
    if not rows:
        raise AlignmentError("no sample on either side can be fed to the draft (token ids and aux states needed)",
                             hint=f"the draft reads {d.num_aux} x {H} aux states; dump input_ids with them")
    if "text" in modes:
        warnings.append("some samples are not the target's greedy output (or no lm_head/final state was found): "
                        "acceptance was measured against the dump's own next tokens there")
    reference = {frozenset({"greedy"}): "target greedy token (target lm_head on the dump's final hidden state)",
                 frozenset({"text"}): "the dump's next token"}.get(frozenset(modes), "mixed: target greedy where known, else the dump's next token")
    return PredictedAcceptance(draft=d.path, num_steps=num_steps, topk=topk, num_draft_tokens=ndt, reference=reference,
                               rows=tuple(rows), warnings=tuple(warnings), ids_for=ids_for)
