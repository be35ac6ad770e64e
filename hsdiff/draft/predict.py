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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import AlignmentError, InputError
from ..extras import needs
from ..model import INFER, TRAIN, Capture, Dump, Report
from ..progress import Progress, step, track
from .checkpoint import Draft, TargetHead, load_draft, load_target_head
from .inputs import ReportLayers, Speculation
from .records import PredictedAcceptance, Prediction, SlotScales
from .run import draft_tree, prefix_pass

with needs("draft", "--draft (the draft's forward, hsdiff.draft)"):
    import torch

__all__ = ["Prediction", "PredictedAcceptance", "Speculation", "predict_acceptance", "acceptance_from_tree"]

log = logging.getLogger(__name__)

#: Shortest greedy run (positions) read as the target's own generation.
MIN_GENERATION = 8


# --------------------------------------------------------------------------- the dumps, per sample


@dataclass
class _Sample:
    name: str
    tokens: torch.Tensor  # [T]
    concat: Capture | None = None  # capture of width k*H (what the engine fed the draft)
    layers: dict[int, Capture] = field(default_factory=dict)
    final: Capture | None = None  # post-norm final state capture
    last: Capture | None = None  # pre-norm B=L capture
    reply_start: int | None = None  # where the last reply begins, from a training file's loss_mask


def _samples(
    dump: Dump, width: int, hidden: int, num_layers: int | None, slots: Sequence[int] = ()
) -> dict[tuple[int, ...], _Sample]:
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
                kept = c.replace(
                    loader=c.final_loader,
                    rows=None,
                    width=hidden,
                    shape=None,
                    concat=False,
                    post_norm=not c.final_pre_norm,
                    col_start=0,
                    col_stop=None,
                    slot_layers=(),
                )
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


def _reference(
    s: _Sample, head: TargetHead | None, others: Sequence[_Sample]
) -> tuple[torch.Tensor, torch.Tensor, str]:
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
                final = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + head.rms_norm_eps)).to(
                    head.norm.dtype
                ) * head.norm
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


def _reply_start(mask: np.ndarray) -> int | None:
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


def acceptance_from_tree(
    tokens: torch.Tensor,
    parents: torch.Tensor,
    depth: torch.Tensor,
    selected: torch.Tensor,
    refs: torch.Tensor,
    ref_ok: torch.Tensor,
) -> torch.Tensor:
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


def _score(d: Draft, it: _Item, tree_shape: Speculation) -> tuple[list[int], torch.Tensor, torch.Tensor, torch.Tensor]:
    """(accepted per visited step, per-start accepted, per-start top-1 hit, starts) for one sample."""
    s, feats, ref, valid, mode, reply_start = it.sample, it.feats, it.ref, it.valid, it.mode, it.reply_start
    num_steps = tree_shape.num_steps
    T = len(s.tokens)
    nxt = torch.cat([s.tokens[1:], ref[-1:] if mode == "greedy" else s.tokens[-1:]])
    first = _generation_start(s.tokens, ref, reply_start) if mode == "greedy" else (reply_start or 0)
    starts = torch.arange(first, T)
    starts = starts[valid[torch.clamp(starts + 1, max=T - 1)] & (starts + 1 < T)]
    if len(starts) == 0:
        return [], torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.bool), starts
    pre = prefix_pass(d, feats.to(d.weights["fc.weight"].dtype), nxt)
    tree = draft_tree(d, pre, starts, num_steps, tree_shape.topk, tree_shape.num_draft_tokens)
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


def _predict_row(
    d: Draft,
    name: str,
    side: str,
    boundaries: Sequence[int] | None,
    ids: Sequence[int | None] | None,
    items: list[_Item],
    tree: Speculation,
    progress: Progress | None = None,
) -> Prediction | None:
    """The prediction of one setting over its samples, or None when no sample has a start to draft from."""
    num_steps = tree.num_steps
    visited: list[int] = []
    accs, tops = [], []
    n = 0
    for it in track(items, progress, f"replaying the draft, {name} (samples)"):
        v, acc, top1, starts = _score(d, it, tree)
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
        name=name,
        side=side,
        boundaries=None if boundaries is None else tuple(boundaries),
        ids=None if ids is None else tuple(ids),
        acceptance_length=1.0 + sum(visited) / len(visited),
        top1=float(torch.cat(tops).float().mean()),
        per_depth=tuple(per_depth),
        steps=len(visited),
        positions=len(acc),
        samples=n,
        per_position=tuple(sum(a >= j for a in visited) / len(visited) for j in range(1, num_steps + 1)),
    )


def _ids_for(
    boundaries: Sequence[int], engine: str, num_layers: int | None, family: str | None, version: str | None
) -> list[int | None] | None:
    """The ids of a what-if row, for the report's engine at the report's version (its settings)."""
    from ..rules.conventions import from_boundary

    try:
        return from_boundary(list(boundaries), engine, num_layers=num_layers, model_family=family, version=version)
    except Exception:  # noqa: BLE001 - a boundary the engine cannot express: no ids
        return None


def _ids_words(engine: str, version: str | None, family: str | None) -> str:
    from ..rules.settings import engine_version

    try:
        return "for " + engine_version(engine, version, family).words()
    except InputError:  # a version this table does not know: say it as the report did
        return f"for {engine} {version or ''}".rstrip()


def predict_acceptance(
    train: str | os.PathLike | Dump,
    infer: str | os.PathLike | Dump,
    report: Report | Mapping[str, Any] | None,
    draft: str | os.PathLike | Draft,
    *,
    target: str | os.PathLike | TargetHead | None = None,
    tree: Speculation = Speculation(),
    dtype: torch.dtype = torch.float32,
    what_if: bool = True,
    progress: Progress | None = None,
) -> PredictedAcceptance:
    """Predict the acceptance length the deployed draft gets from each side's hidden states.

    ``train`` and ``infer`` are dump paths or :class:`~hsdiff.model.Dump` objects; ``report`` (a
    :class:`~hsdiff.model.Report` or its ``to_dict()``) gives the configured and recommended
    boundaries, the engine and L (:class:`~hsdiff.draft.inputs.ReportLayers`). ``target`` is the target
    model's folder: its embeddings when the draft has none, and its ``lm_head`` for the greedy
    reference. ``tree`` is the draft tree the engine verifies. When the inference side captured more
    layers than configured, every one-layer shift of the recommended ids is predicted too.
    ``progress`` (:mod:`hsdiff.progress`) is told of the loading and of each setting's samples.

    >>> pa = predict_acceptance("train/", "infer/", report, "draft/", target="target/")   # doctest: +SKIP
    >>> print(pa.summary())
    your config: 1.02; recommended: 1.84; training-side ceiling: 1.86 tokens/step
    """
    tree = tree.checked()
    rep = ReportLayers.of(report)
    with step(progress, "loading the draft and the target's head"):
        head = target if isinstance(target, TargetHead) else None if target is None else load_target_head(target, dtype)
        d = draft if isinstance(draft, Draft) else load_draft(draft, target=head, dtype=dtype, engine=rep.engine)
    if "embed_tokens.weight" not in d.weights and head is not None:
        d.weights["embed_tokens.weight"] = head.embed
    width, H = d.num_aux * d.target_hidden_size, d.target_hidden_size
    feeder = _Feeder(
        head,
        dtype,
        _samples(_dump(train, TRAIN), width, H, rep.num_layers),
        _samples(_dump(infer, INFER), width, H, rep.num_layers, sorted(rep.configured)),
    )
    warnings = list(d.warnings)
    train_items = feeder.items(TRAIN, _concat_of)
    if not train_items:
        warnings.append(
            f"training side: no sample with token ids and a {width}-wide aux tensor; no training-side ceiling"
        )
    row = _predict_row(d, "training", TRAIN, rep.claimed, None, train_items, tree, progress) if train_items else None
    rows = [row] if row else []  # the training side's own features: the ceiling
    rows += _configured_row(d, rep, feeder, tree, progress)
    rows += _recommended_rows(d, rep, feeder, tree, what_if, progress)
    if not any(r.side == INFER for r in rows):
        warnings.append(
            "inference side: no sample with token ids and the aux states the draft reads "
            "(a concatenated aux tensor, or per-layer captures at the configured/recommended layers)"
        )
    if not rows:
        raise AlignmentError(
            "no sample on either side can be fed to the draft (token ids and aux states needed)",
            hint=f"the draft reads {d.num_aux} x {H} aux states; dump input_ids with them",
        )
    if "text" in feeder.modes:
        warnings.append(
            "some samples are not the target's greedy output (or no lm_head/final state was found): "
            "acceptance was measured against the dump's own next tokens there"
        )
    return PredictedAcceptance(
        draft=d.path,
        num_steps=tree.num_steps,
        topk=tree.topk,
        num_draft_tokens=tree.num_draft_tokens or 0,
        reference=_reference_words(feeder.modes),
        rows=tuple(rows),
        warnings=tuple(warnings),
        ids_for=_ids_words(rep.engine, rep.version, rep.family),
        scales=_slot_scales(d, rep, feeder),
        norms=d.norms,
    )


def _dump(side: str | os.PathLike | Dump, name: str) -> Dump:
    from ..readers import scan

    return side if isinstance(side, Dump) else scan(side, name)


@dataclass(frozen=True)
class _Item:
    """One sample ready for the draft: the features it reads, the reference tokens, and where to start."""

    sample: _Sample
    feats: torch.Tensor
    ref: torch.Tensor
    valid: torch.Tensor
    mode: str  # "greedy" or "text"
    reply_start: int | None


#: Picks the features a row feeds the draft from one sample (None: the sample lacks them).
Pick = Callable[[_Sample], "torch.Tensor | None"]


@dataclass
class _Feeder:
    """Both sides' samples, fed to the draft as a row asks (``modes``: the references used so far)."""

    head: TargetHead | None
    dtype: torch.dtype
    train: dict[tuple[int, ...], _Sample]
    infer: dict[tuple[int, ...], _Sample]
    modes: set[str] = field(default_factory=set)

    def items(self, side: str, pick: Pick) -> list[_Item]:
        """Every sample of ``side`` with the features ``pick`` takes, beside the other side's same tokens."""
        samples, other = (self.train, self.infer) if side == TRAIN else (self.infer, self.train)
        out = []
        for key, s in samples.items():
            feats = pick(s)
            if feats is None:
                continue
            match = other.get(key)
            ref, valid, mode = _reference(s, self.head, [match] if match is not None else [])
            self.modes.add(mode)
            reply = s.reply_start if s.reply_start is not None else None if match is None else match.reply_start
            out.append(
                _Item(
                    s, feats.float() if self.dtype == torch.float32 else feats.to(self.dtype), ref, valid, mode, reply
                )
            )
        return out


def _concat_of(s: _Sample) -> torch.Tensor | None:
    return None if s.concat is None else s.concat.load()


def _layers_of(bs: Sequence[int]) -> Pick:
    def pick(s: _Sample) -> torch.Tensor | None:
        if not all(b in s.layers for b in bs):
            return None
        return torch.cat([s.layers[b].load() for b in bs], -1)

    return pick


def _configured_row(
    d: Draft, rep: ReportLayers, feeder: _Feeder, tree: Speculation, progress: Progress | None = None
) -> list[Prediction]:
    """What the engine as configured feeds the draft: the configured layers, else the aux tensor it wrote."""
    if rep.configured and len(rep.configured) == d.num_aux:
        engine_order = sorted(rep.configured)  # the engines capture in layer order
        items = feeder.items(INFER, _layers_of(engine_order))
        src = "layers"
        if not items:
            items, src = feeder.items(INFER, _concat_of), "concat"
        row = _predict_row(d, "configured", INFER, engine_order, rep.configured_ids, items, tree, progress)
        log.debug("configured row from %s captures", src)
        return [row] if row else []
    if any(s.concat is not None for s in feeder.infer.values()):
        row = _predict_row(d, "configured", INFER, None, None, feeder.items(INFER, _concat_of), tree, progress)
        return [row] if row else []
    return []


def _slot_scales(d: Draft, rep: ReportLayers, feeder: _Feeder) -> SlotScales | None:
    """Per aux slot, the median per-token norm of what the engine as configured feeds the draft over the
    training side's aux state on the same tokens (None: no sample has both)."""
    pick = _layers_of(sorted(rep.configured)) if len(rep.configured) == d.num_aux else _concat_of
    per_slot: list[list[torch.Tensor]] = [[] for _ in range(d.num_aux)]
    for key, s in feeder.infer.items():
        t = feeder.train.get(key)
        fed = pick(s)
        if t is None or t.concat is None or fed is None:
            continue
        pairs = zip(fed.float().chunk(d.num_aux, -1), t.concat.load().float().chunk(d.num_aux, -1))
        for i, (a, b) in enumerate(pairs):
            per_slot[i].append(a.norm(dim=-1) / b.norm(dim=-1).clamp_min(1e-30))
    if not per_slot[0]:
        return None
    ratios = tuple(float(torch.cat(r).median()) for r in per_slot)  # the lower median, as elsewhere
    return SlotScales(ratios, d.fc_norm, d.norm_before_fc)


def _recommended_rows(
    d: Draft, rep: ReportLayers, feeder: _Feeder, tree: Speculation, what_if: bool, progress: Progress | None = None
) -> list[Prediction]:
    """The recommended layers, and (``what_if``) every shift of them by one layer, all slots or one."""
    rb = list(rep.recommended or ())
    if not rb or len(rb) != d.num_aux:
        return []
    candidates: list[tuple[str, list[int]]] = [("recommended", rb)]
    if what_if:
        candidates += [(f"all {'+' if s > 0 else '-'}1", [b + s for b in rb]) for s in (-1, 1)]
        candidates += [
            (f"slot {i} {'+' if s > 0 else '-'}1", [b + s if j == i else b for j, b in enumerate(rb)])
            for i in range(len(rb))
            for s in (-1, 1)
        ]
    L = rep.num_layers
    rows = []
    for name, bs in candidates:
        if min(bs) < 0 or (L is not None and max(bs) > L) or len(set(bs)) < len(bs):
            continue
        items = feeder.items(INFER, _layers_of(bs))
        ids = _ids_for(bs, rep.engine, L, rep.family, rep.version)
        row = _predict_row(d, name, INFER, bs, ids, items, tree, progress) if items else None
        if row:
            rows.append(row)
    return rows


def _reference_words(modes: set[str]) -> str:
    """What the acceptance was measured against, in words."""
    return {
        frozenset({"greedy"}): "target greedy token (target lm_head on the dump's final hidden state)",
        frozenset({"text"}): "the dump's next token",
    }.get(frozenset(modes), "mixed: target greedy where known, else the dump's next token")
