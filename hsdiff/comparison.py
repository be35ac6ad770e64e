"""``compare``: from two dumps to a :class:`~hsdiff.model.Report`.

Steps, data flowing one way: read both sides (:mod:`hsdiff.readers`) → work out the hidden size
and split concatenated aux tensors into slots → label inference captures (their own tags, or the
configured ids in slot order) → align tokens and score every training slot against every
inference capture (:mod:`hsdiff.align`) → decide what each slot is, with a confidence that
accounts for neighbours that were not captured → compare with the configuration, infer unobserved
slots from the training side's own labels → verdict and explanation.
"""

from __future__ import annotations

import logging
import math
import os
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from . import align, explain
from . import conventions as conv
from .errors import AlignmentError, ConfigError, InputError
from .configs import draft_ids as _draft_ids
from .configs import is_draft_config as _is_draft_config
from .configs import load_config
from .model import INFER, TRAIN, Candidate, Capture, Configured, Dump, Layer, Report
from .readers import scan

__all__ = ["compare", "Options", "load_config"]

log = logging.getLogger("hsdiff")

Progress = Callable[[str, int, int], None]


@dataclass
class Options:
    """Everything ``compare`` can be told; the CLI options map one to one."""

    layer_ids: Sequence[int] | None = None
    engine: str = "sglang"
    model_family: str | None = None
    infer_index: str = "boundary"
    train_index: str = "boundary"
    hidden_size: int | None = None
    num_layers: int | None = None
    model_config: str | None = None
    train_layer_ids: Sequence[int] | None = None
    train_engine: str = "specforge"
    train_format: str | None = None
    infer_format: str | None = None
    tolerance: float = align.NOISE_TOLERANCE
    configured_source: str = "--layer-ids"
    log_pattern: str | None = None
    progress: Progress | None = field(default=None, repr=False)


def compare(
    train: str | os.PathLike | Dump,
    infer: str | os.PathLike | Dump,
    options: Options | None = None,
    **kwargs: Any,
) -> Report:
    """Compare a training-side dump with an inference-side dump.

    >>> report = compare("fixtures/seed/train", "fixtures/seed/infer-wrong", layer_ids=[-1, 2, 30])  # doctest: +SKIP
    >>> report.verdict, report.recommended.ids
    ('mismatch', (2, 30, 58))
    """
    opts = options or Options()
    for k, v in kwargs.items():
        if not hasattr(opts, k):
            raise TypeError(f"compare() got an unexpected keyword argument {k!r}")
        setattr(opts, k, v)
    conv.rule(opts.engine)
    family = conv.normalize_family(opts.model_family) if opts.engine == "sglang" else (opts.model_family or "llama")
    for name, value in (("--infer-index", opts.infer_index), ("--train-index", opts.train_index)):
        if value not in (conv.BOUNDARY, conv.OUTPUT):
            raise InputError(f"{name} must be 'boundary' or 'output', not {value!r}")

    def reading(side: str):
        if opts.progress is None:
            return None
        return lambda i, n, path: opts.progress(f"reading {side} files", i + 1, n)  # type: ignore[misc]

    train_dump = train if isinstance(train, Dump) else scan(
        train, TRAIN, fmt=opts.train_format, index=opts.train_index, progress=reading("training")
    )
    infer_dump = infer if isinstance(infer, Dump) else scan(
        infer, INFER, fmt=opts.infer_format, index=opts.infer_index, progress=reading("inference"),
        log_pattern=opts.log_pattern,
    )
    return _Comparison(train_dump, infer_dump, opts, family, str(train), str(infer)).run()


class _Comparison:
    def __init__(self, train: Dump, infer: Dump, opts: Options, family: str, train_path: str, infer_path: str):
        self.opts, self.family = opts, family
        self.warnings: list[str] = list(train.warnings) + list(infer.warnings)
        self.inputs = {"train": train_path, "infer": infer_path}
        self.train = _with_values(train, "training", train_path, self.warnings)
        self.infer = _with_values(infer, "inference", infer_path, self.warnings)
        self.model_cfg = load_config(opts.model_config) if opts.model_config else None
        self.cands: dict[int, list[Candidate]] = {}  # per training slot, best first (filled by run)
        self.train_slots: dict[int, list[Capture]] = {}

    # ---------------------------------------------------------------- set-up
    def _num_layers(self) -> int | None:
        if self.opts.num_layers:
            return self.opts.num_layers
        if self.model_cfg is not None:
            n = self.model_cfg.get("num_hidden_layers") or (self.model_cfg.get("text_config") or {}).get("num_hidden_layers")
            if n:
                return int(n)
        for _, cfg in self.train.configs + self.infer.configs:
            if not _is_draft_config(cfg) and cfg.get("num_hidden_layers"):
                return int(cfg["num_hidden_layers"])
        stacks = [c.boundary for c in self.train.captures + self.infer.captures if c.origin.format == "hf" and c.boundary is not None]
        posts = [c for c in self.train.captures + self.infer.captures if c.origin.format == "hf" and c.post_norm]
        if stacks:
            return max(stacks) + (1 if posts else 0)
        return None

    def _hidden_size(self) -> int:
        o = self.opts
        if o.hidden_size:
            return int(o.hidden_size)
        if self.model_cfg is not None and self.model_cfg.get("hidden_size"):
            return int(self.model_cfg["hidden_size"])
        for _, cfg in self.train.configs + self.infer.configs:
            if _is_draft_config(cfg) and cfg.get("target_hidden_size"):
                return int(cfg["target_hidden_size"])
        for _, cfg in self.train.configs + self.infer.configs:
            if not _is_draft_config(cfg) and cfg.get("hidden_size"):
                return int(cfg["hidden_size"])
        train_widths = {c.width for c in self.train.captures if c.width}
        plain_train = {c.width for c in self.train.captures if c.width and not c.concat}
        if plain_train:
            return Counter(c.width for c in self.train.captures if not c.concat and c.width).most_common(1)[0][0]
        infer_widths = Counter(c.width for c in self.infer.captures if c.width)  # printed captures: their claimed shape
        for w, _ in infer_widths.most_common():
            if all(tw % w == 0 for tw in train_widths) and any(tw // w > 1 for tw in train_widths):
                return w
        ids = self.opts.layer_ids
        if ids and train_widths:
            k = len(set(ids))
            w = max(train_widths)
            if w % k == 0:
                return w // k
        for _, cfg in self.train.configs + self.infer.configs:
            if cfg.get("hidden_size") and not cfg.get("target_hidden_size"):
                return int(cfg["hidden_size"])
        raise AlignmentError(
            f"cannot tell the hidden size: training width {sorted(train_widths)} and inference widths "
            f"{sorted(infer_widths)} do not show how many slots are concatenated",
            hint="pass --hidden-size H or --model-config path/to/target/config.json",
        )

    def _configured(self, num_layers: int | None) -> Configured | None:
        o = self.opts
        if o.layer_ids is None:
            return None
        ids = [int(i) for i in o.layer_ids]
        b = conv.to_boundary(ids, o.engine, num_layers=num_layers, model_family=self.family)
        return Configured(o.engine, tuple(ids), tuple(b), o.configured_source)

    def _claims(self, k: int, slots: dict[int, list[Capture]], num_layers: int | None) -> tuple[list[int | None], str]:
        """Boundary indices the training side claims for its slots, and where that claim came from."""
        o = self.opts
        if o.train_layer_ids is not None:
            b = conv.to_boundary(o.train_layer_ids, o.train_engine, num_layers=num_layers, keep_order=True)
            return _pad(b, k), f"--train-layer-ids in {o.train_engine} convention"
        labelled = [slots[s][0].boundary for s in range(k)]
        if all(b is not None for b in labelled):
            return labelled, "labels in the training dump"
        for path, cfg in self.train.configs:
            ids = _draft_ids(cfg)
            if ids is not None:
                try:
                    b = conv.to_boundary(ids, o.train_engine, num_layers=num_layers, keep_order=True)
                except InputError:
                    continue
                return _pad(b, k), f"{Path(path).name} beside the training dump ({o.train_engine} convention)"
        return [None] * k, ""

    def _split_train(self, hidden: int) -> dict[int, list[Capture]]:
        slots: dict[int, list[Capture]] = defaultdict(list)
        by_group: dict[str | None, list[Capture]] = defaultdict(list)
        for c in self.train.captures:
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
                for s in c.split(hidden):
                    slots[s.slot].append(s)  # type: ignore[index]
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

    def _label_infer(self, hidden: int, configured: Configured | None) -> list[Capture]:
        cfg_b = list(configured.boundary_indices) if configured else None
        out: list[Capture] = []
        unlabelled_by_group: dict[str | None, list[Capture]] = defaultdict(list)
        for c in self.infer.captures:
            if c.post_norm:
                out.append(c)
                continue
            width = c.width
            if width and width != hidden and width % hidden == 0:
                labels = None
                k = width // hidden
                if cfg_b is not None and len(cfg_b) == k:
                    labels = [Layer(b, "boundary", "configured") for b in cfg_b]
                elif cfg_b is not None:
                    self.warnings.append(
                        f"{c.origin}: holds {k} slots but {len(cfg_b)} ids are configured; slots left unlabelled"
                    )
                parts = c.split(hidden, labels)
                if c.observation is not None:  # printed values: only the slots whose columns were printed
                    parts = [p for p in parts if p.observation is not None and p.observation.values.size]
                out.extend(parts)
                continue
            if c.observation is None and width and width % hidden:
                self.warnings.append(f"{c.origin}: width {width} is not a multiple of hidden size {hidden}; skipped")
                continue
            if c.layer is None:
                unlabelled_by_group[c.group].append(c)
            else:
                out.append(c)
        for group, caps in unlabelled_by_group.items():
            if cfg_b is None:
                out.extend(caps)
                continue
            if all(c.slot is not None for c in caps):
                for c in caps:
                    ok = c.slot is not None and c.slot < len(cfg_b)
                    out.append(c.replace(layer=Layer(cfg_b[c.slot], "boundary", "configured")) if ok else c)  # type: ignore[index]
            elif len(caps) == len(cfg_b):
                for i, c in enumerate(caps):
                    out.append(c.replace(slot=i, layer=Layer(cfg_b[i], "boundary", "configured")))
            else:
                self.warnings.append(
                    f"{len(caps)} unlabelled inference captures in {group} but {len(cfg_b)} configured ids: "
                    "they cannot be matched to slots by position"
                )
                out.extend(caps)
        return out

    # ---------------------------------------------------------------- scoring
    def _score(self, slots: dict[int, list[Capture]], infer: list[Capture]) -> tuple[dict[int, list[Candidate]], list[dict]]:
        """Best candidate per (slot, inference capture), minimised over samples and offsets."""
        infer_tensors: dict[int, torch.Tensor | None] = {}
        for c in infer:
            infer_tensors[id(c)] = None if c.observation is not None else _checked_load(c, self.warnings)
        # samples: training group -> {slot: capture}
        samples: dict[str | None, dict[int, Capture]] = defaultdict(dict)
        for s, caps in slots.items():
            for c in caps:
                samples[c.group][s] = c
        best: dict[tuple[int, int], list[tuple[Candidate, float]]] = defaultdict(list)
        rows: list[dict] = []
        ids_failed = set()
        n = len(samples)
        sample_ids = {g: next((c.token_ids for c in caps.values() if c.token_ids), None) for g, caps in samples.items()}
        homes: dict[str | None, set] = {}  # inference group -> training samples whose ids contain its ids
        for c in infer:
            if c.token_ids and c.group not in homes:
                homes[c.group] = {g for g, ids in sample_ids.items() if ids and align.id_offsets(c.token_ids, ids)}
        for si, (sample, slot_caps) in enumerate(samples.items()):
            if self.opts.progress:
                self.opts.progress("scoring samples", si, n)
            train_ids = next((c.token_ids for c in slot_caps.values() if c.token_ids), None)
            plan = []
            for c in infer:
                offsets = None
                if c.token_ids and train_ids:
                    offsets = align.id_offsets(c.token_ids, train_ids)
                    if not offsets:
                        ids_failed.add(c.group)
                        if homes.get(c.group):
                            continue  # another training sample holds these tokens
                plan.append((c, offsets))
            if not plan:
                continue  # token ids rule this sample out: its tensors are never loaded
            loaded = {s: align.TrainSlot.load(c) for s, c in slot_caps.items()}
            for s, ts in loaded.items():
                bad = int((~torch.isfinite(ts.tensor)).sum())
                if bad:
                    self.warnings.append(f"{ts.capture.origin} slot {s}: {bad} NaN/Inf values in the training tensor")
                zero = _zero_tokens(ts.tensor)
                if zero:
                    self.warnings.append(f"{ts.capture.origin} slot {s}: {_zero_text(zero, ts.tokens, 'training tensor')}")
            for c, offsets in plan:
                x = infer_tensors[id(c)]
                if c.observation is None and x is None:
                    continue
                for s, ts in loaded.items():
                    if x is not None and x.shape[1] != ts.tensor.shape[1]:
                        continue
                    off, m = align.best_alignment(ts, c, x, offsets)
                    cand = Candidate(c, sample, off, m)
                    best[(s, id(c))].append((cand, m.rel_err))
                    rows.append(
                        {
                            "slot": s, "sample": sample, "capture": c.label(), "capture_boundary": c.boundary,
                            "label_source": None if c.layer is None else c.layer.source, "token_offset": off,
                            "rel_err": m.rel_err, "cosine": m.cosine, "p90_err": m.p90_err,
                            "norm_ratio": m.norm_ratio, "tokens": m.tokens, "values": m.values, "sink_only": m.sink_only,
                        }
                    )
        if self.opts.progress:
            self.opts.progress("scoring samples", n, n)
        for g in sorted(x for x in ids_failed if x is not None):
            if not homes.get(g):
                self.warnings.append(
                    f"{g}: its token ids appear in no training sample; tokens were aligned by value instead"
                )
        out: dict[int, list[Candidate]] = defaultdict(list)
        for (s, _), cands in best.items():
            cands.sort(key=lambda x: x[1])
            top = cands[0][0]
            tol = max(self.opts.tolerance * 0.1, top.metrics.rel_err * 1.02 + 1e-6)
            tied = sum(1 for _, e in cands if e <= tol)
            out[s].append(Candidate(top.capture, top.sample, top.offset, top.metrics, tied))
        for s in out:
            out[s].sort(key=lambda c: c.metrics.rel_err)
        return out, rows

    # ---------------------------------------------------------------- decisions
    def _decide(self, s: int, cands: list[Candidate]) -> dict:
        tol = self.opts.tolerance
        if not cands:
            return {"status": "unobserved", "b": None, "conf": 0.0, "margin": None, "match": None, "runner": None,
                    "note": "no inference capture could be compared with this slot"}
        ordinary = [c for c in cands if not c.metrics.sink_only and c.metrics.rel_err <= tol]
        if cands[0].metrics.sink_only and ordinary:  # ordinary tokens separate layers, sinks cannot
            cands = ordinary + [c for c in cands if all(c is not o for o in ordinary)]
        top = cands[0]
        m = top.metrics
        runner = next((c for c in cands[1:] if c.boundary != top.boundary or top.boundary is None), None)
        margin = None if runner is None else runner.metrics.rel_err - m.rel_err
        if not m.rel_err <= tol:
            return {"status": "unmatched", "b": None, "conf": 0.0, "margin": margin, "match": None, "runner": top,
                    "note": f"no inference capture equals this slot (closest: {top.capture.label()}, "
                    f"error {_pct(m.rel_err)})"}
        b = top.boundary
        neighbours = {c.boundary for c in cands} & ({b - 1, b + 1} if b is not None else set())
        sep = runner.metrics.rel_err if runner is not None else math.inf
        neighbour_note = ""
        if b is not None and len(neighbours) < 2 and sep > align.ADJACENT_PRIOR:
            sep = align.ADJACENT_PRIOR
            neighbour_note = " (neighbouring layers not captured: separation taken from the adjacent-layer prior)"
        ratio = sep / max(m.rel_err, 1e-3)
        conf = max(0.0, min(1.0, math.log(ratio) / math.log(10))) if ratio > 1 else 0.0
        if top.capture.is_partial:
            # a few printed numbers estimate the error roughly: confidence grows with the evidence
            cap = _evidence_cap(m.values)
            if conf > cap:
                conf = cap
                if cap < 0.9:
                    neighbour_note += f" (confidence capped at {cap:.2f}: only {m.values} printed values)"
        if m.sink_only:
            conf = min(conf, 0.25)
            return {"status": "ambiguous", "b": None, "conf": conf, "margin": margin, "match": top, "runner": runner,
                    "candidate_b": b,
                    "note": f"only attention-sink tokens were compared (closest: {top.capture.label()} at "
                    f"{_pct(m.rel_err)}); the sink barely changes across middle layers, so it cannot tell B{b} from "
                    f"B{b - 1 if b else 0} or B{(b or 0) + 1}: print ordinary tokens (position ≥ 1)"}
        if ratio < 3.0:
            who = runner.capture.label() if runner is not None and sep == runner.metrics.rel_err else "an uncaptured neighbour"
            return {"status": "ambiguous", "b": None, "conf": min(conf, 0.4), "margin": margin, "match": top,
                    "runner": runner, "candidate_b": b,
                    "note": f"matches {top.capture.label()} at {_pct(m.rel_err)} but {who} is nearly as close "
                    f"({_pct(sep)}): the evidence cannot separate neighbouring layers"}
        status = "identified" if b is not None else "matched-unlabelled"
        note = f"matches {top.capture.label()} at {_pct(m.rel_err)} error" + neighbour_note
        if b is None:
            note += "; that capture carries no layer number (pass --layer-ids to label it)"
        return {"status": status, "b": b, "conf": conf, "margin": margin, "match": top, "runner": runner, "note": note}

    def run(self) -> Report:
        num_layers = self._num_layers()
        hidden = self._hidden_size()
        configured = self._configured(num_layers)
        slots = self._split_train(hidden)
        k = len(slots)
        infer = self._label_infer(hidden, configured)
        usable = [c for c in infer if not c.post_norm]
        if not usable:
            widths = sorted({c.width for c in self.infer.captures if c.width})
            raise AlignmentError(
                "the inference side holds no capture of width "
                f"{hidden} (or a multiple of it); widths found: {widths}", path=self.inputs["infer"],
                hint="check --hidden-size, or that INFER is the inference-side dump",
            )
        cands, rows = self._score(slots, usable)
        self.cands, self.train_slots = cands, slots
        decisions = {s: self._decide(s, cands.get(s, [])) for s in range(k)}
        claims, claim_src = self._claims(k, slots, num_layers)
        self._check_data(slots, usable)
        return explain.explain(self, decisions, claims, claim_src, configured, num_layers, hidden, rows, k)

    def _check_data(self, slots: dict[int, list[Capture]], infer: list[Capture]) -> None:
        for s, caps in slots.items():
            c = caps[0]
            if c.boundary is not None and s > 0 and slots[s - 1][0].boundary is not None and c.boundary < slots[s - 1][0].boundary:  # type: ignore[operator]
                self.warnings.append(
                    f"training slots are not in ascending layer order (slot {s - 1} B{slots[s - 1][0].boundary}, slot {s} "
                    f"B{c.boundary}): engines capture in ascending order, so the draft's fc input blocks are permuted"
                )
        first_with: dict[tuple[int, ...], str] = {}
        for c in self.train.captures:
            if c.token_ids and c.group is not None:
                first = first_with.setdefault(c.token_ids, c.group)
                if first != c.group:
                    self.warnings.append(
                        f"training samples {first} and {c.group} hold the same {len(c.token_ids)} tokens "
                        "(the same sample twice?)"
                    )



def _pad(b: list[int], k: int) -> list[int | None]:
    out: list[int | None] = list(b[:k])
    return out + [None] * (k - len(out))


def _checked_load(c: Capture, warnings: list[str]) -> torch.Tensor | None:
    t = c.load()
    if not (t.dtype.is_floating_point):
        warnings.append(f"{c.origin}: integer tensor ({c.dtype}) is not a hidden state; skipped")
        return None
    x = t.float()
    bad = int((~torch.isfinite(x)).sum())
    if bad:
        warnings.append(f"{c.origin}: {bad} NaN/Inf values in the inference capture")
    if x.numel() and float(x.abs().max()) == 0.0:
        warnings.append(f"{c.origin}: the capture is all zeros (nothing was written into it?)")
    elif x.numel():
        zero = _zero_tokens(x)
        if zero:
            warnings.append(f"{c.origin}: {_zero_text(zero, x.shape[0], 'capture')}")
    return x


def _with_values(dump: Dump, side: str, path: str, warnings: list[str]) -> Dump:
    """``dump`` without captures that hold no values, and without token ids that do not fit their tensor."""
    import dataclasses

    keep = []
    for c in dump.captures:
        if c.observation is None and c.shape is not None:
            if len(c.shape) == 0 or 0 in c.shape:
                warnings.append(f"{c.origin}: the {side} tensor holds no hidden state (shape {list(c.shape)}); skipped")
                continue
            if c.token_ids is not None and c.tokens is not None and len(c.token_ids) != c.tokens:
                warnings.append(f"{c.origin}: {len(c.token_ids)} token ids but {c.tokens} tokens in the tensor; "
                                "the ids are not used to align it")
                c = c.replace(token_ids=None)
        keep.append(c)
    if not keep:
        raise AlignmentError(f"the {side} side holds no tensor with a hidden state ({warnings[-1]})", path=path,
                             hint="the dump was not written completely; re-run it")
    return dataclasses.replace(dump, captures=tuple(keep))


def _zero_tokens(x: torch.Tensor) -> int:
    """How many tokens (rows) of ``x`` are exactly zero: a zero norm is never a real hidden state."""
    return int((x.abs().amax(dim=-1) == 0).sum()) if x.numel() else 0


def _zero_text(zero: int, tokens: int, what: str) -> str:
    if zero == tokens:
        return f"the {what} is all zeros (zero norm: nothing was written into it?)"
    return f"{zero} of {tokens} tokens of the {what} are all zeros (zero norm: was it written only partly?)"


def _evidence_cap(values: int) -> float:
    """Highest confidence a match on ``values`` printed numbers can carry: 5 values 0.33, 20 values
    0.67, 100 values 0.91, a whole tensor ~1 (measured on SmolLM2: the spread of the per-token error
    over 5 columns of one token is several times that over a full row)."""
    return values / (values + 10.0) if values > 0 else 0.0


def _pct(x: float) -> str:
    if not math.isfinite(x):
        return "n/a"
    return f"{x * 100:.2g}%" if x < 0.1 else f"{x * 100:.0f}%"
