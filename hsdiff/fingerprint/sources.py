"""A fingerprint from an all-layer dump already on disk (``hsdiff capture``'s output): no forward pass;
and where a fingerprint may be written."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..arrays import as_f32
from ..configs import is_draft_config, load_config, target_shape
from ..errors import InputError
from ..model import INFER, TRAIN, Capture, Dump
from ..readers import scan
from . import file as fpfile
from .probes import PROBE_MAX, PROBE_TOKENS, Pass, Probes, probes_from_dump
from .recording import build, draft_info, identify_training
from .sketch import DIM, SEED

__all__ = ["from_dump", "check_out", "train_dump", "file_digest", "source_name"]


def train_dump(train: str | os.PathLike | Dump | None) -> Dump | None:
    if train is None or isinstance(train, Dump):
        return train
    return scan(train, TRAIN, format_name="train")


def source_name(train: str | os.PathLike | Dump | None) -> str:
    """How the fingerprint names the training dump: its folder's name, never the full path (the file travels
    with the draft, and the path is the recording machine's)."""
    if train is None or isinstance(train, Dump):
        return "the training dump" if train is not None else ""
    return Path(train).name or str(train)


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
    tdump = train_dump(train)
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
            tdump,
            probes,
            passes,
            hidden,
            L,
            train_engine=train_engine,
            model_family=model_family,
            source=source_name(train),
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


def file_digest(path: Path) -> str | None:
    if not path.is_file():
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()
