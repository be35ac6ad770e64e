"""What every benchmark table is stamped with, and how a table is written between the markers of its docs page."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The docs page that publishes each section's table (between ``<!-- bench:SECTION:begin -->`` and ``...:end -->``).
PAGES = {
    "scale": ROOT / "docs" / "benchmarks.md",
    "audit": ROOT / "docs" / "audit.md",
    "central": ROOT / "docs" / "audit.md",
}


def machine() -> dict:
    """Commit (of the work tree, with a + when it has changes), date, machine and the load before the run."""
    git = ["git", "-C", str(ROOT)]
    commit = subprocess.run(
        git + ["log", "-1", "--format=%h %cs"], capture_output=True, text=True, check=False
    ).stdout.strip()
    dirty = subprocess.run(
        git + ["status", "--porcelain", "--", "hsdiff", "benchmarks", ":!benchmarks/results"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return {
        "commit": commit + (" (+ uncommitted changes)" if dirty else ""),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="minutes"),
        "machine": f"{os.cpu_count()} cores, "
        f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, "
        f"{platform.machine()}, Python {platform.python_version()}",
        "load": round(os.getloadavg()[0], 1),
    }


def line(m: dict, load_after: float | None = None) -> str:
    load = f"{m['load']}" + (f"–{load_after:.1f}" if load_after is not None else "")
    return f"Last run {m['date']} on {m['machine']}, hsdiff at {m['commit']}; 1-minute load average {load}."


def write_page(section: str, text: str) -> bool:
    """Replace what lies between ``<!-- bench:SECTION:begin -->`` and ``...:end -->`` in the section's page."""
    page = PAGES[section]
    begin, end = f"<!-- bench:{section}:begin -->", f"<!-- bench:{section}:end -->"
    body = page.read_text()
    if begin not in body or end not in body:
        return False
    head, rest = body.split(begin, 1)
    page.write_text(f"{head}{begin}\n{text}\n{end}{rest.split(end, 1)[1]}")
    return True


def publish(result: dict, table: Callable[[dict], str], path: Path, section: str, *, write: bool) -> None:
    """Stamp the load after the run, print the table, and (``write``) save the JSON and the docs page's section."""
    result["load_after"] = round(os.getloadavg()[0], 1)
    text = table(result)
    print(text)
    if write:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1) + "\n")
        write_page(section, text)


def peak_rss() -> int:
    """This process's own high-water mark of resident memory, in bytes (VmHWM)."""
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) * 1024 for x in f if x.startswith("VmHWM"))
