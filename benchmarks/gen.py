"""Large benchmark dumps derived from the real SmolLM2 hidden states in fixtures/smollm2/states.

Random tensors lack what makes real hidden states hard to compare (massive activations on the
attention-sink token, residual-stream norms growing with depth, neighbouring layers alike), so
every value here is a fixed linear recipe applied to real states:

- **tokens**: positions 0..23 are the real rows of a sample (token 0 = the sink, the shared chat
  prefix); every later token is a weighted sum of three real ordinary rows (Dirichlet weights,
  one scale per token), *the same recipe at every boundary*, so depth growth and the similarity
  of neighbouring boundaries are those of the real model;
- **width**: H = 576·k is reached with k blocks, each a signed permutation of the 576 real
  channels fed by its own recipe, so outlier channels stay a few large channels (never smeared
  over all of H by a rotation) and per-token norms and errors keep their real proportions;
- **sides**: the training side applies the recipe to the fp32 model's states, the inference side
  to the bf16 model's, so the difference between the sides is the real bf16 noise.

Files are written once into a cache folder outside the repository (``HSDIFF_BENCH_CACHE``,
default ``~/.cache/hsdiff-bench``), named by shape, recipe seed and generator version, and reused.
The inference side is an all-layer stack ``hidden_states`` [L+1, T, H] bf16 safetensors written
one boundary at a time (bounded memory); the training side is a SpecForge ``data_{i}.ckpt``
(``torch.save`` of ``input_ids``, ``loss_mask``, ``hidden_state`` [1, T, H] post-norm,
``aux_hidden_state`` [1, T, 3H]), bf16 as SpecForge writes it from a bf16 target (fp32 on request).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parent.parent
STATES = ROOT / "fixtures" / "smollm2" / "states"
VERSION = 1
SRC_H = 576
PREFIX = 24  # real rows kept verbatim at the start of every sample
TRAIN_B = (2, 15, 27)  # SpecForge default O [1, L//2-1, L-4] on L = 30 -> boundaries 2, 15, 27
TRAIN_IDS = "1,14,26"  # the same, as SGLang (O-index) ids
MATCH = 0.73  # where the matching sample sits in a training set (relative position)


def cache_dir() -> Path:
    return Path(os.environ.get("HSDIFF_BENCH_CACHE", Path.home() / ".cache" / "hsdiff-bench"))


@dataclass(frozen=True)
class Source:
    fp32: torch.Tensor  # [B, R, 576] real rows of the fp32 model, R = 3 samples x 24 tokens
    bf16: torch.Tensor  # [B, R, 576] the same rows from the bf16 model, as fp32
    ids: torch.Tensor  # [3, 24]
    ordinary: torch.Tensor  # row numbers of ordinary tokens (no sink-like norms)
    norm_weight: torch.Tensor  # [576] the final RMSNorm weight, recovered from the states


def load_source() -> Source:
    torch.set_num_threads(1)  # generation runs beside other work: one core, no waiting on a busy second thread
    samples = [load_file(str(STATES / f"sample-{i}.safetensors")) for i in range(3)]
    fp = torch.cat([s["fp32.boundaries"] for s in samples], dim=1).float()
    bf = torch.cat([s["bf16.boundaries"] for s in samples], dim=1).float()
    mid = fp[fp.shape[0] // 2].norm(dim=1)
    pos = torch.arange(fp.shape[1]) % PREFIX
    ordinary = torch.nonzero((mid < 4 * mid.median()) & (pos > 0)).flatten()
    last = samples[0]["fp32.boundaries"][-1].float()
    final = samples[0]["fp32.final"].float()
    rms = last.pow(2).mean(dim=1, keepdim=True).add(1e-5).sqrt()
    weight = (final * rms / last).median(dim=0).values
    ids = torch.stack([s["input_ids"] for s in samples])
    return Source(fp, bf, ids, ordinary, weight)


@dataclass(frozen=True)
class Recipe:
    """How each token of one synthetic sample is made from real rows (same at every boundary)."""

    mix: torch.Tensor  # [k, T, R] per block, each token's weights over the R real rows (3 non-zero)
    perms: torch.Tensor  # [k, 576]
    signs: torch.Tensor  # [k, 576]
    ids: torch.Tensor  # [T]
    hidden: int


def recipe(src: Source, tokens: int, hidden: int, seed: int) -> Recipe:
    g = torch.Generator().manual_seed(seed)
    k = -(-hidden // SRC_H)
    sample = seed % 3
    rows = src.ordinary[torch.randint(len(src.ordinary), (k, tokens, 3), generator=g)]
    w = -torch.log(torch.rand((k, tokens, 3), generator=g))  # Dirichlet(1, 1, 1)
    w = w / w.sum(dim=2, keepdim=True)
    n = min(PREFIX, tokens)
    rows[:, :n] = (sample * PREFIX + torch.arange(n)).view(1, n, 1)
    w[:, :n] = torch.tensor([1.0, 0.0, 0.0])
    mix = torch.zeros(k, tokens, src.fp32.shape[1]).scatter_add_(2, rows, w)
    mid = src.fp32[src.fp32.shape[0] // 2]
    want = (mid.norm(dim=1)[rows] * w).sum(dim=2)  # the weighted norm of the rows mixed
    mix *= (want / torch.matmul(mix, mid).norm(dim=-1)).unsqueeze(-1)  # keep real norms
    ids = torch.randint(100, 49152, (tokens,), generator=g)
    ids[:n] = src.ids[sample, :n]
    perms = torch.stack([torch.randperm(SRC_H, generator=g) for _ in range(k)])
    signs = torch.randint(0, 2, (k, SRC_H), generator=g).float().mul(2).sub(1)
    return Recipe(mix, perms, signs, ids, hidden)


def boundary(src: Source, r: Recipe, b: int, side: str, start: int = 0, stop: int | None = None) -> torch.Tensor:
    """Boundary b of the synthetic sample, tokens [start, stop), as fp32 [T, H]."""
    base = (src.fp32 if side == "fp32" else src.bf16)[b]
    blocks = torch.stack([base[:, p] * sg for p, sg in zip(r.perms, r.signs)])  # [k, R, 576]
    out = torch.bmm(r.mix[:, start:stop], blocks)  # [k, T, 576]
    return out.permute(1, 0, 2).reshape(out.shape[1], -1)[:, : r.hidden].contiguous()


def final(src: Source, r: Recipe, last: torch.Tensor) -> torch.Tensor:
    weight = torch.cat([src.norm_weight[p] for p in r.perms])[: r.hidden]
    return last * last.pow(2).mean(dim=1, keepdim=True).add(1e-5).rsqrt() * weight


def num_boundaries(src: Source) -> int:
    return int(src.fp32.shape[0])


def write_stack(
    path: Path, planes: Iterator[torch.Tensor], shape: tuple[int, int, int], ids: torch.Tensor | None
) -> None:
    """Write a safetensors file with ``hidden_states`` (bf16, one plane at a time) and ``input_ids``."""
    nbytes = shape[0] * shape[1] * shape[2] * 2
    header: dict = {"__metadata__": {"index": "boundary", "source": "SmolLM2-135M states, benchmarks/gen.py"}}
    offset = 0
    if ids is not None:
        header["input_ids"] = {"dtype": "I64", "shape": [len(ids)], "data_offsets": [0, 8 * len(ids)]}
        offset = 8 * len(ids)
    header["hidden_states"] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        if ids is not None:
            f.write(ids.to(torch.int64).numpy().tobytes())
        for plane in planes:
            f.write(plane.to(torch.bfloat16).view(torch.int16).numpy().tobytes())
    tmp.replace(path)


def write_specforge(path: Path, src: Source, r: Recipe, dtype: torch.dtype) -> None:
    slots = [boundary(src, r, b, "fp32") for b in TRAIN_B]
    last = boundary(src, r, num_boundaries(src) - 1, "fp32")
    obj = {
        "input_ids": r.ids.clone(),
        "loss_mask": (torch.arange(len(r.ids)) >= PREFIX).long(),
        "hidden_state": final(src, r, last).to(dtype).unsqueeze(0),
        "aux_hidden_state": torch.cat(slots, dim=1).to(dtype).unsqueeze(0),
    }
    del slots, last
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    torch.save(obj, tmp)
    tmp.replace(path)


@dataclass(frozen=True)
class Pair:
    train: Path
    infer: Path

    @property
    def nbytes(self) -> int:
        return sum(f.stat().st_size for f in files(self.train)) + sum(f.stat().st_size for f in files(self.infer))


def files(p: Path) -> list[Path]:
    return sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]


def disk_usage(d: Path) -> int:
    """Bytes of the files under d, hard links counted once."""
    sizes = {}
    for f in files(d):
        st = f.stat()
        sizes[(st.st_dev, st.st_ino)] = st.st_size
    return sum(sizes.values())


def _infer_stack(path: Path, src: Source, r: Recipe, start: int, stop: int, with_ids: bool) -> None:
    if path.exists():
        return
    nb = num_boundaries(src)
    planes = (boundary(src, r, b, "bf16", start, stop) for b in range(nb))
    write_stack(path, planes, (nb, stop - start, r.hidden), r.ids[start:stop] if with_ids else None)


def pair(src: Source, tokens: int, hidden: int, *, train_dtype: str = "bf16", seed: int = 7) -> Pair:
    """One sample: an all-layer inference stack against a SpecForge training file, aligned, with ids."""
    d = cache_dir() / f"v{VERSION}-pair-T{tokens}-H{hidden}-{train_dtype}-s{seed}"
    r = recipe(src, tokens, hidden, seed)
    train = d / "train" / "rows_0-5000" / "data_0.ckpt"
    if not train.exists():
        write_specforge(train, src, r, getattr(torch, {"bf16": "bfloat16", "fp32": "float32"}[train_dtype]))
    infer = d / "infer" / "hidden_states.safetensors"
    _infer_stack(infer, src, r, 0, tokens, True)
    return Pair(train.parent.parent, infer)


def window(src: Source, tokens: int, width: int, offset: int, hidden: int, *, seed: int = 11) -> tuple[Pair, Pair]:
    """A ``width``-token window at ``offset`` of a ``tokens``-token sample: without ids, and with."""
    d = cache_dir() / f"v{VERSION}-window-T{tokens}-W{width}-at{offset}-H{hidden}-s{seed}"
    r = recipe(src, tokens, hidden, seed)
    train = d / "train" / "rows_0-5000" / "data_0.ckpt"
    if not train.exists():
        write_specforge(train, src, r, torch.bfloat16)
    out = []
    for with_ids in (False, True):
        infer = d / ("infer-ids" if with_ids else "infer-noids") / "hidden_states.safetensors"
        infer.parent.mkdir(parents=True, exist_ok=True)
        _infer_stack(infer, src, r, offset, offset + width, with_ids)
        out.append(Pair(train.parent.parent, infer))
    return out[0], out[1]


def sample_set(src: Source, counts: tuple[int, ...], tokens: int, hidden: int) -> dict[int, Pair]:
    """Training sets of ``n`` SpecForge samples (n in counts) holding one sample of the inference run.

    The largest set is generated; the smaller ones hard-link its first files (no extra disk), each
    with the matching sample at the same relative position. Sample lengths vary around ``tokens``.
    """
    top = max(counts)
    d = cache_dir() / f"v{VERSION}-samples-N{top}-T{tokens}-H{hidden}"
    pool = d / "pool"
    lengths = torch.randint(tokens // 2, tokens * 3 // 2 + 1, (top,), generator=torch.Generator().manual_seed(3))
    for i in range(top):
        f = pool / f"data_{i}.ckpt"
        if not f.exists():
            write_specforge(f, src, recipe(src, int(lengths[i]), hidden, 1000 + i), torch.bfloat16)
    out = {}
    for n in counts:
        m = int(n * MATCH)  # the sample the inference run replayed
        rows = d / f"N{n}" / "train" / "rows_0-5000"
        rows.mkdir(parents=True, exist_ok=True)
        for i in range(n):
            f = rows / f"data_{i}.ckpt"
            if not f.exists():
                os.link(pool / f"data_{i}.ckpt", f)
        infer = d / f"N{n}" / "infer" / "hidden_states.safetensors"
        infer.parent.mkdir(parents=True, exist_ok=True)
        _infer_stack(infer, src, recipe(src, int(lengths[m]), hidden, 1000 + m), 0, int(lengths[m]), True)
        out[n] = Pair(rows.parent, infer)
    return out
