"""TensorRT-LLM's PyTorch-backend ``debug_mode`` tensor dump: ``rank{R}/{n}.{Class}-…-{input|output}.{name}.pt``.

Read from NVIDIA/TensorRT-LLM ``tensorrt_llm/_torch/debug/debug_hook.py`` (135eb8b):

* ``DebuggerContext._init_log_folder``: one folder per MPI rank, ``{dest}/rank{rank}``;
* ``enable_debug``: hooks on every sub-module of the model given (not the model itself);
  ``pre_forward``/``after_forward`` keep the call path and, per depth, a call counter that counts
  the calls under the current parent (so a model's children are numbered in call order: its
  embedding 1, its decoder layers 2, 3, …; the top level counts forward passes and other calls);
* ``dump_tensor``: every tensor among a module's *positional* inputs (before forward) and its
  outputs (after), flattened, ``torch.save(t)`` alone to ``{n}.{Class}-…-{input|output}.{name}.pt``,
  ``name`` the forward's argument names taken in order (for outputs too), else the tensor's count.

What the tensors are, from ``tensorrt_llm/_torch/models/modeling_llama.py`` (``LlamaModel.forward``,
``LlamaDecoderLayer.forward``) and ``modules/embedding.py`` (``Embedding.forward(self, input)``):
the embedding is called positionally, so its ``input.input`` file holds the token ids and its
``output.input`` file B0; decoder layers are called with keywords only (no input files) and return
``(hidden_states, residual)``: the MLP's output and the stream before it, whose sum is the layer's
output, B{i+1} (what TensorRT-LLM's own EAGLE-3 capture stores). Decoder layer i is the (i+1)-th
call of a ``*DecoderLayer`` under its parent. Every other file of such a dump is recognised and
left aside.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ..arrays import as_f32
from ..errors import FormatError
from ..model import Capture, Index, LabelSource, Layer
from ._common import ReadContext, make_capture, rank_and_run
from ._container import Table, cleanup, open_table, sniff_container

KEY = "trtllm_debug"
READS = "table"
PRIORITY = 14
_FILE_RE = re.compile(r"^((?:\d+\.[A-Za-z_]\w*-)+)(input|output)\.(\w+)\.pt$")
_PART_RE = re.compile(r"(\d+)\.([A-Za-z_]\w*)-")
_RANK_RE = re.compile(r"^rank(\d+)$")


def sniff(table: Table) -> bool:
    return bool(_FILE_RE.match(table.path.name)) and list(table.entries) == [""]


def _parse(name: str) -> tuple[str, list[tuple[int, str]], str] | None:
    """(module path, [(counter, class)], input|output) of a dump file's name, or None."""
    m = _FILE_RE.match(name)
    return None if m is None else (m.group(1), [(int(c), k) for c, k in _PART_RE.findall(m.group(1))], m.group(2))


def _listing(ctx: ReadContext, d: Path) -> dict[str, list[str]]:
    """The directory's dump files by module path (what each path dumped, sorted), listed once per scan."""
    key = (KEY, d)
    if key not in ctx.memo:
        by_path: dict[str, list[str]] = {}
        for name in sorted(os.listdir(d)):
            parsed = _parse(name)
            if parsed is not None:
                by_path.setdefault(parsed[0], []).append(name)
        ctx.memo[key] = by_path
    return ctx.memo[key]


def _tensor(path: Path) -> Any:
    try:
        container = sniff_container(path)
    except OSError as e:
        raise FormatError(
            f"cannot read this part of a layer's dump ({e.strerror or e})",
            path=path,
            hint="make the dump's files readable (chmod +r)",
        ) from None
    table = open_table(path, container)
    try:
        return table.entries[""]
    finally:
        cleanup(table)


def read(table: Table, ctx: ReadContext) -> list[Capture]:
    path = table.path
    parsed = _parse(path.name)
    assert parsed is not None
    module, parts, kind = parsed
    ctx.consumed.add(path)
    cls = parts[-1][1]
    parent = "".join(f"{c}.{k}-" for c, k in parts[:-1])
    listing = _listing(ctx, path.parent)
    files = listing[module]
    is_layer = cls.endswith("DecoderLayer") and kind == "output"
    is_embedding = cls.endswith("Embedding") and kind == "output"
    outputs = [n for n in files if n[len(module) :].startswith("output.")]
    if not (is_layer or is_embedding) or path.name != outputs[0]:
        return []
    children = _children(listing, parent)
    siblings = [c for c, k, _ in children if k == cls]
    entries = [table.entries[""]] + [_tensor(path.parent / n) for n in outputs[1:]]
    if is_layer and len(entries) > 2 or any(len(e.shape) != 2 or not e.is_float for e in entries):
        raise FormatError(
            f"{cls} output files {outputs[:4]} hold {[list(e.shape) for e in entries][:4]}; a decoder layer's dump "
            "is expected as its (hidden_states, residual) pair of [T, H] tensors",
            path=path,
            hint="point hsdiff at the dump of a decoder whose layers return (hidden_states, residual), as Llama's do",
        )
    layer = (
        Layer(0, Index.BOUNDARY, LabelSource.KEY)
        if is_embedding
        else Layer(siblings.index(parts[-1][0]), Index.OUTPUT, LabelSource.KEY)
    )
    if is_embedding and len(entries) != 1:
        return []
    rank, run = rank_and_run(path, _RANK_RE, ctx)
    ids = _token_ids(path.parent, parent, listing)
    cap = make_capture(
        table,
        entries[0],
        ctx,
        fmt=KEY,
        group=f"{run}:{parent.rstrip('-')}",
        layer=layer,
        token_ids=ids,
        rank=rank,
        key=module + "output" + ("s summed" if len(entries) > 1 else ""),
    )
    if len(entries) == 2:
        first, second = entries
        cap = cap.replace(loader=lambda: as_f32(first.loader()) + as_f32(second.loader()), rows=None, dtype="float32")
    return [cap]


def _children(listing: dict[str, list[str]], parent: str) -> list[tuple[int, str, str]]:
    """(counter, class, module path) of the calls directly under the module path ``parent``, in call order."""
    out = []
    for module in listing:
        m = _PART_RE.fullmatch(module[len(parent) :]) if module.startswith(parent) else None
        if m is not None:
            out.append((int(m.group(1)), m.group(2), module))
    return sorted(out)


def _token_ids(d: Path, parent: str, listing: dict[str, list[str]]) -> tuple[int, ...] | None:
    """The token ids the embedding under ``parent`` was called with (its positional input), if dumped."""
    for _, cls, module in _children(listing, parent):
        for n in listing[module] if cls.endswith("Embedding") else ():
            if n[len(module) :].startswith("input."):
                e = _tensor(d / n)
                if not e.is_float and len(e.shape) <= 2:
                    return tuple(int(v) for v in e.loader().reshape(-1).tolist())
    return None
