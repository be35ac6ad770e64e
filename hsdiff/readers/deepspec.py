"""DeepSpec's target cache, version 2: ``manifest.json``, ``samples.idx`` and ``shard-{id:05d}.bin``.

Read from deepseek-ai/DeepSpec (main at afdfa7c, 2026-06-30), ``deepspec/data/target_cache_dataset.py``:

* lines 20-26: ``TARGET_CACHE_VERSION = 2``; an index record is ``struct "<QIIQQQQQ"`` (56 bytes:
  sample id, shard id, seq_len, then the byte offsets of input_ids, attention_mask, loss_mask,
  target_hidden_states, target_last_hidden_states in its shard); hidden states bfloat16, tokens
  int32, masks uint8;
* ``validate_target_cache_manifest`` (132-200): the manifest's fields (``version``, ``num_samples``,
  ``num_shards``, ``target_layer_ids`` ascending, the three dtypes, ``index_record_size``,
  ``hidden_size``, ``shards`` of ``{shard_id, file_name}``) and ``samples.idx`` of exactly
  ``num_samples`` records; ``build_target_cache_manifest`` (580-602);
* ``LocalTargetCacheWriter.write_sample_bytes`` (351-387): each sample's five arrays back to back in
  its shard; ``CacheDataset.__getitem__`` (753-798): ``target_hidden_states`` [T, k·H] and
  ``target_last_hidden_states`` [T, H].

What the layers are, from ``scripts/data/prepare_target_cache.py:83-134``: a forward hook on
``layers[id]`` (its output: O-index) for each id, ``embed_tokens`` for -1 (B0), concatenated in
``target_layer_ids`` order; the last state is the backbone's ``last_hidden_state`` (after the final
norm). The manifest's ids label the slots (source ``claimed``). Everything is checked before a byte
of a shard is mapped: the manifest against version 2, shard names without directories, every record
within its shard; a cache of another version is refused with one line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..arrays import np_dtype
from ..errors import FormatError
from ..model import Capture, Index, LabelSource, Layer, Origin
from ._common import LazyRows, ReadContext

KEY = "deepspec"
READS = "dataset"
PRIORITY = 0
INDEX = "samples.idx"
#: The name of the file that stands for the whole dataset (asked for by ``hsdiff audit``, which reads files one by one).
ENTRY = INDEX
TITLE = "a DeepSpec target cache"
MANIFEST = "manifest.json"
#: The largest manifest read (it lists shards by name: a few KB per thousand shards).
MANIFEST_LIMIT = 16 * 2**20
RECORD = np.dtype(
    [
        ("sample_id", "<u8"),
        ("shard_id", "<u4"),
        ("seq_len", "<u4"),
        ("input_ids", "<u8"),
        ("attention_mask", "<u8"),
        ("loss_mask", "<u8"),
        ("hidden", "<u8"),
        ("last", "<u8"),
    ]
)
_EXPECTED = {
    "version": 2,
    "hidden_dtype": "bfloat16",
    "token_dtype": "int32",
    "mask_dtype": "uint8",
    "index_record_size": RECORD.itemsize,
}
_SHARD_NAME = re.compile(r"^[\w.\-]+$")


def claims(path: Path) -> bool:
    """A ``samples.idx`` beside a ``manifest.json``: the cache's entry point (its shards are read from it)."""
    return path.name == INDEX and (path.parent / MANIFEST).is_file()


def shards_of(path: Path) -> set[Path]:
    """The files of the cache at ``path`` besides its index, which hold nothing to read on their own."""
    return {p for p in path.parent.glob("shard-*.bin")}


def _manifest(d: Path) -> dict[str, Any]:
    path = d / MANIFEST
    if path.stat().st_size > MANIFEST_LIMIT:
        raise FormatError(f"manifest of {path.stat().st_size} bytes is too large", path=path)
    try:
        m = json.loads(path.read_text(encoding="utf-8"))
        layers = [int(i) for i in m["target_layer_ids"]]
        hidden, n = int(m["hidden_size"]), int(m["num_samples"])
        names = {int(s["shard_id"]): str(s["file_name"]) for s in m["shards"]}
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise FormatError(
            f"not a DeepSpec target-cache manifest ({type(e).__name__}: {str(e)[:80]})",
            path=path,
            hint="point hsdiff at a cache prepare_target_cache.py wrote",
        ) from None
    wrong = {k: m.get(k) for k, v in _EXPECTED.items() if m.get(k) != v}
    if (
        wrong
        or not layers
        or layers != sorted(layers)
        or hidden <= 0
        or n < 0
        or not all(_SHARD_NAME.match(f) for f in names.values())
    ):
        raise FormatError(
            f"a DeepSpec target cache with {wrong or 'unsorted layer ids, no hidden size or a shard path'}; hsdiff "
            f"reads version 2: {_EXPECTED}, ascending target_layer_ids, shard files beside it",
            path=path,
            hint="regenerate the cache with DeepSpec's prepare_target_cache.py (version 2)",
        )
    return {"layers": layers, "hidden": hidden, "n": n, "shards": names}


def read(path: Path, ctx: ReadContext) -> list[Capture]:
    m = _manifest(path.parent)
    size = path.stat().st_size
    if size != m["n"] * RECORD.itemsize:
        raise FormatError(
            f"{size} bytes for {m['n']} records of {RECORD.itemsize}",
            path=path,
            hint="the cache was not finalised or is truncated; regenerate it",
        )
    records = np.fromfile(path, dtype=RECORD, count=m["n"])
    k, h = len(m["layers"]), m["hidden"]
    layers = tuple(Layer(i, Index.OUTPUT, LabelSource.CLAIMED) for i in m["layers"])
    shards: dict[int, tuple[Path, int]] = {}
    out = []
    for r in records:
        sid, t = int(r["shard_id"]), int(r["seq_len"])
        if sid not in shards:
            shard = path.parent / m["shards"].get(sid, f"<shard {sid} not in the manifest>")
            shards[sid] = (shard, shard.stat().st_size if shard.is_file() else -1)
        shard, shard_size = shards[sid]
        spans = {"input_ids": 4 * t, "loss_mask": t, "hidden": 2 * t * k * h, "last": 2 * t * h}
        if t <= 0 or shard_size < 0 or any(int(r[f]) + n > shard_size for f, n in spans.items()):
            raise FormatError(
                f"record of sample {int(r['sample_id'])} ({t} tokens) points past the end of {shard.name}",
                path=path,
                hint="the cache is damaged or incomplete; regenerate it",
            )
        ids = tuple(int(v) for v in np.fromfile(shard, dtype="<i4", count=t, offset=int(r["input_ids"])))
        hidden = _Mapped(shard, int(r["hidden"]), (t, k * h))
        out.append(
            Capture(
                side=ctx.side,
                origin=Origin(ctx.rel(path), f"sample {int(r['sample_id'])}", None, KEY),
                shape=(t, k * h),
                dtype="bfloat16",
                width=k * h,
                group=f"sample-{int(r['sample_id'])}",
                token_ids=ids,
                concat=True,
                loader=hidden.array,
                rows=LazyRows(hidden.array),
                final_width=h,
                final_loader=_Mapped(shard, int(r["last"]), (t, h)).array,
                slot_layers=layers,
                mask_loader=_Mapped(shard, int(r["loss_mask"]), (t,), "uint8").array,
                variant=f"target_layer_ids {m['layers']} (outputs of those decoder layers; -1: the embeddings)",
            )
        )
    ctx.consumed.update(shards_of(path))
    return out


class _Mapped:
    """An array at a byte offset of a shard, memory-mapped read-only when used."""

    def __init__(self, path: Path, offset: int, shape: tuple[int, ...], dtype: str = "bfloat16") -> None:
        self.path, self.offset, self.shape, self.dtype = path, offset, shape, dtype

    def array(self) -> np.ndarray:
        return np.memmap(self.path, dtype=np_dtype(self.dtype), mode="r", offset=self.offset, shape=self.shape)
