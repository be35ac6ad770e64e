"""Recording a fingerprint: every boundary of the target on a few probes, sketched; the training slots
identified by value; the target's identity.

The states come from a Hugging Face model run here (:func:`from_model`, :func:`record`: the ``capture``
extra), or from an all-layer dump that is already on disk (:func:`from_dump`: no forward at all, e.g.
``hsdiff capture``'s output). Either way :func:`build` does the rest with numpy alone:

* the probes: by default the first samples of the training dump (their first tokens, up to
  :data:`PROBE_TOKENS` in all), so that the engine captures users already make of training samples
  (``hsdiff request SAMPLE``) can be checked; else the probes given, or :data:`BUILTIN_TEXTS`;
* per boundary B0…BL and the final post-norm state, per probe token, the norm and the unit sketch
  (:mod:`.sketch`) of the *reference* pass — by default in the dtype engines serve the target in (bf16):
  an engine keeps its residual stream in that dtype, and on a deep target the rounding of the
  residual moves every boundary a fraction of a layer, the same way in any engine, but not in fp32;
* the noise floor: per boundary, the median error between the reference pass and a pass in other
  numerics (fp32 against bf16), in sketch space;
* the training slots, identified by value (:func:`hsdiff.fingerprint.identify.identify`, on whole rows)
  against every boundary of each pass, the better-fitting pass deciding (a SpecForge dump captured through
  SGLang in bf16 fits the bf16 pass, an fp32 Hugging Face dump the fp32 one);
* the target's identity: ``model_type``, depth, width, vocabulary, and digests of the config and of the
  embedding rows of the probe tokens.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..arrays import as_f32, row_norms
from ..comparison import slots as slot_cut
from ..configs import is_draft_config, load_config, load_draft, stated_ids, target_shape
from ..errors import AlignmentError, InputError
from ..model import INFER, TRAIN, Capture, Dump
from ..readers import scan
from ..rules.kinds import kind_from_config
from ..sinks import ordinary_mask
from . import file as fpfile
from .align import place
from .file import config_digest, embedding_digest
from .identify import identify
from .sketch import DIM, SEED, errors, projection, references, sketch

__all__ = [
    "PROBE_TOKENS",
    "PROBE_MAX",
    "BUILTIN_TEXTS",
    "Probes",
    "Pass",
    "probes_from_dump",
    "builtin_probes",
    "build",
    "identify_training",
    "target_identity",
    "from_dump",
    "from_model",
    "record",
    "model_states",
    "check_out",
]

log = logging.getLogger("hsdiff.fingerprint")

#: Probe tokens a fingerprint keeps by default: 256 tokens of 64 sketch numbers are 34 kB per boundary.
PROBE_TOKENS = 256
#: Most tokens taken from one probe (a long sample gives its first tokens: in a causal model they are the
#: same states in any capture of the whole sample).
PROBE_MAX = 128
#: Probes when no training dump is at hand: plain prose, tokenised with the target's tokenizer.
BUILTIN_TEXTS = (
    "The river that runs through the old town was once the only road to the sea. Merchants brought salt, "
    "cloth and news up the valley every spring, and the bridge they built in stone still carries the market "
    "road today.",
    "To make bread, mix flour, water, salt and a little yeast, knead the dough until it is smooth, and leave "
    "it to rise in a warm place for two hours. Shape the loaf, let it rise again, and bake it in a hot oven.",
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n"
    "print([fibonacci(i) for i in range(10)])  # the first ten numbers of the sequence\n",
    "Question: a train leaves at nine and travels at sixty miles an hour; a second train leaves the same "
    "station at ten at eighty miles an hour. When does the second train catch up? Answer: at one o'clock.",
)


@dataclass(frozen=True)
class Probes:
    """The probes of a fingerprint: names, token ids and where they came from."""

    names: tuple[str, ...]
    ids: tuple[tuple[int, ...], ...]
    source: str

    @property
    def tokens(self) -> int:
        return sum(len(p) for p in self.ids)


@dataclass(frozen=True)
class Pass:
    """One forward pass over the probes: per probe, the states ``[rows, T, H]`` float32 (rows: B0..BL, and
    the final post-norm state last when ``final``) and how they were computed (``dtype``, ``how``)."""

    states: tuple[np.ndarray, ...]
    dtype: str
    how: str = ""
    final: bool = True


def embedding_ids(probes: Probes) -> list[int]:
    """The token ids whose embedding rows the digest covers: the probes' distinct ids, ascending."""
    return sorted({t for p in probes.ids for t in p})


def target_identity(
    config: Mapping[str, Any] | None,
    num_layers: int,
    hidden_size: int,
    *,
    embedding: np.ndarray | None = None,
    tokenizer_digest: str | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """The target's identity as a fingerprint states it (``embedding``: the rows of :func:`embedding_ids`)."""
    cfg = dict(config or {})
    shape = target_shape(cfg) if cfg else None
    vocab = cfg.get("vocab_size") or (cfg.get("text_config") or {}).get("vocab_size")
    return {
        "name": name,
        "model_type": None if shape is None else shape.model_type,
        "num_hidden_layers": int(num_layers),
        "hidden_size": int(hidden_size),
        "vocab_size": None if vocab is None else int(vocab),
        "config_digest": config_digest(cfg),
        "embedding_digest": None if embedding is None else embedding_digest(embedding),
        "tokenizer_digest": tokenizer_digest,
    }


# ---------------------------------------------------------------------------------------------- probes


def probes_from_dump(dump: Dump, budget: int = PROBE_TOKENS, per_probe: int = PROBE_MAX, max_probes: int = 8) -> Probes:
    """The first samples of a training dump (natural order of their names), each up to ``per_probe`` of its
    first tokens, until ``budget`` tokens."""
    samples: dict[str, tuple[int, ...]] = {}
    for c in dump.captures:
        if c.token_ids and c.group is not None:
            samples.setdefault(c.group, tuple(int(t) for t in c.token_ids))
    if not samples:
        raise InputError(
            "the training dump holds no token ids to take probes from",
            hint="give a dump that stores input_ids (SpecForge .ckpt, ModelOpt .pt), or `probes=builtin`",
            options=("probes",),
        )
    names: list[str] = []
    ids: list[tuple[int, ...]] = []
    left = budget
    for name in sorted(samples, key=_natural):
        if left <= 0 or len(names) >= max_probes:
            break
        take = samples[name][: min(per_probe, left)]
        if len(take) < 2:
            continue
        names.append(name)
        ids.append(take)
        left -= len(take)
    return Probes(tuple(names), tuple(ids), "the training dump")


def builtin_probes(tokenize: Callable[[str], Sequence[int]], budget: int = PROBE_TOKENS) -> Probes:
    """:data:`BUILTIN_TEXTS` tokenised by ``tokenize``, each up to ``budget / len(texts)`` tokens."""
    per = max(8, budget // len(BUILTIN_TEXTS))
    ids = tuple(tuple(int(t) for t in tokenize(text))[:per] for text in BUILTIN_TEXTS)
    return Probes(tuple(f"builtin-{i}" for i in range(len(ids))), ids, "built-in texts")


def _natural(name: str) -> tuple:
    import re

    return tuple(int(p) if p.isdecimal() else p for p in re.split(r"(\d+)", name))


# ---------------------------------------------------------------------------------------------- building


def _sketch_pass(states: Sequence[np.ndarray], p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``norms`` [rows, N] and ``sketches`` [rows, N, d] of a pass's states, probes one after another."""
    norms, units = [], []
    for s in states:
        rows, t, h = s.shape
        n, u = sketch(np.ascontiguousarray(s.reshape(rows * t, h), dtype=np.float32), p)
        norms.append(n.reshape(rows, t))
        units.append(u.reshape(rows, t, -1))
    return np.concatenate(norms, axis=1), np.concatenate(units, axis=1)


def _ordinary_tokens(norms: np.ndarray, first_of: np.ndarray) -> np.ndarray:
    """Tokens of a stored pass that count: no attention sink at any boundary of its probe, counted once."""
    mask = first_of == np.arange(first_of.size)
    for b in range(norms.shape[0]):
        mask &= ordinary_mask(norms[b])
    return mask


def noise_floor(
    ref_norms: np.ndarray, ref_units: np.ndarray, other: Pass, p: np.ndarray, mask: np.ndarray
) -> list[float | None]:
    """Per stored row, the upper median sketch-space error of ``other`` against the reference on ``mask``."""
    o_norms, o_units = _sketch_pass(other.states, p)
    out: list[float | None] = []
    for b in range(ref_norms.shape[0]):
        if b >= o_norms.shape[0]:
            out.append(None)
            continue
        r = references(ref_units[b][mask], ref_norms[b][mask])
        y = references(o_units[b][mask], o_norms[b][mask])
        e = errors(y, r[None])[0]
        e = e[np.isfinite(e)]
        out.append(round(float(np.sort(e)[e.size // 2]), 6) if e.size else None)
    return out


def build(
    probes: Probes,
    reference: Pass,
    *,
    config: Mapping[str, Any] | None = None,
    num_layers: int | None = None,
    noise: Pass | None = None,
    training: tuple[list[fpfile.TrainingSlot], dict[str, Any]] | None = None,
    draft: Mapping[str, Any] | None = None,
    embedding: np.ndarray | None = None,
    tokenizer_digest: str | None = None,
    name: str | None = None,
    source: str = "model",
    dim: int = DIM,
    seed: int = SEED,
) -> fpfile.Fingerprint:
    """A fingerprint from the reference pass over ``probes`` (and a ``noise`` pass for the noise floor;
    ``training``: the slots :func:`identify_training` found, and where from)."""
    if len(reference.states) != len(probes.ids):
        raise ValueError(f"{len(reference.states)} probe states for {len(probes.ids)} probes")
    rows = {s.shape[0] for s in reference.states}
    widths = {s.shape[2] for s in reference.states}
    if len(rows) != 1 or len(widths) != 1:
        raise InputError("the probes' states differ in depth or width", hint="record every probe on one target")
    n_rows, hidden = rows.pop(), widths.pop()
    L = n_rows - 1 - (1 if reference.final else 0)
    if num_layers is not None and num_layers != L:
        raise InputError(f"the states hold {L + 1} boundaries, but the target has {num_layers} layers")
    for s, ids in zip(reference.states, probes.ids):
        if s.shape[1] != len(ids):
            raise ValueError(f"states of {s.shape[1]} tokens for a probe of {len(ids)}")
    p = projection(hidden, dim, seed)
    norms, units = _sketch_pass(reference.states, p)
    meta = fpfile.document(
        target=target_identity(config, L, hidden, embedding=embedding, tokenizer_digest=tokenizer_digest, name=name),
        dim=dim,
        seed=seed,
        final=reference.final,
        probes=[{"name": n, "tokens": len(ids)} for n, ids in zip(probes.names, probes.ids)],
        probe_source=probes.source,
        reference={"dtype": reference.dtype, "source": source, "how": reference.how},
        noise_floor=None,
        training=None if training is None else {**training[1], "slots": [s.to_dict() for s in training[0]]},
        draft=draft,
    )
    meta["boundaries"]["count"] = n_rows
    fp = fpfile.Fingerprint(meta, np.asarray([t for ids in probes.ids for t in ids], dtype=np.int32), norms, units)
    if noise is not None:
        mask = _ordinary_tokens(norms, fp.first_of)
        meta["noise_floor"] = {
            "method": f"{noise.dtype} against the {reference.dtype} reference"
            + (f" ({noise.how})" if noise.how else ""),
            "per_boundary": noise_floor(norms, units, noise, p, mask),
        }
    return fp


# ---------------------------------------------------------------------------------------------- training


def _slot_rows(caps: Sequence[Capture], probes: Probes) -> list[tuple[int, int, int, int, Capture]]:
    """Per training capture of a slot, where it sits among the probes: (probe, offset, start, stop, capture)."""
    out = []
    for c in caps:
        if not c.token_ids:
            continue
        at = place(c.token_ids, probes.ids)
        if at is not None:
            out.append((at.probe, at.offset, at.start, at.stop, c))
    return out


def _full_errors(rows: np.ndarray, states: np.ndarray) -> np.ndarray:
    """Per token the relative error of ``rows`` [n, H] against every row of ``states`` [B, n, H], [B, n]."""
    out = np.empty((states.shape[0], rows.shape[0]), dtype=np.float32)
    for b in range(states.shape[0]):
        ref = states[b]
        den = row_norms(ref)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[b] = np.where(den > 0, row_norms(rows - ref) / den, np.inf)
    return out


def identify_training(
    train: Dump,
    probes: Probes,
    passes: Sequence[Pass],
    hidden_size: int,
    num_layers: int,
    *,
    train_engine: str = "specforge",
    model_family: str | None = None,
    source: str = "",
) -> tuple[list[fpfile.TrainingSlot], dict[str, Any]]:
    """Each slot of the training dump identified by value against every boundary of each pass (whole rows,
    on the probe tokens the dump holds; the pass it fits better decides), and what the training side's labels
    say (its ``config.json`` read as ``train_engine`` reads it)."""
    cut = slot_cut.split_train(train, hidden_size)
    k = len(cut)
    if not k:
        raise AlignmentError("the training dump holds no slot of the target's hidden size", path=source or None)
    final_rows = {num_layers + 1} if passes and passes[0].final else set()
    first_of = _first_of(probes)
    slots: list[fpfile.TrainingSlot] = []
    for s in range(k):
        placed = _slot_rows(cut[s], probes)
        best: tuple[float, Any] | None = None
        for ps in passes:
            errs, pooled = [], 0
            for j, o, i0, i1, c in placed:
                x = as_f32(c.array()[i0:i1])
                ref = ps.states[j][:, i0 + o : i1 + o]
                keep = ordinary_mask(row_norms(x)) & (
                    first_of[j][i0 + o : i1 + o] == _positions(probes, j)[i0 + o : i1 + o]
                )
                if not keep.any():
                    continue
                errs.append(_full_errors(x[keep], ref[:, keep]))
                pooled += int(keep.sum())
            if not errs:
                continue
            found = identify(np.concatenate(errs, axis=1))
            if best is None or found.error < best[0]:
                best = (found.error, found)
        if best is None:
            slots.append(fpfile.TrainingSlot(s, None, "none"))
            continue
        f = best[1]
        ok = f.decisive and f.error <= 0.10
        slots.append(
            fpfile.TrainingSlot(
                s,
                f.boundary if ok else None,
                "observed" if ok else "none",
                f.confidence if ok else 0.0,
                f.share,
                f.tokens,
                f.error,
                f.against,
                f.against_error,
            )
        )
        if f.boundary in final_rows and ok:
            log.info("training slot %d holds the final post-norm state", s)
    claims, claim_src = slot_cut.claims(k, cut, train, None, train_engine, num_layers, model_family, None, None)
    labels = {"boundaries": list(claims), "source": claim_src} if any(c is not None for c in claims) else None
    # a slot the values left open keeps what the labels say, marked as such
    slots = [
        s
        if s.boundary is not None or labels is None or claims[s.slot] is None
        else fpfile.TrainingSlot(
            s.slot, claims[s.slot], "labelled", 0.0, s.share, s.tokens, s.error, s.runner_up, s.runner_up_error
        )
        for s in slots
    ]
    return slots, {"source": source or None, "labels": labels, "engine": train_engine}


def _first_of(probes: Probes) -> list[np.ndarray]:
    """Per probe, per position: the global index of the first stored token with the same prefix."""
    starts = np.cumsum([0] + [len(p) for p in probes.ids])
    out = []
    for j, p in enumerate(probes.ids):
        first = starts[j] + np.arange(len(p))
        set_ = np.zeros(len(p), dtype=bool)
        for q in range(j):
            other = probes.ids[q]
            n = min(len(p), len(other))
            diff = np.flatnonzero(np.asarray(p[:n]) != np.asarray(other[:n]))
            cp = int(diff[0]) if diff.size else n
            take = (~set_) & (np.arange(len(p)) < cp)
            first[take] = starts[q] + np.arange(len(p))[take]
            set_ |= take
        out.append(first)
    return out


def _positions(probes: Probes, j: int) -> np.ndarray:
    start = sum(len(p) for p in probes.ids[:j])
    return start + np.arange(len(probes.ids[j]))


def draft_info(draft_config: str | os.PathLike | None, engine: str = "specforge") -> dict[str, Any] | None:
    """The draft as a fingerprint states it: kind, ids as configured and where (``None`` without one)."""
    if draft_config is None:
        return None
    cfg, path = load_draft(draft_config)
    stated = stated_ids(cfg, ints_only=True)
    return {
        "config": path.name,
        "kind": kind_from_config(cfg).key,
        "architectures": [str(a) for a in cfg.get("architectures") or []],
        "ids": None if stated is None else [int(i) for i in stated[1]],
        "key": None if stated is None else stated[0],
    }


# ---------------------------------------------------------------------------------------------- sources


def _train_dump(train: str | os.PathLike | Dump | None) -> Dump | None:
    if train is None or isinstance(train, Dump):
        return train
    return scan(train, TRAIN, format_name="train")


def _configs_from(dump: Dump | None) -> dict[str, Any] | None:
    for _, cfg in dump.configs if dump is not None else ():
        if not is_draft_config(cfg) and cfg.get("num_hidden_layers"):
            return cfg
    return None


def from_dump(
    path: str | os.PathLike,
    *,
    train: str | os.PathLike | Dump | None = None,
    draft_config: str | os.PathLike | None = None,
    noise_from: str | os.PathLike | None = None,
    target_config: str | os.PathLike | None = None,
    num_layers: int | None = None,
    train_engine: str = "specforge",
    model_family: str | None = None,
    budget: int = PROBE_TOKENS,
    dim: int = DIM,
    seed: int = SEED,
) -> fpfile.Fingerprint:
    """A fingerprint from an all-layer dump on disk (``hsdiff capture``'s output, or any dump holding
    every boundary B0..BL of some sequences, labelled): no forward pass. The probes are the dump's
    sequences (the training dump's samples among them first, when ``train`` is given); ``noise_from``:
    a second all-layer dump of the same tokens in other numerics, for the noise floor."""
    tdump = _train_dump(train)
    config = load_config(target_config) if target_config else None
    dump = scan(path, INFER, format_name="from")
    config = config or _configs_from(dump)
    L = num_layers or (target_shape(config).num_layers if config else None)
    seqs = _sequences(dump, L, path)
    L = L or max(int(b) for m in seqs.values() for b in m if b != "final")
    wanted = probes_from_dump(tdump, budget) if tdump is not None else None
    names: list[str] = []
    ids: list[tuple[int, ...]] = []
    states: list[np.ndarray] = []
    final = all("final" in m for m in seqs.values())
    order = list(seqs)
    if wanted is not None:  # the training samples' sequences, in the dump
        order = []
        for want in wanted.ids:
            hit = next((k for k in seqs if tuple(k[: len(want)]) == want), None)
            if hit is not None:
                order.append(hit)
        if not order:
            raise InputError(
                "the all-layer dump holds none of the training samples' token sequences",
                path=path,
                hint="capture the training samples (hsdiff capture --input TRAIN_SAMPLE), or leave out `train`",
                options=("train",),
            )
    left = budget
    for key in order:
        if left <= 0:
            break
        n = min(len(key), PROBE_MAX, left)
        m = seqs[key]
        rows = [m[b] for b in range(L + 1)] + ([m["final"]] if final else [])
        states.append(np.stack([as_f32(c.array()[:n]) for c in rows]))
        ids.append(tuple(key[:n]))
        names.append(m[0].group or f"sequence-{len(names)}")
        left -= n
    probes = Probes(tuple(names), tuple(ids), "the training dump" if wanted is not None else "the dump's sequences")
    hidden = states[0].shape[-1]
    ref = Pass(tuple(states), _dtype_of(seqs[order[0]][0]), f"read from {Path(path).name}", final)
    passes = [ref]
    noise = None
    if noise_from is not None:
        other = _sequences(scan(noise_from, INFER, format_name="noise_from"), L, noise_from)
        got = []
        for key in ids:
            hit = next((k for k in other if tuple(k[: len(key)]) == key), None)
            if hit is None:
                raise InputError("holds not every probe's tokens", path=noise_from, hint="capture the same samples")
            m = other[hit]
            rows = [m[b] for b in range(L + 1)] + ([m["final"]] if final else [])
            got.append(np.stack([as_f32(c.array()[: len(key)]) for c in rows]))
        noise = Pass(tuple(got), _dtype_of(other[next(iter(other))][0]), f"read from {Path(noise_from).name}", final)
        passes.append(noise)
    training = (
        identify_training(
            tdump, probes, passes, hidden, L, train_engine=train_engine, model_family=model_family, source=str(train)
        )
        if tdump is not None
        else None
    )
    return build(
        probes,
        ref,
        config=config,
        num_layers=L,
        noise=noise,
        training=training,
        draft=draft_info(draft_config),
        source="dump",
        dim=dim,
        seed=seed,
    )


def _dtype_of(c: Capture) -> str:
    return c.dtype


def _sequences(dump: Dump, num_layers: int | None, path: Any) -> dict[tuple[int, ...], dict[Any, Capture]]:
    """The dump's token sequences that hold every boundary: token ids -> {boundary: capture, "final": …}."""
    by: dict[tuple[int, ...], dict[Any, Capture]] = {}
    for c in dump.captures:
        if not c.token_ids or c.is_partial or (c.boundary is None and not c.post_norm) or c.concat:
            continue
        key = tuple(int(t) for t in c.token_ids)
        by.setdefault(key, {})["final" if c.post_norm else c.boundary] = c
    full = {}
    for key, m in by.items():
        bs = sorted(b for b in m if b != "final")
        L = num_layers if num_layers is not None else (bs[-1] if bs else 0)
        if L and all(b in m for b in range(L + 1)):
            full[key] = m
    if not full:
        raise InputError(
            "holds no sequence with every boundary B0..BL and its token ids",
            path=path,
            hint="give an all-layer dump (hsdiff capture --model TARGET --input SAMPLE --out DIR)",
        )
    return full


# ---------------------------------------------------------------------------------------------- models (torch)


def model_states(model: Any, input_ids: Sequence[int]) -> np.ndarray:
    """Every boundary of ``model`` (a Hugging Face causal LM) on ``input_ids``: ``[L + 2, T, H]`` float32,
    B0..B(L-1) from HF's ``output_hidden_states``, B=L from a forward hook on the last decoder layer (its
    output before the final norm; the last call's, should the module run more than once), and the final
    post-norm state last (HF's ``hidden_states[L]``)."""
    from ..arrays import from_torch
    from ..capture import decoder_layers
    from ..extras import require

    torch = require("torch", "capture", "recording a fingerprint")
    device = next(model.parameters()).device
    ids = torch.tensor([int(i) for i in input_ids], dtype=torch.long, device=device)[None]
    layers = decoder_layers(model)
    got: list[Any] = []

    def last(module: Any, args: Any, output: Any) -> None:
        got.append(output[0] if isinstance(output, (tuple, list)) else output)

    handle = layers[-1].register_forward_hook(last)
    try:
        with torch.inference_mode():
            out = model(input_ids=ids, output_hidden_states=True, use_cache=False)
    finally:
        handle.remove()
    hs = out.hidden_states
    L = len(layers)
    if hs is None or len(hs) != L + 1 or not got:
        raise InputError(
            f"the model returned {0 if hs is None else len(hs)} hidden states for {L} decoder layers",
            hint="record from a Hugging Face causal LM that supports output_hidden_states",
        )
    stack = [h[0].to("cpu").float() for h in hs[:L]] + [got[-1][0].to("cpu").float(), hs[L][0].to("cpu").float()]
    return np.ascontiguousarray(from_torch(torch.stack(stack)))


def _embedding_rows(model: Any, ids: Sequence[int]) -> np.ndarray | None:
    try:
        w = model.get_input_embeddings().weight
    except AttributeError:
        return None
    from ..arrays import from_torch

    return np.asarray(from_torch(w[list(ids)].detach().float().cpu()), dtype=np.float32)


def record(
    model: Any,
    input_ids: Sequence[int] | Sequence[Sequence[int]],
    *,
    train: str | os.PathLike | Dump | None = None,
    draft_config: str | os.PathLike | None = None,
    noise_model: Any = None,
    names: Sequence[str] | None = None,
    train_engine: str = "specforge",
    dim: int = DIM,
    seed: int = SEED,
) -> fpfile.Fingerprint:
    """A fingerprint of ``model`` (a Hugging Face causal LM, in the dtype it serves in) on ``input_ids`` (one
    sequence, or a list of them: the probes), e.g. inside a data-generation loop on its first samples.

    ``train``: the training dump written so far, whose slots are identified against the model's boundaries
    (it must hold the probes' samples); ``noise_model``: the same target in other numerics (an fp32 copy of a
    bf16 model) for the noise floor; ``draft_config``: the draft's ``config.json`` (kind and ids).

    >>> fp = hsdiff.fingerprint.record(model, batch["input_ids"][0])          # doctest: +SKIP
    >>> hsdiff.fingerprint.write(fp, "draft/hsdiff-fingerprint.safetensors")  # doctest: +SKIP
    """
    seqs = _as_sequences(input_ids)
    probes = Probes(tuple(names or (f"probe-{i}" for i in range(len(seqs)))), tuple(seqs), "given")
    ref = Pass(tuple(model_states(model, s) for s in seqs), _torch_dtype(model), "Hugging Face forward")
    noise = (
        None
        if noise_model is None
        else Pass(tuple(model_states(noise_model, s) for s in seqs), _torch_dtype(noise_model), "Hugging Face forward")
    )
    return _finish(model, probes, ref, noise, train, draft_config, train_engine, "python", dim, seed)


def _finish(
    model: Any,
    probes: Probes,
    ref: Pass,
    noise: Pass | None,
    train: str | os.PathLike | Dump | None,
    draft_config: str | os.PathLike | None,
    train_engine: str,
    source: str,
    dim: int,
    seed: int,
    tokenizer_digest: str | None = None,
    name: str | None = None,
) -> fpfile.Fingerprint:
    config = model.config.to_dict() if hasattr(model, "config") else None
    hidden = ref.states[0].shape[-1]
    L = ref.states[0].shape[0] - 2
    tdump = _train_dump(train)
    passes = [ref] + ([noise] if noise is not None else [])
    training = (
        identify_training(tdump, probes, passes, hidden, L, train_engine=train_engine, source=str(train))
        if tdump is not None
        else None
    )
    return build(
        probes,
        ref,
        config=config,
        num_layers=L,
        noise=noise,
        training=training,
        draft=draft_info(draft_config),
        embedding=_embedding_rows(model, embedding_ids(probes)),
        tokenizer_digest=tokenizer_digest,
        name=name,
        source=source,
        dim=dim,
        seed=seed,
    )


def _as_sequences(input_ids: Any) -> list[tuple[int, ...]]:
    try:
        import torch

        if isinstance(input_ids, torch.Tensor):
            input_ids = input_ids.tolist()
    except ImportError:  # pragma: no cover - torch is there whenever a model is
        pass
    if isinstance(input_ids, np.ndarray):
        input_ids = input_ids.tolist()
    seqs = list(input_ids)
    if seqs and not isinstance(seqs[0], (list, tuple)):
        seqs = [seqs]
    out = [tuple(int(t) for t in s) for s in seqs]
    if not out or not all(len(s) >= 2 for s in out):
        raise InputError("give at least one probe of two tokens or more", options=("input_ids",))
    return out


def _torch_dtype(model: Any) -> str:
    try:
        return str(next(model.parameters()).dtype).replace("torch.", "")
    except (StopIteration, AttributeError):
        return "unknown"


_DTYPES = {
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
    "fp32": "float32",
    "float32": "float32",
}


def from_model(
    model_dir: str | os.PathLike,
    *,
    train: str | os.PathLike | Dump | None = None,
    draft_config: str | os.PathLike | None = None,
    dtype: str = "bf16",
    noise_dtype: str | None = "fp32",
    probes: str = "train",
    device_map: str | None = None,
    train_engine: str = "specforge",
    budget: int = PROBE_TOKENS,
    dim: int = DIM,
    seed: int = SEED,
) -> fpfile.Fingerprint:
    """A fingerprint of the Hugging Face target in ``model_dir``, run here (CPU, or ``device_map="auto"``).

    ``dtype``: the reference pass's dtype (the one the engine serves in); ``noise_dtype``: the second pass
    for the noise floor (None: none). ``probes``: ``train`` (the training dump's first samples; the default
    when ``train`` is given) or ``builtin`` (:data:`BUILTIN_TEXTS`, tokenised by the model's tokenizer)."""
    from ..extras import require

    torch = require("torch", "capture", "hsdiff fingerprint --model")
    tf = require("transformers", "capture", "hsdiff fingerprint --model")
    d = Path(model_dir)
    if not (d / "config.json").is_file():
        raise InputError(
            "not a Hugging Face model directory (no config.json)",
            path=d,
            hint="give the folder written by save_pretrained (config.json + weights)",
        )
    for name in (dtype, noise_dtype):
        if name is not None and name not in _DTYPES:
            raise InputError(f"unknown dtype {name!r}", hint=f"choose one of: {', '.join(_DTYPES)}", options=("dtype",))
    tdump = _train_dump(train)
    if probes == "train" and tdump is not None:
        chosen = probes_from_dump(tdump, budget)
    elif probes in ("train", "builtin"):
        try:
            tok = tf.AutoTokenizer.from_pretrained(str(d))
        except (OSError, ValueError) as e:
            raise InputError(
                f"no tokenizer for the built-in probes ({e})",
                path=d,
                hint="give the training dump (`train`): its samples are the probes",
                options=("train",),
            ) from None
        chosen = builtin_probes(lambda text: tok(text, add_special_tokens=True)["input_ids"], budget)
    else:
        raise InputError(f"unknown probes {probes!r}", hint="choose train or builtin", options=("probes",))
    kwargs: dict[str, Any] = {"device_map": device_map} if device_map else {}
    model = _load(tf, d, getattr(torch, _DTYPES[noise_dtype or dtype]), kwargs)
    passes: dict[str, Pass] = {}
    order = [noise_dtype, dtype] if noise_dtype and noise_dtype != dtype else [dtype]
    for i, name in enumerate(order):
        if i:
            model.to(getattr(torch, _DTYPES[name]))  # down-cast in place: one copy of the weights at a time
        passes[name] = Pass(tuple(model_states(model, s) for s in chosen.ids), _DTYPES[name], "Hugging Face forward")
    ref = passes[dtype]
    noise = passes.get(noise_dtype) if noise_dtype and noise_dtype != dtype else None
    return _finish(
        model,
        chosen,
        ref,
        noise,
        tdump,
        draft_config,
        train_engine,
        "model",
        dim,
        seed,
        tokenizer_digest=_file_digest(d / "tokenizer.json"),
        name=d.name,
    )


def _load(tf: Any, d: Path, dtype: Any, kwargs: dict[str, Any]) -> Any:
    try:
        model = tf.AutoModelForCausalLM.from_pretrained(str(d), dtype=dtype, **kwargs)
    except TypeError:  # transformers < 4.56 names it torch_dtype
        model = tf.AutoModelForCausalLM.from_pretrained(str(d), torch_dtype=dtype, **kwargs)
    except (OSError, ValueError) as e:
        raise InputError(
            f"transformers cannot load this model ({e})", path=d, hint="check the folder holds config.json and weights"
        ) from None
    return model.eval()


def check_out(path: str | os.PathLike, dumps: Sequence[str | os.PathLike]) -> None:
    """Refuse to write a fingerprint into a dump the user gave (it goes beside the draft, or to ``out``)."""
    o = Path(path).resolve()
    for d in dumps:
        root = Path(d).resolve()
        root = root if root.is_dir() else root.parent
        if root.name.startswith("rows_"):  # SpecForge: train/rows_0-2000/
            root = root.parent
        if o.parent == root or root in o.parents:
            raise InputError(
                f"the fingerprint would be written into the dump {d}",
                path=path,
                hint="write it beside the draft (`draft`) or to `out` outside every dump directory",
                options=("out",),
            )


def _file_digest(path: Path) -> str | None:
    if not path.is_file():
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def reference_rows(fp: fpfile.Fingerprint, rows: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """``P·h`` of stored ``rows`` at stored ``tokens``: [len(rows), len(tokens), d] float32."""
    return references(np.asarray(fp.sketches[rows][:, tokens]), np.asarray(fp.norms[rows][:, tokens]))
