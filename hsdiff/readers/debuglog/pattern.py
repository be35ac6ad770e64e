"""``--log-pattern``: a user's regular expression for a debug log in a format hsdiff does not know.

The expression has a named group ``values`` (the printed numbers) and optionally ``slot``,
``layer``, ``token``, ``col`` (first column), ``norm``, ``shape``, ``dtype`` and ``name``; every
match is one print, handed to the same :class:`~hsdiff.readers.debuglog.builder.Builder` as the
prints found without a pattern.
"""

from __future__ import annotations

import re

import numpy as np

from ...errors import InputError
from ...model import Capture
from .._common import ReadContext
from .builder import Builder
from .labels import Labels, ints, short_key
from .numbers import NUM, parse_values
from .scanner import Lines, Print


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The ``--log-pattern`` regular expression, checked: it must compile and name a group ``values``."""
    try:
        rx = re.compile(pattern)
    except re.error as e:
        raise InputError(
            f"--log-pattern is not a valid regular expression ({e})",
            hint=r"example: --log-pattern 'slot (?P<slot>\d+): (?P<values>[-\d., e+]+)'",
        ) from None
    if "values" not in rx.groupindex:
        raise InputError(
            "--log-pattern needs a named group 'values' holding the printed numbers",
            hint=r"example: --log-pattern 'aux(?P<slot>\d) = \[(?P<values>[^\]]*)\]'; optional groups: slot, layer, "
            "token, col, norm, shape, dtype, name",
        )
    return rx


def read_with_pattern(lines: Lines, ctx: ReadContext, rel: str, rx: re.Pattern[str]) -> tuple[list[Capture], str]:
    """Captures from every match of ``rx`` on the lines of the log ``rel``, and why there are none if so."""
    b = Builder(ctx, rel)
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
                nums = [float(x) for x in NUM.findall(raw)]
                if not nums:
                    continue
                vals, cols = np.asarray([nums]), tuple(range(len(nums)))
            lab = Labels()
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
                lab.shape = ints(g["shape"]) or None
            if g.get("dtype"):
                lab.dtype = g["dtype"]
            p = Print(vals, rows_list, tuple(cols), False, True, no, "list", g.get("name") or "")
            key = (g.get("name") or short_key(text[: m.start("values")]) or "match").strip()
            b.add_print(p, lab, key)
    caps = b.finish()
    why = "" if matched else "--log-pattern matched no line"
    return caps, why
