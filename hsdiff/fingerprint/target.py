"""Is the fingerprint of the served target? Its identity against the target config and the embedding rows beside it."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..arrays import as_f32
from ..comparison import Options
from ..configs import load_config, target_shape
from ..errors import InputError
from ..model import (
    pct,
)
from . import file as fpfile
from .file import config_digest, embedding_digest
from .identify import upper_median
from .sketch import project, projection, references

__all__ = ["WrongTargetError", "target_check"]


class WrongTargetError(InputError):
    """The fingerprint is of another target than the inference side ran (or of another tokenizer)."""


def target_check(fp: fpfile.Fingerprint, config_path: str | os.PathLike | None, opts: Options) -> list[str]:
    """Refuse a fingerprint the stated target contradicts (depth, width, vocabulary; embedding rows when
    the weights sit beside its config); warnings for what differs without deciding."""
    L, H = fp.num_layers, fp.hidden_size
    if opts.num_layers and opts.num_layers != L:
        raise WrongTargetError(
            f"the fingerprint is of a {L}-layer target, but `num_layers` says {opts.num_layers}",
            path=fp.path,
            hint="check against the fingerprint of the served target, or drop `num_layers`",
            options=("num_layers",),
        )
    if opts.hidden_size and opts.hidden_size != H:
        raise WrongTargetError(
            f"the fingerprint is of a {H}-wide target, but `hidden_size` says {opts.hidden_size}",
            path=fp.path,
            hint="check against the fingerprint of the served target, or drop `hidden_size`",
            options=("hidden_size",),
        )
    if config_path is None:
        return []
    cfg = load_config(config_path)
    shape_ = target_shape(cfg)
    vocab = cfg.get("vocab_size") or (cfg.get("text_config") or {}).get("vocab_size")
    said = [
        (what, mine, theirs)
        for what, mine, theirs in (
            ("layers", L, shape_.num_layers),
            ("hidden size", H, shape_.hidden_size),
            ("vocabulary", fp.vocab_size, vocab),
        )
        if mine is not None and theirs is not None and int(mine) != int(theirs)
    ]
    if said:
        what = ", ".join(f"{w} {a} against {b}" for w, a, b in said)
        raise WrongTargetError(
            f"the fingerprint is of another target than {config_path} ({what})",
            path=fp.path,
            hint="record the fingerprint on the target the engine serves (hsdiff fingerprint --model TARGET)",
        )
    warnings = []
    digest = fp.target.get("config_digest")
    if digest and config_digest(cfg) != digest:
        warnings.append(
            f"the target config {config_path} differs from the one the fingerprint was recorded with (same depth, "
            "width and vocabulary): the values decide whether it is the same target"
        )
    warnings += _embedding_check(fp, Path(config_path))
    return warnings


def _embedding_check(fp: fpfile.Fingerprint, config_path: Path) -> list[str]:
    """The target's embedding rows of the probe tokens, read from safetensors weights beside its config,
    against the fingerprint's B0 (by value) and its digest (bit for bit)."""
    folder = config_path.parent if config_path.is_file() else config_path
    rows = _read_embedding(folder, sorted({int(t) for t in fp.probe_ids.tolist()}))
    if rows is None:
        return []
    ids, emb = rows
    digest = fp.target.get("embedding_digest")
    if digest and embedding_digest(emb) == digest:
        return []
    p = projection(fp.hidden_size, fp.dim, fp.seed)
    index = {t: i for i, t in enumerate(ids)}
    tokens = np.arange(fp.tokens)
    mine = references(np.asarray(fp.sketches[0]), np.asarray(fp.norms[0]))
    theirs = project(emb[[index[int(t)] for t in fp.probe_ids.tolist()]], p)
    unit = mine / np.maximum(np.linalg.norm(mine, axis=1, keepdims=True), 1e-30)
    other = theirs / np.maximum(np.linalg.norm(theirs, axis=1, keepdims=True), 1e-30)
    err = upper_median(np.linalg.norm(unit - other, axis=1)[tokens])
    if err > 0.10:  # a scale (Gemma's sqrt(H)) is no difference; other directions are other weights
        raise WrongTargetError(
            f"the fingerprint is of another target: the embedding rows of its probe tokens in {folder} differ from "
            f"its B0 by {pct(err)}",
            path=fp.path,
            hint="record the fingerprint on the target the engine serves (hsdiff fingerprint --model TARGET)",
        )
    return [f"the embedding rows in {folder} equal the fingerprint's B0 within {pct(err)}, not bit for bit"]


def _read_embedding(folder: Path, ids: list[int]) -> tuple[list[int], np.ndarray] | None:
    from ..readers._container import open_table

    for f in sorted(folder.glob("*.safetensors")):
        if fpfile.is_fingerprint(f):
            continue
        try:
            table = open_table(f, "safetensors")
        except Exception:  # noqa: BLE001 - weights hsdiff cannot read say nothing about the target
            continue
        for name, e in table.entries.items():
            if name.endswith(("embed_tokens.weight", "wte.weight", "word_embeddings.weight")) and len(e.shape) == 2:
                if ids and max(ids) >= e.shape[0]:
                    raise WrongTargetError(
                        f"the fingerprint's probe tokens reach id {max(ids)}, past the {e.shape[0]}-row embedding of "
                        f"{f}: another tokenizer",
                        hint="record the fingerprint on the target the engine serves",
                    )
                return ids, as_f32(np.asarray(e.loader())[ids])
    return None
