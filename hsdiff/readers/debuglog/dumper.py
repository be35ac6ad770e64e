"""Records SGLang's tensor dumper prints: ``[Dumper.Value] <path> ... shape=... dtype=... sample_value=tensor(...)``.

The dumped file's path carries the tags, read with the dumper file reader's own grammar
(:func:`hsdiff.readers.sglang_dumper.read_tags`), so a tensor has the same key, layer and slot in
the log as in its file; its forward pass is ``{log}:{experiment}:step={step}``. The sample is
SGLang's truncated view: every dimension longer than 50 is cut to its first 5 entries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..sglang_dumper import parse_tags, read_tags
from .labels import find_labels, norm_dtype
from .numbers import flat_index
from .scanner import Record

DUMPER_RE = re.compile(r"\[Dumper\.(?:Value|Grad|ParamValue|ParamGrad)\]\s+(\S+\.pt)\b")
DUMPER_OLD_RE = re.compile(r"(\S*(?:forward_pass_id|step)=[^\s]*?___\S*\.pt)\b")


def dumper_path(text: str) -> str | None:
    """The path of the file a dumper record describes, or None when ``text`` is no dumper record."""
    m = DUMPER_RE.search(text) or (DUMPER_OLD_RE.search(text) if "sample_value" in text else None)
    return m.group(1) if m else None


@dataclass(frozen=True)
class DumperSample:
    """The sample one dumper record prints, with what its tags say."""

    ident: tuple[str, str, str, str | None]  # (experiment, step, key, dump_index): one tensor, whichever rank
    group: str
    key: str
    pattern: str
    values: np.ndarray
    rows: tuple[int, ...]
    cols: tuple[int, ...]
    shape: tuple[int, ...] | None
    dtype: str
    slot: int | None
    layer: int | None
    norm: float | None
    line: int


def read_record(rec: Record, path_text: str, rel: str) -> DumperSample | None:
    """The sample of one dumper record of the log ``rel``; None when it is not floating point."""
    path = path_text.replace("\\", "/")
    raw = parse_tags(path.rsplit("/", 1)[-1]) or {}
    tags = read_tags(raw)
    exp = path.rsplit("/", 2)[-2] if "/" in path_text else ""
    p = next((q for q in rec.prints if "sample_value" in q.prefix or q.kind == "tensor"), rec.prints[0])
    lab = find_labels(rec.text, "")
    shape = lab.shape
    m = re.search(r"\bdtype=(?:torch\.)?(\w+)", rec.text)
    dtype = norm_dtype(m.group(1) if m else p.dtype, "tensor")
    if not p.is_float or not dtype.startswith(("float", "bfloat")):
        return None
    rows_t, cols = p.rows, list(p.cols)
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
            rows = tuple(flat_index(idx, dims) for idx in rows_t)
        else:
            rows = tuple(range(len(rows_t)))
    if shape is not None:
        width = shape[-1]
        cols = [c if c >= 0 else width + c for c in cols]
    return DumperSample(
        ident=(exp, tags.step, tags.key, tags.dump_index),
        group=tags.group(f"{rel}:{exp}"),
        key=tags.key,
        pattern=f"dumper {raw.get('name', '')}",
        values=p.values,
        rows=rows,
        cols=tuple(cols),
        shape=shape,
        dtype=dtype,
        slot=tags.slot,
        layer=tags.layer,
        norm=lab.norm,
        line=rec.line,
    )
