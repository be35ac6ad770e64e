"""Engine-side numerics applied to real fp32 SmolLM2 states: the real bf16 run, fp16, simulated fp8
e4m3 with per-token scaling, and Gaussian noise at levels measured between the fp32 and bf16 runs."""

from __future__ import annotations

from functools import cache

import torch

from .. import builders as B

FP8_MAX = 448.0  # largest finite float8 e4m3fn value
KINDS = ("bf16", "fp16", "fp8", "gauss")


def _rows(x: torch.Tensor) -> torch.Tensor:
    return x.float().reshape(-1, x.shape[-1])


def fp8_e4m3(x: torch.Tensor) -> torch.Tensor:
    """Quantise each token's row to float8 e4m3 with its own scale (amax / 448), then dequantise."""
    r = _rows(x)
    scale = r.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / FP8_MAX
    q = (r / scale).to(torch.float8_e4m3fn).float() * scale
    return q.reshape(x.shape)


def gaussian(x: torch.Tensor, level: float, gen: torch.Generator) -> torch.Tensor:
    """Add noise whose per-token norm is ``level`` times the token's own norm."""
    r = _rows(x)
    n = torch.randn(r.shape, generator=gen)
    n = n / n.norm(dim=-1, keepdim=True) * r.norm(dim=-1, keepdim=True) * level
    return (r + n).reshape(x.shape)


def apply(sample: int, boundary: int, kind: str, level: float, gen: torch.Generator) -> torch.Tensor:
    """[T, H] float32: boundary ``boundary`` of ``sample`` as an engine running ``kind`` would see it."""
    s = B.states(sample)
    if kind == "bf16":
        x = s["bf16"][boundary].float()
    elif kind == "fp16":
        x = s["fp32"][boundary].to(torch.float16).float()
    elif kind == "fp8":
        x = fp8_e4m3(s["fp32"][boundary])
    else:
        x = s["fp32"][boundary].float()
    if level > 0:
        x = gaussian(x, level, gen)
    return x


@cache
def sink_tokens(sample: int) -> frozenset[int]:
    """Tokens whose norm in the middle of the model is > 8x the median (attention sinks)."""
    h = B.states(sample)["fp32"][B.L // 2].float().norm(dim=-1)
    return frozenset(int(t) for t in torch.nonzero(h > 8 * h.median()).flatten())


@cache
def measured_bf16_error() -> tuple[float, float]:
    """(median, max) over samples and boundaries 1..29 of the median per-token relative error of the
    bf16 run against the fp32 run on ordinary tokens: the noise an engine really adds."""
    errs = []
    for i in range(3):
        s = B.states(i)
        keep = [t for t in range(s["fp32"].shape[1]) if t not in sink_tokens(i)]
        for b in range(1, B.L):
            a, e = s["fp32"][b, keep].float(), s["bf16"][b, keep].float()
            errs.append(float(((e - a).norm(dim=-1) / a.norm(dim=-1)).median()))
    t = torch.tensor(errs)
    return float(t.median()), float(t.max())
