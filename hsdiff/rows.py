"""Reading tensors a few rows at a time: bounded memory on multi-GB dumps.

A :class:`~hsdiff.model.Capture` whose file allows it (safetensors, memory-mapped ``torch.save``)
reads rows ``[i0, i1)`` alone, as float32; anything else is loaded once and sliced. :func:`chunks`
walks rows in pieces of about :data:`CHUNK_BYTES` with the next piece read on a second thread, so
that reading and computing overlap on two cores. :class:`RowStats` collects, from exactly the rows
read, what is no hidden state (NaN/Inf, all-zero rows) for the data-quality warnings.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from .model import Capture

__all__ = ["CHUNK_BYTES", "RowStats", "chunks", "extent", "gather_columns", "give_back_freed_memory", "read", "read_at",
           "source", "threads"]

#: Rows per chunk are chosen so that one chunk of one side holds about this many float32 bytes.
CHUNK_BYTES = 8 * 2**20


@dataclass
class RowStats:
    """What the rows read of one tensor hold: NaN/Inf values, all-zero rows, and each row's norm (the
    norm profile the pictures draw). With ``tokens`` given, each row counts once however often it is
    read, and :meth:`norms_read` gives the norms of the rows read with their positions."""

    tokens: int | None = None
    rows: int = 0
    nonfinite: int = 0
    zero_rows: int = 0
    nonzero: bool = False
    _seen: torch.Tensor | None = None
    _norms: torch.Tensor | None = None

    def add(self, x: torch.Tensor, start: int | None = None) -> torch.Tensor | None:
        """Count rows ``x`` (read at token ``start``); the norms of the rows counted (None: none new)."""
        new = None
        if self.tokens is not None and start is not None:
            if self._seen is None:
                self._seen = torch.zeros(self.tokens, dtype=torch.bool)
                self._norms = torch.zeros(self.tokens)
            new = ~self._seen[start : start + x.shape[0]]
            if not bool(new.any()):
                return None
            self._seen[start : start + x.shape[0]] = True
            if bool(new.all()):
                new = None
            else:
                x = x[new]
        self.rows += int(x.shape[0])
        if not x.numel():
            return torch.zeros(x.shape[0])
        norms = self._count(x)
        if self._norms is not None and start is not None:
            where = self._norms[start : start + len(norms) if new is None else start + len(new)]
            if new is None:
                where.copy_(norms)
            else:
                where[new] = norms
        return norms

    def _count(self, x: torch.Tensor) -> torch.Tensor:
        """Count NaN/Inf values and all-zero rows of ``x``; its row norms. A row's norm is finite and
        non-zero for nearly every row, so values are looked at only in the rows where it is not."""
        norms = x.norm(dim=1)
        odd = ~torch.isfinite(norms) | (norms == 0)
        if bool(odd.any()):
            rows = x[odd]
            self.nonfinite += int((~torch.isfinite(rows)).sum())
            amax = rows.abs().amax(dim=1)
            self.zero_rows += int((amax == 0).sum())
            self.nonzero = self.nonzero or bool((amax != 0).any()) or bool((~odd).any())
        else:
            self.nonzero = True
        return norms

    def add_at(self, x: torch.Tensor, positions: list[int]) -> None:
        """Rows ``x`` read at token ``positions`` (ascending, each once)."""
        if self.tokens is None or not positions:
            return
        if self._seen is None:
            self._seen = torch.zeros(self.tokens, dtype=torch.bool)
            self._norms = torch.zeros(self.tokens)
        pos = torch.tensor(positions, dtype=torch.long)
        new = ~self._seen[pos]
        if not bool(new.any()):
            return
        x, pos = x[new], pos[new]
        self._seen[pos] = True
        self.rows += int(x.shape[0])
        assert self._norms is not None
        self._norms[pos] = self._count(x)

    def norms_read(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Norms of the rows read and their token positions (ascending); None if nothing was read."""
        if self._seen is None or self._norms is None or not bool(self._seen.any()):
            return None
        pos = torch.nonzero(self._seen).flatten()
        return self._norms[pos], pos


def source(cap: Capture) -> torch.Tensor | Capture:
    """What rows are read from: the capture itself when its file gives rows alone, else its tensor loaded once."""
    return cap if cap.reads_rows else cap.load().float()


def extent(src: torch.Tensor | Capture) -> tuple[int, int]:
    """Tokens and width of a tensor or a capture."""
    if isinstance(src, torch.Tensor):
        return int(src.shape[0]), int(src.shape[1])
    shape = src.shape or ()
    return int(src.tokens or 0), int(shape[-1]) if shape else 0


def read(src: torch.Tensor | Capture, i0: int, i1: int) -> torch.Tensor:
    """Rows ``[i0, i1)`` as float32."""
    return src[i0:i1] if isinstance(src, torch.Tensor) else src.read_rows(i0, i1)


def chunks(src: torch.Tensor | Capture, i0: int, i1: int, step: int | None = None) -> Iterator[torch.Tensor]:
    """Rows ``[i0, i1)`` in chunks of about :data:`CHUNK_BYTES`; from a file, the next chunk is read on
    a second thread while the caller works on the current one."""
    width = max(1, extent(src)[1])
    step = step or max(1, CHUNK_BYTES // (4 * width))
    starts = list(range(i0, i1, step))
    if isinstance(src, torch.Tensor) or len(starts) < 2:
        for a in starts:
            yield read(src, a, min(a + step, i1))
        return
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(read, src, starts[0], min(starts[0] + step, i1))
        for k in range(len(starts)):
            x = pending.result()
            if k + 1 < len(starts):
                a = starts[k + 1]
                pending = pool.submit(read, src, a, min(a + step, i1))
            yield x


def gather_columns(src: torch.Tensor | Capture, cols: torch.Tensor, tokens: int) -> torch.Tensor:
    if isinstance(src, torch.Tensor):
        return src[:, cols]
    parts = [x[:, cols] for x in chunks(src, 0, tokens)]
    return torch.cat(parts) if parts else torch.zeros((0, len(cols)))


def read_at(src: torch.Tensor | Capture, rows: list[int], cache: dict[int, torch.Tensor] | None) -> torch.Tensor:
    """Rows ``rows`` (ascending) as float32 ``[len(rows), W]``, reading runs of neighbouring rows at once."""
    if isinstance(src, torch.Tensor):
        return src[torch.tensor(rows, dtype=torch.long)]
    cache = {} if cache is None else cache
    need = [r for r in rows if r not in cache]
    k = 0
    while k < len(need):
        j = k
        while j + 1 < len(need) and need[j + 1] == need[j] + 1:
            j += 1
        block = read(src, need[k], need[j] + 1)
        for r in range(need[k], need[j] + 1):
            cache[r] = block[r - need[k]]
        k = j + 1
    return torch.stack([cache[r] for r in rows]) if rows else torch.zeros((0, extent(src)[1]))


@contextmanager
def threads(n: int) -> Iterator[None]:
    """Run torch's own operations on ``n`` threads inside the block (restored after).

    The work here is many medium-sized reductions: torch's intra-op threads wait for each other on
    every one of them, which on a machine whose cores are busy with other work costs far more than it
    gains. One compute thread plus the reading thread of :func:`chunks` keeps both cores busy instead."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def give_back_freed_memory() -> None:
    """Return the C allocator's free memory to the system (glibc ``malloc_trim``; nothing elsewhere).

    Chunks read on one thread and freed on another leave glibc's heaps fragmented and growing: a 4 GB
    dump walked chunk by chunk would keep over a GB it no longer uses. Called once per window of rows
    compared, which bounds what the heaps hold by one window's buffers at the cost of page faults."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        lib = ctypes.CDLL(None)
        lib.malloc_trim.argtypes = [ctypes.c_size_t]
        return lib
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        return None


_LIBC = _glibc()
