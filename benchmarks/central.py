"""The central pass of ``hsdiff audit`` at 10^4, 10^5 and 10^6 files: time and peak memory, and their growth.

No hidden-state file is read: each size is a checkpoint of generated summaries
(``tests/audit/generated.py``: real SmolLM2 rows with a capture run's rounding, one file in 50
shallower, one in 1,000 a duplicate, one in 2,000 with NaN rows), written once (and kept in
``HSDIFF_BENCH_CACHE``/central, default ``~/.cache/hsdiff-bench/central``: ~9 kB per file). A fresh
process then runs what ``hsdiff audit`` runs once every file is summarised — the listing's names and
order, :class:`hsdiff.audit.run.CheckpointStore` over the checkpoint, and
:func:`hsdiff.audit.groups.analyse` — and reports its wall and CPU time and its peak resident memory;
the check column says whether it named exactly the planted problems.

    python benchmarks/central.py [--sizes 1e4,1e5,1e6] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from array import array
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import stamp  # noqa: E402
from tests.audit.generated import Source, expected, name  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "central.json"


def cache_dir() -> Path:
    return Path(os.environ.get("HSDIFF_BENCH_CACHE") or Path.home() / ".cache" / "hsdiff-bench") / "central"


def generate(n: int) -> Path:
    """The checkpoint of n generated summaries and its line offsets (``.offsets``), made once."""
    from hsdiff.audit.run import _CHECKPOINT_MAGIC

    path = cache_dir() / f"{n}.jsonl"
    if path.exists() and path.with_suffix(".offsets").exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    src, rng = Source(), np.random.Generator(np.random.PCG64(n))
    offsets = array("q")
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(json.dumps({"magic": _CHECKPOINT_MAGIC, "version": 1, "dataset": f"generated-{n}"}).encode() + b"\n")
        for k in range(n):
            offsets.append(f.tell())
            f.write(json.dumps(src.summary(k, rng).to_record()).encode() + b"\n")
    path.with_suffix(".offsets").write_bytes(offsets.tobytes())
    tmp.replace(path)
    return path


def central(path: Path, n: int) -> dict:
    """Run in a fresh process: the central pass over the checkpoint at ``path``."""
    from hsdiff.audit.groups import analyse
    from hsdiff.audit.run import CheckpointStore

    base = stamp.peak_rss()
    t0, c0 = time.perf_counter(), time.process_time()
    names = [name(k) for k in range(n)]  # what the listing gives audit()
    order = {x: i for i, x in enumerate(names)}
    store = CheckpointStore(path, f"generated-{n}", order)
    store.offsets = array("q")
    store.offsets.frombytes(path.with_suffix(".offsets").read_bytes())
    found = analyse(store)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    kinds: dict[str, int] = {}
    for p in found.problems:
        kinds[p.kind] = kinds.get(p.kind, 0) + 1
    return {
        "files": n,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "peak_rss": stamp.peak_rss(),
        "peak_rss_after_imports": base,
        "problems": kinds,
        "groups": [g.files for g in found.groups],
        "tolerance": [round(t, 4) for t in found.tolerance],
        "checkpoint_bytes": path.stat().st_size,
    }


def table(results: dict) -> str:
    runs = results["runs"]
    m = results["machine"]
    lines = [
        stamp.line(m, results.get("load_after")) + " Each row is a fresh process: the names and order of the "
        "listing, the checkpoint read back three times in file order, the tolerance measured, files flagged and "
        "grouped (`benchmarks/central.py`; the summaries are generated from real SmolLM2 rows with a capture "
        "run's rounding, one file in 50 shallower, one in 1,000 a duplicate, one in 2,000 with NaN rows).",
        "",
        "| files | checkpoint | wall | CPU | peak RSS (after imports) | per file: CPU, memory "
        "| growth ×10 files: CPU, memory | found exactly the planted problems |",
        "|---|---|---|---|---|---|---|---|",
    ]
    prev = None
    for r in runs:
        mem = r["peak_rss"] - r["peak_rss_after_imports"]
        grow = (
            ""
            if prev is None
            else (
                f"{r['cpu_s'] / prev['cpu_s']:.1f}×, {mem / (prev['peak_rss'] - prev['peak_rss_after_imports']):.1f}×"
            )
        )
        lines.append(
            f"| {r['files']:,} | {r['checkpoint_bytes'] / 1e9:.2f} GB | {r['wall_s']:.1f} s | {r['cpu_s']:.1f} s | "
            f"{r['peak_rss'] / 1e6:,.0f} MB ({r['peak_rss_after_imports'] / 1e6:.0f} MB) | "
            f"{r['cpu_s'] / r['files'] * 1e6:.0f} µs, {mem / r['files']:,.0f} B | {grow} | "
            f"{'yes' if r['right'] else 'no: ' + json.dumps(r['problems'])} |"
        )
        prev = r
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=os.environ.get("HSDIFF_BENCH_CENTRAL", "1e4,1e5,1e6"))
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--run", nargs=2, metavar=("PATH", "N"), help=argparse.SUPPRESS)  # the measured child
    a = ap.parse_args()
    if a.run:
        print(json.dumps(central(Path(a.run[0]), int(a.run[1]))))
        return
    results: dict = {"machine": stamp.machine(), "runs": []}
    for n in (int(float(s)) for s in a.sizes.split(",")):
        t0 = time.perf_counter()
        path = generate(n)
        print(f"{n} summaries ready in {time.perf_counter() - t0:.0f} s: {path}", file=sys.stderr, flush=True)
        p = subprocess.run(
            [sys.executable, __file__, "--run", str(path), str(n)], capture_output=True, text=True, check=True
        )
        r = json.loads(p.stdout)
        r["right"] = r["problems"] == expected(n)
        results["runs"].append(r)
        print(json.dumps(r), file=sys.stderr, flush=True)
    stamp.publish(results, table, RESULTS, "central", write=not a.no_write)


if __name__ == "__main__":
    main()
