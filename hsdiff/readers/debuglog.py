"""Debug logs as evidence: the tensors engineers (or SGLang's dumper) printed, read as partial
observations, with no format declared.

What is recognised in a noisy log (timestamps, other lines, ANSI colour, very long lines):

* a bracketed list of numbers in any float notation, ``nan`` and ``inf``:
  ``first5=[0.0295, -0.0114, -0.017, -0.0179, -0.0183]``, numpy's ``[ 0.0295 -0.0114 ...]``;
* PyTorch's printed tensors ``tensor([[...]], device=..., dtype=...)`` over several lines,
  including summarised prints where ``...`` hides the middle: only the first and last rows and
  columns are visible, counted from the end (negative positions) unless the full shape is printed;
* numpy's ``array([...], dtype=...)`` likewise, and a printed Python list of tensors
  (``[tensor(...), tensor(...)]``: list order is the slot order);
* SGLang's tensor dumper records ``[Dumper.Value] <path> ... shape=... dtype=... sample_value=tensor(...)``,
  where every dimension longer than 50 is cut to its first 5 entries and the file path carries the
  tags (``layer_id=...``, ``slot=...``).

Labels read from the line (or from a header line just above a multi-line print): a slot index
(``aux_hidden_states[1]``, ``slot 1``), a layer number (``layer=3``, ``layer_id=3``, ``layers.3``,
``layer 3 capture``; counted as ``--infer-index`` says), ``shape=``/``torch.Size([...])``, ``dtype=``,
``norm=``, token positions (``h[5, :8]``, ``token=5``, ``positions=[...]``, ``first5``/``head``,
``last5``/``tail``). When several unlabelled captures of one forward pass share a label pattern,
the log's order gives their slot order. A new forward pass starts at SGLang's ``Prefill batch`` /
``Decode batch`` lines, at the dumper's ``step=N``, or when a slot or layer label repeats.

A user with an unusual format passes ``--log-pattern REGEX`` instead: a regular expression with a
named group ``values`` (the printed numbers) and optionally ``slot``, ``layer``, ``token``, ``col``
(first column), ``norm``, ``shape``, ``dtype`` and ``name``; every line it matches is one capture.

The file is streamed line by line; a line longer than 1 MiB is read up to that length only.

>>> caps = read(Path("server.log"), ReadContext(side="infer"))       # doctest: +SKIP
>>> caps[0].observation.values.shape, caps[0].slot, caps[0].norm
((2, 5), 1, 13.2)
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np

from ..errors import FormatError, InputError
from ..model import Capture, Layer, Observation, Origin
from ._common import ReadContext

KEY = "debuglog"

__all__ = ["KEY", "read", "parse_values", "compile_pattern"]

#: Bytes of one physical line that are read; the rest of a longer line is skipped unread.
MAX_LINE = 1 << 20
#: A multi-line print longer than this many lines (or bytes) is given up on.
_MAX_PRINT_LINES = 200_000
_MAX_PRINT_BYTES = 16 << 20
_MAX_DEPTH = 8

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_NUM_TEXT = r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf(?:inity)?)"
_NUM = re.compile(_NUM_TEXT + r"(?![\w.])", re.IGNORECASE)
_START = re.compile(r"\b(?:tensor|array|Tensor)\(|\[")
_NUMERIC_CONT = re.compile(r"^[\s\d.,eE+\-\[\]naifNAIF]*$")
_KWARGS_CONT = re.compile(r"^\s*(?:device|dtype|requires_grad|grad_fn|size)\s*=")


class _Invalid(Exception):
    pass


class _Incomplete(Exception):
    pass


_ELLIPSIS = object()


def _parse_list(s: str, i: int, depth: int = 0) -> tuple[list, int, bool]:
    """Parse ``s[i:]`` starting at ``[``; returns (items, end, saw_float). Raises _Invalid/_Incomplete."""
    if depth > _MAX_DEPTH:
        raise _Invalid
    n = len(s)
    i += 1
    items: list = []
    saw_float = False
    kind = None  # "num" or "list"
    while True:
        while i < n and s[i] in " \t\n\r,":
            i += 1
        if i >= n:
            raise _Incomplete
        c = s[i]
        if c == "]":
            return items, i + 1, saw_float
        if c == "[":
            if kind == "num":
                raise _Invalid
            kind = "list"
            sub, i, f = _parse_list(s, i, depth + 1)
            items.append(sub)
            saw_float |= f
            continue
        if s.startswith("...", i):
            items.append(_ELLIPSIS)
            i += 3
            continue
        m = _NUM.match(s, i)
        if m is None:
            if i + 8 >= n and re.fullmatch(r"[-+.\deEnaifNAIF]*", s[i:]):
                raise _Incomplete
            raise _Invalid
        if kind == "list":
            raise _Invalid
        kind = "num"
        text = m.group()
        items.append(float(text))
        if not saw_float and ("." in text or "e" in text.lower() or text.lower().lstrip("+-") in ("nan", "inf", "infinity")):
            saw_float = True
        i = m.end()
        if i < n and s[i] not in " \t\n\r,]":
            raise _Invalid


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
        items, _, _ = _parse_list(text, j)
    except (_Invalid, _Incomplete):
        return None
    g = _grid(items)
    if g is None:
        return None
    vals, rows, cols, _ = g
    return vals, tuple(r[-1] if r else 0 for r in rows), cols


def _positions(items: list) -> tuple[list[int], list]:
    """Positions of the non-ellipsis items of one list level: 0.. before ``...``, -k..-1 after it."""
    idx = [k for k, it in enumerate(items) if it is _ELLIPSIS]
    kept = [it for it in items if it is not _ELLIPSIS]
    if not idx:
        return list(range(len(kept))), kept
    e = idx[0]
    head = [it for it in items[:e] if it is not _ELLIPSIS]
    tail = [it for it in items[e + 1 :] if it is not _ELLIPSIS]
    return list(range(len(head))) + list(range(-len(tail), 0)), head + tail


def _grid(items: list):
    """Flatten a parsed tree to (values [R, C], row index tuples, col positions, summarised)."""
    rows: list[tuple[int, ...]] = []
    blocks: list[tuple[list[int], list[float]]] = []
    summarised = False

    def walk(node: list, prefix: tuple[int, ...], depth: int) -> None:
        nonlocal summarised
        if any(it is _ELLIPSIS for it in node):
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


# ------------------------------------------------------------------------------------ lines
class _Lines:
    """Physical lines of a file, bounded in length, decoded leniently, colour codes removed."""

    def __init__(self, f: IO[bytes]):
        self.f = f
        self.no = 0
        self.long_lines: list[int] = []
        self._queue: deque[tuple[int, str, bool]] = deque()
        self.no_join_through = 0  # lines already tried as the body of an unfinished print

    def _read(self) -> bool:
        raw = self.f.readline(MAX_LINE)
        if not raw:
            return False
        self.no += 1
        cut = len(raw) >= MAX_LINE and not raw.endswith(b"\n")
        if cut:
            self.long_lines.append(self.no)
            while True:
                rest = self.f.readline(MAX_LINE)
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


# ------------------------------------------------------------------------------------ prints
@dataclass
class _Print:
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
class _Record:
    """A logical log record: its first line number, its text with prints cut out, and the prints."""

    line: int
    text: str
    prints: list[_Print] = field(default_factory=list)
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


def _scan_records(lines: _Lines, warnings: list[str], rel: str) -> Iterator[_Record]:
    """Yield one record per log line (joining continuation lines of multi-line prints)."""
    prev_text = ""
    prev_line = -10
    while True:
        got = lines.next()
        if got is None:
            return
        no, text, cut = got
        rec = _Record(no, text)
        out_text: list[str] = []
        pos = 0
        seg = 0  # where the text before the next print starts (the end of the previous print)
        list_ctx: tuple[int, str, int] | None = None  # (list start, label, next index)
        while True:
            m = _START.search(text, pos)
            if m is None:
                out_text.append(text[pos:])
                break
            start = m.start()
            bracket = m.end() - 1 if m.group() == "[" else m.end()
            kind = "list" if m.group() == "[" else ("array" if m.group().startswith("array") else "tensor")
            if kind != "list" and (bracket >= len(text) or text[bracket] != "["):
                # a scalar tensor such as tensor(12.5, device='cuda:0'): keep it as label text
                out_text.append(text[pos : m.end()])
                pos = m.end()
                continue
            if kind == "list" and re.match(r"\[\s*(?:tensor|array)\(", text[bracket:]):
                # a printed Python list of tensors: its items are slots in list order
                list_ctx = (bracket, text[pos:bracket], 0)
                out_text.append(text[pos:bracket])
                pos = bracket + 1
                continue
            if not _looks_numeric(text, bracket):
                nxt = bracket + 1
                while nxt < len(text) and text[nxt] == "[":  # a run of brackets: skip it whole
                    nxt += 1
                out_text.append(text[pos:nxt])
                pos = nxt
                continue
            joined, complete = text, True
            consumed: list[tuple[int, str, bool]] = []
            try:
                try:
                    items, end, is_float = _parse_list(text, bracket)
                except _Incomplete:
                    if cut or no <= lines.no_join_through:
                        raise  # (a failed join is not retried from every line it covered)
                    joined, consumed, complete = _join(lines, text, bracket)
                    items, end, is_float = _parse_list(joined, bracket)
            except _Invalid:
                if consumed:
                    lines.no_join_through = max(lines.no_join_through, consumed[-1][0])
                    lines.push_front(consumed)
                out_text.append(text[pos : bracket + 1])
                pos = bracket + 1
                continue
            except _Incomplete:
                if consumed:
                    lines.no_join_through = max(lines.no_join_through, consumed[-1][0])
                    lines.push_front(consumed)
                if cut:
                    warnings.append(
                        f"{rel}:{no}: a printed tensor is cut off by the {MAX_LINE >> 20} MiB line limit; "
                        "its values were not used"
                    )
                elif not complete:
                    warnings.append(
                        f"{rel}:{no}: a printed tensor never closes its brackets (the log ends or other lines "
                        "interrupt it); its values were not used"
                    )
                out_text.append(text[pos:])
                break
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
            dtype = None
            if kind != "list":
                dtype, end = _tensor_kwargs(joined, end)
            g = _grid(items)
            prefix = text[seg:start]
            if g is not None:
                vals, rows, cols, summarised = g
                p = _Print(vals, rows, cols, summarised, is_float, no, kind, prefix, dtype)
                if list_ctx is not None:
                    p.list_index, p.list_label = list_ctx[2], list_ctx[1]
                    list_ctx = (list_ctx[0], list_ctx[1], list_ctx[2] + 1)
                rec.prints.append(p)
            out_text.append(text[pos:start] + (" <printed> " if is_float else joined[start:end]))
            if consumed:
                # continue scanning on the last physical line of the print
                k, off = _locate([text] + [c[1] for c in consumed], end)
                _, last_text, cut = consumed[k - 1] if k else (no, text, cut)
                text, pos = last_text, off
                seg = pos if is_float else 0
            else:
                pos = end
                if is_float:
                    seg = pos
            if list_ctx is not None:
                mm = re.match(r"\s*,\s*", text[pos:])
                if mm and re.match(r"(?:tensor|array)\(", text[pos + mm.end():]):
                    pos += mm.end()
                elif mm is None and text[pos : pos + 1] == "]":
                    pos += 1
                    list_ctx = None
        rec.text = "".join(out_text)
        floats = [p for p in rec.prints if p.is_float]
        if floats and (no - prev_line) <= 2 and not _has_words(floats[0].prefix):
            rec.header = prev_text
        if not floats:
            prev_text, prev_line = rec.text, no
        else:
            prev_text, prev_line = "", -10
        yield rec


def _locate(parts: list[str], end: int) -> tuple[int, int]:
    """Which of the newline-joined ``parts`` holds offset ``end``, and the offset inside it."""
    start = 0
    for k, part in enumerate(parts):
        if end <= start + len(part):
            return k, end - start
        start += len(part) + 1
    return len(parts) - 1, len(parts[-1])


def _has_words(text: str) -> bool:
    return bool(re.search(r"[A-Za-z_]{2,}", _strip_prefix(text)))


def _join(lines: _Lines, text: str, bracket: int) -> tuple[str, list[tuple[int, str, bool]], bool]:
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
            stripped = _strip_prefix(check)  # a log prefix repeated on every line
            if stripped == check or not _NUMERIC_CONT.match(stripped):
                return "\n".join(parts), consumed, False
            body = body[len(check) - len(stripped):]
        lines.next()
        consumed.append((nxt[0], body, nxt[2]))
        parts.append(body)
        size += len(body)
        depth += body.count("[") - body.count("]")
        if len(consumed) > _MAX_PRINT_LINES or size > _MAX_PRINT_BYTES or nxt[2]:
            return "\n".join(parts), consumed, False
    return "\n".join(parts), consumed, True


# ------------------------------------------------------------------------------------ labels
_LOG_PREFIX = re.compile(
    r"^\s*(?:"
    r"\[[^\]]*(?:\d{1,2}:\d{2}|\bTP\d|\bDP\d|\brank\b|INFO|DEBUG|WARN|ERROR)[^\]]*\]"  # [2026-11-30 01:15:02 TP0]
    r"|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"  # ISO timestamps
    r"|(?:INFO|DEBUG|WARNING|WARN|ERROR|CRITICAL)\b:?"
    r"|\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?"  # vLLM: INFO 11-30 01:15:02
    r"|\[[\w./-]+\.py:\d+\]"  # [model_runner.py:123]
    r"|\([A-Za-z]\w*(?:\s+\w+=\w+)+\)"  # (VllmWorker rank=0 pid=123)
    r")\s*"
)


def _strip_prefix(text: str) -> str:
    prev = None
    while prev != text:
        prev = text
        text = _LOG_PREFIX.sub("", text, count=1)
    return text


_SHAPE_RES = (
    re.compile(r"torch\.Size\(\s*\[([\d,\s]*)\]\s*\)"),
    re.compile(r"\bshape\s*[=:]\s*[\[(]([\d,\s]+)[\])]", re.I),
    re.compile(r"\bsize\s*[=:]\s*[\[(]([\d,\s]+)[\])]", re.I),
)
_DTYPE_RE = re.compile(r"\bdtype\s*[=:]\s*['\"]?(?:torch\.|np\.|numpy\.)?([A-Za-z]+\d*)", re.I)
_NORM_RE = re.compile(
    r"(?:\b\w*norm\w*|\bl2|\|\|\w*\|\|)(?:\([^()]*\))?(?:\.\w+\([^()]*\))*\s*[=:]\s*(?:tensor\(\s*)?(" + _NUM_TEXT + r")(?![\w.])",
    re.I,
)
_SLOT_RES = (
    re.compile(r"\b(?:aux\w*|captures?|slots?)\s*\[\s*(\d{1,9})\s*\]", re.I),
    re.compile(r"\b(?:slot|aux_idx|aux_index|aux_id|slot_idx|capture_idx)\s*[=:#]?\s*(\d{1,9})\b", re.I),
)
_LAYER_RES = (
    re.compile(r"\blayer(?:_id|_idx|_index|_no|_num)?\s*[=:#]?\s*(-?\d{1,9})\b", re.I),
    re.compile(r"\blayers?[._\[](\d{1,9})\]?", re.I),
    re.compile(r"\bcapture(?:_layer)?\s*[=:#]\s*(-?\d{1,9})\b", re.I),
)
_ROW_RE = re.compile(r"\b(?:token|tok|pos|position|row|token_idx|tok_idx)\s*[=:#]?\s*(-?\d{1,9})\b", re.I)
_LAST_TOKEN_RE = re.compile(r"\blast[_ ]?(?:token|tok|row)\b", re.I)
_HEAD_RE = re.compile(r"(?<![A-Za-z])(?:first|head|begin|start)(?![a-z])", re.I)
_TAIL_RE = re.compile(r"(?<![A-Za-z])(?:last|tail|end)(?![a-z])(?![_ ]?(?:token|tok|row|pos))", re.I)
_SUBSCRIPT_RE = re.compile(r"([A-Za-z_][\w.]*(?:\(\))?)((?:\[[^\[\]]*\])+)")
_NOT_VALUES_RE = re.compile(
    r"(?:\b(?:\w*norms?|mean|std|var|min|max|sum|amax|amin|abs_?max|loss|lr|prob\w*|logits?|scores?|"
    r"acc\w*|accept\w*|ids|input_ids|token_ids|positions?|seq_lens?|out_cache_loc|req_pool_indices|"
    r"shape|size|stride|topk\w*)\s*(?:\([^()]*\))?(?:\.\w+\([^()]*\))*\s*[=:]?\s*)$",
    re.I,
)
_HIDDEN_WORDS = re.compile(r"hidden|aux|capture|layer|slot|residual|\bhs\b|\bh\d*\b|eagle|tensor|first|head|last|tail|sample", re.I)
_PASS_RE = re.compile(
    r"\b(?:prefill|decode|extend|verify|draft)\s+batch\b|\bforward[_ ]pass(?:_id)?\b|^\s*step\s*[=:]\s*\d+\s*$"
    r"|\bnew\s+request\b|={5,}",
    re.I,
)
_DUMPER_RE = re.compile(r"\[Dumper\.(?:Value|Grad|ParamValue|ParamGrad)\]\s+(\S+\.pt)\b")
_DUMPER_OLD_RE = re.compile(r"(\S*(?:forward_pass_id|step)=[^\s]*?___\S*\.pt)\b")
_RANK_RE = re.compile(r"\b(?:TP|rank[ =]?)(\d+)\b")


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(t) for t in re.findall(r"\d{1,12}", text))


def _slice(part: str) -> tuple[int | None, int | None, bool] | None:
    """``3`` -> (3, None, False); ``1:4`` -> (1, 4, True); ``:`` -> (None, None, True)."""
    part = part.strip()
    if part in ("", ":", "::"):
        return None, None, True
    if re.fullmatch(r"-?\d{1,9}", part):
        return int(part), None, False
    m = re.fullmatch(r"(-?\d{0,9})\s*:\s*(-?\d{0,9})(?:\s*:\s*\d{0,9})?", part)
    if m:
        a = int(m.group(1)) if m.group(1) else None
        b = int(m.group(2)) if m.group(2) else None
        return a, b, True
    return None


@dataclass
class _Labels:
    slot: int | None = None
    layer: int | None = None
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    norm: float | None = None
    row_start: int | None = None  # row of the first printed row, when a position is printed
    row_from_end: bool = False
    col_start: int | None = None
    col_from_end: bool = False
    flat: bool = False  # values of x.flatten()[...]
    positions: tuple[int, ...] | None = None
    name: str = ""


def _subscripts(text: str, lab: _Labels) -> None:
    """Read ``name[i][a, b:c]`` index expressions: a slot for aux lists, else token/column positions."""
    for m in _SUBSCRIPT_RE.finditer(text):
        name = m.group(1)
        subs = re.findall(r"\[([^\[\]]*)\]", m.group(2))
        if name.lower().startswith(("torch.size", "size")):
            continue
        lname = name.lower()
        if re.search(r"\blayers$|\.layers$", lname) and subs and re.fullmatch(r"\s*\d{1,9}\s*", subs[0]):
            lab.layer = int(subs[0]) if lab.layer is None else lab.layer
            subs = subs[1:]
        elif re.match(r"(?:aux|captures?|slots?)", lname.rsplit(".", 1)[-1]) and subs and re.fullmatch(r"\s*\d{1,9}\s*", subs[0]):
            lab.slot = int(subs[0]) if lab.slot is None else lab.slot
            subs = subs[1:]
        parts: list[str] = []
        for s in subs:
            parts.extend(p for p in s.split(","))
        parts = [p for p in parts if p.strip() not in ("...", "None")]
        if not parts:
            continue
        sl = [_slice(p) for p in parts]
        if any(x is None for x in sl):
            continue
        lab.flat = lab.flat or "flatten" in lname or "view(-1)" in lname or "ravel" in lname
        if len(sl) >= 3:  # [batch, token, col]
            sl = sl[-2:]
        if len(sl) == 1 and not lab.flat:  # x[t] or x[a:b]: token positions
            a = sl[0][0]  # type: ignore[index]
            lab.row_start, lab.row_from_end = a, a is not None and a < 0
            continue
        if len(sl) == 1 and lab.flat:  # x.flatten()[a:b]: the first or the last values
            a = sl[0][0]  # type: ignore[index]
            lab.col_start = a if a is not None else 0
            lab.col_from_end = a is not None and a < 0
            lab.row_start, lab.row_from_end = (-1, True) if lab.col_from_end else (0, False)
            continue
        (ra, _, _), (ca, _, _) = sl[0], sl[1]  # type: ignore[misc]
        if ra is not None:
            lab.row_start, lab.row_from_end = ra, ra < 0
        if ca is not None:
            lab.col_start, lab.col_from_end = ca, ca < 0


def _labels(text: str, local: str) -> _Labels:
    """Labels from a print's own key text (``local``) and its line (``text``)."""
    lab = _Labels()
    for src in (local, text):
        if lab.slot is None:
            for r in _SLOT_RES:
                m = r.search(src)
                if m:
                    lab.slot = int(m.group(1))
                    break
        if lab.layer is None:
            for r in _LAYER_RES:
                m = r.search(src)
                if m:
                    lab.layer = int(m.group(1))
                    break
    _subscripts(local or text, lab)
    if lab.row_start is None:
        m = _ROW_RE.search(local) or _ROW_RE.search(text)
        if m:
            lab.row_start = int(m.group(1))
            lab.row_from_end = lab.row_start < 0
        elif _LAST_TOKEN_RE.search(local) or _LAST_TOKEN_RE.search(text):
            lab.row_start, lab.row_from_end = -1, True
    key = _key_words(local)
    if lab.col_start is None:
        if _TAIL_RE.search(key) and not _HEAD_RE.search(key):
            lab.flat = True
            lab.col_from_end = True
            if lab.row_start is None:
                lab.row_start, lab.row_from_end = -1, True
        elif _HEAD_RE.search(key):
            lab.flat = True
    for r in _SHAPE_RES:
        m = r.search(text)
        if m:
            dims = _ints(m.group(1))
            if dims:
                lab.shape = dims
                break
    m = _DTYPE_RE.search(text)
    if m:
        lab.dtype = m.group(1)
    m = _NORM_RE.search(text)
    if m:
        try:
            lab.norm = float(m.group(1))
        except ValueError:
            pass
    return lab


def _key_words(local: str) -> str:
    """The key just before a print (``first5=``, ``x_sample_tail=``, ``first 5 values:``)."""
    return " ".join(local.replace("<printed>", " ").split()[-3:])


def _pattern(text: str) -> str:
    """A label pattern: the words of a label with numbers blanked, so that repeated prints match."""
    text = _strip_prefix(text)
    text = re.sub(r"<printed>", " ", text)
    text = _RANK_RE.sub(" ", text)
    words = re.findall(r"[A-Za-z_][A-Za-z_0-9.]*", text)
    return " ".join(re.sub(r"\d+", "#", w) for w in words if w.lower() not in ("tensor", "array", "nan", "inf"))


# ------------------------------------------------------------------------------------ captures
@dataclass
class _Cap:
    """A capture being assembled (mutable until the log is read)."""

    line: int
    key: str
    pattern: str
    values: np.ndarray
    rows: tuple[int, ...]
    cols: tuple[int, ...]
    rows_known: bool
    shape: tuple[int, ...] | None
    dtype: str
    slot: int | None
    layer: int | None
    norm: float | None
    group: str
    explicit: bool  # slot or layer printed
    duplicates: int = 0


def _norm_dtype(d: str | None, kind: str) -> str:
    if d:
        d = d.lower().replace("torch.", "")
        return {"half": "float16", "float": "float32", "double": "float64", "bf16": "bfloat16", "fp16": "float16",
                "fp32": "float32"}.get(d, d)
    if kind == "tensor":
        return "float32"  # PyTorch leaves the default dtype out of its print
    return "unknown"


def _build(p: _Print, lab: _Labels, shape: tuple[int, ...] | None) -> tuple[np.ndarray, tuple[int, ...], tuple[int, ...], bool]:
    """Rows and columns of one print, in positions of the captured tensor."""
    vals = p.values
    rows_t = p.rows
    cols = list(p.cols)
    depth = len(rows_t[0]) if rows_t else 0
    rows_known = True
    if depth == 0:
        # a flat list: one token's values (x[t, a:b], x.flatten()[:k], first5=[...])
        width = shape[-1] if shape else None
        n = vals.shape[1]
        c0 = lab.col_start
        if c0 is None:
            c0 = -n if lab.col_from_end else 0
        if lab.col_from_end and c0 >= 0:
            c0 = -n
        if width is not None and c0 < 0:
            c0 = width + c0
        if width is not None and lab.flat and c0 >= 0 and c0 + n > width and not lab.col_from_end:
            # x.flatten()[:k] with k wider than a row: several tokens
            k = math.ceil((c0 + n) / width)
            flat = np.full(k * width, np.nan)
            flat[c0 : c0 + n] = vals[0]
            r0 = lab.row_start or 0
            return flat.reshape(k, width), tuple(range(r0, r0 + k)), tuple(range(width)), True
        if c0 < 0:
            cols = list(range(c0, c0 + n))
        else:
            cols = list(range(c0, c0 + n))
        row = lab.row_start if lab.row_start is not None else 0
        return vals, (row,), tuple(cols), True
    # leading dims: drop singleton dims, keep one token dim
    lead = list(zip(*rows_t))  # per leading dim, the index of each row
    keep = [d for d, idx in enumerate(lead) if len(set(idx)) > 1 or any(i != 0 for i in idx)]
    if shape is not None and len(shape) >= 2:
        token_dims = list(shape[:-1])[-depth:] if len(shape) - 1 >= depth else None
    else:
        token_dims = None
    if not keep:
        rows = [0] * len(rows_t)
    elif len(keep) == 1:
        rows = [idx[keep[0]] for idx in rows_t]
    elif token_dims is not None:
        rows = [_flat_index(idx, tuple(token_dims)) for idx in rows_t]
    else:
        rows = list(range(len(rows_t)))
        rows_known = False
    row0 = lab.row_start
    if row0 is not None and row0 != 0 and all(r >= 0 for r in rows):
        rows = [r + row0 for r in rows]
    col0 = lab.col_start
    if col0 is not None and col0 != 0 and all(c >= 0 for c in cols):
        cols = [c + col0 for c in cols]
    if shape is not None and len(shape) >= 1:
        width = shape[-1]
        cols = [c if c >= 0 or -c > width else width + c for c in cols]
        cols = [c if c >= 0 else c for c in cols]
    return vals, tuple(rows), tuple(cols), rows_known


class _Builder:
    """Turns records into captures: labels, passes, slot order, duplicates."""

    def __init__(self, ctx: ReadContext, rel: str):
        self.ctx, self.rel = ctx, rel
        self.caps: list[_Cap] = []
        self.pass_no = 0
        self.pass_keys: set = set()
        self.pass_shapes: dict[str, tuple[int, ...] | None] = {}
        self.passes_with_caps: set[int] = set()
        self.dumper_groups: dict[tuple, _Cap] = {}
        self.saw_non_float = 0
        self.saw_stats = 0
        self._positions: tuple[int, ...] | None = None
        self.dups: dict[tuple, _Cap] = {}  # identical prints of one pass (tensor-parallel ranks)
        self.parts: dict[tuple, list[_Cap]] = {}  # prints of one pass with the same name, slot and layer

    def new_pass(self) -> None:
        if self.pass_no in self.passes_with_caps:
            self.pass_no += 1
        self.pass_keys = set()
        self.pass_shapes = {}

    @property
    def group(self) -> str:
        return f"{self.rel}#pass{self.pass_no}"

    def record(self, rec: _Record) -> None:
        if not rec.prints:
            if _PASS_RE.search(rec.text):
                self.new_pass()
            return
        dumper = _DUMPER_RE.search(rec.text) or (_DUMPER_OLD_RE.search(rec.text) if "sample_value" in rec.text else None)
        if dumper:
            self._dumper(rec, dumper.group(1))
            return
        if _PASS_RE.search(rec.text) and not any(_HIDDEN_WORDS.search(p.prefix) for p in rec.prints):
            self.new_pass()
        float_prints = []
        for p in rec.prints:
            local = p.list_label if p.list_index is not None else p.prefix
            if not p.is_float:
                self.saw_non_float += 1
                self._int_labels(p, local)
                continue
            if _NOT_VALUES_RE.search(_strip_prefix(local).rstrip()[-60:]):
                self.saw_stats += 1
                continue
            if p.kind == "list" and p.values.size < 4 and not _HIDDEN_WORDS.search(local + rec.text):
                continue
            float_prints.append((p, local))
        if not float_prints:
            return
        text = (rec.header + " " + rec.text) if rec.header else rec.text
        line_key = _short_key(text)
        # several flat prints on one line keyed first/last, head/tail or by index are parts of one tensor
        if len(float_prints) > 1 and all(len(p.rows[0]) == 0 and p.list_index is None for p, _ in float_prints) and all(
            _HEAD_RE.search(_key_words(loc)) or _TAIL_RE.search(_key_words(loc)) or _SUBSCRIPT_RE.search(_key_words(loc))
            for _, loc in float_prints
        ):
            self._merged(rec, float_prints, text, line_key)
            return
        for p, local in float_prints:
            if p.list_index is not None:
                name = _short_key(p.list_label) or "list"
                lab = _labels(text, p.list_label)
                if lab.slot is None:
                    lab.slot = p.list_index
                key = f"{name}[{p.list_index}]"
            else:
                lab = _labels(text, local)
                key = line_key if len(float_prints) == 1 else f"{line_key} {_key_words(local).rstrip('=: ')}".strip()
            vals, rows, cols, rows_known = _build(p, lab, lab.shape)
            self._add(p, lab, key, vals, rows, cols, rows_known, text)

    def _int_labels(self, p: _Print, local: str) -> None:
        if re.search(r"\bpositions?\s*[=:]?\s*$", _strip_prefix(local).rstrip(), re.I):
            self._positions = tuple(int(v) for v in p.values.reshape(-1) if np.isfinite(v) and abs(v) < 1e9)

    def _merged(self, rec: _Record, prints: list[tuple[_Print, str]], text: str, key: str) -> None:
        cells: dict[tuple[int, int], float] = {}
        lab0: _Labels | None = None
        for p, local in prints:
            lab = _labels(text, local)
            lab0 = lab0 or lab
            vals, rows, cols, _ = _build(p, lab, lab.shape)
            for r, row in zip(rows, vals):
                for c, v in zip(cols, row):
                    cells[(r, c)] = float(v)
        assert lab0 is not None
        vals, rows, cols = _cells_grid(cells)
        first = prints[0][0]
        self._add(first, lab0, key, vals, rows, cols, True, text)

    def _add(self, p: _Print, lab: _Labels, key: str, vals: np.ndarray, rows: tuple[int, ...], cols: tuple[int, ...],
             rows_known: bool, text: str) -> None:
        shape = lab.shape
        if self._positions is not None and len(self._positions) == len(rows) and all(r >= 0 for r in rows):
            rows = self._positions
            self._positions = None
        if not np.isfinite(vals).any():
            self.ctx.warnings.append(f"{self.rel}:{p.line}: a printed tensor holds only NaN/Inf values; not used")
            return
        pattern = _pattern(key)
        base = _base_name(key)
        explicit = lab.slot is not None or lab.layer is not None
        dup_key = (self.group, pattern, lab.slot, lab.layer, rows, cols, vals.shape, vals.tobytes())
        if dup_key in self.dups:
            self.dups[dup_key].duplicates += 1  # the same print again (another tensor-parallel rank)
            return
        part_key = (self.group, lab.slot, lab.layer, base)
        if explicit:
            for c in reversed(self.parts.get(part_key, [])):
                if (c.shape is None or shape is None or c.shape == shape) and _disjoint(c, rows, cols):
                    # another part of a tensor printed just before (first values, then the last token ...)
                    cells = {(r, col): float(v) for r, row in zip(c.rows, c.values) for col, v in zip(c.cols, row)}
                    cells.update({(r, col): float(v) for r, row in zip(rows, vals) for col, v in zip(cols, row)})
                    c.values, c.rows, c.cols = _cells_grid(cells)
                    c.shape = c.shape or shape
                    c.norm = c.norm if c.norm is not None else lab.norm
                    return
            k = (base, lab.slot, lab.layer)
            if k in self.pass_keys:
                self.new_pass()
            self.pass_keys.add(k)
        else:
            prev = self.pass_shapes.get(pattern, "unset")
            if prev != "unset" and prev != shape:
                self.new_pass()
            self.pass_shapes[pattern] = shape
        self.passes_with_caps.add(self.pass_no)
        cap = _Cap(
            line=p.line, key=key, pattern=pattern, values=vals, rows=rows, cols=cols, rows_known=rows_known,
            shape=shape, dtype=_norm_dtype(p.dtype or lab.dtype, p.kind), slot=lab.slot, layer=lab.layer,
            norm=lab.norm, group=self.group, explicit=explicit,
        )
        self.caps.append(cap)
        self.dups[(self.group, pattern, lab.slot, lab.layer, rows, cols, vals.shape, vals.tobytes())] = cap
        if explicit:
            self.parts.setdefault((self.group, lab.slot, lab.layer, base), []).append(cap)

    def _dumper(self, rec: _Record, path_text: str) -> None:
        """An SGLang dumper record: tags from the file name, the sample is the first 5 of long dims."""
        from .sglang_dumper import parse_tags

        name = path_text.replace("\\", "/").rsplit("/", 1)[-1]
        tags = parse_tags(name) or {}
        exp = path_text.replace("\\", "/").rsplit("/", 2)[-2] if "/" in path_text else ""
        step = tags.get("step", tags.get("forward_pass_id", "0"))
        group = f"{self.rel}:{exp}:step={step}"
        p = next((q for q in rec.prints if "sample_value" in q.prefix or q.kind == "tensor"), rec.prints[0])
        lab = _labels(rec.text, "")
        shape = lab.shape
        m = re.search(r"\bdtype=(?:torch\.)?(\w+)", rec.text)
        dtype = _norm_dtype(m.group(1) if m else p.dtype, "tensor")
        if not p.is_float or not dtype.startswith(("float", "bfloat")):
            self.saw_non_float += 1
            return
        vals, rows_t, cols = p.values, p.rows, list(p.cols)
        depth = len(rows_t[0]) if rows_t else 0
        if depth == 0:
            rows: tuple[int, ...] = (0,)
        else:
            lead = list(zip(*rows_t))
            keep = [d for d, idx in enumerate(lead) if len(set(idx)) > 1]
            if len(keep) <= 1:
                rows = tuple(idx[keep[0]] if keep else 0 for idx in rows_t)
            elif shape is not None:
                dims = shape[:-1][-depth:]
                rows = tuple(_flat_index(idx, dims) for idx in rows_t)
            else:
                rows = tuple(range(len(rows_t)))
        layer = None
        for t in ("layer_id", "layer", "layer_idx", "layer_index"):
            if t in tags and re.fullmatch(r"-?\d{1,9}", tags[t]):
                layer = int(tags[t])
                break
        slot = None
        for t in ("slot", "aux_idx", "aux_index"):
            if t in tags and re.fullmatch(r"\d{1,9}", tags[t]):
                slot = int(tags[t])
                break
        extra = {k: v for k, v in tags.items()
                 if k not in ("step", "forward_pass_id", "rank", "dump_index", "world_rank", "world_size", "recompute_status")}
        key = " ".join(f"{k}={v}" for k, v in [("name", extra.pop("name", "?"))] + sorted(extra.items()))
        ident = (exp, step, key, tags.get("dump_index"))
        if ident in self.dumper_groups:
            prev = self.dumper_groups[ident]
            if prev.values.shape == vals.shape and np.allclose(prev.values, vals, equal_nan=True):
                prev.duplicates += 1
            else:
                self.ctx.warnings.append(
                    f"{self.rel}:{rec.line}: [{key}] printed by another rank with different values; the first one is used"
                )
            return
        if shape is not None:
            width = shape[-1]
            cols = [c if c >= 0 else width + c for c in cols]
        cap = _Cap(
            line=rec.line, key=key, pattern=f"dumper {tags.get('name', '')}", values=vals, rows=rows, cols=tuple(cols),
            rows_known=True, shape=shape, dtype=dtype, slot=slot, layer=layer, norm=lab.norm, group=group,
            explicit=layer is not None or slot is not None,
        )
        self.dumper_groups[ident] = cap
        self.caps.append(cap)

    def finish(self) -> list[Capture]:
        # slot order from the log: unlabelled prints of one pass that share a label pattern
        by_pat: dict[tuple[str, str], list[_Cap]] = {}
        for c in self.caps:
            if not c.explicit and c.slot is None:
                by_pat.setdefault((c.group, c.pattern), []).append(c)
        for caps in by_pat.values():
            if len(caps) >= 2:
                for i, c in enumerate(caps):
                    c.slot = i
        out = []
        for c in self.caps:
            width = c.shape[-1] if c.shape else None
            obs = Observation(c.values, c.rows, c.cols, c.rows_known)
            out.append(
                Capture(
                    side=self.ctx.side,
                    origin=Origin(self.rel, c.key, c.line, KEY),
                    shape=c.shape,
                    dtype=c.dtype,
                    width=width,
                    group=c.group,
                    slot=c.slot,
                    layer=None if c.layer is None else Layer(c.layer, self.ctx.index, "log"),
                    norm=c.norm,
                    observation=obs,
                )
            )
        return out


def _flat_index(idx: tuple[int, ...], dims: tuple[int, ...]) -> int:
    flat = 0
    for i, size in zip(idx, dims):
        flat = flat * size + (i if i >= 0 else size + i)
    return flat


def _short_key(text: str) -> str:
    """A short label for reports: the line's own words before its shape, dtype, norm or values."""
    t = _strip_prefix(text).replace("<printed>", "\x00")
    t = re.split(r"\s(?=(?:type|shape|dtype|norm\w*|device|stride|size|first\w*|last\w*|head|tail)\s*[=:])|:\s|:$|\x00", t)[0]
    t = re.sub(r"\s+", " ", t).strip(" =:,")
    return t[:80] + ("…" if len(t) > 80 else "")


def _base_name(key: str) -> str:
    """The tensor's name in a label: ``[eagle3] aux_hidden_states[1] layer=3`` -> ``aux_hidden_states``."""
    t = re.sub(r"^(?:\[[^\]]*\]\s*)+", "", key)
    m = re.search(r"[A-Za-z_][\w.]*", t)
    return m.group() if m else ""


def _disjoint(c: _Cap, rows: tuple[int, ...], cols: tuple[int, ...]) -> bool:
    have = {(r, col) for r, row in zip(c.rows, c.values) for col, v in zip(c.cols, row) if np.isfinite(v)}
    return not any((r, col) in have for r in rows for col in cols)


def _cells_grid(cells: dict[tuple[int, int], float]) -> tuple[np.ndarray, tuple[int, ...], tuple[int, ...]]:
    order = lambda x: (x < 0, x)  # noqa: E731 - positions from the start first, then from the end
    rows = sorted({r for r, _ in cells}, key=order)
    cols = sorted({c for _, c in cells}, key=order)
    ri = {r: i for i, r in enumerate(rows)}
    ci = {c: j for j, c in enumerate(cols)}
    grid = np.full((len(rows), len(cols)), np.nan)
    for (r, c), v in cells.items():
        grid[ri[r], ci[c]] = v
    return grid, tuple(rows), tuple(cols)


# ------------------------------------------------------------------------------------ entry points
def read(path: Path, ctx: ReadContext) -> list[Capture]:
    """Every printed hidden-state tensor in the log ``path``, as partial-observation captures.

    Raises :class:`FormatError` when the log holds no printed tensor.
    """
    rel = ctx.rel(path)
    pattern = ctx.log_pattern
    try:
        f = open(path, "rb")
    except OSError as e:
        raise InputError(f"cannot read ({e.strerror or e})", path=path) from None
    with f:
        if pattern:
            caps, why = _read_with_pattern(f, ctx, rel, compile_pattern(pattern))
        else:
            caps, why = _read_auto(f, ctx, rel)
    if not caps:
        raise FormatError(
            "this log holds no printed tensor" + (f" ({why})" if why else ""),
            path=path,
            hint="print the captured hidden states (e.g. first values of a few tokens: h[:4, :16]) "
            "and pass that log, or give --log-pattern REGEX with a named group 'values' for an unusual format",
        )
    return caps


def _read_auto(f: IO[bytes], ctx: ReadContext, rel: str) -> tuple[list[Capture], str]:
    lines = _Lines(f)
    b = _Builder(ctx, rel)
    for rec in _scan_records(lines, ctx.warnings, rel):
        b.record(rec)
    if lines.long_lines:
        n = len(lines.long_lines)
        ctx.warnings.append(
            f"{rel}: {n} line(s) longer than {MAX_LINE >> 20} MiB (first: line {lines.long_lines[0]}) were read only "
            "up to that length"
        )
    caps = b.finish()
    why = ""
    if not caps:
        if b.saw_non_float:
            why = f"{b.saw_non_float} integer list(s) such as token ids or shapes, but no floating-point values"
        elif b.saw_stats:
            why = "only statistics such as norms or means, which cannot identify a layer"
        else:
            why = f"{lines.no} lines read"
    return caps, why


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The ``--log-pattern`` regular expression, checked: it must compile and name a group ``values``."""
    try:
        rx = re.compile(pattern)
    except re.error as e:
        raise InputError(f"--log-pattern is not a valid regular expression ({e})",
                         hint=r"example: --log-pattern 'slot (?P<slot>\d+): (?P<values>[-\d., e+]+)'") from None
    if "values" not in rx.groupindex:
        raise InputError(
            "--log-pattern needs a named group 'values' holding the printed numbers",
            hint=r"example: --log-pattern 'aux(?P<slot>\d) = \[(?P<values>[^\]]*)\]'; optional groups: slot, layer, "
            "token, col, norm, shape, dtype, name",
        )
    return rx


def _read_with_pattern(f: IO[bytes], ctx: ReadContext, rel: str, rx: re.Pattern[str]) -> tuple[list[Capture], str]:
    lines = _Lines(f)
    b = _Builder(ctx, rel)
    matched = 0
    while True:
        got = lines.next()
        if got is None:
            break
        no, text, _ = got
        for m in rx.finditer(text):
            matched += 1
            g = m.groupdict()
            raw = g.get("values") or ""
            rows_list: list[tuple[int, ...]] = [()]
            if "[" in raw:
                parsed = parse_values(raw)
                if parsed is None:
                    continue
                vals, rows_t, cols = parsed
                if vals.shape[0] > 1:
                    rows_list = [(r,) for r in rows_t]
            else:
                nums = [float(x) for x in _NUM.findall(raw)]
                if not nums:
                    continue
                vals, cols = np.asarray([nums]), tuple(range(len(nums)))
            lab = _Labels()
            for name, attr in (("slot", "slot"), ("layer", "layer"), ("token", "row_start"), ("col", "col_start")):
                v = g.get(name)
                if v is not None and re.fullmatch(r"\s*-?\d{1,9}\s*", v):
                    setattr(lab, attr, int(v))
            if lab.row_start is not None:
                lab.row_from_end = lab.row_start < 0
            if lab.col_start is not None:
                lab.col_from_end = lab.col_start < 0
            if g.get("norm"):
                try:
                    lab.norm = float(g["norm"])
                except ValueError:
                    pass
            if g.get("shape"):
                lab.shape = _ints(g["shape"]) or None
            if g.get("dtype"):
                lab.dtype = g["dtype"]
            p = _Print(vals, rows_list, tuple(cols), False, True, no, "list", g.get("name") or "")
            v, rows, cols_, known = _build(p, lab, lab.shape)
            key = (g.get("name") or _short_key(text[: m.start("values")]) or "match").strip()
            b._add(p, lab, key, v, rows, cols_, known, text)
    caps = b.finish()
    why = "" if matched else "--log-pattern matched no line"
    return caps, why
