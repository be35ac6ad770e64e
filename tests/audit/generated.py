"""Audit summaries generated from real SmolLM2 rows, for the central pass at any number of files.

Every file starts with the chat template the three samples of ``fixtures/smollm2/states`` share (11
tokens), then ids of its own; its prefix fingerprint is that of the fp32 rows at B 2, 15, 27 moved
towards the bf16 rows of the same tokens by a random fraction: the rounding of a capture run, so
files differ from each other by up to the fp32-bf16 gap (0.5-1.6%). Every 50th file holds B 1, 14,
26 (a shallower capture), every 1,000th repeats the previous file's input_ids (a duplicate) and
every 2,000th has NaN rows. Used by ``tests/audit/test_central.py`` and ``benchmarks/central.py``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from hsdiff.audit.fingerprint import PREFIX_TOKENS, FileSummary, NonFinite, _projection

STATES = (
    Path(__file__).resolve().parents[2] / "fixtures" / "smollm2" / "states"
)  # tests.builders.SMOLLM2, without torch

GOOD, SHALLOW = (2, 15, 27), (1, 14, 26)
SHARED = 11  # tokens of the chat template the three samples share
SHALLOW_EVERY, DUPLICATE_EVERY, NAN_EVERY = 50, 1000, 2000


def name(k: int) -> str:
    lo = k // 2000 * 2000
    return f"rows_{lo}-{lo + 2000}/data_{k}.ckpt"


class Source:
    """Per sample and boundary set: the projected fp32 rows, the projected fp32-to-bf16 step, and norms."""

    def __init__(self) -> None:
        from safetensors.torch import load_file

        p = _projection(576)
        self.rows = []
        for i in range(3):
            d = load_file(str(STATES / f"sample-{i}.safetensors"))
            fp = d["fp32.boundaries"].float().numpy()
            bf = d["bf16.boundaries"].float().numpy()
            ids = d["input_ids"].numpy()
            per = {}
            for bs in (GOOD, SHALLOW):
                x = np.stack([fp[b, :PREFIX_TOKENS] for b in bs], axis=1)  # [P, slots, H]
                step = np.stack([bf[b, :PREFIX_TOKENS] for b in bs], axis=1) - x
                whole = np.stack([np.linalg.norm(fp[b], axis=1) for b in bs], axis=1)  # [T, slots]
                sink = whole > 8 * np.median(whole, axis=0)
                medians = np.array([np.median(whole[~sink[:, s], s]) for s in range(len(bs))])
                per[bs] = (x, step, x @ p, step @ p, medians)
            self.rows.append((ids, per))

    def summary(self, k: int, rng: np.random.Generator) -> FileSummary:
        ids, per = self.rows[k % 3]
        bs = SHALLOW if k % SHALLOW_EVERY == SHALLOW_EVERY - 1 else GOOD
        x, step, px, pstep, medians = per[bs]
        u = float(rng.random())
        proj = (px + u * pstep).astype(np.float32)
        norms = np.linalg.norm(x + u * step, axis=2).astype(np.float32)
        own = rng.integers(100, 49000, PREFIX_TOKENS - SHARED)
        prefix = tuple(int(v) for v in ids[:SHARED]) + tuple(int(v) for v in own)
        who = k - 1 if k % DUPLICATE_EVERY == DUPLICATE_EVERY - 1 else k
        nf = (NonFinite(1, 5, 8, 4, 4, 0),) if k % NAN_EVERY == NAN_EVERY - 1 else ()
        return FileSummary(
            file=name(k),
            size=86_000_000,
            format="specforge",
            dtype="bfloat16",
            tokens=2048,
            slots=3,
            hidden_size=576,
            hidden_size_source="final hidden_state width",
            ids_tokens=2048,
            mask_tokens=2048,
            ids_digest=hashlib.blake2b(f"ids{who}".encode(), digest_size=12).hexdigest(),
            values_digest=hashlib.blake2b(f"values{k}".encode(), digest_size=12).hexdigest(),
            non_finite=nf,
            prefix_ids=prefix,
            prefix_proj=proj,
            prefix_norms=norms,
            median_norms=tuple(float(m * (1 + 0.02 * rng.standard_normal())) for m in medians),
        )


def expected(n: int) -> dict[str, int]:
    """How many files of the first n each problem kind should name (NaN files are not grouped)."""
    shallow = sum(1 for k in range(n) if k % SHALLOW_EVERY == SHALLOW_EVERY - 1 and k % NAN_EVERY != NAN_EVERY - 1)
    out = {"layer_mapping_outlier": shallow, "duplicate": n // DUPLICATE_EVERY, "non_finite": n // NAN_EVERY}
    return {k: v for k, v in out.items() if v}
