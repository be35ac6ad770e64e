"""hsdiff — prove that an inference engine feeds an EAGLE-3 draft the hidden states it was trained on.

Typical use in a notebook::

    import hsdiff
    report = hsdiff.compare("train_dump/", "sglang_dump/", layer_ids=[-1, 2, 30])
    report.verdict               # 'mismatch'
    report.recommended.ids       # (2, 30, 58)
    report.settings.words()      # 'for SGLang 0.5.23, rule: SGLang, llama rule (+1)': what the ids are right for
    report.slots_frame()         # one row per training slot (pandas)
    report.plot()                # error of every slot against every capture (a Figure; hsdiff.report.pictures)
    hsdiff.inspect("sglang_dump/")           # what a dump holds, without comparing

    hsdiff.translate([2, 30, 58], "sglang", "vllm", num_layers=61)   # [3, 31, 59]

The pieces, in the order data flows: :func:`load` (readers → captures), :func:`compare`
(the pipeline in :mod:`hsdiff.comparison`: aligner → :mod:`hsdiff.decide` → :mod:`hsdiff.explain` →
:class:`Report`), :func:`run_gate` / :func:`check_config` (the pre-deployment gate), and the
renderers in :mod:`hsdiff.report`.
"""

from __future__ import annotations

import os
from importlib import import_module
from typing import TYPE_CHECKING, Any

from .errors import (
    AlignmentError,
    ConfigError,
    FormatError,
    HsdiffError,
    InputError,
    MissingExtraError,
    UnsafeFileError,
)
from .rules.conventions import ENGINES, default_ids, describe_boundary, from_boundary, to_boundary, translate

if TYPE_CHECKING:  # pragma: no cover
    from .comparison import Options, compare
    from .gate import check_config, run_gate
    from .inspection import Inspection, inspect
    from .model import Capture, Dump, Report, Settings

__version__ = "0.2.0"

__all__ = [
    "compare",
    "load",
    "run_gate",
    "check_config",
    "inspect",
    "Inspection",
    "Options",
    "Report",
    "Settings",
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
    "MissingExtraError",
]

# The heavy parts (torch, the pipeline) load on first use: ``import hsdiff`` stays cheap.
_LAZY = {
    "compare": ("comparison", "compare"),
    "Options": ("comparison", "Options"),
    "run_gate": ("gate", "run_gate"),
    "check_config": ("gate", "check_config"),
    "inspect": ("inspection", "inspect"),
    "Inspection": ("inspection", "Inspection"),
    "Report": ("model", "Report"),
    "Settings": ("model", "Settings"),
    "Capture": ("model", "Capture"),
    "Dump": ("model", "Dump"),
}


def load(path: str | os.PathLike, side: str = "infer", **kwargs: Any) -> Dump:
    """Read every capture under ``path`` lazily (``side``: ``"train"`` or ``"infer"``); see
    :func:`hsdiff.readers.scan` for the keyword arguments.

    >>> dump = hsdiff.load("fixtures/seed/infer-wrong")      # doctest: +SKIP
    >>> dump.captures[0].shape
    (25, 1728)
    """
    from .readers import scan

    return scan(path, side, **kwargs)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(import_module(f".{module}", __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hsdiff' has no attribute {name!r}")
