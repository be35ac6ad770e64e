"""Scale benchmarks: hsdiff as a whole process on multi-GB dumps, against a naive script and the
read floor measured in the same run, each a separate process (wall time and peak RSS from
``wait4``). Data: benchmarks/gen.py (real SmolLM2 states tiled to large shapes, cached).

Environment (or the matching ``benchmarks/run.py`` flags):

- ``HSDIFF_BENCH_SIZES``: pair sizes in GB from SIZES, default ``0.2,1,4`` (the naive script holds the
  whole stack: a size is skipped when free memory is short of ~1.5x it);
- ``HSDIFF_BENCH_CASES``: ``sizes,window,samples`` (default all three);
- ``HSDIFF_BENCH_SAMPLES``: training-set sizes of the sample search, default ``100,200,400``;
- ``HSDIFF_BENCH_CACHE``: where generated dumps live, default ``~/.cache/hsdiff-bench``.

Results merge into benchmarks/results/scale.json (one entry per case, the newest measurement
wins) and the table between the ``bench:scale`` markers of docs/benchmarks.md is regenerated from it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks import gen
from hsdiff.comparison import scoring

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "scale.json"
PAGE = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench:scale:begin -->", "<!-- bench:scale:end -->"
BIN = Path(sys.executable).parent
PY = sys.executable
# GB -> (tokens, hidden): an all-layer stack [31, T, H] of the 30-layer model, bf16
SIZES = {"0.2": (768, 4096), "1": (4096, 4096), "2.2": (8192, 4096), "4": (8192, 8192)}
WINDOW = {"tokens": 8192, "width": 512, "offset": 2917, "hidden": 4096}
SAMPLES = {"tokens": 256, "hidden": 2048}
EXPECT = [b for b in gen.TRAIN_B]


@dataclass
class Run:
    wall_s: float
    cpu_s: float  # user + system: far less sensitive than wall time to other load on the machine
    peak_rss_mb: float
    exit: int
    stdout: str = ""


#: Measured processes run as after ``pip install``, which compiles every module's bytecode: with
#: PYTHONDONTWRITEBYTECODE set (some CI images set it) hsdiff would compile its own sources on every
#: run while torch, installed by pip, never does.
RUN_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def compile_bytecode() -> None:
    """Write hsdiff's bytecode now (what pip does at install), so that no measured run pays for it."""
    subprocess.run(
        [PY, "-m", "compileall", "-q", str(ROOT / "hsdiff")], check=True, env=RUN_ENV, stdout=subprocess.DEVNULL
    )


def measure(cmd: list[str], timeout: float = 3600, env: dict[str, str] | None = None) -> Run:
    """Run cmd as its own process (through benchmarks/measure.py): wall time, CPU time, peak RSS."""
    with tempfile.TemporaryDirectory() as t:
        res, out, err = Path(t) / "run.json", Path(t) / "stdout", Path(t) / "stderr"
        with open(out, "wb") as o, open(err, "wb") as e:
            subprocess.run(
                [PY, "-S", str(ROOT / "benchmarks" / "measure.py"), str(res), *cmd],
                stdout=o,
                stderr=e,
                timeout=timeout,
                check=False,
                env=RUN_ENV | (env or {}),
            )
        r = json.loads(res.read_text())
        if r["exit"] not in (0, 1):
            raise RuntimeError(f"{' '.join(cmd)} exited {r['exit']}: {err.read_text(errors='replace')[-2000:]}")
        return Run(r["wall_s"], r["cpu_s"], r["peak_rss_mb"], r["exit"], out.read_text(errors="replace"))


def cached_fraction(paths: list[Path]) -> float | None:
    """Share of the files' bytes in the page cache (``fincore``), None when fincore is missing."""
    try:
        res = subprocess.run(
            ["fincore", "--bytes", "--noheadings", "--raw", "-o", "RES,SIZE", *map(str, paths)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None
    vals = [int(v) for v in res]
    return round(sum(vals[0::2]) / max(1, sum(vals[1::2])), 3)


def median_of(cmd: list[str], repeat: int = 3) -> Run:
    """The run of median wall time among ``repeat`` runs of cmd (a shared machine's wall times move)."""
    runs = sorted((measure(cmd) for _ in range(repeat)), key=lambda r: r.wall_s)
    return runs[len(runs) // 2]


def median_run(cmd: list[str], repeat: int = 3) -> dict[str, float]:
    runs = [measure(cmd) for _ in range(repeat)]
    return {
        "wall_s": statistics.median(r.wall_s for r in runs),
        "cpu_s": statistics.median(r.cpu_s for r in runs),
        "peak_rss_mb": statistics.median(r.peak_rss_mb for r in runs),
    }


def import_times() -> dict[str, dict[str, float]]:
    """Cost of a process that only imports what each side imports before its first read."""
    return {
        "hsdiff": median_run([PY, "-c", "import hsdiff.cli.compare, hsdiff.comparison"]),
        "naive": median_run([PY, "-c", "import torch, safetensors.torch"]),
    }


def mem_available_mb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return float("inf")


def hsdiff_cmd(pair: gen.Pair, report: Path) -> list[str]:
    """``hsdiff compare`` through benchmarks/timed.py, which times the work inside the process."""
    return [
        PY,
        str(ROOT / "benchmarks" / "timed.py"),
        "compare",
        str(pair.train),
        str(pair.infer),
        "--layer-ids",
        gen.TRAIN_IDS,
        "--json",
        str(report),
        "-q",
    ]


def hsdiff_run(pair: gen.Pair, repeat: int = 3) -> tuple[Run, dict]:
    """The run of median wall time of ``repeat``, with its work as timed inside it."""
    with tempfile.TemporaryDirectory() as t:
        report = Path(t) / "report.json"
        runs = []
        for i in range(repeat):
            times = Path(t) / f"times-{i}.json"
            run = measure(hsdiff_cmd(pair, report), env={"HSDIFF_BENCH_TIMES": str(times)})
            runs.append((run, json.loads(times.read_text())))
        run, inside = sorted(runs, key=lambda r: r[0].wall_s)[repeat // 2]
        rep = json.loads(report.read_text())
    rep = rep.get("report", rep)
    matched = [s.get("matched") or {} for s in rep["slots"]]
    # captures compared on every token (the others on a sample of SKETCH_TOKENS rows): with the
    # training file, the bytes that had to be read
    full = {r["capture"] for r in rep.get("scores", []) if (r.get("tokens") or 0) > 2 * scoring.SKETCH_TOKENS}
    return run, {
        "work_s": inside["work_s"],
        "work_cpu_s": inside["work_cpu_s"],
        "verdict": rep["verdict"],
        "boundaries": [s.get("boundary_index") for s in rep["slots"]],
        "token_offsets": sorted({m.get("token_offset") for m in matched} - {None}),
        "samples": sorted({m.get("sample") for m in matched} - {None}),
        "captures_read_whole": len(full),
    }


def warm(*pairs: gen.Pair) -> list[Path]:
    """Read the pairs' files once, so that every timed run finds them in the page cache."""
    paths = [f for p in pairs for f in gen.files(p.train) + gen.files(p.infer)]
    measure(["sh", "-c", 'cat "$@" > /dev/null', "cat", *map(str, paths)])
    return paths


def floor_run(pair: gen.Pair) -> tuple[Run, float | None]:
    paths = warm(pair)
    cached = cached_fraction(paths)
    run = median_of(["sh", "-c", 'cat "$@" > /dev/null', "cat", *map(str, paths)])
    return run, cached


def _rec(run: Run, imp: dict[str, float] | None = None, **extra: object) -> dict:
    """A run as JSON; with the import cost given, also its work (the run minus the import)."""
    d = {k: v for k, v in asdict(run).items() if k != "stdout"}
    if imp:
        d |= {"work_s": round(run.wall_s - imp["wall_s"], 3), "work_cpu_s": round(run.cpu_s - imp["cpu_s"], 3)}
    return d | extra  # an hsdiff run's own work_s/work_cpu_s (timed inside it) replace the difference


Imports = dict[str, dict[str, float]]


def bench_size(src: gen.Source, size: str, imports: Imports) -> dict:
    tokens, hidden = SIZES[size]
    pair = gen.pair(src, tokens, hidden)
    need = 1.5 * gen.num_boundaries(src) * tokens * hidden * 2 / 2**20  # the naive script holds the stack
    if mem_available_mb() < need:
        return {
            "case": f"pair {size} GB",
            "skipped": f"needs ~{need:.0f} MB free, {mem_available_mb():.0f} MB available",
        }
    floor, cached = floor_run(pair)
    load0 = os.getloadavg()[0]
    hs, found = hsdiff_run(pair)
    naive = measure([PY, str(ROOT / "benchmarks" / "naive.py"), str(pair.train), str(pair.infer)])
    nv = [s["boundary"] for s in json.loads(naive.stdout)["slots"]]
    h, n = _rec(hs, imports["hsdiff"], **found), _rec(naive, imports["naive"], boundaries=nv)
    layer_bytes = tokens * hidden * 2
    train_bytes = sum(f.stat().st_size for f in gen.files(pair.train))
    needed = min(pair.nbytes, train_bytes + found["captures_read_whole"] * layer_bytes)
    floor_needed = floor.wall_s * needed / pair.nbytes  # cat reads at one rate: its time for these bytes
    return {
        "case": f"pair {size} GB",
        "shape": {"infer": [gen.num_boundaries(src), tokens, hidden], "train": [1, tokens, 3 * hidden]},
        "bytes": pair.nbytes,
        "floor": _rec(floor, page_cache=cached),
        "hsdiff": h,
        "naive": n,
        "ratios": {
            "hsdiff/naive": round(hs.wall_s / naive.wall_s, 2),
            "hsdiff/naive cpu": round(hs.cpu_s / naive.cpu_s, 2),
            "naive/hsdiff": round(naive.wall_s / hs.wall_s, 2),
            "naive/hsdiff cpu": round(naive.cpu_s / hs.cpu_s, 2),
            "hsdiff/floor": round(hs.wall_s / floor.wall_s, 1),
            "work/floor": round(h["work_s"] / floor.wall_s, 1),
            "work cpu/floor": round(h["work_cpu_s"] / floor.wall_s, 1),
            "work/floor of bytes read": round(h["work_s"] / max(floor_needed, 1e-3), 1),
        },
        "bytes_read": needed,
        "correct": {"hsdiff": found["verdict"] == "ok" and found["boundaries"] == EXPECT, "naive": nv == EXPECT},
        "loadavg_1m": [round(load0, 1), round(os.getloadavg()[0], 1)],
    }


def bench_window(src: gen.Source, imports: Imports) -> dict:
    w = WINDOW
    noids, ids = gen.window(src, w["tokens"], w["width"], w["offset"], w["hidden"])
    warm(noids, ids)
    load0 = os.getloadavg()[0]
    a, fa = hsdiff_run(ids)
    u, fu = hsdiff_run(noids)
    ra, ru = _rec(a, imports["hsdiff"], **fa), _rec(u, imports["hsdiff"], **fu)
    return {
        "case": f"window {w['width']} of {w['tokens']} tokens",
        "setup": w,
        "bytes": noids.nbytes,
        "aligned": ra,
        "unknown_offset": ru,
        "ratios": {
            "unknown/aligned": round(u.wall_s / a.wall_s, 2),
            "unknown/aligned cpu": round(u.cpu_s / a.cpu_s, 2),
            "unknown/aligned work": round(ru["work_s"] / max(0.01, ra["work_s"]), 2),
            "unknown/aligned work cpu": round(ru["work_cpu_s"] / max(0.01, ra["work_cpu_s"]), 2),
        },
        "correct": {
            "aligned": fa["verdict"] == "ok" and fa["token_offsets"] == [w["offset"]],
            "unknown_offset": fu["verdict"] == "ok" and fu["token_offsets"] == [w["offset"]],
        },
        "loadavg_1m": [round(load0, 1), round(os.getloadavg()[0], 1)],
    }


def bench_samples(src: gen.Source, counts: tuple[int, ...], imports: Imports) -> dict:
    sets = gen.sample_set(src, counts, SAMPLES["tokens"], SAMPLES["hidden"])
    load0 = os.getloadavg()[0]
    rows = {}
    for n, pair in sorted(sets.items()):
        warm(pair)
        run, found = hsdiff_run(pair)
        want = f"data_{int(n * gen.MATCH)}"
        rows[str(n)] = _rec(
            run,
            imports["hsdiff"],
            **found,
            bytes=pair.nbytes,
            correct=found["verdict"] == "ok" and found["samples"] == [want],
        )
    return {
        "case": "sample search",
        "setup": SAMPLES | {"counts": sorted(sets)},
        "runs": rows,
        "work_cpu_per_sample_ms": {n: round(1000 * r["work_cpu_s"] / int(n), 1) for n, r in rows.items()},
        "correct": all(r["correct"] for r in rows.values()),
        "loadavg_1m": [round(load0, 1), round(os.getloadavg()[0], 1)],
    }


def _mb(x: float) -> str:
    return f"{x / 1024:.2f} GB" if x >= 1024 else f"{x:.0f} MB"


def _shape(s: list[int]) -> str:
    return "[" + ", ".join(map(str, s)) + "]"


def _run(r: dict) -> str:
    return f"{r['wall_s']:.1f} s, {r['cpu_s']:.1f} s, {_mb(r['peak_rss_mb'])}"


def table(results: dict) -> str:
    env = results.get("machine", {})
    imp = env.get("imports", {})
    cases = results["cases"]
    lines = [
        f"Last run {env.get('date', '?')} on {env.get('machine', '?')}, Python {env.get('python', '?')}, hsdiff at "
        f"{env.get('hsdiff_commit', '?')} (each case's own commit and date are in the JSON). Each cell "
        "is one process (hsdiff's and `cat`'s: the one of median wall time of three): wall time, CPU time (user + "
        "system), peak RSS. *work*: hsdiff's is timed inside its process, from after the imports its command needs "
        "to the command's end (`benchmarks/timed.py`); the naive script's is the run minus a process that only "
        f"imports what it imports ({_run(imp['naive']) if 'naive' in imp else '?'}; hsdiff's imports alone: "
        f"{_run(imp['hsdiff']) if 'hsdiff' in imp else '?'}). The read floor is `cat` of both files, page cache warm "
        "(never dropped; share cached in brackets). *load* is the 1-minute load average before and after: the "
        "machine is shared, so wall times move with it; CPU times much less. Bytecode is compiled beforehand, as "
        "`pip install` does (for torch, the naive script's import, it always is). *bytes hsdiff had to read*: the "
        "training file and the layers compared on every token (the report's `scores` say which); *their floor* "
        "is `cat`'s time for that many bytes.",
        "",
        "| pair: inference stack + SpecForge file | read floor | naive | hsdiff | hsdiff work: wall, CPU "
        "| naive ÷ hsdiff: wall (CPU) | hsdiff ÷ floor | work ÷ floor: wall (CPU) | bytes hsdiff had to read "
        "| work ÷ their floor | right answer | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key in sorted((k for k in cases if k.startswith("pair")), key=lambda k: float(k.split()[1])):
        r = cases[key]
        if "skipped" in r:
            lines.append(f"| {key}: skipped, {r['skipped']} | | | | | | | | | | | |")
            continue
        cache = r["floor"].get("page_cache")
        ok = (
            "yes"
            if all(r["correct"].values())
            else ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in r["correct"].items())
        )
        ra, h = r["ratios"], r["hsdiff"]
        lines.append(
            f"| {_shape(r['shape']['infer'])} + {_shape(r['shape']['train'])} bf16 = {r['bytes'] / 1e9:.2f} GB "
            f"| {r['floor']['wall_s']:.2f} s{f' ({cache:.0%})' if cache is not None else ''} | {_run(r['naive'])} "
            f"| {_run(h)} | {h['work_s']:.1f} s, {h['work_cpu_s']:.1f} s "
            f"| {r['naive']['wall_s'] / h['wall_s']:.2f}× ({r['naive']['cpu_s'] / h['cpu_s']:.2f}×) "
            f"| {ra['hsdiff/floor']:.0f}× "
            f"| {ra['work/floor']:.1f}× ({h['work_cpu_s'] / r['floor']['wall_s']:.1f}×) "
            f"| {_bytes_read(r)} | {ra.get('work/floor of bytes read', float('nan')):.1f}× | {ok} "
            f"| {r['loadavg_1m'][0]}–{r['loadavg_1m'][1]} |"
        )
    w = next((v for k, v in cases.items() if k.startswith("window")), None)
    if w:
        lines += [
            "",
            f"| {w['case']}, H {w['setup']['hidden']} ({w['bytes'] / 1e9:.2f} GB) | hsdiff | work: wall, CPU "
            "| token offset found | load |",
            "|---|---|---|---|---|",
        ]
        for name, k in (("aligned by token ids", "aligned"), ("no token ids, offset unknown", "unknown_offset")):
            x = w[k]
            lines.append(
                f"| {name} | {_run(x)} | {x['work_s']:.1f} s, {x['work_cpu_s']:.1f} s "
                f"| {x['verdict']}, {x['token_offsets']} (true {w['setup']['offset']}) "
                f"| {w['loadavg_1m'][0]}–{w['loadavg_1m'][1]} |"
            )
        ra = w["ratios"]
        work_cpu = w["unknown_offset"]["work_cpu_s"] / max(0.01, w["aligned"]["work_cpu_s"])
        lines.append(
            f"| unknown ÷ aligned | {ra['unknown/aligned']:.2f}× wall, {ra['unknown/aligned cpu']:.2f}× CPU "
            f"| {work_cpu:.2f}× CPU | | |"
        )
    s = cases.get("sample search")
    if s:
        lines += [
            "",
            f"| sample search: 1 matching sample (≈{s['setup']['tokens']} tokens, H {s['setup']['hidden']}; "
            "token ids on both sides) | training set | hsdiff | work CPU | CPU per added sample "
            "| right sample |",
            "|---|---|---|---|---|---|",
        ]
        prev = None
        for n, r in sorted(s["runs"].items(), key=lambda x: int(x[0])):
            slope = "" if prev is None else f"{1000 * (r['work_cpu_s'] - prev[1]) / (int(n) - prev[0]):.0f} ms"
            lines.append(
                f"| among {n} | {r['bytes'] / 1e9:.2f} GB | {_run(r)} | {r['work_cpu_s']:.1f} s | {slope} "
                f"| {', '.join(r['samples'])}: {'yes' if r['correct'] else 'NO'} |"
            )
            prev = (int(n), r["work_cpu_s"])
    return "\n".join(lines)


def _bytes_read(r: dict) -> str:
    if "bytes_read" not in r:
        return "not measured"
    whole = r["hsdiff"].get("captures_read_whole", "?")
    every = r.get("shape", {}).get("infer", [None])[0]
    rest = "" if whole == every else ", a sample of the rest"
    return (
        f"{r['bytes_read'] / 1e9:.2f} GB ({r['bytes_read'] / r['bytes']:.0%}: the training file, "
        f"{'all ' if whole == every else ''}{whole} layers whole{rest})"
    )


def write_page(text: str) -> None:
    body = PAGE.read_text()
    if BEGIN not in body:
        return
    head, rest = body.split(BEGIN, 1)
    PAGE.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.split(END, 1)[1]}")


def save(results: dict) -> dict:
    """Merge this run's cases into the results file (cases not run keep their last measurement)."""
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"cases": {}}
    merged = {**old, "machine": results["machine"], "cases": {**old.get("cases", {}), **results["cases"]}}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS.with_suffix(".tmp")
    tmp.write_text(json.dumps(merged, indent=1) + "\n")
    tmp.replace(RESULTS)
    return merged


def main(sizes: list[str], cases: list[str], counts: tuple[int, ...], write: bool = True) -> dict:
    for s in sizes:
        if s not in SIZES:
            raise SystemExit(f"unknown size {s!r}: choose from {', '.join(SIZES)}")
    src = gen.load_source()
    compile_bytecode()
    imports = import_times()
    print(f"import only: {imports}", file=sys.stderr)
    results: dict = {"cases": {}}
    results["machine"] = {
        "date": dt.date.today().isoformat(),
        "machine": f"{os.cpu_count()} cores, "
        f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, {platform.machine()}",
        "python": platform.python_version(),
        "imports": imports,
        "cache": str(gen.cache_dir()).replace(str(Path.home()), "~", 1),  # no path of this machine in the results
        "hsdiff_commit": subprocess.run(
            ["git", "-C", str(ROOT), "log", "-1", "--format=%h %cs", "--", "hsdiff"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip(),
    }
    todo = [(f"pair {s} GB", lambda s=s: bench_size(src, s, imports)) for s in sizes if "sizes" in cases]
    if "window" in cases:
        todo.append(("window", lambda: bench_window(src, imports)))
    if "samples" in cases:
        todo.append(("sample search", lambda: bench_samples(src, counts, imports)))
    for name, fn in todo:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        r = fn()
        results["cases"][r["case"]] = r | {
            "date": dt.datetime.now().isoformat(timespec="seconds"),
            "imports": imports,
            "hsdiff_commit": results["machine"]["hsdiff_commit"],
        }
        if write:
            save(results)
    results["machine"]["cache_bytes"] = gen.disk_usage(gen.cache_dir())
    results = save(results) if write else results
    text = table(results)
    print(text)
    if write:
        write_page(text)
    return results
