"""The bounded line scanner: physical lines of a log, and the printed tensors found in them.

:class:`Lines` reads a file line by line, at most ``max_line`` bytes of each (the rest of a longer
line is skipped unread), decodes leniently and removes colour codes. :func:`scan_records` turns
those lines into :class:`Record` s, one per log line, with every bracket list it prints parsed into
a :class:`Print`; a print spread over several lines is joined while its brackets are open, up to a
bounded number of lines and bytes.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

from .labels import has_words, strip_prefix
from .numbers import Incomplete, Invalid, grid, parse_list

#: A multi-line print longer than this many lines (or bytes) is given up on.
_MAX_PRINT_LINES = 200_000
_MAX_PRINT_BYTES = 16 << 20

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_START = re.compile(r"\b(?:tensor|array|Tensor)\(|\[")
_NUMERIC_CONT = re.compile(r"^[\s\d.,eE+\-\[\]naifNAIF]*$")
_KWARGS_CONT = re.compile(r"^\s*(?:device|dtype|requires_grad|grad_fn|size)\s*=")


class Lines:
    """Physical lines of a file, bounded in length, decoded leniently, colour codes removed."""

    def __init__(self, f: IO[bytes], max_line: int):
        self.f = f
        self.max_line = max_line  # bytes of one physical line that are read; the rest is skipped unread
        self.no = 0
        self.long_lines: list[int] = []
        self._queue: deque[tuple[int, str, bool]] = deque()
        self.no_join_through = 0  # lines already tried as the body of an unfinished print

    def _read(self) -> bool:
        raw = self.f.readline(self.max_line)
        if not raw:
            return False
        self.no += 1
        cut = len(raw) >= self.max_line and not raw.endswith(b"\n")
        if cut:
            self.long_lines.append(self.no)
            while True:
                rest = self.f.readline(self.max_line)
                if not rest or rest.endswith(b"\n"):
                    break
        text = raw.decode("utf-8", errors="replace").replace("\x00", " ")
        text = _ANSI.sub("", text).rstrip("\r\n")
        parts = text.split("\r") if "\r" in text else [text]
        for k, part in enumerate(parts):
            self._queue.append((self.no, part, cut and k == len(parts) - 1))
        return True

    def next(self) -> tuple[int, str, bool] | None:
        while not self._queue:
            if not self._read():
                return None
        return self._queue.popleft()

    def peek(self) -> tuple[int, str, bool] | None:
        while not self._queue:
            if not self._read():
                return None
        return self._queue[0]

    def push_front(self, items: list[tuple[int, str, bool]]) -> None:
        self._queue.extendleft(reversed(items))


@dataclass
class Print:
    """One printed bracket list found in the log, before it becomes a capture."""

    values: np.ndarray
    rows: list[tuple[int, ...]]
    cols: tuple[int, ...]
    summarised: bool
    is_float: bool
    line: int
    kind: str  # "tensor", "array", "list"
    prefix: str  # text before the print on its line (from the previous print or the line start)
    dtype: str | None = None
    list_index: int | None = None  # position in a printed list of tensors
    list_label: str = ""


@dataclass
class Record:
    """A logical log record: its first line number, its text with prints cut out, and the prints."""

    line: int
    text: str
    prints: list[Print] = field(default_factory=list)
    header: str = ""


def _tensor_kwargs(s: str, i: int) -> tuple[str | None, int]:
    """After the closing ``]`` of ``tensor([...]`` read ``, device=..., dtype=...)``; returns (dtype, end)."""
    m = re.match(r"((?:\s*,\s*\w+\s*=\s*(?:'[^']*'|\"[^\"]*\"|[\w.:()\[\], ]*?))*)\s*\)", s[i:])
    if not m:
        return None, i
    d = re.search(r"dtype\s*=\s*(?:torch\.|np\.|numpy\.)?([A-Za-z]+\d*)", m.group(1))
    return (d.group(1) if d else None), i + m.end()


def _looks_numeric(s: str, i: int) -> bool:
    j = i + 1
    while j < len(s) and s[j] in " \t[" and j - i < 32:
        j += 1
    if j - i >= 32:
        return False  # deeper than any printed tensor
    if j >= len(s):
        return True
    c = s[j]
    return c.isdigit() or c in "-+.]" or s.startswith("...", j) or s[j : j + 3].lower() in ("nan", "inf")


def scan_records(lines: Lines, warnings: list[str], rel: str) -> Iterator[Record]:
    """Yield one record per log line (joining continuation lines of multi-line prints)."""
    prev: tuple[str, int] = ("", -10)
    while True:
        got = lines.next()
        if got is None:
            return
        rec = _scan_record(lines, got, warnings, rel)
        prev = _attach_header(rec, prev)
        yield rec


@dataclass
class _Cursor:
    """Where the scan of one record stands: its physical line, the offset in it, and the text kept so far."""

    no: int  # the record's first line number (prints and warnings are reported there)
    text: str  # the physical line being scanned (the last line of a multi-line print once past it)
    cut: bool  # whether that line was cut off at the line limit
    pos: int = 0
    seg: int = 0  # where the text before the next print starts (the end of the previous print)
    list_ctx: tuple[int, str, int] | None = None  # (list start, label, next index)
    out: list[str] = field(default_factory=list)
    done: bool = False


@dataclass
class _Parsed:
    """A print parsed from the text: its items, where it ends in ``joined``, and the lines joined to read it."""

    items: list[Any]
    end: int
    is_float: bool
    joined: str
    consumed: list[tuple[int, str, bool]]


def _scan_record(lines: Lines, got: tuple[int, str, bool], warnings: list[str], rel: str) -> Record:
    """Read one record from a physical line: its text with the numeric prints cut out, and the prints parsed."""
    no, text, cut = got
    rec = Record(no, text)
    cur = _Cursor(no, text, cut)
    while not cur.done:
        m = _START.search(cur.text, cur.pos)
        if m is None:
            cur.out.append(cur.text[cur.pos :])
            break
        if _skip_non_print(cur, m):
            continue
        parsed = _parse_print(lines, cur, _opening(m)[0], warnings, rel)
        if parsed is None:
            continue
        _take_print(lines, cur, rec, m, parsed)
    rec.text = "".join(cur.out)
    return rec


def _opening(m: re.Match[str]) -> tuple[int, str]:
    """Where the opening ``[`` of a matched print start is, and which kind of print it opens."""
    bracket = m.end() - 1 if m.group() == "[" else m.end()
    kind = "list" if m.group() == "[" else ("array" if m.group().startswith("array") else "tensor")
    return bracket, kind


def _skip_non_print(cur: _Cursor, m: re.Match[str]) -> bool:
    """Decide whether the match is not a numeric print (a scalar tensor, a list of tensors, a bracketed word).

    If so, keep its text as label text, move past it and return True.
    """
    text, pos = cur.text, cur.pos
    bracket, kind = _opening(m)
    if kind != "list" and (bracket >= len(text) or text[bracket] != "["):
        # a scalar tensor such as tensor(12.5, device='cuda:0'): keep it as label text
        cur.out.append(text[pos : m.end()])
        cur.pos = m.end()
        return True
    if kind == "list" and re.match(r"\[\s*(?:tensor|array)\(", text[bracket:]):
        # a printed Python list of tensors: its items are slots in list order
        cur.list_ctx = (bracket, text[pos:bracket], 0)
        cur.out.append(text[pos:bracket])
        cur.pos = bracket + 1
        return True
    if not _looks_numeric(text, bracket):
        nxt = bracket + 1
        while nxt < len(text) and text[nxt] == "[":  # a run of brackets: skip it whole
            nxt += 1
        cur.out.append(text[pos:nxt])
        cur.pos = nxt
        return True
    return False


def _parse_print(lines: Lines, cur: _Cursor, bracket: int, warnings: list[str], rel: str) -> _Parsed | None:
    """Parse the print opening at ``bracket``, joining the following lines while its brackets are open.

    None if it cannot be read: text that is not a list of numbers is kept and the scan goes on past its
    ``[``; a print that never closes ends the record's scan (with a warning when it was cut off or left open).
    The lines joined for a print that could not be read are given back.
    """
    text, no, cut = cur.text, cur.no, cur.cut
    joined, complete = text, True
    consumed: list[tuple[int, str, bool]] = []
    try:
        try:
            items, end, is_float = parse_list(text, bracket)
        except Incomplete:
            if cut or no <= lines.no_join_through:
                raise  # (a failed join is not retried from every line it covered)
            joined, consumed, complete = _join(lines, text, bracket)
            items, end, is_float = parse_list(joined, bracket)
    except Invalid:
        _give_back(lines, consumed)
        cur.out.append(text[cur.pos : bracket + 1])
        cur.pos = bracket + 1
        return None
    except Incomplete:
        _give_back(lines, consumed)
        if cut:
            warnings.append(
                f"{rel}:{no}: a printed tensor is cut off by the {lines.max_line >> 20} MiB line limit; "
                "its values were not used"
            )
        elif not complete:
            warnings.append(
                f"{rel}:{no}: a printed tensor never closes its brackets (the log ends or other lines "
                "interrupt it); its values were not used"
            )
        cur.out.append(text[cur.pos :])
        cur.done = True
        return None
    return _Parsed(items, end, is_float, joined, consumed)


def _give_back(lines: Lines, consumed: list[tuple[int, str, bool]]) -> None:
    """Return the lines joined for an unreadable print, and mark them as already tried as a print's body."""
    if consumed:
        lines.no_join_through = max(lines.no_join_through, consumed[-1][0])
        lines.push_front(consumed)


def _take_print(lines: Lines, cur: _Cursor, rec: Record, m: re.Match[str], parsed: _Parsed) -> None:
    """Add a parsed print to the record, keep the text around it, and move the scan past it."""
    start = m.start()
    kind = _opening(m)[1]
    text = cur.text
    joined, consumed, end = _trim_join(lines, text, kind, parsed)
    dtype = None
    if kind != "list":
        dtype, end = _tensor_kwargs(joined, end)
    g = grid(parsed.items)
    if g is not None:
        vals, rows, cols, summarised = g
        p = Print(vals, rows, cols, summarised, parsed.is_float, cur.no, kind, text[cur.seg : start], dtype)
        if cur.list_ctx is not None:
            ctx = cur.list_ctx
            p.list_index, p.list_label = ctx[2], ctx[1]
            cur.list_ctx = (ctx[0], ctx[1], ctx[2] + 1)
        rec.prints.append(p)
    cur.out.append(text[cur.pos : start] + (" <printed> " if parsed.is_float else joined[start:end]))
    _move_past(cur, consumed, end, parsed.is_float)
    _step_list(cur)


def _trim_join(lines: Lines, text: str, kind: str, parsed: _Parsed) -> tuple[str, list[tuple[int, str, bool]], int]:
    """The joined text the print was read from, cut to the lines it spans, plus a tensor's keyword line.

    Lines joined past the print's end are given back; a tensor whose values end in ``,`` takes the next
    line when that line carries its keyword arguments (``device=``, ``dtype=`` ...).
    """
    joined, consumed, end = parsed.joined, parsed.consumed, parsed.end
    if consumed:
        # the print may end before the last joined line: give the rest back
        k, _ = _locate([text] + [c[1] for c in consumed], end)
        if k < len(consumed):
            lines.push_front(consumed[k:])
            consumed = consumed[:k]
        joined = "\n".join([text] + [c[1] for c in consumed])
    if kind != "list" and re.fullmatch(r"\s*,\s*", joined[end:]):
        ahead = lines.peek()
        if ahead is not None and _KWARGS_CONT.match(ahead[1]):
            lines.next()
            consumed.append(ahead)
            joined = joined + "\n" + ahead[1]
    return joined, consumed, end


def _move_past(cur: _Cursor, consumed: list[tuple[int, str, bool]], end: int, is_float: bool) -> None:
    """Move the scan to just after the print: on the last physical line it spans, if it spans several."""
    if consumed:
        # continue scanning on the last physical line of the print
        k, off = _locate([cur.text] + [c[1] for c in consumed], end)
        _, last_text, cur.cut = consumed[k - 1] if k else (cur.no, cur.text, cur.cut)
        cur.text, cur.pos = last_text, off
        cur.seg = cur.pos if is_float else 0
    else:
        cur.pos = end
        if is_float:
            cur.seg = cur.pos


def _step_list(cur: _Cursor) -> None:
    """Inside a printed list of tensors, step over the ``,`` before the next item, or leave at the closing ``]``."""
    if cur.list_ctx is None:
        return
    text, pos = cur.text, cur.pos
    mm = re.match(r"\s*,\s*", text[pos:])
    if mm and re.match(r"(?:tensor|array)\(", text[pos + mm.end() :]):
        cur.pos += mm.end()
    elif mm is None and text[pos : pos + 1] == "]":
        cur.pos += 1
        cur.list_ctx = None


def _attach_header(rec: Record, prev: tuple[str, int]) -> tuple[str, int]:
    """Give a record of float prints with no words before them the plain line just before it as its header.

    ``prev`` is the text and line number of the last record without float prints (within two lines counts);
    returns the same for the next record.
    """
    prev_text, prev_line = prev
    floats = [p for p in rec.prints if p.is_float]
    if floats and (rec.line - prev_line) <= 2 and not has_words(floats[0].prefix):
        rec.header = prev_text
    return (rec.text, rec.line) if not floats else ("", -10)


def _locate(parts: list[str], end: int) -> tuple[int, int]:
    """Which of the newline-joined ``parts`` holds offset ``end``, and the offset inside it."""
    start = 0
    for k, part in enumerate(parts):
        if end <= start + len(part):
            return k, end - start
        start += len(part) + 1
    return len(parts) - 1, len(parts[-1])


def _join(lines: Lines, text: str, bracket: int) -> tuple[str, list[tuple[int, str, bool]], bool]:
    """Join continuation lines while an unfinished print's brackets are open; (text, lines used, complete)."""
    depth = text.count("[", bracket) - text.count("]", bracket)
    consumed: list[tuple[int, str, bool]] = []
    parts = [text]
    size = len(text)
    while depth > 0:
        nxt = lines.peek()
        if nxt is None:
            return "\n".join(parts), consumed, False
        body = nxt[1]
        check = body.split("]")[0]
        if not _NUMERIC_CONT.match(check):
            stripped = strip_prefix(check)  # a log prefix repeated on every line
            if stripped == check or not _NUMERIC_CONT.match(stripped):
                return "\n".join(parts), consumed, False
            body = body[len(check) - len(stripped) :]
        lines.next()
        consumed.append((nxt[0], body, nxt[2]))
        parts.append(body)
        size += len(body)
        depth += body.count("[") - body.count("]")
        if len(consumed) > _MAX_PRINT_LINES or size > _MAX_PRINT_BYTES or nxt[2]:
            return "\n".join(parts), consumed, False
    return "\n".join(parts), consumed, True
