"""The optional extras: what ``pip install hsdiff`` leaves out, what each extra brings, and the one way
to import a package of one.

The core (numpy, safetensors, click) runs ``compare``, ``gate``, ``check-config``, ``ids``,
``fix-config``, ``inspect``, ``request`` and every JSON, JUnit, Markdown and HTML output, and reads
every dump format but one (a legacy, non-zip ``torch.save`` file). The rest is an extra:

==========  ===============================================  ==============================================
extra       packages                                         serves
==========  ===============================================  ==============================================
plot        matplotlib                                       ``--plot``, ``report.plot()``, the HTML pictures
frames      pandas                                           ``report.slots_frame()``, ``scores_frame()``
torch       torch                                            legacy (non-zip) ``torch.save`` files
draft       torch, tqdm                                      ``--draft``: the draft's forward on the CPU
capture     torch, transformers, accelerate, tqdm            ``hsdiff capture``, ``hsdiff.capture``
audit       dask[distributed], fsspec, tqdm                  ``hsdiff audit`` on worker processes, URLs
zstd        zstandard                                        vLLM's ``.safetensors.zst`` files
watch       prometheus-client                                ``hsdiff watch --metrics``
vllm        (nothing yet)                                    reserved for the vLLM plugin
all         every package above
==========  ===============================================  ==============================================

:data:`EXTRAS` holds these rows; ``setup.cfg`` declares the same (``tests/test_extras.py`` checks
that the two agree). :func:`require` imports a package of an extra, or raises
:class:`~hsdiff.errors.MissingExtraError`, whose message names the extra to install:

>>> require("numpy", "plot", "a picture").__name__
'numpy'
>>> require("no_such_package", "plot", "a picture")
Traceback (most recent call last):
...
hsdiff.errors.MissingExtraError: no_such_package is needed for a picture ... — pip install 'hsdiff[plot]'
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType

from .errors import MissingExtraError

__all__ = ["EXTRAS", "Extra", "require", "needs", "missing"]


@dataclass(frozen=True)
class Extra:
    """One extra: its name (``pip install 'hsdiff[name]'``), the requirements it adds (as ``setup.cfg``
    states them) and what it serves."""

    name: str
    requirements: tuple[str, ...]
    serves: str


#: Every user-facing extra, in the order ``setup.cfg`` lists them (``all`` is their union).
EXTRAS: dict[str, Extra] = {
    e.name: e
    for e in (
        Extra("plot", ("matplotlib>=3.7",), "the pictures: --plot, --acceptance-plot, the HTML page's, report.plot()"),
        Extra(
            "frames",
            ("pandas>=2.0",),
            "pandas frames: report.slots_frame(), scores_frame(), PredictedAcceptance.frame()",
        ),
        Extra("torch", ("torch>=2.4",), "legacy (non-zip) torch.save files, Capture.load()"),
        Extra("draft", ("torch>=2.4", "tqdm>=4.60"), "--draft: the deployed draft run on the CPU (hsdiff.draft)"),
        Extra(
            "capture",
            ("torch>=2.4", "transformers>=4.45", "accelerate>=0.30", "tqdm>=4.60"),
            "hsdiff capture and hsdiff.capture: a Hugging Face model run to write every boundary",
        ),
        Extra(
            "audit",
            ("dask[distributed]>=2024.1", "fsspec>=2023.1", "tqdm>=4.60"),
            "hsdiff audit on worker processes or a Dask cluster, and on fsspec URLs",
        ),
        Extra("zstd", ("zstandard>=0.22",), "vLLM's zstd-compressed .safetensors.zst files"),
        Extra("watch", ("prometheus-client>=0.17",), "hsdiff watch --metrics: the engines' Prometheus pages"),
        Extra("vllm", (), "reserved for hsdiff's vLLM plugin; adds nothing to the core yet"),
    )
}


def missing(module: str, extra: str, what: str) -> MissingExtraError:
    """The error for ``module`` (an import name) missing: what needs it, and the extra that brings it."""
    return MissingExtraError(what, module.split(".")[0], extra)


@contextmanager
def needs(extra: str, what: str, *also: str) -> Iterator[None]:
    """Imports in this block that fail for want of a package of ``extra`` (or of ``also``, import names)
    raise :class:`~hsdiff.errors.MissingExtraError` instead; any other import failure (a broken install)
    is raised as is.

    >>> with needs("capture", "hsdiff.capture"):
    ...     import transformers                     # doctest: +SKIP
    """
    try:
        yield
    except ModuleNotFoundError as e:
        absent = (e.name or "").split(".")[0]
        row = EXTRAS.get(extra)
        brought = {re.split(r"[\[<>=!~ ]", r, maxsplit=1)[0] for r in (row.requirements if row else ())}
        if not absent or absent not in brought | set(also):
            raise
        raise missing(absent, extra, what) from None


def require(module: str, extra: str, what: str) -> ModuleType:
    """``module`` imported, or :class:`~hsdiff.errors.MissingExtraError` naming ``extra`` when it (or a
    package of ``extra``) is not installed."""
    with needs(extra, what, module.split(".")[0]):
        return importlib.import_module(module)
    raise AssertionError("unreachable")  # pragma: no cover - for type checkers
