"""speculators offline training data: ``hs_{idx}.safetensors``, with ``vllm_command.txt`` as provenance.

Read from vllm-project/speculators (main at c05b95b, 2026-08-20; the releases up to v0.7.0.1 write the
same file):

* ``scripts/data_generation_offline.py:227-248``: each sample is the file vLLM's
  ``extract_hidden_states`` connector wrote for the request, moved to ``hs_{idx}.safetensors``
  unchanged: ``hidden_states`` [T, k, H] (one entry per id, in vLLM's sorted order) and
  ``token_ids`` [T];
* ``scripts/launch_vllm.py:79-87,119-135``: the ids are B-indices (vLLM's convention), by default
  ``[2, L // 2, L - 3, L]``; ``--include-last-layer`` (on by default) appends ``L``, the last
  layer's output *before* the final norm;
* ``src/speculators/train/data.py:281-303``: the trainer takes ``hidden_states[:, :-1]`` flattened as
  the draft's input [T, (k-1)·H] and ``hidden_states[:, -1]`` as the verifier's last hidden state.

This reader follows the trainer: one concatenated capture of the first k-1 entries, the last entry
as the final state, marked pre-norm. The content is the vLLM connector's, so the file is told from a
connector file by the name speculators gives it (``hs_{idx}``) or by the provenance file beside it.

``vllm_command.txt`` (written by ``scripts/launch_vllm.py`` ``_save_vllm_command``, 601f3b37
lines 155-175, RFC #880; reverted on main in 904a261c, so many runs have none): comment lines
(``# vllm: VERSION``) then the shell-quoted ``vllm serve`` command, whose ``--speculative_config``
JSON holds ``draft_model_config.hf_config.eagle_aux_hidden_state_layer_ids``. When its ids are as
many as the file's entries, they label the slots (source ``claimed``); otherwise they are ignored
with a warning.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

from ..errors import FormatError
from ..model import Capture, Index, LabelSource, Layer
from ._common import LazyRows, ReadContext, make_capture, sample_name, token_ids_of
from ._container import Table

KEY = "speculators"
READS = "table"
PRIORITY = 25  # before vllm: the same content, told apart by name and provenance

PROVENANCE = "vllm_command.txt"
#: The files ``launch_vllm.py`` writes beside the command: provenance, never hidden states.
PROVENANCE_FILES = frozenset({PROVENANCE, "vllm.patch", "checkpoint_sha256.txt"})
#: The most of a provenance file read (it holds one command line and a few comments).
PROVENANCE_LIMIT = 1 << 20
_NAME_RE = re.compile(r"^hs_\d+\.safetensors$")
_VERSION_RE = re.compile(r"^#\s*vllm:\s*(\S+)", re.MULTILINE)


def sniff(table: Table) -> bool:
    hs = table.entries.get("hidden_states")
    if hs is None or "token_ids" not in table.entries or table.container != "safetensors":
        return False
    return bool(_NAME_RE.match(table.path.name)) or provenance_file(table.path) is not None


def accepts(table: Table) -> bool:
    """``--format speculators``: any safetensors file with ``hidden_states`` and ``token_ids``."""
    return "hidden_states" in table.entries and "token_ids" in table.entries


def provenance_file(path: Path, root: Path | None = None) -> Path | None:
    """The ``vllm_command.txt`` in the file's directory or one above it (up to ``root``), or None."""
    for d in (path.parent, *path.parent.parents):
        if (d / PROVENANCE).is_file():
            return d / PROVENANCE
        if root is not None and d == root:
            break
    return None


def read_provenance(path: Path) -> tuple[list[int] | None, str | None]:
    """The aux-layer ids (sorted, de-duplicated, as vLLM reads them) and the vLLM version a
    ``vllm_command.txt`` records; (None, None) for what it does not say."""
    with open(path, "rb") as f:
        text = f.read(PROVENANCE_LIMIT).decode("utf-8", errors="replace")
    version = _VERSION_RE.search(text)
    ids = None
    for line in text.splitlines():
        if line.startswith("#") or "speculative" not in line:
            continue
        try:
            words = shlex.split(line)
        except ValueError:
            continue
        for i, w in enumerate(words):
            flag, _, value = w.partition("=")
            if flag.replace("-", "_") == "__speculative_config":
                value = value or (words[i + 1] if i + 1 < len(words) else "")
                ids = _ids_of(value)
    return ids, version.group(1) if version else None


def _ids_of(value: str) -> list[int] | None:
    try:
        cfg: Any = json.loads(value)
        ids = cfg["draft_model_config"]["hf_config"]["eagle_aux_hidden_state_layer_ids"]
        return sorted({int(v) for v in ids})
    except (ValueError, KeyError, TypeError):
        return None


def read(table: Table, ctx: ReadContext) -> list[Capture]:
    entry = table.entries["hidden_states"]
    ids = token_ids_of(table)
    if len(entry.shape) != 3 or entry.shape[1] < 2 or (ids is not None and len(ids) != entry.shape[0]):
        raise FormatError(
            f"'hidden_states' has shape {list(entry.shape)}"
            + (f" for {len(ids)} token ids" if ids is not None else "")
            + "; a speculators hs_*.safetensors holds [T, k, H] with k >= 2 (the aux layers, then the "
            "verifier's last hidden state) and T token_ids",
            path=table.path,
            hint="point hsdiff at the files data_generation_offline.py wrote, or pass `fmt=vllm` for a connector file",
            options=("fmt",),
        )
    t, k, h = entry.shape
    layers: tuple[Layer | None, ...] = ()
    variant = f"aux = hidden_states[:, :{k - 1}], verifier's last hidden state = hidden_states[:, -1]"
    prov = provenance_file(table.path, ctx.root)
    claimed, version = None, None
    if prov is not None:
        try:
            claimed, version = read_provenance(prov)
        except OSError as e:
            ctx.warnings.append(f"{ctx.rel(prov)}: cannot read it ({e.strerror or e}); the slots stay unlabelled")
            prov = None
    if prov is not None:
        where = ctx.rel(prov)
        if claimed is not None and len(claimed) == k:
            layers = tuple(Layer(b, Index.BOUNDARY, LabelSource.CLAIMED) for b in claimed[:-1])
            variant += f"; {where} records ids {claimed}" + (f" (vllm {version})" if version else "")
        else:
            ctx.warnings.append(
                f"{where}: records ids {claimed} but {ctx.rel(table.path)} holds {k} entries; its ids are not used"
                if claimed is not None
                else f"{where}: no eagle_aux_hidden_state_layer_ids in its --speculative_config"
            )
    flat = _Flat(entry.loader, t, k * h)
    return [
        make_capture(
            table,
            entry,
            ctx,
            fmt=KEY,
            group=sample_name(table.path),
            token_ids=ids,
            concat=True,
            key=f"hidden_states[:, :{k - 1}]",
            loader=flat.array,
            shape=(t, (k - 1) * h),
            rows=LazyRows(flat.array),
            final_width=h,
            final=lambda: entry.loader()[:, -1, :],
        ).replace(col_stop=(k - 1) * h, final_pre_norm=True, slot_layers=layers, variant=variant)
    ]


class _Flat:
    """A ``[T, k, H]`` tensor seen as ``[T, k·H]`` (the trainer's flatten), mapped from the file lazily."""

    def __init__(self, loader: Any, rows: int, width: int) -> None:
        self.loader, self.shape = loader, (rows, width)

    def array(self) -> Any:
        return self.loader().reshape(self.shape)
