"""Rows of a tensor stored in a file, read a few at a time with ``pread``: bounded memory, no mapping.

The readers memory-map a tensor file read-only (``np.memmap``): nothing is read until used, and
:meth:`Capture.array` slices it. The comparison instead reads rows ``[i0, i1)`` of a C-contiguous
tensor with ``pread`` into a buffer of the calling thread and converts them to float32, into the
caller's buffer when it gives one (``out``), so a walk over a multi-GB dump allocates nothing per
block. Reading through the mapping cost more than ``pread`` into a reused buffer
(benchmarks/results/timings.md): mapping the file's pages (and giving them back, to bound the
resident memory) is dearer than copying them. The last rows read are kept per thread, so the slots
of a concatenated ``[T, k*H]`` tensor read one after the other read the rows once.
"""

from __future__ import annotations

import itertools
import mmap
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from ...arrays import as_f32
from ...errors import FormatError
from ...rowio import RowBuffer, held_files

__all__ = ["file_rows", "identity"]


def file_rows(a: np.ndarray, ident: tuple[int, ...] | None = None) -> Callable[..., np.ndarray]:
    """``(i0, i1, c0=0, c1=None, out=None, raw=False) -> float32`` rows ``[i0, i1)`` and columns
    ``[c0, c1)`` of a C-contiguous array seen as ``[-1, last dimension]``: read from its file when it is
    a memory map of one, else sliced from memory. ``raw``: in the stored dtype instead, the whole rows
    read into ``out`` (a :class:`~hsdiff.rowio.RowBuffer`) or this thread's, valid until its next read."""
    flat = a.reshape(-1, a.shape[-1])
    place = _file_place(flat) if hasattr(os, "preadv") else None
    if place is None:
        return lambda i0, i1, c0=0, c1=None, out=None, raw=False: (
            flat[i0:i1, c0:c1] if raw else _copy(flat[i0:i1, c0:c1], out)
        )
    return _FileRows(*place, flat, ident)


def _copy(rows: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """``rows`` as float32, never a view of them (the caller may keep it; they are a file's mapping or a
    reused buffer)."""
    got = as_f32(rows, out=out)
    return got.copy() if out is None and np.may_share_memory(got, rows) else got


def _file_place(a: np.ndarray) -> tuple[str, int] | None:
    """The file and byte offset holding the first element of a view of a ``np.memmap``, if it is one."""
    root: np.ndarray | None = a
    while root is not None and not isinstance(root.base, mmap.mmap):
        root = root.base if isinstance(root.base, np.ndarray) else None
    name = getattr(root, "filename", None)
    if root is None or not a.flags.c_contiguous or not isinstance(name, (str, os.PathLike)):
        return None
    return os.fspath(name), int(root.offset) + (a.ctypes.data - root.ctypes.data)  # type: ignore[attr-defined]


#: Files a thread keeps open at most within :func:`~hsdiff.rowio.files_held` (others are opened for
#: each read): a sketch over a training set of thousands of files stays far from the open-file limit.
HOLD_AT_MOST = 64

_ids = itertools.count()
_local = threading.local()


class _FileRows:
    """Reads through a descriptor opened for each read, after checking that the path still names the
    file scanned (device, inode, size, modification time): a file changed while hsdiff reads it is an
    error, not rows of another file. When the path is gone (a gzip member's temporary file is removed
    once mapped) the rows are sliced from the mapping made while it was there. No descriptor is held
    between reads, so a training set of thousands of files costs none, except within
    :func:`~hsdiff.rowio.files_held`, where the calling thread keeps up to :data:`HOLD_AT_MOST` files
    open until it ends."""

    def __init__(self, path: str, offset: int, a: np.ndarray, ident: tuple[int, ...] | None = None) -> None:
        self.path, self.offset = path, offset
        self.rows, self.width = int(a.shape[0]), int(a.shape[1])
        self.dtype = a.dtype
        self.row_bytes = self.width * a.dtype.itemsize
        self.key = next(_ids)
        self.mapped = a
        self.ident = ident if ident is not None else identity(path)

    def __call__(
        self, i0: int, i1: int, c0: int = 0, c1: int | None = None, out: Any = None, raw: bool = False
    ) -> np.ndarray:
        i0, i1 = max(0, min(i0, self.rows)), max(0, min(i1, self.rows))
        if raw:
            return self._raw(i0, i1, out)[:, c0:c1]
        whole = c0 == 0 and (c1 is None or c1 >= self.width)
        if whole and self.dtype == np.float32 and not self.dtype.metadata:
            dst = np.empty((max(0, i1 - i0), self.width), dtype=np.float32) if out is None else out
            if _skew(self.offset + i0 * self.row_bytes, dst) == 0:
                self._pread(dst, i0)
            else:  # the kernel's copy into a skewed destination is slow: read, then copy here
                dst[...] = self._raw(i0, i1)
            return dst
        return _copy(self._raw(i0, i1)[:, c0:c1], out)

    def _raw(self, i0: int, i1: int, buf: RowBuffer | None = None) -> np.ndarray:
        """Rows ``[i0, i1)`` in the stored dtype, in ``buf`` or this thread's buffer: read again only when
        that buffer holds other rows. They start in the buffer where their first byte's file offset
        would, modulo :data:`ALIGN`."""
        if buf is None:
            buf = _local.__dict__.setdefault("buf", RowBuffer())
        n = max(0, i1 - i0)
        mem = buf.fit(n * self.row_bytes + ALIGN)
        at = _skew(self.offset + i0 * self.row_bytes, mem)
        got = mem[at : at + n * self.row_bytes].view(self.dtype).reshape(n, self.width)
        if buf.holds != (self.key, i0, i1):
            buf.holds = None
            self._pread(got, i0)
            buf.holds = (self.key, i0, i1)
        return got

    def _pread(self, dst: np.ndarray, i0: int) -> None:
        held = held_files()
        if held is not None and self.path not in held and len(held) >= HOLD_AT_MOST:
            held = None  # opened for this read alone
        fd = self._held(held) if held is not None else self._open()
        if fd is None:  # the file mapped is no longer at its path
            dst.reshape(-1, self.width)[...] = self.mapped[i0 : i0 + dst.size // self.width]  # the same dtype: bits
            return
        try:
            view = memoryview(dst.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
            pos, done = self.offset + i0 * self.row_bytes, 0
            while done < len(view):
                got = os.preadv(fd, [view[done:]], pos + done)
                if got <= 0:
                    raise FormatError(
                        f"the file ended at byte {pos + done} while reading a tensor's rows",
                        path=Path(self.path),
                        hint="the file changed or was truncated while it was read; re-copy it",
                    )
                done += got
        finally:
            if held is None:
                os.close(fd)

    def _held(self, held: dict[str, int]) -> int | None:
        """This file's descriptor among those the thread holds open (:func:`~hsdiff.rowio.files_held`),
        opened and kept on first use, and checked again at each read (``fstat``: no path lookup; a
        path since replaced by another file is read from the one scanned, still open)."""
        if self.path not in held:
            fd = self._open()
            if fd is not None:
                held[self.path] = fd
            return fd
        self._check(held[self.path])
        return held[self.path]

    def _open(self) -> int | None:
        """A descriptor of the file scanned, None when its path names no file any more."""
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return None
        try:
            self._check(fd)
        except FormatError:
            os.close(fd)
            raise
        return fd

    def _check(self, fd: int) -> None:
        """Refuse a descriptor whose file is not the one scanned (device, inode, size, modification time)."""
        st = os.fstat(fd)
        if self.ident is not None and (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != self.ident:
            self._changed()

    def _changed(self) -> NoReturn:
        raise FormatError(
            "the file changed while hsdiff read it",
            path=Path(self.path),
            hint="let whatever writes it finish, then run hsdiff again",
        )


#: Reads land at the same offset modulo this as their bytes have in the file: ``pread`` into a buffer
#: 8 or 16 bytes off the file's alignment can copy several times slower than into an aligned one
#: (benchmarks/results/timings.md), and numpy's buffers start 16 bytes into an allocation.
ALIGN = 64


def _skew(pos: int, buf: np.ndarray) -> int:
    """How far into ``buf`` a read of file offset ``pos`` should start to share its alignment."""
    return (pos - buf.ctypes.data) % ALIGN


def identity(path: str | os.PathLike) -> tuple[int, ...] | None:
    """What tells a file from its later versions: device, inode, size, modification time (None: no file)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns
