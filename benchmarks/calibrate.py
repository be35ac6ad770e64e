"""Calibration: how often hsdiff is right, wrong or silent, per confidence bin, over scenarios
generated from real SmolLM2-135M hidden states (``tests/scenarios``). Run with ``make calibrate``.

Each scenario knows the boundary of every training slot and whether the deployment should pass;
hsdiff is called in-process (``hsdiff.compare``) on files written in the engines' formats. Printed:
a markdown table (confidence bin -> fraction right / wrong / null), the wrong ids at confidence
>= 0.9 with their seeds, the fraction answered and the exits 0 that should have been 1. Replay one
scenario with ``--seed N --n 1 -v``.

Seeds are split (``tests/scenarios/heldout.py``): the decision constants were chosen on seeds
0..999 (:data:`FIT_SEEDS`, CI's among them); the published table runs on seeds from 100000
(:data:`HELD_OUT_SEEDS`), the scenarios and then the held-out deployments per target (SmolLM2 at 30,
61 and 126 layers, Gemma 3 270M; bf16, batched bf16, eager attention, fp8 e4m3 and e5m2).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.scenarios import generate  # noqa: E402
from tests.scenarios.heldout import FIT_SEEDS, HELD_OUT_SEEDS, TARGETS  # noqa: E402
from tests.scenarios.score import as_json, markdown, run, summarise  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--n", type=int, default=1000, help="number of scenarios (default 1000; 0: only the deployments and classes)"
    )
    ap.add_argument(
        "--seed",
        type=int,
        default=HELD_OUT_SEEDS.start,
        help=f"first scenario seed; scenarios use seed..seed+n-1 (default {HELD_OUT_SEEDS.start}: held out; "
        f"the constants were fitted on {FIT_SEEDS.start}..{FIT_SEEDS.stop - 1})",
    )
    ap.add_argument(
        "--deployments",
        type=int,
        default=400,
        help="held-out deployments per target and engine numerics, seeds seed..seed+N-1 (default 400)",
    )
    ap.add_argument(
        "--targets", default=",".join(TARGETS), help=f"targets of the deployments (default {','.join(TARGETS)})"
    )
    ap.add_argument(
        "--classes",
        type=int,
        default=40,
        help="held-out cases per named class of thin evidence (tests/scenarios/classes.py), seeds seed..seed+N-1 "
        "(default 40)",
    )
    ap.add_argument(
        "--class-names",
        default="",
        help="only these named classes, comma-separated (default: every class in tests/scenarios/classes.py)",
    )
    ap.add_argument(
        "--fingerprint",
        type=int,
        default=0,
        help="held-out deployments per target and engine numerics checked against a fingerprint "
        "(tests/scenarios/fingerprint.py), seeds seed..seed+N-1 in every row (default 0: none)",
    )
    ap.add_argument("--json", type=Path, default=None, help="write the summary and every outcome here")
    ap.add_argument("--examples", type=int, default=10, help="examples listed per failure kind")
    ap.add_argument(
        "--depths",
        default="",
        help="also run the fixed deep-target cases the constants were fitted on (tests/scenarios/deep.py) "
        "at these depths, e.g. 61,126, and print a table per depth (never published)",
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="print every scenario and its outcome")
    ap.add_argument(
        "--docs",
        action="store_true",
        help="rewrite the table between the calibrate markers of docs/calibration.md and "
        "benchmarks/results/calibration.json (the summary, without the outcomes)",
    )
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    import torch

    torch.set_num_threads(1)  # tiny tensors: threads only add contention
    t0 = time.perf_counter()
    s = scenarios_table(args) if args.n else None
    for d in args.depths.split(","):
        if d:
            print("\n" + deep_table(int(d), args.verbose))
    held = heldout_table(args) if args.deployments else ""
    print("\n" + held)
    named = classes_table(args) if args.classes else ""
    print("\n" + named)
    if args.fingerprint:
        fp = fingerprint_table(args)
        print("\n" + fp["table"])
        if args.docs and not set(FIT_SEEDS) & {*range(args.seed, args.seed + args.fingerprint)}:
            write_fingerprint(fp, args)
    held = "\n\n".join(x for x in (held, named) if x)
    wall = time.perf_counter() - t0
    print(f"\nmake calibrate: {wall / 60:.1f} min wall time ({wall:.0f} s)")
    fit = set(FIT_SEEDS) & {*range(args.seed, args.seed + max(args.n, args.deployments))}
    if args.docs and s is not None and args.n >= 1000 and not fit:
        write_results(s, args, held, wall)
    elif args.docs:
        print("docs page and results left alone: they hold a run of at least 1000 scenarios on held-out seeds")
    return 0


def scenarios_table(args: argparse.Namespace) -> dict:
    """The generated scenarios of seeds seed..seed+n-1: printed as a table per confidence bin (with the
    failures listed); returns their summary."""
    outcomes = []
    t0 = time.perf_counter()
    for i, seed in enumerate(range(args.seed, args.seed + args.n)):
        o = run(generate(seed))
        outcomes.append(o)
        if args.verbose:
            got = [(a.truth, a.got, round(a.confidence, 2), a.outcome) for a in o.slots]
            print(
                f"seed {seed}: {o.about}\n  -> {o.verdict} exit {o.exit_code} (should pass: {o.should_pass}) "
                f"{got} {o.error}"
            )
        elif (i + 1) % 100 == 0:
            print(f"  {i + 1}/{args.n} scenarios, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    s = summarise(outcomes, args.examples)
    print(markdown(s))
    for key in (
        "wrong_at_confidence_ge_0.9_examples",
        "wrong_exit_0_examples",
        "ok_with_null_ids_examples",
        "internal_error_examples",
    ):
        if s[key]:
            print(f"\n{key.replace('_', ' ')}:")
            for e in s[key]:
                print("  " + json.dumps(e))
    print(f"\n{args.n} scenarios in {time.perf_counter() - t0:.1f} s ({s['compare_seconds_total']} s in compare)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"summary": s, "outcomes": as_json(outcomes)}, indent=1) + "\n")
        print(f"JSON: {args.json}")
    return s


def heldout_table(args: argparse.Namespace) -> str:
    """The held-out deployments (``tests/scenarios/heldout.py``) of seeds seed..seed+deployments-1."""
    import tempfile

    from tests.scenarios import heldout

    targets = tuple(t for t in args.targets.split(",") if t)
    outcomes = []
    t0 = time.perf_counter()
    for i, seed in enumerate(range(args.seed, args.seed + args.deployments)):
        with tempfile.TemporaryDirectory(prefix="calibration-heldout-") as d:
            outcomes.append(heldout.outcome(heldout.deployment(seed, targets), Path(d)))
        if args.verbose:
            print(json.dumps(outcomes[-1]))
        elif (i + 1) % 50 == 0:
            print(f"  {i + 1}/{args.deployments} deployments, {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if args.json:
        path = args.json.with_name(args.json.stem + "-heldout.json")
        path.write_text(json.dumps(outcomes, indent=1) + "\n")
    return heldout.table(outcomes)


def fingerprint_table(args: argparse.Namespace) -> dict:
    """The held-out deployments checked against a fingerprint (``tests/scenarios/fingerprint.py``): for every
    target and engine numerics, the deployments of seeds seed..seed+fingerprint-1 (each seed's target drawn
    among that one target, its numerics set to the row's). Returns the table, the outcomes and the wall time."""
    import dataclasses
    import tempfile

    from tests.scenarios import fingerprint, heldout

    targets = tuple(t for t in args.targets.split(",") if t)
    outcomes = []
    t0 = time.perf_counter()
    partial = args.json.with_name(args.json.stem + "-fingerprint.jsonl") if args.json else None
    if partial:
        partial.write_text("")  # one outcome a line as they come: a run cut short keeps what it measured
    for t in targets:
        for noise in heldout.NOISES:
            for seed in range(args.seed, args.seed + args.fingerprint):
                d = dataclasses.replace(heldout.deployment(seed, (t,)), noise=noise)
                with tempfile.TemporaryDirectory(prefix="calibration-fingerprint-") as tmp:
                    outcomes.append(fingerprint.outcome(d, Path(tmp)))
                if partial:
                    with open(partial, "a") as f:
                        f.write(json.dumps(outcomes[-1]) + "\n")
                if args.verbose:
                    print(json.dumps(outcomes[-1]), flush=True)
            print(f"  fingerprint {t} {noise}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        fingerprint.forget(t)
    if args.json:
        path = args.json.with_name(args.json.stem + "-fingerprint.json")
        path.write_text(json.dumps(outcomes, indent=1) + "\n")
    return {"table": fingerprint.table(outcomes), "outcomes": outcomes, "wall": time.perf_counter() - t0}


def classes_table(args: argparse.Namespace) -> str:
    """The named classes of thin evidence (``tests/scenarios/classes.py``), seeds seed..seed+classes-1 each."""
    import tempfile

    from tests.scenarios import classes

    names = [n for n in args.class_names.split(",") if n] or list(classes.CLASSES)
    unknown = sorted(set(names) - set(classes.CLASSES))
    if unknown:
        raise SystemExit(f"unknown class(es) {', '.join(unknown)}; the classes: {', '.join(classes.CLASSES)}")
    outcomes = []
    for make in (classes.CLASSES[n] for n in names):
        for seed in range(args.seed, args.seed + args.classes):
            with tempfile.TemporaryDirectory(prefix="calibration-class-") as d:
                outcomes.append(classes.outcome(make(seed), Path(d)))
            if args.verbose:
                print(json.dumps(outcomes[-1]))
    if args.json:
        path = args.json.with_name(args.json.stem + "-classes.json")
        path.write_text(json.dumps(outcomes, indent=1) + "\n")
    return classes.table(outcomes)


def deep_table(depth: int, verbose: bool) -> str:
    """Every deep-target deployment at ``depth`` (off by one layer or right; configured captures or every
    boundary; training labels absent, right or one off), as a table."""
    import tempfile

    from tests.scenarios import deep

    outcomes = []
    for c in deep.cases(depth):
        with tempfile.TemporaryDirectory(prefix="calibration-deep-") as d:
            outcomes.append(deep.outcome(c, Path(d)))
        if verbose:
            print(json.dumps(outcomes[-1]))
    return deep.table(depth, outcomes)


PAGE = ROOT / "docs" / "calibration.md"
FINGERPRINT_RESULTS = ROOT / "benchmarks" / "results" / "calibration-fingerprint.json"
FP_BEGIN, FP_END = "<!-- calibrate-fingerprint:begin -->", "<!-- calibrate-fingerprint:end -->"
RESULTS = ROOT / "benchmarks" / "results" / "calibration.json"
BEGIN, END = "<!-- calibrate:begin -->", "<!-- calibrate:end -->"


def write_results(s: dict, args: argparse.Namespace, held: str, wall: float) -> None:
    """The docs page's tables (the scenarios, then the held-out deployments per target) and the summary JSON,
    from this run (seeds ``seed..seed+n-1``)."""
    import platform
    import subprocess

    commit = subprocess.run(
        ["git", "-C", str(ROOT), "log", "-1", "--format=%h %cs"], capture_output=True, text=True
    ).stdout.strip()
    about = (
        f"Last run: held-out seeds {args.seed}..{args.seed + args.n - 1} (the constants were chosen on "
        f"{FIT_SEEDS.start}..{FIT_SEEDS.stop - 1}), hsdiff at {commit or 'an unknown commit'}, "
        f"Python {platform.python_version()}, {wall / 60:.1f} min wall time on {os.cpu_count()} cores."
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "seeds": [args.seed, args.seed + args.n - 1],
                "fit_seeds": [FIT_SEEDS.start, FIT_SEEDS.stop - 1],
                "commit": commit,
                "wall_seconds": round(wall),
                "summary": s,
            },
            indent=1,
        )
        + "\n"
    )
    body = PAGE.read_text()
    if BEGIN in body and END in body:
        head, rest = body.split(BEGIN, 1)
        tables = f"\n{held}\n" if held else ""
        PAGE.write_text(f"{head}{BEGIN}\n{about}\n\n{markdown(s)}\n{tables}{END}{rest.split(END, 1)[1]}")
        print(f"{PAGE.relative_to(ROOT)} table and {RESULTS.relative_to(ROOT)} rewritten")


def write_fingerprint(fp: dict, args: argparse.Namespace) -> None:
    """The fingerprint rows: between the fingerprint markers of the docs page, and every
    outcome in ``benchmarks/results/calibration-fingerprint.json``."""
    import platform
    import subprocess

    from tests.scenarios import fingerprint

    commit = subprocess.run(
        ["git", "-C", str(ROOT), "log", "-1", "--format=%h %cs"], capture_output=True, text=True
    ).stdout.strip()
    last = args.seed + args.fingerprint - 1
    about = (
        f"Last run: held-out seeds {args.seed}..{last} in every target and numerics row, hsdiff at "
        f"{commit or 'an unknown commit'}, Python {platform.python_version()}, {fp['wall'] / 60:.1f} min wall "
        f"time on {os.cpu_count()} cores."
    )
    FINGERPRINT_RESULTS.write_text(
        json.dumps(
            {
                "seeds": [args.seed, last],
                "fit_seeds": [FIT_SEEDS.start, FIT_SEEDS.stop - 1],
                "commit": commit,
                "wall_seconds": round(fp["wall"]),
                "summary": fingerprint.summary(fp["outcomes"]),
                "outcomes": fp["outcomes"],
            },
            indent=1,
        )
        + "\n"
    )
    body = PAGE.read_text()
    if FP_BEGIN in body and FP_END in body:
        head, rest = body.split(FP_BEGIN, 1)
        PAGE.write_text(f"{head}{FP_BEGIN}\n{about}\n\n{fp['table']}\n{FP_END}{rest.split(FP_END, 1)[1]}")
        print(f"{PAGE.relative_to(ROOT)} fingerprint table rewritten")
    print(f"{FINGERPRINT_RESULTS.relative_to(ROOT)} rewritten")


if __name__ == "__main__":
    raise SystemExit(main())
