"""The capture builder: turns the records of a log into partial-observation captures.

:func:`place` puts a print's values at their positions in the captured tensor (rows are tokens,
columns hidden units), from its labels. :class:`Builder` keeps the state of one log: forward
passes (a new one at SGLang's batch lines, the dumper's ``step=N``, or a repeated label), parts of
one tensor printed separately (merged), the same print from several tensor-parallel ranks
(counted once), and the slot order of unlabelled prints that share a label pattern (log order).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

import numpy as np

from ...model import Capture, Index, LabelSource, Layer, NormPrint, Observation, Origin
from .._common import ReadContext, layer_label
from .dumper import DumperSample, dumper_path, read_record
from .labels import (
    HEAD_RE,
    HIDDEN_WORDS,
    NOT_VALUES_RE,
    PASS_RE,
    SUBSCRIPT_RE,
    TAIL_RE,
    Labels,
    base_name,
    find_labels,
    is_json_object,
    key_words,
    label_pattern,
    norm_dtype,
    short_key,
    strip_prefix,
)
from .numbers import flat_index
from .scanner import Print, Record

#: The format key of every capture read from a debug log.
KEY = "debuglog"


@dataclass
class Cap:
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
    layer_index: str | None = None  # what the words around the layer number say it counts


def place(
    p: Print, lab: Labels, shape: tuple[int, ...] | None
) -> tuple[np.ndarray, tuple[int, ...], tuple[int, ...], bool]:
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
        rows = [flat_index(idx, tuple(token_dims)) for idx in rows_t]
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


class Builder:
    """Turns records into captures: labels, passes, slot order, duplicates."""

    def __init__(self, ctx: ReadContext, rel: str):
        self.ctx, self.rel = ctx, rel
        self.caps: list[Cap] = []
        self.pass_no = 0
        self.pass_keys: set = set()
        self.pass_shapes: dict[str, tuple[int, ...] | None] = {}
        self.passes_with_caps: set[int] = set()
        self.dumper_groups: dict[tuple, Cap] = {}
        self.saw_non_float = 0
        self.saw_stats = 0
        self.norm_prints: list[NormPrint] = []
        self.norm_keys: set[tuple] = set()  # labelled norm prints of this pass (a repeat starts a new one)
        #: per-token norms printed one token a line, by (pass, slot, layer, what the layer counts, label pattern)
        self.token_norms: dict[tuple, _TokenNorms] = {}
        self._positions: tuple[int, ...] | None = None
        self._json = False  # the record being read is a JSON object
        self.dups: dict[tuple, Cap] = {}  # identical prints of one pass (tensor-parallel ranks)
        self.parts: dict[tuple, list[Cap]] = {}  # prints of one pass with the same name, slot and layer

    def new_pass(self) -> None:
        if self.pass_no in self.passes_with_caps:
            self.pass_no += 1
        self.pass_keys = set()
        self.pass_shapes = {}
        self.norm_keys = set()

    @property
    def group(self) -> str:
        return f"{self.rel}#pass{self.pass_no}"

    def record(self, rec: Record) -> None:
        self._json = is_json_object(rec.text)
        if self._json:
            _unquote(rec)
        if not rec.prints:
            if PASS_RE.search(rec.text):
                self.new_pass()
            else:
                self._token_norm(rec)
            return
        path = dumper_path(rec.text)
        if path is not None:
            self._dumper(read_record(rec, path, self.rel), rec)
            return
        if PASS_RE.search(rec.text) and not any(HIDDEN_WORDS.search(p.prefix) for p in rec.prints):
            self.new_pass()
        float_prints = []
        for p in rec.prints:
            local = p.list_label if p.list_index is not None else p.prefix
            if not p.is_float:
                self.saw_non_float += 1
                self._int_labels(p, local)
                continue
            if NOT_VALUES_RE.search(_TORCH_SIZE.sub(" ", strip_prefix(local)).rstrip()[-60:]):
                self.saw_stats += 1
                self._norms(p, local, rec)
                continue
            if p.kind == "list" and p.values.size < 4 and not HIDDEN_WORDS.search(local + rec.text):
                continue
            float_prints.append((p, local))
        if not float_prints:
            return
        text = (rec.header + " " + rec.text) if rec.header else rec.text
        line_key = short_key(text)
        # several flat prints on one line keyed first/last, head/tail or by index are parts of one tensor
        if (
            len(float_prints) > 1
            and all(len(p.rows[0]) == 0 and p.list_index is None for p, _ in float_prints)
            and all(
                HEAD_RE.search(key_words(loc)) or TAIL_RE.search(key_words(loc)) or SUBSCRIPT_RE.search(key_words(loc))
                for _, loc in float_prints
            )
        ):
            self._merged(rec, float_prints, text, line_key)
            return
        for p, local in float_prints:
            if p.list_index is not None:
                name = short_key(p.list_label) or "list"
                lab = find_labels(text, p.list_label)
                if lab.slot is None:
                    lab.slot = p.list_index
                key = f"{name}[{p.list_index}]"
            else:
                lab = find_labels(text, local)
                key = line_key if len(float_prints) == 1 else f"{line_key} {key_words(local).rstrip('=: ')}".strip()
            self.add_print(p, lab, key)

    def _norms(self, p: Print, local: str, rec: Record) -> None:
        """Keep a print of per-token norms (``norms=[...]``, ``h.norm(dim=-1): tensor([...])``): weak
        evidence when the log prints nothing else."""
        values = p.values.reshape(-1)
        if not _NORMS_RE.search(strip_prefix(local).rstrip()[-60:]) or values.size < _MIN_NORMS or p.summarised:
            return
        if not bool(np.isfinite(values).all()) or bool((values <= 0).any()):
            return
        text = (rec.header + " " + rec.text) if rec.header else rec.text
        lab = find_labels(text, local)
        start = 0 if lab.row_from_end else (lab.row_start or 0)  # h[-20:]: from an end the log does not state
        rows = tuple(range(start, start + values.size))
        if self._positions is not None and len(self._positions) == values.size:
            rows, self._positions = self._positions, None
        if lab.slot is not None or lab.layer is not None:
            k = (lab.slot, lab.layer)
            if k in self.norm_keys:
                self.new_pass()  # the same capture's norms again: the next forward pass
            self.norm_keys.add(k)
        self.passes_with_caps.add(self.pass_no)
        layer = self._layer(lab, text)
        self.norm_prints.append(
            NormPrint(
                Origin(self.rel, self._key(text, lab), p.line, KEY),
                tuple(float(v) for v in values),
                rows,
                lab.slot,
                layer,
                self.group,
            )
        )

    def _key(self, text: str, lab: Labels) -> str:
        """A print's label for reports: the line's words, or a JSON object's slot and layer."""
        if not self._json:
            return short_key(text)
        named = [f"{k}={v}" for k, v in (("slot", lab.slot), ("layer", lab.layer)) if v is not None]
        return " ".join(named) or short_key(text.strip(" {}"))

    def _layer(self, lab: Labels, text: str) -> Layer | None:
        if lab.layer is None:
            return None
        if lab.layer_index:
            return Layer(lab.layer, Index(lab.layer_index), LabelSource.LOG)
        return layer_label(lab.layer, short_key(text), self.ctx, "log")

    def _token_norm(self, rec: Record) -> None:
        """A line that prints one token's norm of a labelled capture (``layer=2 token=1 norm=105.52``, or a
        JSON object of the same keys): collected into that capture's series of per-token norms."""
        text = (rec.header + " " + rec.text) if rec.header else rec.text
        if not _NORM_WORD.search(text):
            return  # most lines of a server log: not read for labels
        lab = find_labels(text, "")
        if lab.norm is None or lab.row_start is None or lab.row_from_end or (lab.slot is None and lab.layer is None):
            return
        if not (math.isfinite(lab.norm) and lab.norm > 0):
            return
        pattern = label_pattern(_TOKEN_RE.sub(" ", _NORM_VALUE_RE.sub(" ", text)))
        key = (self.group, lab.slot, lab.layer, lab.layer_index, pattern)
        series = self.token_norms.get(key)
        if series is not None and lab.row_start in series.norms:
            self.new_pass()  # the same token of the same capture again: the next forward pass
            key = (self.group, *key[1:])
            series = None
        if series is None:
            name = self._key(_TOKEN_RE.sub(" ", _NORM_VALUE_RE.sub(" ", text)), lab)
            series = self.token_norms[key] = _TokenNorms(rec.line, name, lab, self._layer(lab, text))
        series.norms[lab.row_start] = lab.norm
        self.passes_with_caps.add(self.pass_no)

    def _int_labels(self, p: Print, local: str) -> None:
        if re.search(r"\bpositions?\s*[=:]?\s*$", strip_prefix(local).rstrip(), re.I):
            self._positions = tuple(int(v) for v in p.values.reshape(-1) if np.isfinite(v) and abs(v) < 1e9)

    def _merged(self, rec: Record, prints: list[tuple[Print, str]], text: str, key: str) -> None:
        cells: dict[tuple[int, int], float] = {}
        lab0: Labels | None = None
        for p, local in prints:
            lab = find_labels(text, local)
            lab0 = lab0 or lab
            vals, rows, cols, _ = place(p, lab, lab.shape)
            for r, row in zip(rows, vals):
                for c, v in zip(cols, row):
                    cells[(r, c)] = float(v)
        assert lab0 is not None
        vals, rows, cols = _cells_grid(cells)
        first = prints[0][0]
        self._add(first, lab0, key, vals, rows, cols, True)

    def add_print(self, p: Print, lab: Labels, key: str) -> None:
        """Add one print with its labels under ``key``: the entry for prints found another way (``--log-pattern``)."""
        vals, rows, cols, rows_known = place(p, lab, lab.shape)
        self._add(p, lab, key, vals, rows, cols, rows_known)

    def _add(
        self,
        p: Print,
        lab: Labels,
        key: str,
        vals: np.ndarray,
        rows: tuple[int, ...],
        cols: tuple[int, ...],
        rows_known: bool,
    ) -> None:
        shape = lab.shape
        if self._positions is not None and len(self._positions) == len(rows) and all(r >= 0 for r in rows):
            rows = self._positions
            self._positions = None
        if not np.isfinite(vals).any():
            self.ctx.warnings.append(f"{self.rel}:{p.line}: a printed tensor holds only NaN/Inf values; not used")
            return
        pattern = label_pattern(key)
        base = base_name(key)
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
        cap = Cap(
            line=p.line,
            key=key,
            pattern=pattern,
            values=vals,
            rows=rows,
            cols=cols,
            rows_known=rows_known,
            shape=shape,
            dtype=norm_dtype(p.dtype or lab.dtype, p.kind),
            slot=lab.slot,
            layer=lab.layer,
            norm=lab.norm,
            group=self.group,
            explicit=explicit,
            layer_index=lab.layer_index,
        )
        self.caps.append(cap)
        self.dups[(self.group, pattern, lab.slot, lab.layer, rows, cols, vals.shape, vals.tobytes())] = cap
        if explicit:
            self.parts.setdefault((self.group, lab.slot, lab.layer, base), []).append(cap)

    def _dumper(self, sample: DumperSample | None, rec: Record) -> None:
        """A record SGLang's dumper printed: one capture per tensor, whichever rank printed it."""
        if sample is None:
            self.saw_non_float += 1
            return
        if sample.ident in self.dumper_groups:
            prev = self.dumper_groups[sample.ident]
            if prev.values.shape == sample.values.shape and np.allclose(prev.values, sample.values, equal_nan=True):
                prev.duplicates += 1
            else:
                self.ctx.warnings.append(
                    f"{self.rel}:{rec.line}: [{sample.key}] printed by another rank with different values; "
                    "the first one is used"
                )
                self.ctx.rank_conflicts.append(
                    f"two ranks printed different values for {sample.key} ({self.rel}:{prev.line} and line {rec.line})"
                )
            return
        cap = Cap(
            line=sample.line,
            key=sample.key,
            pattern=sample.pattern,
            values=sample.values,
            rows=sample.rows,
            cols=sample.cols,
            rows_known=True,
            shape=sample.shape,
            dtype=sample.dtype,
            slot=sample.slot,
            layer=sample.layer,
            norm=sample.norm,
            group=sample.group,
            explicit=sample.layer is not None or sample.slot is not None,
        )
        self.dumper_groups[sample.ident] = cap
        self.caps.append(cap)

    def finish(self) -> list[Capture]:
        for (group, *_), series in self.token_norms.items():
            if len(series.norms) >= _MIN_NORMS:
                rows = tuple(sorted(series.norms))
                self.norm_prints.append(
                    NormPrint(
                        Origin(self.rel, series.key, series.line, KEY),
                        tuple(series.norms[t] for t in rows),
                        rows,
                        series.labels.slot,
                        series.layer,
                        group,
                    )
                )
        # slot order from the log: the unlabelled norm prints of one pass, in the order they were printed
        unlabelled: dict[str | None, list[NormPrint]] = {}
        for n in sorted(self.norm_prints, key=lambda n: n.origin.line or 0):
            if n.slot is None:
                unlabelled.setdefault(n.group, []).append(n)
        order = {id(n): i for caps in unlabelled.values() if len(caps) >= 2 for i, n in enumerate(caps)}
        self.ctx.norm_prints.extend(
            dataclasses.replace(n, slot=order[id(n)]) if id(n) in order else n
            for n in sorted(self.norm_prints, key=lambda n: n.origin.line or 0)
        )
        # slot order from the log: unlabelled prints of one pass that share a label pattern
        by_pat: dict[tuple[str, str], list[Cap]] = {}
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
                    layer=None
                    if c.layer is None
                    else (
                        Layer(c.layer, Index(c.layer_index), LabelSource.LOG)
                        if c.layer_index
                        else layer_label(c.layer, c.key, self.ctx, "log")
                    ),
                    norm=c.norm,
                    observation=obs,
                )
            )
        return out


@dataclass
class _TokenNorms:
    """The per-token norms of one capture printed a token a line, as they are read."""

    line: int  # the first line
    key: str
    labels: Labels
    layer: Layer | None
    norms: dict[int, float] = dataclasses.field(default_factory=dict)  # token position -> norm


#: A printed shape before the values (``print("aux", h.shape, h)``): a label, not a statistic they are.
_TORCH_SIZE = re.compile(r"torch\.Size\(\s*\[[\d,\s]*\]\s*\)")
#: A line that may print a norm (what :func:`find_labels` reads as one needs one of these).
_NORM_WORD = re.compile(r"norm|l2|\|\|", re.I)
#: The token position and the norm of a per-token norm line, left out of its label pattern.
_TOKEN_RE = re.compile(r"\b(?:token|tok|pos|position|row|token_idx|tok_idx)\s*[=:#]?\s*-?\d+", re.I)
_NORM_VALUE_RE = re.compile(r"\bnorm\w*\s*[=:]\s*\S+", re.I)


def _unquote(rec: Record) -> None:
    """A JSON object's record with the quotes of its keys removed (``{"slot": 0, "norms": [`` reads as
    ``{slot: 0, norms: [``), so that the label grammar reads its keys as it reads ``slot=0 norms=[``."""
    rec.text = rec.text.replace('"', "")
    rec.header = rec.header.replace('"', "")
    for p in rec.prints:
        p.prefix = p.prefix.replace('"', "")
        p.list_label = p.list_label.replace('"', "")


#: A print of per-token norms: its label ends in a norm word.
_NORMS_RE = re.compile(r"norms?\b|\.norm\([^()]*\)", re.I)
#: Fewer norms than this say too little to rule a layer out.
_MIN_NORMS = 4


def _disjoint(c: Cap, rows: tuple[int, ...], cols: tuple[int, ...]) -> bool:
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
