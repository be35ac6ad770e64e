"""Run by ``make wheel-check`` with the Python of a clean venv into which only the built wheel was
installed: no extra is there, the package is the installed one (pure Python, typed), the seed gate
fails on the wrong ids and passes on the fix, and the venv stays under its size budget.

Prints one line per check and ``N passed, N failed``; exits 1 when a check failed.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEED = "fixtures/seed"
#: The largest clean core venv allowed (MB), pip and setuptools included.
BUDGET_MB = 150
EXTRAS = ("torch", "pandas", "matplotlib", "transformers", "dask", "fsspec", "zstandard")


def venv_mb(prefix: Path) -> float:
    """Bytes of every file under ``prefix`` (as ``du --apparent-size``), in MB (10^6)."""
    return sum(f.stat().st_size for f in prefix.rglob("*") if f.is_file() and not f.is_symlink()) / 1e6


def hsdiff(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    exe = Path(sys.executable).parent / "hsdiff"
    t = time.perf_counter()
    r = subprocess.run(
        [str(exe), *args], cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""}
    )
    return r, time.perf_counter() - t


def main() -> int:
    results: list[tuple[str, bool, str]] = []

    def check(name: str, ok: bool, detail: str = "") -> None:
        results.append((name, ok, detail))
        print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)

    present = [m for m in EXTRAS if importlib.util.find_spec(m) is not None]
    check("no extra's package is installed", not present, ", ".join(present))
    import hsdiff as package

    where = Path(package.__file__).resolve()
    check("hsdiff is the installed wheel, not the source tree", "site-packages" in where.parts, str(where.parent))
    check("the wheel ships py.typed", (where.parent / "py.typed").is_file())
    check("the wheel is pure Python (no C loop)", importlib.util.find_spec("hsdiff._fused") is None)

    r, s = hsdiff("compare", f"{SEED}/train", f"{SEED}/infer-wrong", "--layer-ids=-1,2,30", "-q")
    check(
        "compare on the wrong ids: exit 1, MISMATCH",
        r.returncode == 1 and "verdict: MISMATCH" in r.stdout,
        f"{s:.1f} s",
    )
    draft = ("--target-config", f"{SEED}/model/config.json", "-q")
    r, s = hsdiff(
        "gate", f"{SEED}/train", f"{SEED}/infer-wrong", "--draft-config", f"{SEED}/draft-wrong/config.json", *draft
    )
    check(
        "gate on the wrong ids [-1, 2, 30]: exit 1, MISMATCH",
        r.returncode == 1 and "compare mismatch" in r.stdout,
        f"{s:.1f} s",
    )
    r, s = hsdiff(
        "gate",
        f"{SEED}/train",
        f"{SEED}/infer-fixed-neighbours",
        "--draft-config",
        f"{SEED}/draft-fixed/config.json",
        *draft,
    )
    check("gate on the fix [2, 30, 58]: exit 0, PASS", r.returncode == 0 and "gate: PASS" in r.stdout, f"{s:.1f} s")
    r, _ = hsdiff("compare", f"{SEED}/train", f"{SEED}/infer-wrong", "--layer-ids=-1,2,30", "-q", "--plot", "out")
    check(
        "--plot names the extra it needs",
        r.returncode == 2 and r.stderr.strip().endswith("pip install 'hsdiff[plot]'"),
        r.stderr.strip(),
    )
    mb = venv_mb(Path(sys.prefix))
    check(f"the venv is under {BUDGET_MB} MB", mb < BUDGET_MB, f"{mb:.0f} MB")
    failed = sum(not ok for _, ok, _ in results)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
