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

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..arrays import as_f32, row_norms
from ..comparison import slots as slot_cut
from ..configs import load_draft, stated_ids, target_shape
from ..errors import AlignmentError, InputError
from ..model import Capture, Dump
from ..rules.kinds import kind_from_config
from ..sinks import ordinary_mask
from . import file as fpfile
from .align import place
from .file import config_digest, embedding_digest
from .identify import identify
from .probes import Pass, Probes, first_of_probe, positions
from .sketch import DIM, SEED, errors, projection, references, sketch

__all__ = ["build", "identify_training", "target_identity", "noise_floor", "draft_info"]

log = logging.getLogger("hsdiff.fingerprint")


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
    first_of = first_of_probe(probes)
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
                    first_of[j][i0 + o : i1 + o] == positions(probes, j)[i0 + o : i1 + o]
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
