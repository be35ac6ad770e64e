"""What installing hsdiff costs: a clean venv with the wheel of ``make dist`` alone, and with every extra.

    python tools/install_size.py [--write]

Each venv is made fresh under ``out/`` (``python -m venv``, then ``pip install`` of the wheel; torch is
held to ``constraints.txt``'s CPU build, as a user without a GPU gets it). Prints a Markdown table of
their sizes and install times; ``--write`` puts it between the ``install-size`` markers of
``docs/install.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "install.md"
BEGIN, END = "<!-- install-size:begin -->", "<!-- install-size:end -->"
OUT = ROOT / "out" / "install-size"


def mb(path: Path) -> float:
    """Bytes of the files under ``path`` (apparent size, links not followed), in MB (10^6)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) / 1e6


def venv(name: str, spec: str) -> dict:
    d = OUT / name
    shutil.rmtree(d, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(d)], check=True)
    base = mb(d)
    t = time.perf_counter()
    subprocess.run(
        [str(d / "bin/python"), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
        + ["-c", str(ROOT / "constraints.txt"), spec],
        check=True,
    )
    seconds = time.perf_counter() - t
    freeze = subprocess.run(
        [str(d / "bin/python"), "-m", "pip", "freeze", "--all"], capture_output=True, text=True, check=True
    ).stdout.split()
    return {"name": name, "mb": mb(d), "base_mb": base, "seconds": seconds, "packages": len(freeze)}


def table(wheel: Path, rows: list[dict]) -> str:
    py = platform.python_version()
    lines = [
        f"Measured by `make install-size` ({wheel.name}, {wheel.stat().st_size / 1e3:.0f} kB; Python {py}, "
        f"{platform.machine()}, {os.cpu_count()} cores, pip's cache warm; the times move with the machine's load, "
        "the sizes do not): each a fresh `python -m venv`, pip and setuptools included "
        f"({rows[0]['base_mb']:.0f} MB of it).",
        "",
        "| install | venv size | packages | install time |",
        "|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| `{r['name']}` | {r['mb']:.0f} MB | {r['packages']} | {r['seconds']:.0f} s |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the table in docs/install.md")
    args = ap.parse_args()
    wheels = sorted((ROOT / "dist").glob("hsdiff-*-py3-none-any.whl"))
    if not wheels:
        raise SystemExit("no wheel in dist/: run make dist")
    wheel = wheels[-1]
    rows = [
        venv("pip install hsdiff", str(wheel)),
        venv("pip install 'hsdiff[all]'", f"{wheel}[all]"),
    ]
    text = table(wheel, rows)
    print(text)
    if args.write:
        body = PAGE.read_text()
        head, rest = body.split(BEGIN, 1)
        PAGE.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.split(END, 1)[1]}")
        print(f"{PAGE.relative_to(ROOT)} rewritten")


if __name__ == "__main__":
    main()
