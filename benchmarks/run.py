"""Benchmarks: each measures hsdiff's way against a baseline run in the same run, and prints the
ratio. Nothing here asserts a wall-clock time; run with `make bench`.

In-process micro benchmarks:

1. token alignment by value: probe-proposed offsets vs an exhaustive sweep of every offset;
2. opening a dump: lazy, memory-mapped scan vs eagerly loading every file;
3. finding the sample among many: token-id prefilter vs value search over every sample.

Scale benchmarks (benchmarks/scale.py): hsdiff as a whole process on generated multi-GB pairs
against a naive script and the read floor; a window at an unknown offset; a sample search.

    python benchmarks/run.py [--only micro|scale] [--sizes 0.2,1,4] [--cases sizes,window,samples]
                             [--samples 100,200,400] [--no-write]

Data are real SmolLM2 hidden states from fixtures/ (fp32 training side, bf16 inference side).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hsdiff import align  # noqa: E402
from hsdiff.comparison import compare  # noqa: E402
from hsdiff.readers import scan  # noqa: E402
from tests import builders as B  # noqa: E402


def timed(fn, repeat: int = 3) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def long_sequence() -> tuple[torch.Tensor, torch.Tensor]:
    """~2,200 distinct real hidden-state rows (all samples, all boundaries), fp32 and bf16."""
    fp = torch.cat([B.states(i)["fp32"][b] for i in range(3) for b in range(1, 31)])
    bf = torch.cat([B.states(i)["bf16"][b] for i in range(3) for b in range(1, 31)]).float()
    return fp, bf


def bench_alignment() -> tuple[str, float, float, str]:
    fp, bf = long_sequence()
    cap = B.states(0)  # noqa: F841 - warm the cache
    train = align.TrainSlot.of(fp.numpy())
    x = bf[137:1337].numpy()
    t_new, (o_new, m_new) = timed(lambda: align._search_full(train, x))
    t_old, (o_old, m_old) = timed(lambda: align._search_full(train, x, exhaustive=True), repeat=1)
    agree = "same offset" if o_new == o_old == 137 else f"offsets {o_new} vs {o_old}"
    return (f"align 1200 of {fp.shape[0]} tokens by value", t_old, t_new, agree)


def bench_scan(tmp: Path) -> tuple[str, float, float, str]:
    d = tmp / "many"
    B.specforge(d, [0, 1, 2], [2, 15, 27])
    rows = d / "rows_0-2000"
    big = {k: v for k, v in torch.load(rows / "data_0.ckpt", weights_only=True).items()}
    big["aux_hidden_state"] = big["aux_hidden_state"].repeat(1, 40, 1).contiguous()  # T = 960
    for i in range(3, 120):
        torch.save(big, rows / f"data_{i}.ckpt")
    files = sorted(rows.iterdir())

    def eager():
        return [torch.load(f, weights_only=True) for f in files]

    t_lazy, dump = timed(lambda: scan(d, "train"))
    t_eager, _ = timed(eager)
    return (f"open {len(files)} SpecForge files", t_eager, t_lazy, f"{len(dump.captures)} captures")


def bench_sample_search(tmp: Path) -> tuple[str, float, float, str]:
    train = tmp / "train"
    B.specforge(train, [0, 1, 2], [2, 15, 27])
    rows = train / "rows_0-2000"
    for i in range(3, 60):  # more samples: real states of sample i % 3, with shifted token ids
        obj = torch.load(rows / f"data_{i % 3}.ckpt", weights_only=True)
        obj["input_ids"] = obj["input_ids"] + 100000 + i
        obj["aux_hidden_state"] = obj["aux_hidden_state"] * (1 + i / 50)
        torch.save(obj, rows / f"data_{i}.ckpt")
    with_ids = B.sglang_dump(tmp / "with_ids", 1, [2, 15, 27])
    without = B.sglang_dump(tmp / "without", 1, [2, 15, 27], with_ids=False)
    t_ids, r1 = timed(lambda: compare(train, with_ids, layer_ids=[1, 14, 26]), repeat=1)
    t_val, r2 = timed(lambda: compare(train, without, layer_ids=[1, 14, 26]), repeat=1)
    ok = "both ok" if r1.verdict == r2.verdict == "ok" else f"{r1.verdict}/{r2.verdict}"
    return ("find 1 sample among 60", t_val, t_ids, ok)


def bench_inspect(tmp: Path) -> tuple[str, float, float, str]:
    from hsdiff.inspection import inspect

    rows = tmp / "big" / "rows_0-2000"
    rows.mkdir(parents=True)
    aux = B.concat(0, [2, 15, 27])  # real states, repeated to ~1 GiB of float32
    reps = (2**30 // (aux.numel() * 4)) + 1
    aux = aux.repeat(reps, 1)
    torch.save(
        {"input_ids": B.states(0)["input_ids"].repeat(reps), "aux_hidden_state": aux.unsqueeze(0)}, rows / "data_0.ckpt"
    )
    (tmp / "big" / "config.json").write_text(
        '{"target_hidden_size": 576, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 14, 26]}}'
    )
    del aux

    def eager():
        t = torch.load(rows / "data_0.ckpt", weights_only=True)["aux_hidden_state"][0]
        return [float(t[:, s * 576 : (s + 1) * 576].norm(dim=1).median()) for s in range(3)]

    t_new, info = timed(lambda: inspect(tmp / "big"), repeat=1)
    t_old, med = timed(eager, repeat=1)
    got = [s["median"] for s in info.captures[0]["slot_norms"]]
    close = all(abs(a / b - 1) < 0.05 for a, b in zip(got, med))
    size = (rows / "data_0.ckpt").stat().st_size / 2**30
    return (
        f"inspect a {size:.1f} GiB SpecForge file",
        t_old,
        t_new,
        f"slot norm medians {'within 5%' if close else 'differ'} of the full pass",
    )


def micro() -> None:
    torch.set_num_threads(max(1, torch.get_num_threads()))
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        results = [bench_alignment(), bench_scan(tmp), bench_sample_search(tmp), bench_inspect(tmp)]
    print(f"{'benchmark':<40} {'baseline s':>11} {'hsdiff s':>9} {'speed-up':>9}  check")
    for name, base, new, check in results:
        print(f"{name:<40} {base:>11.3f} {new:>9.3f} {base / max(new, 1e-9):>8.1f}x  {check}")


def main() -> None:
    env = os.environ.get
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=("micro", "scale"))
    ap.add_argument("--sizes", default=env("HSDIFF_BENCH_SIZES", "0.2,1,4"), help="pair sizes in GB (0.2, 1, 2.2, 4)")
    ap.add_argument("--cases", default=env("HSDIFF_BENCH_CASES", "sizes,window,samples"))
    ap.add_argument("--samples", default=env("HSDIFF_BENCH_SAMPLES", "100,200,400"), help="training-set sizes")
    ap.add_argument("--no-write", action="store_true", help="print only: leave results JSON and docs page alone")
    a = ap.parse_args()
    if a.only != "scale":
        micro()
        print()
    if a.only != "micro":
        from benchmarks import scale

        split = lambda s: [x for x in s.replace(" ", "").split(",") if x]  # noqa: E731
        scale.main(split(a.sizes), split(a.cases), tuple(int(n) for n in split(a.samples)), write=not a.no_write)


if __name__ == "__main__":
    main()
