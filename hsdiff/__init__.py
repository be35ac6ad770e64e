"""hsdiff — prove that an inference engine feeds an EAGLE-3 draft the hidden states it was trained on.

Typical use in a notebook::

    import hsdiff
    report = hsdiff.compare("train_dump/", "sglang_dump/", layer_ids=[-1, 2, 30])
    report.verdict               # 'mismatch'
    report.recommended.ids       # (2, 30, 58)
    report.slots_frame()         # one row per training slot (pandas)
    report.plot()                # error of every slot against every capture

    hsdiff.translate([2, 30, 58], "sglang", "vllm", num_layers=61)   # [3, 31, 59]

The pieces, in the order data flows: :func:`load` (readers → captures), :func:`compare`
(aligner → :class:`Report`), and the renderers in :mod:`hsdiff.report`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .conventions import ENGINES, default_ids, describe_boundary, from_boundary, to_boundary, translate
from .errors import AlignmentError, ConfigError, FormatError, HsdiffError, InputError, UnsafeFileError

if TYPE_CHECKING:  # pragma: no cover
    from .comparison import Options
    from .model import Capture, Dump, Report

__version__ = "0.1.0"

__all__ = [
    "compare",
    "load",
    "Options",
    "Report",
    "Capture",
    "Dump",
    "ENGINES",
    "to_boundary",
    "from_boundary",
    "translate",
    "default_ids",
    "describe_boundary",
    "HsdiffError",
    "InputError",
    "ConfigError",
    "FormatError",
    "UnsafeFileError",
    "AlignmentError",
]


def compare(train: Any, infer: Any, options: Options | None = None, **kwargs: Any) -> Report:
    """Compare a training-side dump with an inference-side dump; see :func:`hsdiff.comparison.compare`."""
    from .comparison import compare as _compare

    return _compare(train, infer, options, **kwargs)


def load(path: Any, side: str = "infer", **kwargs: Any) -> Dump:
    """Read every capture under ``path`` lazily; see :func:`hsdiff.readers.scan`.

    >>> dump = hsdiff.load("fixtures/seed/infer-wrong")      # doctest: +SKIP
    >>> dump.captures[0].shape
    (25, 1728)
    """
    from .readers import scan

    return scan(path, side, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "Options":
        from .comparison import Options

        return Options
    if name in ("Report", "Capture", "Dump"):
        from . import model

        return getattr(model, name)
    raise AttributeError(f"module 'hsdiff' has no attribute {name!r}")
