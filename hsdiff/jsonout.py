"""Reports as JSON: indented for reading, with each list of plain values (a per-token curve, ids),
and each record of plain values deep in the document, on one line, written by the json module's C
encoder. A report on a large dump holds tens of thousands of numbers, on which the pure-Python
indented encoder is slow (benchmarks/results/timings.md)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["dumps"]

_flat = json.JSONEncoder(allow_nan=False, separators=(", ", ": "))


def dumps(obj: Any, indent: int | None = 2) -> str:
    """``json.dumps(obj, indent=indent, allow_nan=False)``, the same document, lists of scalars inline."""
    if indent is None:
        return json.dumps(obj, allow_nan=False)
    return _encode(obj, indent, 0)


_NESTED = {dict, list, tuple}
#: From this depth on, a dict of plain values is written on one line (a score, a metric record).
_FLAT_FROM = 3


def _encode(obj: Any, indent: int, level: int) -> str:
    if isinstance(obj, dict) and obj and level >= _FLAT_FROM and _NESTED.isdisjoint(map(type, obj.values())):
        return _flat.encode(obj)  # a record of plain values deep in the document: one line
    if isinstance(obj, dict) and obj:
        pad, end = " " * (indent * (level + 1)), " " * (indent * level)
        items = (f"{pad}{_flat.encode(_key(k))}: {_encode(v, indent, level + 1)}" for k, v in obj.items())
        return "{\n" + ",\n".join(items) + "\n" + end + "}"
    if isinstance(obj, (list, tuple)) and obj and not _NESTED.isdisjoint(map(type, obj)):
        pad, end = " " * (indent * (level + 1)), " " * (indent * level)
        return "[\n" + ",\n".join(pad + _encode(v, indent, level + 1) for v in obj) + "\n" + end + "]"
    return _flat.encode(obj)


def _key(k: Any) -> str:
    """A dict key as json writes it."""
    return k if isinstance(k, str) else json.dumps(k)
