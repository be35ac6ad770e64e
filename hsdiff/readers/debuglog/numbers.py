"""The number grammar of printed tensors: nested bracket lists of floats, ``nan``, ``inf`` and ``...``.

:func:`parse_list` reads one bracket list (raising :class:`Incomplete` when the text ends inside it,
so the caller can join continuation lines); :func:`grid` flattens it to a ``[rows, cols]`` array
with the positions of the printed values, counted from the end after a ``...``.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

#: Deepest bracket nesting read; deeper is not a printed tensor.
MAX_DEPTH = 8

NUM_TEXT = r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf(?:inity)?)"
NUM = re.compile(NUM_TEXT + r"(?![\w.])", re.IGNORECASE)


class Invalid(Exception):
    """The text is not a printed list of numbers."""


class Incomplete(Exception):
    """The text ends before the list closes."""


#: The ``...`` of a summarised print, as an item of a parsed list.
ELLIPSIS: Any = object()

#: values [R, C], row index tuples, column positions, whether a ``...`` hid values
Grid = tuple[np.ndarray, list[tuple[int, ...]], tuple[int, ...], bool]


def parse_list(s: str, i: int, depth: int = 0) -> tuple[list[Any], int, bool]:
    """Parse ``s[i:]`` starting at ``[``; returns (items, end, saw_float). Raises Invalid/Incomplete."""
    if depth > MAX_DEPTH:
        raise Invalid
    n = len(s)
    i += 1
    items: list[Any] = []
    saw_float = False
    kind = None  # "num" or "list"
    while True:
        while i < n and s[i] in " \t\n\r,":
            i += 1
        if i >= n:
            raise Incomplete
        c = s[i]
        if c == "]":
            return items, i + 1, saw_float
        if c == "[":
            if kind == "num":
                raise Invalid
            kind = "list"
            sub, i, f = parse_list(s, i, depth + 1)
            items.append(sub)
            saw_float |= f
            continue
        if s.startswith("...", i):
            items.append(ELLIPSIS)
            i += 3
            continue
        m = NUM.match(s, i)
        if m is None:
            if i + 8 >= n and re.fullmatch(r"[-+.\deEnaifNAIF]*", s[i:]):
                raise Incomplete
            raise Invalid
        if kind == "list":
            raise Invalid
        kind = "num"
        text = m.group()
        items.append(float(text))
        if not saw_float and (
            "." in text or "e" in text.lower() or text.lower().lstrip("+-") in ("nan", "inf", "infinity")
        ):
            saw_float = True
        i = m.end()
        if i < n and s[i] not in " \t\n\r,]":
            raise Invalid


def parse_values(text: str) -> tuple[np.ndarray, tuple[int, ...], tuple[int, ...]] | None:
    """The values of one printed bracket list as a ``[rows, cols]`` grid with their positions.

    Positions after a ``...`` count from the end (negative). ``None`` if ``text`` holds no list.

    >>> v, rows, cols = parse_values("[[1.5, 2.0, ..., 3.0], [4.0, 5.0, ..., 6.0]]")
    >>> v.shape, rows, cols
    ((2, 3), (0, 1), (0, 1, -1))
    """
    j = text.find("[")
    if j < 0:
        return None
    try:
        items, _, _ = parse_list(text, j)
    except (Invalid, Incomplete):
        return None
    g = grid(items)
    if g is None:
        return None
    vals, rows, cols, _ = g
    return vals, tuple(r[-1] if r else 0 for r in rows), cols


def _positions(items: list[Any]) -> tuple[list[int], list[Any]]:
    """Positions of the non-ellipsis items of one list level: 0.. before ``...``, -k..-1 after it."""
    idx = [k for k, it in enumerate(items) if it is ELLIPSIS]
    kept = [it for it in items if it is not ELLIPSIS]
    if not idx:
        return list(range(len(kept))), kept
    e = idx[0]
    head = [it for it in items[:e] if it is not ELLIPSIS]
    tail = [it for it in items[e + 1 :] if it is not ELLIPSIS]
    return list(range(len(head))) + list(range(-len(tail), 0)), head + tail


def grid(items: list[Any]) -> Grid | None:
    """Flatten a parsed tree to (values [R, C], row index tuples, col positions, summarised)."""
    rows: list[tuple[int, ...]] = []
    blocks: list[tuple[list[int], list[float]]] = []
    summarised = False

    def walk(node: list[Any], prefix: tuple[int, ...], depth: int) -> None:
        nonlocal summarised
        if any(it is ELLIPSIS for it in node):
            summarised = True
        pos, kept = _positions(node)
        if not kept:
            return
        if isinstance(kept[0], list):
            for p, sub in zip(pos, kept):
                walk(sub, prefix + (p,), depth + 1)
        else:
            rows.append(prefix)
            blocks.append((pos, [float(v) for v in kept]))

    walk(items, (), 0)
    if not blocks:
        return None
    cols: list[int] = []
    for pos, _ in blocks:
        for p in pos:
            if p not in cols:
                cols.append(p)
    cols.sort(key=lambda c: (c < 0, c))
    where = {c: k for k, c in enumerate(cols)}
    vals = np.full((len(blocks), len(cols)), np.nan, dtype=np.float64)
    for r, (pos, v) in enumerate(blocks):
        for p, x in zip(pos, v):
            vals[r, where[p]] = x
    return vals, rows, tuple(cols), summarised


def flat_index(idx: tuple[int, ...], dims: tuple[int, ...]) -> int:
    """The row-major position of ``idx`` (negative entries count from the end) in an array of ``dims``."""
    flat = 0
    for i, size in zip(idx, dims):
        flat = flat * size + (i if i >= 0 else size + i)
    return flat
