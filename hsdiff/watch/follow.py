"""Following an engine's log for its acceptance lines (``hsdiff watch --log``): each line reports one interval
(:func:`hsdiff.engine_log.logged_acceptance`), so it is an increment as it stands. A file that shrinks or is
replaced (log rotation, a restarted server writing anew) is read from its start again, as a restart.
"""

from __future__ import annotations

import os

from ..engine_log import logged_acceptance
from ..errors import InputError
from .counters import Restart
from .records import Increment

__all__ = ["LogFollower", "MAX_LINE"]

#: Longest line kept (bytes): a JSON line of TensorRT-LLM's iteration stats stays far below.
MAX_LINE = 1 << 20


class LogFollower:
    """Reads the lines added to ``path`` since the last :meth:`poll`."""

    def __init__(self, path: str | os.PathLike, *, from_end: bool = False) -> None:
        self.path = os.fspath(path)
        self.offset = 0
        self.inode: int | None = None
        self.number = 0
        self.partial = b""
        self.engine: str | None = None
        st = self._stat()
        self.inode = st.st_ino
        if from_end:
            self.offset = st.st_size

    def _stat(self) -> os.stat_result:
        try:
            return os.stat(self.path)
        except OSError as e:
            raise InputError(
                f"cannot read the engine log: {e.strerror or e}", path=self.path, hint="give the file the engine writes"
            ) from None

    def poll(self) -> list[Increment | Restart]:
        """What the lines added since the last poll report, in order (a :class:`Restart` first when the file
        was truncated or replaced)."""
        st = self._stat()
        out: list[Increment | Restart] = []
        if st.st_ino != self.inode or st.st_size < self.offset:
            why = "the log was replaced" if st.st_ino != self.inode else "the log was truncated"
            self.inode, self.offset, self.partial, self.number = st.st_ino, 0, b"", 0
            out.append(Restart(why, None))
        if st.st_size == self.offset:
            return out
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read(st.st_size - self.offset)
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()[:MAX_LINE]
        for raw in lines:
            self.number += 1
            got = logged_acceptance(raw[:MAX_LINE].decode("utf-8", errors="replace"), self.number)
            if got is None or not got.drafts or got.accepted is None:
                continue
            self.engine = got.engine
            spec = len(got.per_position) if got.per_position else None
            out.append(Increment(got.drafts, got.accepted, got.accepted_at, "log", got.estimated, spec))
        return out
