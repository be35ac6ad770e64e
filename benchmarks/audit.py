"""Audit throughput on a set large enough that starting a cluster is amortised, against ``cat``.

The set: 2,048 SpecForge files (``HSDIFF_BENCH_AUDIT_FILES``) of 560 tokens each, 5.3 GB of real
SmolLM2 rows in bf16 (``fixtures/smollm2/states``, the bf16 run): each file starts with a real
24-token sample cut as the audit tests cut it (``tests/audit/dataset.py``: the shared chat template,
then the user's words), then real rows of the three samples drawn at random token positions, each
with its own token id, so no two files hold the same input_ids. Every 128th file is captured one
layer shallower (B 1, 14, 26 against 2, 15, 27): the check column says whether each run found
exactly those. Written once to ``HSDIFF_BENCH_CACHE``/audit (default ``~/.cache/hsdiff-bench``).

Runs, each preceded by ``cat`` of the same files (page cache warm, as for the audit that follows):
in this process (``--workers 0``), 1 and 2 local worker processes (a ``LocalCluster`` started by the
audit), and ``--cluster`` to a ``dask scheduler`` with 2 ``dask worker`` processes started here
beforehand. *Steady* rates count the files that arrived after the first result, over the time from
the first result to the last: they leave out starting the cluster and the first batch, which a long
audit pays once. Nothing is asserted; ``make bench`` rewrites ``benchmarks/results/audit.json`` and
the table between the ``bench:audit`` markers of docs/audit.md.

    python benchmarks/audit.py [--files 2048] [--tokens 560] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import stamp  # noqa: E402
from hsdiff.audit import AuditOptions, audit  # noqa: E402
from tests import builders as B  # noqa: E402
from tests.audit import dataset as D  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "audit.json"
SHALLOW_EVERY = 128


def cache_dir() -> Path:
    return Path(os.environ.get("HSDIFF_BENCH_CACHE") or Path.home() / ".cache" / "hsdiff-bench") / "audit"


def build(files: int, tokens: int) -> tuple[Path, list[str]]:
    """The set (made once): its root and the names of the shallower files."""
    root = cache_dir() / f"v1-{files}x{tokens}"
    shallow = [f"{D.ROWS}/data_{k}.ckpt" for k in range(files) if k % SHALLOW_EVERY == SHALLOW_EVERY - 1]
    done = root / ".complete"
    if done.exists():
        return root, shallow
    rows = root / D.ROWS
    rows.mkdir(parents=True, exist_ok=True)
    s = [B.states(i) for i in range(3)]
    final = [D._final(i).bfloat16() for i in range(3)]
    pieces = [(i, n) for n in range(24, 18, -1) for i in range(3)]
    g = torch.Generator().manual_seed(files * 7919 + tokens)
    for k in range(files):
        i, n = pieces[k % len(pieces)]
        bs = D.SHALLOW if k % SHALLOW_EVERY == SHALLOW_EVERY - 1 else D.GOOD
        src = torch.randint(0, 3, (tokens - n,), generator=g)
        pos = torch.randint(1, 24, (tokens - n,), generator=g)  # any real row but a sink token
        ids = torch.cat(
            [s[i]["input_ids"][:n], torch.stack([s[a]["input_ids"][p] for a, p in zip(src.tolist(), pos.tolist())])]
        )
        aux = torch.cat(
            [
                torch.cat([s[i]["bf16"][b][:n] for b in bs], -1),
                torch.stack([torch.cat([s[a]["bf16"][b][p] for b in bs]) for a, p in zip(src.tolist(), pos.tolist())]),
            ]
        )
        fin = torch.cat([final[i][:n], torch.stack([final[a][p] for a, p in zip(src.tolist(), pos.tolist())])])
        mask = torch.zeros_like(ids)
        mask[D.REPLY_START :] = 1
        torch.save(
            {
                "input_ids": ids,
                "loss_mask": mask,
                "aux_hidden_state": aux.unsqueeze(0).contiguous(),
                "hidden_state": fin.unsqueeze(0).contiguous(),
            },
            rows / f"data_{k}.ckpt",
        )
    D.draft_config(root)
    done.write_text("")
    return root, shallow


def start_cluster(tmp: Path, workers: int) -> tuple[str, list[subprocess.Popen]]:
    dask = str(Path(sys.executable).with_name("dask"))
    sched = tmp / "scheduler.json"
    procs = [
        subprocess.Popen(
            [dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file", str(sched)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    ]
    while not (sched.exists() and "address" in sched.read_text()):
        time.sleep(0.1)
    address = json.loads(sched.read_text())["address"]
    procs += [
        subprocess.Popen(
            [dask, "worker", address, "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for _ in range(workers)
    ]
    from distributed import Client

    with Client(address) as c:
        c.wait_for_workers(workers, timeout=300)
        c.run(lambda: __import__("hsdiff.audit.fingerprint") and None)  # warm imports, as a running cluster has
    return address, procs


def cat(paths: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(["cat", *paths], stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def cpu(pids: list[int]) -> float:
    """CPU seconds (user + system) this process, its finished children and the running ``pids`` have used."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # a LocalCluster's processes, once the audit closed it
    total = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    return total + sum(_stat(pid)[1] for pid in _descendants(pids))


def _stat(pid: int) -> tuple[int, float]:
    """(parent pid, CPU seconds) of a running process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return -1, 0.0
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _descendants(pids: list[int]) -> set[int]:
    """``pids`` and every process below them (a ``dask worker`` runs its worker in a child of its nanny)."""
    parent = {int(d): _stat(int(d))[0] for d in os.listdir("/proc") if d.isdigit()}
    out = set(pids)
    while True:
        more = {p for p, pp in parent.items() if pp in out} - out
        if not more:
            return out
        out |= more


def timed(root: Path, tmp: Path, shallow: list[str], pids: list[int], **kw: object) -> dict:
    marks: list[tuple[float, int]] = []
    t0 = time.perf_counter()
    c0 = cpu(pids)
    report = audit(
        root,
        AuditOptions(
            checkpoint=str(tmp / f"ck-{time.monotonic_ns()}.jsonl"),  # type: ignore[arg-type]
            progress=lambda what, done, total: marks.append((time.perf_counter(), done)),
            **kw,
        ),
    )
    wall = time.perf_counter() - t0
    arrived = [(t - t0, d) for t, d in marks if d > 0]
    (t_first, d_first), (t_last, d_last) = arrived[0], arrived[-1]
    kinds = {p.kind for p in report.problems}
    flagged = {p.file for p in report.problems}
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu(pids) - c0, 2),
        "first_result_s": round(t_first, 2),
        "steady_files": d_last - d_first,
        "steady_s": round(t_last - t_first, 3),
        "execution": report.execution,
        "right": kinds <= {"layer_mapping_outlier"} and flagged == set(shallow),
        "groups": [g.files for g in report.groups],
    }


def table(r: dict) -> str:
    m, size, files = r["machine"], r["bytes"], r["files"]
    base = r["runs"][0]
    lines = [
        stamp.line(m, r["load_after"]) + f" {files:,} SpecForge files of {r['tokens']} tokens, "
        f"{size / 1e9:.2f} GB of real SmolLM2 rows in bf16 (`benchmarks/audit.py`). *cat*: `cat` of the same files "
        "just before the run, page cache warm. *steady*: files after the first result over the time from the first "
        "result to the last (no cluster start, no first batch). *CPU*: user + system time of this process, the local "
        "cluster's processes and the running scheduler and workers, over the run: what the work costs whatever "
        "else the machine runs.",
        "",
        "| run | wall | files/s | GB/s | cat of the same bytes | wall ÷ cat | first result after | steady files/s | "
        "steady time per file ÷ in-process | CPU, all processes | CPU per file ÷ in-process | right answer |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for x in r["runs"]:
        steady = x["steady_files"] / x["steady_s"] if x["steady_s"] > 0 else float("nan")
        ratio = (base["steady_files"] / base["steady_s"]) / steady if x["steady_s"] > 0 else float("nan")
        lines.append(
            f"| {x['label']} | {x['wall_s']:.1f} s | {files / x['wall_s']:.0f} | {size / 1e9 / x['wall_s']:.2f} | "
            f"{x['cat_s']:.2f} s ({size / 1e9 / x['cat_s']:.1f} GB/s) | {x['wall_s'] / x['cat_s']:.1f}× | "
            f"{x['first_result_s']:.1f} s | {steady:.0f} | {ratio:.2f}× | {x['cpu_s']:.1f} s | "
            f"{x['cpu_s'] / base['cpu_s']:.2f}× | {'yes' if x['right'] else 'no'} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=int(os.environ.get("HSDIFF_BENCH_AUDIT_FILES", 2048)))
    ap.add_argument("--tokens", type=int, default=560)
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    t0 = time.perf_counter()
    root, shallow = build(a.files, a.tokens)
    paths = sorted(str(p) for p in (root / D.ROWS).iterdir())
    size = sum(os.path.getsize(p) for p in paths)
    print(f"set ready in {time.perf_counter() - t0:.0f} s: {root} ({size / 1e9:.2f} GB)", file=sys.stderr, flush=True)
    result: dict = {"machine": stamp.machine(), "files": len(paths), "tokens": a.tokens, "bytes": size, "runs": []}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        address, procs = start_cluster(tmp, 2)
        try:
            cat(paths)  # warm the page cache once
            for label, kw in (
                ("in this process (`--workers 0`)", {"workers": 0}),
                ("1 local worker process", {"workers": 1}),
                ("2 local worker processes", {"workers": 2}),
                ("`--cluster`: scheduler + 2 running workers", {"cluster": address}),
            ):
                floor = cat(paths)
                x = timed(root, tmp, shallow, [p.pid for p in procs] if "cluster" in kw else [], **kw) | {
                    "label": label,
                    "cat_s": round(floor, 3),
                }
                result["runs"].append(x)
                print(json.dumps(x), file=sys.stderr, flush=True)
        finally:
            for p in reversed(procs):
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=60)
    stamp.publish(result, table, RESULTS, "audit", write=not a.no_write)


if __name__ == "__main__":
    main()
