"""The format registry, built from the reader modules; :func:`hsdiff.readers.read_file` consults it.

Every reader module is one of three :class:`typing.Protocol` kinds, and mypy checks each module
against its kind where the registry lists it:

* :class:`TableReader` (``READS = "table"``): given the file's tensors as a
  :class:`~hsdiff.readers._container.Table`; ``sniff(table)`` says whether the file looks like its
  format, ``PRIORITY`` the order in which table readers are asked (lower first). A module may add
  ``accepts(table)``, for a format forced by name, when it reads more than it would claim unasked;
* :class:`TextReader` (``READS = "text"``): given the path of a text file;
* :class:`DatasetReader` (``READS = "dataset"``): given the path of a dataset's entry point, which its
  ``claims(path)`` names; ``ENTRY`` is the file name that stands for the whole dataset (or None) and
  ``TITLE`` names the dataset in messages.

Every reader declares ``KEY``, the same string as the module's name, the format a caller forces and
the JSON report.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from ..model import Capture
from . import (
    debuglog,
    deepspec,
    eagle,
    hf,
    modelopt,
    sglang_dumper,
    sglang_hook,
    sglang_http,
    specforge,
    specforge_dflash,
    speculators,
    tensors,
    trtllm,
    trtllm_debug,
    verl_speco,
    vllm,
)
from ._common import ReadContext
from ._container import Table

__all__ = [
    "BY_KEY",
    "DATASETS",
    "DETECTION",
    "FORMATS",
    "LOG_SUFFIXES",
    "READERS",
    "TEXT_READER",
    "DatasetReader",
    "Reader",
    "TableReader",
    "TextReader",
    "accepts",
]


class Reader(Protocol):
    """What every reader module declares."""

    @property
    def KEY(self) -> str: ...
    @property
    def READS(self) -> str: ...  # "table", "text" or "dataset"
    @property
    def PRIORITY(self) -> int: ...


class TableReader(Reader, Protocol):
    """A format read from one file's tensors."""

    def sniff(self, table: Table) -> bool: ...
    def read(self, table: Table, ctx: ReadContext) -> list[Capture]: ...


class TextReader(Reader, Protocol):
    """A format read from a text file."""

    def read(self, path: Path, ctx: ReadContext) -> list[Capture]: ...


class DatasetReader(Reader, Protocol):
    """A format spread over several files, read from its entry point."""

    @property
    def ENTRY(self) -> str | None: ...
    @property
    def TITLE(self) -> str: ...

    def claims(self, path: Path) -> bool: ...
    def read(self, path: Path, ctx: ReadContext) -> list[Capture]: ...


_TABLES: Sequence[TableReader] = (
    specforge,
    modelopt,
    eagle,
    sglang_dumper,
    vllm,
    hf,
    speculators,
    trtllm,
    specforge_dflash,
    sglang_hook,
    trtllm_debug,
    verl_speco,
    tensors,
)
#: Readers of datasets spread over several files, asked first whether a path is their entry point (``claims``).
DATASETS: Sequence[DatasetReader] = (deepspec, sglang_http)
TEXT_READER: TextReader = debuglog

#: Every reader, in the order formats are listed to users (format choices, error hints).
READERS: tuple[Reader, ...] = (
    specforge,
    modelopt,
    eagle,
    sglang_dumper,
    vllm,
    hf,
    speculators,
    trtllm,
    specforge_dflash,
    sglang_hook,
    trtllm_debug,
    deepspec,
    verl_speco,
    sglang_http,
    tensors,
    debuglog,
)
FORMATS: tuple[str, ...] = tuple(m.KEY for m in READERS)
BY_KEY: dict[str, Reader] = {m.KEY: m for m in READERS}
TABLES: dict[str, TableReader] = {m.KEY: m for m in _TABLES}
#: Table readers in the order they are asked whether a file is theirs.
DETECTION: list[TableReader] = sorted(_TABLES, key=lambda m: m.PRIORITY)

#: Suffixes of text files that may be logs; other files whose content is not a tensor container are no dumps.
LOG_SUFFIXES = {".log", ".txt", ".out", ".err", ".stdout", ".stderr"}


def accepts(reader: TableReader, table: Table) -> bool:
    """Whether ``reader``'s format, forced by name, reads ``table``: the module's ``accepts``, else its ``sniff``."""
    check: Callable[[Table], bool] = getattr(reader, "accepts", reader.sniff)
    return bool(check(table))
