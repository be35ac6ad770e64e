"""vLLM's ``extract_hidden_states`` connector: ``{req_id}.safetensors`` with ``hidden_states``
[T, k, H] (one entry per configured aux layer, in the engine's sorted order) and ``token_ids`` [T].
The file carries no layer numbers: slots are labelled from ``--layer-ids`` by the aligner.

Read from the vllm 0.33.0 wheel, ``distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py``:

* ``_submit_async_write`` (lines 359-430): ``hidden_states`` gathered from the cache-only layer
  ([num_blocks, k, block_size, H], indexed by slot: [T, k, H]) beside ``token_ids``, written by
  ``_write_tensors`` (329-347) with ``save_file`` on a thread;
* ``wait_for_save`` (268-289): with ``use_synchronization_lock`` (the default) an empty companion
  ``{file}.lock`` is created and held with ``flock(LOCK_EX)`` until the write is done;
  ``load_hidden_states`` (48-66) waits for it with ``LOCK_SH``. This reader asks for the same lock
  without waiting: a file whose lock is still held is being written and is refused;
* ``request_finished`` (520-559): with ``include_output_tokens`` in the request's
  ``kv_transfer_params`` the file covers the prompt and the generated tokens but the last (never fed
  back), ``token_ids`` saying which; otherwise the prompt alone. Either aligns by token ids.

Older releases (e.g. 806715e) stacked the entries first, [k, T, H]; both layouts are read.

vLLM's ``OnlineHiddenStatesConnector`` (PR #35425; vllm-project/vllm at c9548d2,
``distributed/kv_transfer/kv_connector/online/online_hidden_states_connector.py``
``register_new_requests`` and ``write_prefill``, ``online/hidden_states_writer.py`` ``writer_loop``
and ``write_compressed``) writes the same two tensors per request under ``{base|lora name}/``:
``{req_id}.safetensors`` for the prefill and ``{req_id}_decode.safetensors`` for the tokens decoded
after it, each zstd-compressed whole to ``….safetensors.zst`` with ``use_compression``. Compressed
files are opened by the container layer (bounded, like gzip); each file is its own sample.
"""

from __future__ import annotations

import errno
import fcntl
import os

from ..errors import FormatError
from ..model import Capture
from ._common import ReadContext, make_capture, sample_name, token_ids_of
from ._container import Table

KEY = "vllm"
READS = "table"
PRIORITY = 30  # before hf: its [T, k, H] stack would read as an all-layer stack


def sniff(table: Table) -> bool:
    hs = table.entries.get("hidden_states")
    return hs is not None and "token_ids" in table.entries and len(hs.shape) in (2, 3)


def accepts(table: Table) -> bool:
    """``--infer-format vllm``: a ``hidden_states`` [T, k, H] or [T, k*H] whose ``token_ids`` were left out."""
    hs = table.entries.get("hidden_states")
    return hs is not None and len(hs.shape) in (2, 3)


def check_lock(table: Table) -> None:
    """Refuse a connector file whose companion ``.lock`` vLLM still holds (the write is not finished)."""
    lock = table.path.with_name(table.path.name + ".lock")
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return  # no lock file (use_synchronization_lock off, or cleaned up): nothing to wait for
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise FormatError(
                f"vLLM is still writing this file: its companion {lock.name} is locked",
                path=table.path,
                hint="wait for the request to finish (or the server to stop), then run hsdiff again",
            ) from None
    finally:
        os.close(fd)  # closing releases the shared lock


def read(table: Table, ctx: ReadContext) -> list[Capture]:
    check_lock(table)
    entry = table.entries["hidden_states"]
    ids = token_ids_of(table)
    group = sample_name(table.path)
    if len(entry.shape) == 2:  # already concatenated [T, k*H]
        return [make_capture(table, entry, ctx, fmt=KEY, group=group, token_ids=ids, concat=True)]
    t_len = len(ids) if ids is not None else entry.shape[0]
    layer_axis = 1 if entry.shape[0] == t_len else 0
    out = []
    for s in range(entry.shape[layer_axis]):
        if layer_axis == 1:
            loader = lambda e=entry, s=s: e.loader()[:, s, :]  # noqa: E731
            shape = (entry.shape[0], entry.shape[2])
        else:
            loader = lambda e=entry, s=s: e.loader()[s]  # noqa: E731
            shape = (entry.shape[1], entry.shape[2])
        cap = make_capture(
            table,
            entry,
            ctx,
            fmt=KEY,
            group=group,
            token_ids=ids,
            key=f"hidden_states[:, {s}]" if layer_axis == 1 else f"hidden_states[{s}]",
            loader=loader,
            shape=shape,
        )
        out.append(cap.replace(slot=s))
    return out
