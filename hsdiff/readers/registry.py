"""The format registry, built from the reader modules; :func:`hsdiff.readers.read_file` consults it.

Every reader module declares what the registry needs: ``KEY`` (the same string as the module's
name, ``--format`` and the JSON report), ``READS`` (``"table"``: it is given the file's tensors as a
:class:`~hsdiff.readers._container.Table`; ``"text"``: it is given the path of a text file;
``"dataset"``: it is given the path of a dataset's entry point, which its ``claims(path)`` names),
``PRIORITY`` (the order in which table readers are asked, lower first), ``sniff(table)`` (does the
file look like this format?) and ``read``. A module may declare ``accepts(table)`` for
``--format KEY``, when it reads more than it would claim unasked.
"""

from __future__ import annotations

from types import ModuleType

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
from ._container import Table

__all__ = ["BY_KEY", "DATASETS", "DETECTION", "FORMATS", "LOG_SUFFIXES", "READERS", "TEXT_READER", "accepts"]

#: Every reader, in the order formats are listed to users (``--format`` choices, error hints).
READERS: tuple[ModuleType, ...] = (
    specforge, modelopt, eagle, sglang_dumper, vllm, hf, speculators, trtllm, specforge_dflash, sglang_hook,
    trtllm_debug, deepspec, verl_speco, sglang_http, tensors, debuglog,
)
FORMATS: tuple[str, ...] = tuple(m.KEY for m in READERS)
BY_KEY = {m.KEY: m for m in READERS}
#: Table readers in the order they are asked whether a file is theirs.
DETECTION = sorted((m for m in READERS if m.READS == "table"), key=lambda m: m.PRIORITY)
(TEXT_READER,) = (m for m in READERS if m.READS == "text")
#: Readers of datasets spread over several files, asked first whether a path is their entry point (``claims``).
DATASETS = [m for m in READERS if m.READS == "dataset"]

#: Suffixes of text files that may be logs; other files whose content is not a tensor container are no dumps.
LOG_SUFFIXES = {".log", ".txt", ".out", ".err", ".stdout", ".stderr"}


def accepts(reader: ModuleType, table: Table) -> bool:
    """Whether ``--format`` ``reader.KEY`` reads ``table``: the module's ``accepts``, else its ``sniff``."""
    check = getattr(reader, "accepts", reader.sniff)
    return bool(check(table))
