"""SGLang ``/generate`` responses saved as JSON, with the aux hidden states in ``meta_info.hidden_states``.

Read from the sglang 0.5.23 wheel:

* ``arg_groups/validation_hook.py:700-745``: ``--enable-return-aux-hidden-states`` (with
  ``--speculative-algorithm EAGLE3``, no draft) runs the target alone and captures the aux layers of
  that convention (``--return-aux-hidden-state-layer-ids``, else the EAGLE-3 default);
  ``model_runner_components/spec_aux_hidden_state.py:90-130`` sets them as the model's EAGLE-3 ids;
* ``layers/logits_processor.py:853-904`` (``_get_hidden_states_to_store``): with a request's
  ``return_hidden_states`` the stored rows are the aux states concatenated, [tokens, k·H]
  (``layers/aux_hidden_states.py:97-102``);
* ``managers/scheduler_components/batch_result_processor.py:641-700``: each prefill chunk appends
  its rows as one nested list; each decode step appends the rows of the tokens it accepted, one
  list per token (``return_hidden_states: "last"`` keeps the last row alone);
* ``managers/tokenizer_manager.py:2598-2601``: the response's ``meta_info["hidden_states"]``.

The rows, in order, are the tokens the model was fed: the prompt, then each generated token but the
last. The response names neither the prompt's token ids nor the layers: the capture is placed by
value, and ``--layer-ids`` labels its slots as for any SGLang capture. ``hsdiff request
--hidden-states`` prints a request that asks for them. A response (or a list of them) whose
``hidden_states`` are not such rows is refused with one line; files over :data:`JSON_LIMIT` bytes
are refused before parsing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import FormatError
from ..model import Capture, Origin
from ._common import ReadContext

KEY = "sglang_http"
READS = "dataset"
PRIORITY = 0
ENTRY = None  # one response per file: nothing for hsdiff audit to refuse
TITLE = "an SGLang response"
#: The largest response parsed (bytes): JSON numbers take ~10 bytes each, and parsing holds them all.
JSON_LIMIT = int(os.environ.get("HSDIFF_JSON_LIMIT", str(2**30)))
_PEEK = 1 << 20


def claims(path: Path) -> bool:
    """A ``.json`` file whose first MiB names ``meta_info`` and ``hidden_states``."""
    if path.suffix.lower() != ".json":
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(_PEEK)
    except OSError:  # an unreadable .json beside a dump was never read before: still none of hsdiff's business
        return False
    return head.lstrip()[:1] in (b"{", b"[") and b'"meta_info"' in head and b'"hidden_states"' in head


def read(path: Path, ctx: ReadContext) -> list[Capture]:
    size = path.stat().st_size
    if size > JSON_LIMIT:
        raise FormatError(
            f"response of {size / 2**20:.0f} MiB is over the {JSON_LIMIT / 2**20:.0f} MiB parsed at most",
            path=path,
            hint="raise HSDIFF_JSON_LIMIT (bytes), or dump the states with SGLang's dumper",
        )
    try:
        doc = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as e:
        raise FormatError(
            f"not valid JSON ({str(e)[:80]})", path=path, hint="save the server's response unchanged"
        ) from None
    responses = doc if isinstance(doc, list) else [doc]
    out = []
    for i, resp in enumerate(responses):
        rows = _rows(resp)
        if rows is None:
            raise FormatError(
                f"response {i}: meta_info.hidden_states is not a list of rows; SGLang returns the prefill's rows as "
                "one nested list [[...], ...] and then one list per decoded token, all of one width",
                path=path,
                hint='save the /generate response of a request with "return_hidden_states": true (hsdiff request '
                "--hidden-states)",
            )
        meta, array = resp["meta_info"], rows
        rid = str(meta.get("id") or i)
        out.append(
            Capture(
                side=ctx.side,
                origin=Origin(ctx.rel(path), f"meta_info.hidden_states (response {rid})", None, KEY),
                shape=array.shape,
                dtype="float32",
                width=array.shape[1],
                group=f"{path.stem}:{rid}",
                concat=True,
                loader=_constant(array),
                variant=f"{array.shape[0]} rows ({meta.get('prompt_tokens', '?')} prompt tokens, "
                f"{meta.get('completion_tokens', '?')} generated)",
            )
        )
    return out


def _rows(resp: Any) -> np.ndarray | None:
    """The response's hidden-state rows as a float32 [tokens, width] array, or None when they are not rows."""
    hs = resp.get("meta_info", {}).get("hidden_states") if isinstance(resp, dict) else None
    if not isinstance(hs, list) or not hs:
        return None
    parts = []
    for item in hs:
        if isinstance(item, list) and item and isinstance(item[0], list):
            parts.extend(item)  # a prefill chunk: one row per token
        else:
            parts.append(item)  # a decoded token's row
    try:
        array = np.asarray(parts, dtype=np.float32)
    except (ValueError, TypeError):
        return None
    return array if array.ndim == 2 and array.shape[1] > 1 else None


def _constant(array: np.ndarray) -> Callable[[], np.ndarray]:
    return lambda: array
