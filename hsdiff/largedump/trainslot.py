"""One training slot as the comparison reads it: every token's norm and the attention-sink tokens,
from one pass over its rows, and its rows read again when a comparison needs them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..model import Capture
from ..sinks import sink_mask
from .rows import RowStats, extent, gather_columns, norms_of, read, read_at, source

__all__ = ["TrainSlot"]


@dataclass(eq=False)
class TrainSlot:
    """One training slot of one sample: per-token norms and sink mask from one chunked pass; its rows
    are read again as float32 when needed (:meth:`rows`, :meth:`columns`), and the whole ``[T, H]``
    tensor only when something asks for :attr:`tensor` (printed-value placement). It holds arrays:
    two slots are equal only when they are the same object (a key of a dict, a member of a set)."""

    capture: Capture
    sinks: np.ndarray  # bool [T]
    norms: np.ndarray  # float32 [T]
    width: int
    stats: RowStats
    _source: np.ndarray | Capture
    _columns: dict[tuple[int, ...], np.ndarray]
    #: rows read (sketches), by row number (see :func:`~hsdiff.largedump.rows.read_at`)
    _rows: dict = field(default_factory=dict)
    #: what :meth:`kept` computed, by its key
    _kept: dict = field(default_factory=dict)
    #: tokens ordinary (finite, non-zero, no sink) in every slot of its sample read with it: the slots of
    #: one sample sample the same rows of a capture, read once for all of them
    ordinary: np.ndarray | None = None

    @classmethod
    def load(cls, capture: Capture) -> TrainSlot:
        return cls.load_all([capture])[0]

    @classmethod
    def load_all(cls, captures: Sequence[Capture]) -> list[TrainSlot]:
        """:meth:`load` of each capture, read together: the slots of one concatenated tensor read their
        file's rows once."""
        srcs = [source(c) for c in captures]
        out = []
        for c, src, (norms, odd) in zip(captures, srcs, norms_of(srcs)):
            stats = RowStats()
            stats.add_norms(0, norms, odd)
            out.append(cls(c, sink_mask(norms), norms, extent(src)[1], stats, src, {}))
        if out and len({t.tokens for t in out}) == 1:
            with np.errstate(invalid="ignore"):
                common = np.logical_and.reduce([~t.sinks & np.isfinite(t.norms) & (t.norms > 0) for t in out])
            for t in out:
                t.ordinary = common
        return out

    @classmethod
    def of(cls, tensor: np.ndarray, capture: Capture | None = None) -> TrainSlot:
        """A slot from a float32 ``[T, H]`` tensor already in memory."""
        stats = RowStats()
        norms = stats.add(tensor)
        assert norms is not None
        return cls(capture, sink_mask(norms), norms, int(tensor.shape[1]), stats, tensor, {})  # type: ignore[arg-type]

    @property
    def tokens(self) -> int:
        return int(self.norms.shape[0])

    @property
    def tensor(self) -> np.ndarray:
        """The whole slot as float32 ``[T, H]`` (read once, then kept)."""
        if isinstance(self._source, Capture):
            self._source = read(self._source, 0, self.tokens)
        return self._source

    def rows(self, i0: int, i1: int, out: np.ndarray | None = None) -> np.ndarray:
        """Rows ``[i0, i1)`` as float32 (:func:`~hsdiff.largedump.rows.read`)."""
        return read(self._source, i0, i1, out)

    def rows_at(self, rows: list[int]) -> np.ndarray:
        return read_at(self._source, rows, self._rows)

    @property
    def source(self) -> np.ndarray | Capture:
        """What its rows are read from: its capture, or its tensor once in memory."""
        return self._source

    @property
    def file_rows(self) -> object:
        """The same object for slots whose rows are read from the same rows of a file (one concatenated
        tensor: its reader), else the slot itself."""
        src = self._source
        return src.rows if isinstance(src, Capture) and src.rows is not None else self

    def kept(self, key: tuple, make: Callable[[], Any]) -> Any:
        """``make()``, computed once per ``key`` for this slot (what a sketch derives from it)."""
        if key not in self._kept:
            self._kept[key] = make()
        return self._kept[key]

    def sample(self, rows: list[int], raw: bool = False) -> np.ndarray:
        """:meth:`rows_at`, kept: the sketch samples the same rows of a slot for every capture (``raw``: in
        the stored dtype, see :func:`~hsdiff.largedump.rows.read_at`)."""
        return self.kept(("sample", raw, *rows), lambda: read_at(self._source, rows, self._rows, raw))

    def columns(self, cols: np.ndarray) -> np.ndarray:
        """Columns ``cols`` of every token, float32 ``[T, len(cols)]``, read in chunks and kept."""
        key = tuple(int(c) for c in cols)
        if key not in self._columns:
            self._columns[key] = gather_columns(self._source, cols, self.tokens)
        return self._columns[key]
