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
  tags (``layer_id=...``, ``slot=...``);
* per-token norms without values (weak evidence, kept apart from the captures): a list per capture
  (``aux slot 0 norms: [...]``, ``h[1:25].norm(dim=-1).tolist()=[...]``), one token a line
  (``layer=2 token=1 norm=105.52``), and JSON lines of either (``{"layer": 2, "token": 1, "norm": 105.52}``,
  ``{"slot": 0, "norms": [...]}``: a JSON object's keys are read as ``key=value`` labels).

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

The package, one module per layer (each imports only those above it):

============  ==================================================================================
module        what it holds
============  ==================================================================================
``numbers``   the number grammar: nested bracket lists, ``nan``/``inf``, ``...`` of summarised prints
``labels``    the label regexes: slot, layer, shape, dtype, norm, positions; log prefixes; pass starts
``scanner``   the bounded line scanner: physical lines, multi-line prints joined, records of prints
``dumper``    the records SGLang's dumper prints, read with the dumper file reader's tag grammar
``builder``   the capture builder: values placed, passes, parts merged, ranks counted once, slot order
``pattern``   the ``--log-pattern`` path: a user's regex, feeding the same builder
============  ==================================================================================
"""

from __future__ import annotations

from pathlib import Path

from ...errors import FormatError, InputError
from ...model import Capture
from .._common import ReadContext
from .builder import KEY, Builder
from .numbers import parse_values
from .pattern import compile_pattern, read_with_pattern
from .scanner import Lines, scan_records

__all__ = ["KEY", "READS", "PRIORITY", "read", "parse_values", "compile_pattern"]

#: It reads text files, by path (every other reader reads a table of tensors).
READS = "text"
#: Never asked by content: text files come here, and ``--format debuglog`` sends any file here.
PRIORITY = 100
#: Bytes of one physical line that are read; the rest of a longer line is skipped unread.
MAX_LINE = 1 << 20


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
        lines = Lines(f, MAX_LINE)
        if pattern:
            caps, why = read_with_pattern(lines, ctx, rel, compile_pattern(pattern))
        else:
            caps, why = _read_auto(lines, ctx, rel)
    if not caps and ctx.norm_prints:
        return []  # per-token norms only: weak evidence, kept in the context (a Dump's norm_prints)
    if not caps:
        raise FormatError(
            "this log holds no printed tensor" + (f" ({why})" if why else ""),
            path=path,
            hint="print the captured hidden states (e.g. first values of a few tokens: h[:4, :16]) "
            "and pass that log, or give --log-pattern REGEX with a named group 'values' for an unusual format",
        )
    return caps


def _read_auto(lines: Lines, ctx: ReadContext, rel: str) -> tuple[list[Capture], str]:
    b = Builder(ctx, rel)
    for rec in scan_records(lines, ctx.warnings, rel):
        b.record(rec)
    if lines.long_lines:
        n = len(lines.long_lines)
        ctx.warnings.append(
            f"{rel}: {n} line(s) longer than {lines.max_line >> 20} MiB (first: line {lines.long_lines[0]}) were read "
            "only up to that length"
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
