"""Bounded resources: huge damaged files cost little memory; a long log is read in one streaming pass.

Every measurement runs in one fresh process (``tests/badinput/resource_probe.py``): a long test
session keeps freed memory resident, and reading there could reuse it unseen. Memory is the rise of
the resident set (high-water mark and sampled size), so numpy, torch and C allocations count too.

``HSDIFF_LOG_LINES`` sets the length of the generated log (default 300 000 lines, a few seconds;
set it to millions for the full-size check).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

GIB = 2**30
MIB = 2**20
BOUND = 64 * MIB
LOG_LINES = int(os.environ.get("HSDIFF_LOG_LINES", "300000"))
HAS_DEBUGLOG = importlib.util.find_spec("hsdiff.readers.debuglog") is not None
ROOT = Path(__file__).resolve().parent.parent


def _sparse(path: Path, head: bytes, size: int) -> Path:
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)  # the rest is a hole: no disk, no time
    return path


def _npy_head(shape: str) -> bytes:
    header = ("{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }").encode()
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header


#: Multi-GB files (sparse) whose header is damaged: name -> (first bytes, size).
BIG = {
    # header length within the format's 100 MB limit, header bytes a hole of zeros
    "zero-header.safetensors": (struct.pack("<Q", 99 * MIB) + b"{", 4 * GIB),
    # header length past the end of the file
    "lying-length.safetensors": (struct.pack("<Q", 5 * GIB) + b"{", 4 * GIB),
    # header is JSON garbage right away, then a hole
    "garbage-header.safetensors": (struct.pack("<Q", 90 * MIB) + b'{"a": [1, 2, ', 4 * GIB),
    # zip signature, no central directory anywhere
    "no-directory.pt": (b"PK\x03\x04" + b"\x00" * 26, 4 * GIB),
    # gzip header, then zeros: an invalid deflate stream
    "zeros.ckpt.gz": (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 4 * GIB),
    # npy whose header promises 2**40 floats
    "promise.npy": (_npy_head("(1099511627776,)"), 4 * GIB),
    # legacy torch pickle opcode, then zeros: refused on size before any read
    "legacy.pt": (b"\x80\x02", 4 * GIB),
    # legacy torch small enough to be read: the unpickler stops at the first bad opcode
    "legacy-small.pt": (b"\x80\x02", GIB + GIB // 2),
    # unrecognised binary
    "zeros.bin": (b"", 4 * GIB),
    # a '.log' of NUL bytes: one endless line, read up to the line limit, the rest skipped
    "nul.log": (b"", 256 * MIB),
}


def _write_bomb(path: Path) -> Path:
    zeros = gzip.compress(b"\x00" * (16 * MIB), compresslevel=9)
    with open(path, "wb") as f:
        f.write(gzip.compress(b"PK\x03\x04"))
        for _ in range(64):  # 1 GiB when expanded
            f.write(zeros)
    return path


def _write_log(path: Path, lines: int, prints: int) -> None:
    noise = [
        "[2026-11-30 01:02:03 TP0] Decode batch. #running-req: 1, #token: 1234, gen throughput (token/s): 55.2\n",
        "INFO 11-30 01:02:03 scheduler: waiting for requests\n",
        "\n",
    ]
    every = lines // prints
    with open(path, "w", encoding="utf-8") as f:
        buf = []
        for i in range(lines):
            if i % every == every - 1:
                s = (i // every) % 4
                buf.append(
                    f"aux_hidden_states[{s}][:2, :5] = tensor([[ 0.0295, -0.0114, -0.0170, -0.0179, -0.{s}183],\n"
                    "        [ 0.0100,  0.0200,  0.0300,  0.0400,  0.0500]], dtype=torch.bfloat16)\n"
                )
            else:
                buf.append(noise[i % 3])
            if len(buf) >= 10000:
                f.writelines(buf)
                buf.clear()
        f.writelines(buf)


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict[str, dict]:
    """Every case measured in one fresh process; the big files are removed afterwards."""
    d = tmp_path_factory.mktemp("resources")
    tasks: list[dict] = [{"kind": "sanity", "name": "sanity"}]
    made: list[Path] = []
    for name, (head, size) in BIG.items():
        if name.endswith(".log") and not HAS_DEBUGLOG:
            continue
        made.append(_sparse(d / name, head, size))
        tasks.append({"kind": "read", "name": name, "path": str(made[-1])})
    made.append(_write_bomb(d / "data_0.ckpt.gz"))
    tasks.append({"kind": "read", "name": "bomb", "path": str(made[-1])})
    if HAS_DEBUGLOG:
        _write_log(d / "server.log", LOG_LINES, prints=4)
        made.append(d / "server.log")
        tasks.append({"kind": "log", "name": "log", "path": str(made[-1])})
    (d / "tasks.json").write_text(json.dumps(tasks))
    try:
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        p = subprocess.run(
            [sys.executable, "-m", "tests.badinput.resource_probe", str(d / "tasks.json")],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        for f in made:
            f.unlink(missing_ok=True)
    assert p.returncode == 0, p.stderr
    results = json.loads(p.stdout.strip().splitlines()[-1])
    return {t["name"]: r for t, r in zip(tasks, results)}


def test_the_measure_sees_allocations(measured: dict[str, dict]) -> None:
    """The measure itself, in the same process: a 200 MiB array shows up, a small one does not."""
    r = measured["sanity"]
    assert r["big"] > 150 * MIB, r
    assert r["small"] < BOUND, r


@pytest.mark.parametrize("name", sorted(BIG))
def test_multi_gb_file_with_corrupt_header_costs_little_memory(measured: dict[str, dict], name: str) -> None:
    if name not in measured:
        pytest.skip("hsdiff.readers.debuglog is not there yet")
    r = measured[name]
    size = BIG[name][1]
    if name.endswith(".log"):
        assert r["outcome"] in ("error", "ok"), r  # the log reader may find nothing: an HsdiffError, or no captures
    else:
        assert r["outcome"] == "error", r
        assert name in r["message"], r
    assert r["growth"] < BOUND, (
        f"{name}: memory rose by {r['growth'] / MIB:.0f} MiB ({r['how']}) reading {size / GIB:.2f} GiB"
    )
    assert r["seconds"] < 20, r


def test_gzip_bomb_memory_is_flat(measured: dict[str, dict]) -> None:
    """Decompression streams in 1 MiB pieces to a temporary file: memory does not follow the expansion."""
    r = measured["bomb"]
    assert r["outcome"] == "error" and "bomb" in r["message"], r
    assert r["growth"] < BOUND, r


@pytest.mark.skipif(not HAS_DEBUGLOG, reason="hsdiff.readers.debuglog is not there yet")
def test_log_with_many_lines_is_read_in_one_streaming_pass(measured: dict[str, dict]) -> None:
    r = measured["log"]
    assert r["outcome"] == "ok" and r["message"] == "4", r  # the prints spread to the end of the log were all found
    assert r["opens"] == 1 and r["seeks"] == 0, r
    assert r["bytes"] == r["size"], f"{r['bytes']} bytes handed out for a file of {r['size']}: not one pass"
    assert r["growth"] < min(BOUND, max(16 * MIB, r["size"] // 2)), r
    stats = os.environ.get("HSDIFF_RESOURCE_STATS")
    if stats:
        Path(stats).write_text(json.dumps({"lines": LOG_LINES, **r}, indent=2))
