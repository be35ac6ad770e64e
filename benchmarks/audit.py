"""Audit throughput: files/s and GB/s in this process (the baseline), on 1 and 2 local Dask worker
processes, and through a local cluster (a ``dask scheduler`` and two ``dask worker`` processes
started here, reached with ``--cluster``). Nothing is asserted; ratios are against the baseline
measured in the same run. Local rows include starting the local cluster; its cost alone is printed
last. The --cluster rows use workers that are already running, as on a real cluster.

Two sets, both SpecForge files of real SmolLM2 hidden states (``tests/audit/dataset.py``):
``short``: 24-token samples (~0.2 MB per file: per-file overhead dominates); ``long``: the same
real rows tiled to 1,920 tokens (~16 MB per file: reading and checking values dominates). Both sets
reuse 18 distinct samples, so most files are reported as duplicates: the check column shows that
every run found the same.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hsdiff.audit import AuditOptions, audit  # noqa: E402
from tests.audit import dataset as D  # noqa: E402


def build(root: Path, files: int, tile: int) -> int:
    rows = root / D.ROWS
    rows.mkdir(parents=True)
    pieces = [(i, n) for n in range(24, 18, -1) for i in range(3)]
    for k in range(files):
        i, n = pieces[k % len(pieces)]
        obj = D.sample(i, n, D.GOOD)
        if tile > 1:
            obj = {key: v.repeat(*([1] * (v.dim() - 2)), tile, 1) if v.dim() >= 2 else v.repeat(tile) for key, v in obj.items()}
        torch.save(obj, rows / f"data_{k}.ckpt")
    return sum(p.stat().st_size for p in rows.iterdir())


def start_cluster(tmp: Path, workers: int) -> tuple[str, list[subprocess.Popen]]:
    dask = str(Path(sys.executable).with_name("dask"))
    sched = tmp / "scheduler.json"
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                               "--scheduler-file", str(sched)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)]
    while not (sched.exists() and "address" in sched.read_text()):
        time.sleep(0.1)
    address = json.loads(sched.read_text())["address"]
    procs += [subprocess.Popen([dask, "worker", address, "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
              for _ in range(workers)]
    from distributed import Client

    with Client(address) as c:
        c.wait_for_workers(workers, timeout=300)
        c.run(lambda: __import__("hsdiff.audit.fingerprint") and None)  # warm imports, as a running cluster has
    return address, procs


def startup(workers: int) -> float:
    """Starting (and stopping) a LocalCluster whose workers import the per-file pass: paid once per audit."""
    import logging

    from dask.distributed import Client, LocalCluster

    t0 = time.perf_counter()
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                      scheduler_port=0, silence_logs=logging.ERROR) as cluster, Client(cluster) as c:
        c.run(lambda: __import__("hsdiff.audit.fingerprint") and None)
    return time.perf_counter() - t0


def timed(root: Path, tmp: Path, **kw: object) -> tuple[float, str]:
    t0 = time.perf_counter()
    report = audit(root, AuditOptions(checkpoint=str(tmp / f"ck-{time.monotonic_ns()}.jsonl"), **kw))  # type: ignore[arg-type]
    kinds = sorted({p.kind for p in report.problems})
    return time.perf_counter() - t0, f"{len(report.problems)} {'/'.join(kinds) or 'problems'}"


def main() -> None:
    print(f"{'set':<6} {'files':>5} {'GB':>6}  {'run':<34} {'s':>7} {'files/s':>8} {'GB/s':>7} {'vs baseline':>11}  check")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        address, procs = start_cluster(tmp, 2)
        try:
            for name, files, tile in (("short", 240, 1), ("long", 40, 80)):
                root = tmp / name
                size = build(root, files, tile)
                runs = [("in this process (baseline)", {"workers": 0}),
                        ("1 local worker process", {"workers": 1}),
                        ("2 local worker processes", {"workers": 2}),
                        ("--cluster: scheduler + 2 workers", {"cluster": address})]
                base = None
                for label, kw in runs:
                    s, check = timed(root, tmp, **kw)
                    base = base or s
                    print(f"{name:<6} {files:>5} {size / 1e9:>6.3f}  {label:<34} {s:>7.2f} {files / s:>8.1f} "
                          f"{size / 1e9 / s:>7.3f} {base / s:>10.2f}x  {check}")
            for w in (1, 2):
                print(f"local cluster start + stop, {w} worker(s), workers importing hsdiff: {startup(w):.2f} s "
                      "(included in the local rows above)")
        finally:
            for p in reversed(procs):
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=60)


if __name__ == "__main__":
    main()
