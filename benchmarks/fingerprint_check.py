"""How long checking a 3-slot engine capture against a fingerprint takes, on a 61-layer, 7168-wide target
(synthetic states: a residual stream whose neighbouring boundaries are ~3% apart, 4 probes of 64 tokens).

Prints the fingerprint's size, the check's wall time (``hsdiff.fingerprint.check``: read the dump, place,
project, identify against all 62 boundaries, decide) and its ratio to reading the dump's tensors alone
(``torch.load`` of every file, the floor any check pays). Run: ``python benchmarks/fingerprint_check.py``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import hsdiff.fingerprint as F  # noqa: E402
from hsdiff.fingerprint import file as fpfile  # noqa: E402
from hsdiff.fingerprint.sketch import DIM, SEED, projection, sketch  # noqa: E402
from tests.scenarios.write import dumper_records  # noqa: E402

L, H, PROBES, T = 61, 7168, 4, 64
TRAIN = (3, 31, 59)


def main() -> int:
    torch.set_num_threads(2)
    rng = np.random.default_rng(0)
    p = projection(H, DIM, SEED)
    ids = [tuple(int(t) for t in rng.integers(0, 32000, T)) for _ in range(PROBES)]
    norms = np.empty((L + 1, PROBES * T), np.float32)
    units = np.empty((L + 1, PROBES * T, DIM), np.float16)
    kept: dict[int, np.ndarray] = {}
    x = rng.standard_normal((PROBES * T, H)).astype(np.float32)
    for b in range(L + 1):  # B0..BL streamed: only the captured boundaries are kept whole
        if b:
            x = x + 0.03 * rng.standard_normal(x.shape).astype(np.float32) * np.sqrt(b)
        norms[b], units[b] = sketch(x, p)
        if b in TRAIN:
            kept[b] = x.copy()
    meta = fpfile.document(
        target={"name": "synthetic", "model_type": "llama", "num_hidden_layers": L, "hidden_size": H},
        dim=DIM,
        seed=SEED,
        final=False,
        probes=[{"name": f"p{j}", "tokens": T} for j in range(PROBES)],
        probe_source="given",
        reference={"dtype": "float32", "source": "python", "how": "synthetic"},
        noise_floor=None,
        training={
            "source": None,
            "slots": [F.TrainingSlot(i, b, "observed", 0.99).to_dict() for i, b in enumerate(TRAIN)],
        },
        draft=None,
    )
    meta["boundaries"]["count"] = L + 1
    fp = fpfile.Fingerprint(meta, np.asarray([t for s in ids for t in s], np.int32), norms, units)
    with tempfile.TemporaryDirectory(prefix="bench-fingerprint-") as d:
        path = F.write(fp, Path(d) / "fp.safetensors")
        infer = Path(d) / "infer"
        for j in range(PROBES):
            rows = slice(j * T, (j + 1) * T)
            aux = torch.from_numpy(np.concatenate([kept[b][rows] for b in TRAIN], axis=1)).to(torch.bfloat16)
            dumper_records(
                infer / "dump_20261208_000000_000001",
                [("input_ids", torch.tensor(ids[j]), {}), ("aux_hidden_states", aux, {})],
                step=j,
            )
        F.check(path, infer, layer_ids=[b - 1 for b in TRAIN])  # warm: imports, the projection's cache
        t0 = time.perf_counter()
        r = F.check(path, infer, layer_ids=[b - 1 for b in TRAIN])
        check = time.perf_counter() - t0
        t0 = time.perf_counter()
        for f in sorted(infer.rglob("*.pt")):
            torch.load(f, weights_only=True)
        read = time.perf_counter() - t0
        size = path.stat().st_size
    print(f"fingerprint: {L}-layer, {H}-wide target, {PROBES * T} probe tokens: {size / 2**20:.2f} MB")
    print(f"check of a 3-slot capture: verdict {r.verdict}, {check:.2f} s; reading the dump alone {read:.3f} s")
    print(f"ratio check / read: {check / max(read, 1e-9):.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
