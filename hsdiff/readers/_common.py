"""Helpers shared by the format readers: context, labels from names, token ids, capture builders."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..arrays import as_f32, lower_median
from ..model import Capture, Index, LabelSource, Layer, NormPrint, Origin
from ..rules.conventions import BOUNDARY, OUTPUT
from ._container import Entry, Table
from ._container.filerows import file_rows


@dataclass
class ReadContext:
    """What a reader needs to know about the side it reads: ``side`` and how layer labels count."""

    side: str
    index: str = "boundary"  # how layer numbers found in names/tags count: "boundary" or "output"
    root: Path | None = None
    warnings: list[str] = field(default_factory=list)
    log_pattern: str | None = None  # --log-pattern: a regex with a named group "values" for debug logs
    rank_conflicts: list[str] = field(default_factory=list)  # tensor-parallel ranks that disagree, in words
    norm_prints: list[NormPrint] = field(default_factory=list)  # per-token norms a log printed without values
    #: files a reader recognised as part of its format that hold no capture of their own (a pair's second
    #: half, a module's other outputs): not reported as skipped
    consumed: set[Path] = field(default_factory=set)
    #: what readers keep while one scan lasts (a directory's listing), by a key of their own
    memo: dict[Any, Any] = field(default_factory=dict)

    def rel(self, path: Path) -> str:
        if self.root is not None:
            try:
                rel = path.relative_to(self.root)
                return str(rel) if str(rel) != "." else path.name
            except ValueError:
                pass
        return str(path)


# A layer number in a key or a file name: hidden_states.layer_3, layers.31, h59, layer_id=12, blk.7, blocks.3 ...
# (at most 9 digits: no model has a billion layers, and int() refuses strings of over 4300 digits)
_LAYER_WORDS = r"layer_id|layer_idx|layers?|h|blk|blocks?"
_LAYER_RE = re.compile(
    rf"(?:^|[^a-z])(?:{_LAYER_WORDS}|hidden_states?|hs|capture|aux)[._\-=\[:]?(-?\d{{1,9}})\]?(?![\d])", re.IGNORECASE
)
# A tensor's name (SGLang dumper): aux_0, capture_1, hidden_states_2 there are slots more often than layers.
_NAME_LAYER_RE = re.compile(rf"(?:^|[^a-z])(?:{_LAYER_WORDS})[._\-=\[:]?(-?\d{{1,9}})\]?(?![\d])", re.IGNORECASE)
# Which side of a layer a numbered name means: its input (``model.layers.3.input``, ``layer3_residual_in``,
# SGLang's hook names ``model.layers.3.inputs.0``) or its output (``model.layers.3.output``, ``layer3_out``).
# ``in``/``out`` count only when joined to the name (``_in``, ``.out``), not as words of a sentence;
# ``output_hidden_states`` is Hugging Face's flag, whose tuple index is a boundary.
_INPUT_RE = re.compile(r"(?<![a-z])inputs?(?![a-z])|(?<=[._\-])in(?![a-z])", re.IGNORECASE)
_OUTPUT_RE = re.compile(r"(?<![a-z])outputs?(?![a-z]|_hidden)|(?<=[._\-])out(?![a-z])", re.IGNORECASE)
TOKEN_KEYS = ("input_ids", "token_ids", "tokens", "ids", "prompt_token_ids")


def layer_from_name(name: str, *, tensor_name: bool = False) -> int | None:
    """The layer number a key or file name carries, or None (``hidden_states.layer_3`` -> 3).

    ``tensor_name``: a name the user gave a tensor (the dumper's ``name=``), where only the layer
    words count (``model.layers.3.input``, ``layer3_residual_in``, ``blocks.3``), not ``aux_0``.
    """
    found = (_NAME_LAYER_RE if tensor_name else _LAYER_RE).findall(name)
    return int(found[-1]) if found else None


def layer_side(name: str) -> str | None:
    """What a numbered name counts: :data:`~hsdiff.rules.conventions.BOUNDARY` when it names a layer's input,
    :data:`~hsdiff.rules.conventions.OUTPUT` when it names its output, None when it does not say.

    >>> layer_side("model.layers.3.output"), layer_side("layer3_residual_in"), layer_side("blocks.3")
    ('output', 'boundary', None)
    """
    said_in, said_out = bool(_INPUT_RE.search(name)), bool(_OUTPUT_RE.search(name))
    if said_in == said_out:
        return None
    return OUTPUT if said_out else BOUNDARY


def layer_label(n: int, name: str, ctx: ReadContext, source: str) -> Layer:
    """Layer ``n`` found in ``name``: counted as the name says (input of layer 3 is B3, its output B4),
    else as the side's index convention (``--infer-index`` / ``--train-index``)."""
    return Layer(n, Index(layer_side(name) or ctx.index), LabelSource(source))


def token_ids_of(table: Table) -> tuple[int, ...] | None:
    for key in TOKEN_KEYS:
        entry = table.entries.get(key)
        if entry is not None and not entry.is_float and len(entry.shape) <= 2:
            t = entry.loader()
            return tuple(int(v) for v in t.reshape(-1).tolist())
    return None


def final_width(table: Table, name: str) -> int | None:
    """The last dimension of a training file's final post-norm state ``name`` (the target's hidden
    size: SpecForge's ``hidden_state``, ModelOpt's ``hidden_states``), when the file holds one."""
    entry = table.entries.get(name)
    return int(entry.shape[-1]) if entry is not None and entry.shape and len(entry.shape) >= 2 else None


def final_loader(table: Table, name: str) -> Any:
    """The loader of that final post-norm state, when the file holds one."""
    return table.entries[name].loader if final_width(table, name) else None


def make_capture(
    table: Table,
    entry: Entry,
    ctx: ReadContext,
    *,
    fmt: str,
    group: str | None,
    layer: Layer | None = None,
    token_ids: tuple[int, ...] | None = None,
    concat: bool = False,
    post_norm: bool = False,
    rank: int | None = None,
    key: str | None = None,
    loader: Any = None,
    shape: tuple[int, ...] | None = None,
    rows: Any = None,
    final_width: int | None = None,
    final: Any = None,
    mask: Any = None,
) -> Capture:
    return Capture(
        side=ctx.side,
        origin=Origin(ctx.rel(table.path), key if key is not None else (entry.name or None), None, fmt),
        shape=shape if shape is not None else entry.shape,
        dtype=entry.dtype,
        width=(shape or entry.shape)[-1] if (shape or entry.shape) else None,
        group=group,
        layer=layer,
        token_ids=token_ids,
        concat=concat,
        post_norm=post_norm,
        rank=rank,
        loader=loader if loader is not None else entry.loader,
        rows=rows if rows is not None else (entry.rows if loader is None else None),
        final_width=final_width,
        final_loader=final,
        mask_loader=mask,
    )


def sample_name(path: Path) -> str:
    """A readable sample id from a file name: ``data_12.ckpt.gz`` -> ``data_12``."""
    name = path.name
    for suffix in (".gz", ".zst", ".ckpt", ".pt", ".pth", ".bin", ".safetensors", ".npz", ".npy"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def float_entries(table: Table) -> list[Entry]:
    return [e for e in table.entries.values() if e.is_float and len(e.shape) >= 1 and e.shape[-1] > 1]


#: Rows of a tensor looked at to tell what it holds (a duplicated column block, attention sinks).
PROBE_ROWS = 64
#: The rows compared bit for bit to tell that an aux tensor's last columns are the final state (a few
#: hundred values each, equal in every bit only when they are the same tensor).
FINAL_ROWS = 4


def first_rows(entry: Entry, n: int = PROBE_ROWS) -> np.ndarray:
    """The first ``n`` rows of ``entry`` seen as ``[-1, width]``, in the stored dtype (a copy)."""
    if entry.rows is not None:
        return np.array(entry.rows(0, n, raw=True))
    a = entry.loader()
    return np.array(a.reshape(-1, a.shape[-1])[:n])


#: A token whose norm is over this many times the median of a final state's shows it pre-norm: a final
#: RMSNorm scales every token to about the same norm (SmolLM2: 0.84–1.25× the median), while the residual
#: stream before it keeps its attention sinks (over 8× the median).
PRENORM_SINK = 3.0


def sink_ratio(final: Entry) -> float:
    """The largest per-token norm over the median among the first :data:`PROBE_ROWS` rows of a final state
    (0 when it cannot be told): over :data:`PRENORM_SINK`, the state was taken before the final norm."""
    norms = np.linalg.norm(as_f32(first_rows(final)), axis=-1)
    finite = norms[np.isfinite(norms)]
    med = lower_median(finite) if finite.size else 0.0
    return float(finite.max()) / med if med > 0 else 0.0


def final_in_last_columns(aux: Entry, final: Entry) -> bool:
    """Whether the last columns of a concatenated ``aux`` are the ``final`` state, bit for bit (TensorRT-LLM
    keeps its layer -1 capture there when it was asked for), judged on the first :data:`PROBE_ROWS` rows."""
    h = final.shape[-1]
    if aux.shape[-1] <= h:
        return False
    return np.array_equal(first_rows(aux, FINAL_ROWS)[:, -h:], first_rows(final, FINAL_ROWS))


def with_final_last(cap: Capture, aux: Entry, final: Entry | None) -> Capture:
    """``cap``, a concatenated aux capture, marked when its last slot is the file's final state bit for bit (a
    slot the draft is fed like the others): the final post-norm state, unless that state has attention sinks
    (then it is B = L, taken before the final norm)."""
    if final is None or len(final.shape) < 2 or not final_in_last_columns(aux, final):
        return cap
    pre = sink_ratio(final) > PRENORM_SINK
    what = "the last layer's output before the final norm" if pre else "the final post-norm state"
    note = f"its last aux slot is the file's final state, {what}: a slot of its own"
    return cap.replace(final_last=True, final_pre_norm=pre, variant=f"{cap.variant}; {note}" if cap.variant else note)


def rank_and_run(path: Path, rank_dir: re.Pattern[str], ctx: ReadContext) -> tuple[int | None, str]:
    """For a file in a per-rank directory (``rank_dir`` matches its name, group 1 the rank): the rank and
    a name for the run above it, the same for every rank (so their replicas collapse)."""
    m = rank_dir.match(path.parent.name)
    run = path.parent.parent if m else path.parent
    return (int(m.group(1)) if m else None), (ctx.rel(run) if run != ctx.root else run.name)


class LazyRows:
    """Rows of the array ``array()`` returns (a memory map, or a view of one), read with ``pread`` by
    :func:`~hsdiff.readers._container.filerows.file_rows`, set up at the first read."""

    def __init__(self, array: Callable[[], np.ndarray]) -> None:
        self.array = array
        self.read: Callable[..., np.ndarray] | None = None

    def __call__(
        self, i0: int, i1: int, c0: int = 0, c1: int | None = None, out: Any = None, raw: bool = False
    ) -> np.ndarray:
        if self.read is None:
            self.read = file_rows(self.array())
        return self.read(i0, i1, c0, c1, out, raw)
