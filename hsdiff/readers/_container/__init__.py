"""Opening files safely: container detection by content, one backend module per container.

===============  ==============================================================================
module           opens
===============  ==============================================================================
``sniff``        nothing: names the container from a file's first bytes (never its suffix)
``torch``        ``torch.save`` files, zip (memory-mapped) and legacy; the pickle is scanned, never run
``safetensors``  safetensors files; :func:`read_safetensors_header` is the one header reader
``numpy``        ``.npy`` (memory-mapped) and ``.npz``, ``allow_pickle=False``
``gzip``         any of the above gzip- or zstd-compressed, streamed to a private temporary file with a size cap
``table``        the records they return: :class:`Table` of lazy :class:`Entry` tensors
===============  ==============================================================================

:func:`open_table` picks the backend from :data:`BACKENDS`. Every torch load uses
``weights_only=True``, so a pickle that references arbitrary globals is refused, never executed;
nothing is ever written next to the user's files. The limits below bound every backend; they are
read when a file is opened, so changing them here takes effect at once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ...errors import FormatError
from . import gzip as _gzip
from . import limits
from . import numpy as _numpy
from . import safetensors as _safetensors
from . import torch as _torch
from .gzip import cleanup
from .safetensors import read_safetensors_header
from .sniff import claimed_format, not_what_it_claims, sniff_container
from .table import Entry, Table

__all__ = [
    "BACKENDS",
    "limits",
    "Entry",
    "Table",
    "claimed_format",
    "cleanup",
    "not_what_it_claims",
    "open_table",
    "read_safetensors_header",
    "sniff_container",
]

#: container (as :func:`sniff_container` names it) -> the backend function that opens it
BACKENDS: dict[str, Callable[[Path, str], Table]] = {
    "torch": _torch.open_table,
    "torch-legacy": _torch.open_table,
    "safetensors": _safetensors.open_table,
    "npy": _numpy.open_table,
    "npz": _numpy.open_table,
    "gzip": lambda path, container: _gzip.open_table(path, container, open_inner=open_table),
    "zstd": lambda path, container: _gzip.open_table(path, container, open_inner=open_table),
}


def open_table(path: Path, container: str) -> Table:
    """Open ``path`` as a lazy :class:`Table`. Raises :class:`FormatError` on damage.

    >>> table = open_table(Path("data_0.ckpt"), sniff_container(Path("data_0.ckpt")))   # doctest: +SKIP
    >>> sorted(table.entries)
    ['aux_hidden_state', 'hidden_state', 'input_ids', 'loss_mask']
    """
    backend = BACKENDS.get(container)
    if backend is None:
        raise FormatError(f"not a tensor file ({container})", path=path)
    return backend(path, container)
