"""The records every container backend returns: :class:`Table` of lazy :class:`Entry` tensors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Entry:
    """One tensor inside a file: name, shape, dtype and how to load it.

    ``rows(i0, i1, c0=0, c1=None)``, when the container can, reads rows ``[i0, i1)`` (columns
    ``[c0, c1)``) of the tensor seen as ``[prod(shape[:-1]), shape[-1]]`` as float32 without
    reading the rest of it (bounded memory).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    loader: Callable[[], Any]
    rows: Callable[..., Any] | None = None

    @property
    def is_float(self) -> bool:
        return self.dtype.startswith(("float", "bfloat"))


@dataclass
class Table:
    """The tensors of one file (flattened with dotted keys) and its non-tensor values."""

    path: Path
    container: str  # "torch", "safetensors", "npy", "npz"
    entries: dict[str, Entry] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    raw: Any = None
    temp: Path | None = None

    def keys(self) -> set[str]:
        return set(self.entries) | set(self.extras)


def short(e: BaseException) -> str:
    """The first line of an exception's message (at most 200 characters), for one-line errors."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:200]
