"""Slot splitting and labelling: training tensors cut into slots, inference captures labelled (their
own tags, or the configured ids in slot order), the layers the training side claims, and the runs of
an inference dumper directory kept apart."""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..configs import draft_ids
from ..errors import AlignmentError, InputError
from ..model import Capture, Configured, Dump, Evidence, Index, LabelSource, Layer, Report, Status
from ..readers import RANK_SEQUENCE
from ..readers.sglang_dumper import run_of
from ..rules import conventions as conv

#: training slot -> its captures (one per training sample)
Slots = dict[int, list[Capture]]


def configured(
    layer_ids: Sequence[int] | None,
    engine: str,
    family: str,
    source: str,
    num_layers: int | None,
    version: str | None = None,
    kind: str | None = None,
    boundaries: Sequence[int] | None = None,
) -> Configured | None:
    """The ids under test, the boundaries the engine (at ``version``) reads them as for a draft of ``kind`` (or
    ``boundaries``, when the caller read them by the key they sit in), and the rule it applied."""
    if layer_ids is None:
        return None
    ids = [int(i) for i in layer_ids]
    b = (
        list(boundaries)
        if boundaries is not None
        else conv.to_boundary(ids, engine, num_layers=num_layers, model_family=family, version=version, kind=kind)
    )
    rule = conv.applied(engine, family, version, kind)
    return Configured(
        engine,
        tuple(ids),
        tuple(b),
        source,
        f"{rule.label} ({conv.rule(engine).title} {conv.parse_version(engine, version)})",
    )


def split_train(train: Dump, hidden: int) -> Slots:
    """Training captures per slot: concatenated aux tensors cut by ``hidden``; per-layer tensors of one
    sample ordered by their labels."""
    slots: Slots = defaultdict(list)
    by_group: dict[str | None, list[Capture]] = defaultdict(list)
    for c in train.captures:
        if c.is_partial:
            raise InputError(
                f"the training side must hold full tensors, but {c.origin} is printed values",
                hint="swap TRAIN and INFER, or point TRAIN at the training dump",
            )
        if not c.dtype.startswith(("float", "bfloat")):
            raise InputError(
                f"the training tensor {c.origin} holds {c.dtype} values, which cannot be hidden states",
                hint="point TRAIN at the hidden-state dump, or re-dump it as float32/bfloat16",
            )
        if c.width and c.width != hidden and c.width % hidden == 0:
            for i, s in enumerate(c.split(hidden)):  # split numbers its parts 0..k-1
                slots[i].append(s)
        elif c.width == hidden:
            by_group[c.group].append(c)
        else:
            raise AlignmentError(
                f"training tensor width {c.width} is not a multiple of the hidden size {hidden}",
                path=c.origin.path,
                hint="pass the target's --hidden-size or --model-config",
            )
    for caps in by_group.values():
        ordered = sorted(caps, key=lambda c: (c.boundary is None, c.boundary if c.boundary is not None else 0))
        for i, c in enumerate(ordered):
            slots[i].append(c.replace(slot=i))
    return dict(slots)


def label_infer(infer: Dump, hidden: int, cfg: Configured | None) -> tuple[list[Capture], list[str]]:
    """Inference captures cut into slots and labelled; unlabelled ones take the configured ids in slot
    order. Returns the captures and the warnings."""
    cfg_b = list(cfg.boundary_indices) if cfg else None
    out: list[Capture] = []
    warnings: list[str] = []
    unlabelled_by_group: dict[str | None, list[Capture]] = defaultdict(list)
    for c in infer.captures:
        if c.post_norm:
            out.append(c)
            continue
        width = c.width
        if width and width != hidden and width % hidden == 0:
            labels = None
            k = width // hidden
            if cfg_b is not None and len(cfg_b) == k:
                labels = [Layer(b, Index.BOUNDARY, LabelSource.CONFIGURED) for b in cfg_b]
            elif cfg_b is not None:
                warnings.append(
                    f"{c.origin}: holds {k} slots but {len(cfg_b)} ids are configured; slots left unlabelled"
                )
            parts = c.split(hidden, labels)
            if c.observation is not None:  # printed values: only the slots whose columns were printed
                parts = [p for p in parts if p.observation is not None and p.observation.values.size]
            out.extend(parts)
            continue
        if c.observation is None and width and width % hidden:
            warnings.append(f"{c.origin}: width {width} is not a multiple of hidden size {hidden}; skipped")
            continue
        if c.layer is None:
            unlabelled_by_group[c.group].append(c)
        else:
            out.append(c)
    for group, caps in unlabelled_by_group.items():
        if cfg_b is None:
            out.extend(caps)
        elif all(c.slot is not None for c in caps):
            for c in caps:
                if c.slot is not None and c.slot < len(cfg_b):
                    out.append(c.replace(layer=Layer(cfg_b[c.slot], Index.BOUNDARY, LabelSource.CONFIGURED)))
                else:
                    out.append(c)
        elif len(caps) == len(cfg_b):
            out.extend(
                c.replace(slot=i, layer=Layer(cfg_b[i], Index.BOUNDARY, LabelSource.CONFIGURED))
                for i, c in enumerate(caps)
            )
        else:
            warnings.append(
                f"{len(caps)} unlabelled inference captures in {group} but {len(cfg_b)} configured ids: "
                "they cannot be matched to slots by position"
            )
            out.extend(caps)
    return out, warnings


def join_rank_parts(infer: Dump, train: Dump) -> tuple[Dump, list[str]]:
    """Ranks that hold different tokens of one tensor (sequence parallelism splits a request's tokens
    between them) joined by position into one capture, when their token ids, in rank order, run on
    in a training sample's; otherwise each stays a sequence of its own. Returns the dump and what was joined."""
    samples = {c.token_ids for c in train.captures if c.token_ids}
    parts: dict[tuple, list[Capture]] = defaultdict(list)
    for c in infer.captures:
        base, sep, _ = (c.group or "").rpartition(RANK_SEQUENCE)
        if sep and c.rank is not None and c.token_ids and not c.is_partial:
            parts[(base, c.origin.key, c.slot, c.boundary)].append(c)
    joined: dict[int, Capture | None] = {}
    notes = []
    for (base, key, *_), caps in parts.items():
        caps.sort(key=lambda c: c.rank or 0)
        ids = tuple(t for c in caps for t in (c.token_ids or ()))
        if len(caps) < 2 or len({c.width for c in caps}) > 1 or not any(_runs_in(ids, s) for s in samples):
            continue
        whole = caps[0].replace(
            group=base or None,
            rank=None,
            token_ids=ids,
            shape=(len(ids), caps[0].width),
            rows=None,
            col_start=0,
            col_stop=None,
            loader=lambda caps=caps: _stacked([c.array() for c in caps]),
            norm=None,
        )
        joined.update({id(c): None for c in caps[1:]} | {id(caps[0]): whole})
        notes.append(
            f"{key}: ranks {', '.join(str(c.rank) for c in caps)} hold consecutive tokens of one sequence "
            f"(their token ids run on in a training sample): joined by position, {len(ids)} tokens"
        )
    if not joined:
        return infer, []
    captures = tuple(joined.get(id(c), c) for c in infer.captures)
    return dataclasses.replace(infer, captures=tuple(c for c in captures if c is not None)), notes


def _stacked(parts: list[np.ndarray]) -> np.ndarray:
    """Parts of one tensor, one after another along the tokens, in the parts' stored dtype (numpy's
    concatenation drops the tag of a bfloat16 or float8 dtype: the bits are joined, then tagged again)."""
    dtype = parts[0].dtype
    return np.concatenate([p.view(p.dtype.base) if p.dtype.metadata else p for p in parts]).view(dtype)


def _runs_in(ids: tuple[int, ...], sample: tuple[int, ...]) -> bool:
    """Whether ``ids`` occur in ``sample`` as one run of consecutive tokens."""
    n = len(ids)
    return any(sample[i : i + n] == ids for i in range(len(sample) - n + 1))


def with_final(captures: Sequence[Capture], num_layers: int | None) -> list[Capture]:
    """The captures to score: the final post-norm state (an all-layer stack's last entry, TensorRT-LLM's
    layer -1) labelled as its boundary (:func:`~hsdiff.rules.conventions.final_boundary`) when the layer count
    is known, so that a training slot holding it is found; left out when it is not (its boundary is unknown)."""
    if num_layers is None:
        return [c for c in captures if not c.post_norm]
    final = Layer(conv.final_boundary(num_layers), Index.BOUNDARY, LabelSource.KEY)
    return [c.replace(layer=final) if c.post_norm and c.layer is None else c for c in captures]


def final_slots(train_slots: Slots) -> list[int]:
    """The training slots that hold the final post-norm state (their reader found it equal, bit for bit, to
    the file's final hidden state): real slots the draft's fc was trained on."""
    return sorted(s for s, caps in train_slots.items() if caps and all(c.post_norm for c in caps))


def label_final(train_slots: Slots, num_layers: int | None) -> Slots:
    """Training slots holding the final post-norm state labelled as its boundary (L + 1,
    :func:`~hsdiff.rules.conventions.final_boundary`) when the layer count is known; unchanged otherwise."""
    finals = final_slots(train_slots)
    if num_layers is None or not finals:
        return train_slots
    final = Layer(conv.final_boundary(num_layers), Index.BOUNDARY, LabelSource.KEY)
    return {s: [c.replace(layer=final) if s in finals else c for c in caps] for s, caps in train_slots.items()}


def claims(
    k: int,
    slots: Slots,
    train: Dump,
    train_layer_ids: Sequence[int] | None,
    train_engine: str,
    num_layers: int | None,
    model_family: str | None = None,
    version: str | None = None,
    kind: str | None = None,
) -> tuple[list[int | None], str]:
    """Boundary indices the training side claims for its slots, and where that claim came from.

    SpecForge captures through SGLang's own setter, so SGLang's family rules apply to its ids too.
    """
    family = conv.rule(train_engine).family_for(model_family, shifts=True)

    def read(ids: Sequence[int]) -> list[int]:
        return conv.to_boundary(
            ids, train_engine, num_layers=num_layers, keep_order=True, model_family=family, version=version, kind=kind
        )

    if train_layer_ids is not None:
        return _pad(read(train_layer_ids), k), f"--train-layer-ids in {train_engine} convention"
    labelled = [slots[s][0].boundary for s in range(k)]
    if all(b is not None for b in labelled):
        return labelled, "labels in the training dump"
    finals = {s: labelled[s] for s in final_slots(slots) if labelled[s] is not None}
    for path, cfg in train.configs:
        ids = draft_ids(cfg)
        if ids is not None:
            try:
                b = read(ids)
            except InputError:
                continue
            return _overlay(
                _pad(b, k), finals
            ), f"{Path(path).name} beside the training dump ({train_engine} convention)"
    if finals:
        return _overlay([None] * k, finals), "labels in the training dump"
    return [None] * k, ""


def _overlay(claimed: list[int | None], finals: dict[int, int | None]) -> list[int | None]:
    """``claimed`` with the final post-norm slots as the file shows them (its final state, bit for bit)."""
    return [finals.get(s, b) for s, b in enumerate(claimed)]


def _pad(b: list[int], k: int) -> list[int | None]:
    out: list[int | None] = list(b[:k])
    return out + [None] * (k - len(out))


def runs(infer: Dump) -> dict[str, Dump]:
    """The inference side cut into its dumper runs (experiment directories: ``dump_{time}``, or any
    folder of dumper files), when it holds several; ``{}`` when it holds one or none. A slot must be
    matched within one run: a restart may have changed the ids, so another run's captures carry
    other layers under the same names. Captures no dumper wrote belong to every run."""
    names = sorted({r for c in infer.captures if (r := run_of(c.group)) is not None})
    if len(names) < 2:
        return {}
    return {
        n: dataclasses.replace(infer, captures=tuple(c for c in infer.captures if run_of(c.group) in (n, None)))
        for n in names
    }


def pick_run(reports: Mapping[str, Report]) -> tuple[str, str]:
    """The run whose captures explain the training side best (most slots as configured, then most slots
    observed by value, then the smallest error; on a tie the last run), and a warning naming it and
    the others with their verdicts."""

    def standing(name: str) -> tuple:
        r = reports[name]
        errs = [
            s.match.metrics.rel_err for s in r.slots if s.match is not None and math.isfinite(s.match.metrics.rel_err)
        ]
        return (
            sum(s.status == Status.OK for s in r.slots),
            sum(s.evidence == Evidence.OBSERVED for s in r.slots),
            -(sum(errs) / len(errs)) if errs else -math.inf,
            name,
        )

    best = max(reports, key=standing)
    k = len(reports[best].slots)
    others = "; ".join(f"{n}: {reports[n].verdict}" for n in reports if n != best)
    return best, (
        f"the inference side holds {len(reports)} dumper runs ({', '.join(reports)}); "
        "slots are matched within one run, "
        f"and this report is on run {best} ({standing(best)[1]} of {k} slots observed by value). The other runs alone: "
        f"{others}. Point INFER at one run's directory to check it on its own"
    )


def unsettled_by_runs(reports: Mapping[str, Report], best: str) -> list[int]:
    """Slots of run ``best`` whose answer the other runs put in doubt.

    The configured ids describe one deployment, and a restart between runs may have changed them:
    when the runs disagree (another verdict, or another layer for a slot), a slot whose layer rests
    on the configured ids alone (not on a capture's own label, nor on the training side's) could be
    another run's layer under this run's name."""
    r = reports[best]
    others = [o for n, o in reports.items() if n != best and len(o.slots) == len(r.slots)]
    if all(
        o.verdict == r.verdict and [s.boundary_index for s in o.slots] == [s.boundary_index for s in r.slots]
        for o in others
    ):
        return []
    out = []
    for i, s in enumerate(r.slots):
        disputed = any(o.slots[i].boundary_index not in (None, s.boundary_index) for o in others)
        own_label = (
            s.match is not None
            and s.match.capture.layer is not None
            and s.match.capture.layer.source != LabelSource.CONFIGURED
        )
        if s.boundary_index is not None and (disputed or not own_label) and s.claimed_boundary != s.boundary_index:
            out.append(i)
    return out
