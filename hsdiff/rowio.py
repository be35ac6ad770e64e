"""Row I/O state: the buffers rows are read into in their stored dtype, and the files a thread keeps
open while it walks rows (:func:`files_held`). The readers fill them; the large-dump walk holds them."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

__all__ = ["RowBuffer", "files_held", "held_files"]


class RowBuffer:
    """Bytes that rows are read into in their stored dtype (``Capture.read_rows(..., raw=True)``),
    remembering which rows of which file they hold: the training slots of one concatenated tensor read
    the same rows, and the second slot finds them there."""

    def __init__(self, nbytes: int = 0) -> None:
        self.bytes = np.empty(nbytes, dtype=np.uint8)
        self.holds: tuple | None = None

    def fit(self, nbytes: int) -> np.ndarray:
        """At least ``nbytes`` bytes (grown, and then holding nothing, when short)."""
        if self.bytes.nbytes < nbytes:
            self.bytes, self.holds = np.empty(max(nbytes, 2 * self.bytes.nbytes), dtype=np.uint8), None
        return self.bytes


_held = threading.local()


@contextmanager
def files_held() -> Iterator[None]:
    """While it lasts, the calling thread keeps open each file it reads rows from (checked with ``fstat``
    at every read, so a file rewritten meanwhile is still refused) instead of opening it for every
    read: a block of a walk reads dozens of tensors of one file, and a path's lookup cost as much as
    reading a few rows. The files are closed when it ends (nested, the outer one closes them)."""
    if getattr(_held, "fds", None) is not None:
        yield
        return
    _held.fds = {}
    try:
        yield
    finally:
        fds, _held.fds = _held.fds, None
        for fd in fds.values():
            os.close(fd)


def held_files() -> dict[str, int] | None:
    """The files the calling thread holds open in :func:`files_held` (path -> descriptor), None outside it."""
    return getattr(_held, "fds", None)
