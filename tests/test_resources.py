"""Bounded resources: huge damaged files cost little memory; a long log is read in one streaming pass.

Memory is the rise of the process's resident-set high-water mark over the call (``VmHWM`` reset
through ``/proc/self/clear_refs``), so allocations by numpy, torch and the C libraries count too;
where the kernel does not offer that, Python's own allocations are measured with tracemalloc.

``HSDIFF_LOG_LINES`` sets the length of the generated log (default 300 000 lines, a few seconds;
set it to millions to run the full-size check).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import struct
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from hsdiff.errors import HsdiffError
from hsdiff.readers import ReadContext, read_file, scan

GIB = 2**30
MIB = 2**20
BOUND = 64 * MIB
LOG_LINES = int(os.environ.get("HSDIFF_LOG_LINES", "300000"))
HAS_DEBUGLOG = importlib.util.find_spec("hsdiff.readers.debuglog") is not None


def _status(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def peak_growth(fn: Callable[[], object]) -> tuple[object, int, str]:
    """``fn()``'s result (or the exception it raised), how much memory it took at its peak, and how that was measured."""
    rss = _status("VmRSS")
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        how = "VmHWM"
    except OSError:
        how = "tracemalloc"
    if how == "tracemalloc" or rss is None:
        tracemalloc.start()
    try:
        try:
            out: object = fn()
        except Exception as e:  # noqa: BLE001 - returned for the caller to check
            out = e
        if how == "VmHWM" and rss is not None:
            hwm = _status("VmHWM") or rss
            return out, max(0, hwm - rss), how
        return out, tracemalloc.get_traced_memory()[1], "tracemalloc"
    finally:
        if tracemalloc.is_tracing():
            tracemalloc.stop()


def test_peak_growth_sees_allocations() -> None:
    """The measure itself: a 200 MiB array shows up, a small one does not."""
    import numpy as np

    _, grew, how = peak_growth(lambda: np.ones(200 * MIB // 8).sum())
    assert grew > 150 * MIB, (grew, how)
    _, grew, how = peak_growth(lambda: np.ones(1000).sum())
    assert grew < BOUND, (grew, how)


# --------------------------------------------------------------------------- multi-GB files with damaged headers


def _sparse(path: Path, head: bytes, size: int) -> Path:
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)  # the rest is a hole: no disk, no time
    return path


def _npy_head(shape: str) -> bytes:
    header = ("{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }").encode()
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header


BIG = {
    # header length within the format's 100 MB limit, header bytes a hole of zeros
    "zero-header.safetensors": (lambda: struct.pack("<Q", 99 * MIB) + b"{", 4 * GIB),
    # header length past the end of a 4 GiB file
    "lying-length.safetensors": (lambda: struct.pack("<Q", 5 * GIB) + b"{", 4 * GIB),
    # header is JSON garbage right away, then a 4 GiB hole
    "garbage-header.safetensors": (lambda: struct.pack("<Q", 90 * MIB) + b'{"a": [1, 2, ', 4 * GIB),
    # zip signature, no central directory anywhere
    "no-directory.pt": (lambda: b"PK\x03\x04" + b"\x00" * 26, 4 * GIB),
    # gzip header, then zeros: an invalid deflate stream
    "zeros.ckpt.gz": (lambda: b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 4 * GIB),
    # npy whose header promises 2**40 floats
    "promise.npy": (lambda: _npy_head("(1099511627776,)"), 4 * GIB),
    # legacy torch pickle opcode, then zeros: refused on size before any read
    "legacy.pt": (lambda: b"\x80\x02", 4 * GIB),
    # legacy torch small enough to be read: the unpickler stops at the first bad opcode
    "legacy-small.pt": (lambda: b"\x80\x02", GIB + GIB // 2),
    # unrecognised binary
    "zeros.bin": (lambda: b"", 4 * GIB),
}


@pytest.mark.parametrize("name", sorted(BIG))
def test_multi_gb_file_with_corrupt_header_costs_little_memory(tmp_path: Path, name: str) -> None:
    head, size = BIG[name]
    p = _sparse(tmp_path / name, head(), size)
    try:
        t0 = time.monotonic()
        out, grew, how = peak_growth(lambda: read_file(p, ReadContext(side="infer", root=tmp_path)))
        took = time.monotonic() - t0
    finally:
        p.unlink()
    assert isinstance(out, HsdiffError), f"{name}: {out!r}"
    assert name in str(out)
    assert grew < BOUND, f"{name}: memory rose by {grew / MIB:.0f} MiB ({how}) reading a {size / GIB:.1f} GiB file"
    assert took < 20, f"{name}: {took:.1f} s"


@pytest.mark.skipif(not HAS_DEBUGLOG, reason="hsdiff.readers.debuglog is not there yet")
def test_sparse_gigabyte_log_without_newlines(tmp_path: Path) -> None:
    """A 256 MiB '.log' of NUL bytes (one endless line): read up to the line limit, the rest skipped, memory flat."""
    p = _sparse(tmp_path / "server.log", b"", 256 * MIB)
    try:
        out, grew, how = peak_growth(lambda: read_file(p, ReadContext(side="infer", root=tmp_path)))
    finally:
        p.unlink()
    assert isinstance(out, (HsdiffError, list)), repr(out)
    assert grew < BOUND, f"memory rose by {grew / MIB:.0f} MiB ({how})"


def test_gzip_bomb_memory_is_flat(tmp_path: Path) -> None:
    """Decompression streams in 1 MiB pieces to a temporary file: memory does not follow the expansion."""
    zeros = gzip.compress(b"\x00" * (16 * MIB), compresslevel=9)
    p = tmp_path / "data_0.ckpt.gz"
    with open(p, "wb") as f:
        f.write(gzip.compress(b"PK\x03\x04"))
        for _ in range(64):  # 1 GiB when expanded
            f.write(zeros)
    out, grew, how = peak_growth(lambda: read_file(p, ReadContext(side="train", root=tmp_path)))
    assert isinstance(out, HsdiffError) and "bomb" in str(out), repr(out)
    assert grew < BOUND, f"memory rose by {grew / MIB:.0f} MiB ({how})"


# --------------------------------------------------------------------------- a long log, one pass


class _CountingFile:
    """A binary file that counts the bytes handed out and refuses to go back."""

    def __init__(self, f, counter: dict):
        self._f, self._c = f, counter

    def _count(self, data):
        self._c["bytes"] += len(data)
        return data

    def read(self, *a):
        return self._count(self._f.read(*a))

    def readline(self, *a):
        return self._count(self._f.readline(*a))

    def __iter__(self):
        for line in self._f:
            yield self._count(line)

    def seek(self, offset, whence=0):
        if not (whence == 1 and offset == 0):
            self._c["seeks"] += 1
        return self._f.seek(offset, whence)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()

    def __getattr__(self, name):
        return getattr(self._f, name)


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
                buf.append(f"aux_hidden_states[{s}][:2, :5] = tensor([[ 0.0295, -0.0114, -0.0170, -0.0179, -0.{s}183],\n"
                           "        [ 0.0100,  0.0200,  0.0300,  0.0400,  0.0500]], dtype=torch.bfloat16)\n")
            else:
                buf.append(noise[i % 3])
            if len(buf) >= 10000:
                f.writelines(buf)
                buf.clear()
        f.writelines(buf)


@pytest.mark.skipif(not HAS_DEBUGLOG, reason="hsdiff.readers.debuglog is not there yet")
def test_log_with_many_lines_is_read_in_one_streaming_pass(tmp_path: Path, monkeypatch) -> None:
    from hsdiff.readers import debuglog

    p = tmp_path / "server.log"
    _write_log(p, LOG_LINES, prints=4)
    size = p.stat().st_size
    counter = {"opens": 0, "bytes": 0, "seeks": 0}

    def counting_open(path, mode="r", *a, **k):
        f = open(path, mode, *a, **k)
        if Path(path) == p:
            counter["opens"] += 1
            return _CountingFile(f, counter)
        return f

    monkeypatch.setattr(debuglog, "open", counting_open, raising=False)
    t0 = time.monotonic()
    out, grew, how = peak_growth(lambda: debuglog.read(p, ReadContext(side="infer", root=tmp_path)))
    took = time.monotonic() - t0
    assert isinstance(out, list), repr(out)
    assert len(out) == 4, out  # the prints at the end of the log were found too
    assert counter["opens"] == 1 and counter["seeks"] == 0, counter
    assert counter["bytes"] == size, f"{counter['bytes']} bytes handed out for a file of {size}: not one pass"
    assert grew < min(BOUND, max(16 * MIB, size // 2)), f"memory rose by {grew / MIB:.0f} MiB ({how}) for a {size / MIB:.0f} MiB log"
    rate = LOG_LINES / max(took, 1e-9)
    stats = os.environ.get("HSDIFF_RESOURCE_STATS")
    if stats:
        Path(stats).write_text(json.dumps({"lines": LOG_LINES, "bytes": size, "seconds": took, "lines_per_s": rate,
                                           "memory_growth": grew, "measured_with": how}))


def test_scan_of_a_directory_with_a_huge_sparse_dump_stays_flat(tmp_path: Path) -> None:
    """Through scan(): a directory holding a 4 GiB damaged file next to nothing else is an input error, cheaply."""
    d = tmp_path / "dump"
    d.mkdir()
    p = _sparse(d / "req-0.safetensors", struct.pack("<Q", 99 * MIB) + b"{", 4 * GIB)
    try:
        out, grew, how = peak_growth(lambda: scan(d, "infer"))
    finally:
        p.unlink()
    assert isinstance(out, HsdiffError) and "req-0.safetensors" in str(out), repr(out)
    assert grew < BOUND, f"memory rose by {grew / MIB:.0f} MiB ({how})"
