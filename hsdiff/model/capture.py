"""What readers make: a :class:`Capture` per tensor (or printed part of one) and a :class:`Dump` per side.

Nothing is read from disk until :meth:`Capture.load` is called.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..arrays import as_f32, to_torch
from ..enums import StrEnum
from ..extras import require
from ..rowio import RowBuffer

__all__ = [
    "TRAIN",
    "INFER",
    "Origin",
    "Index",
    "LabelSource",
    "Layer",
    "Observation",
    "Capture",
    "Dump",
    "NormPrint",
]

TRAIN = "train"
INFER = "infer"


@dataclass(frozen=True)
class Origin:
    """Where a capture came from: a file, a key or tag inside it, and a line for logs."""

    path: str
    key: str | None = None
    line: int | None = None
    format: str = ""

    def __str__(self) -> str:
        text = self.path
        if self.line is not None:
            text += f":{self.line}"
        if self.key:
            text += f" [{self.key}]"
        return text


class Index(StrEnum):
    """What a layer number counts."""

    BOUNDARY = "boundary"  #: B: the residual stream entering layer ``value`` (B0 = embeddings)
    OUTPUT = "output"  #: O: the output of layer ``value``; B = O + 1


class LabelSource(StrEnum):
    """Where a capture's layer label came from."""

    TAG = "tag"  #: a dumper's own tag (SGLang's dumper names the layer)
    KEY = "key"  #: a tensor name or key in the file
    FILENAME = "filename"  #: the file's name
    CONFIGURED = "configured"  #: the configured ids under test (never evidence for themselves)
    CLAIMED = "claimed"  #: the training side's stated ids
    LOG = "log"  #: a line of a debug log


@dataclass(frozen=True)
class Layer:
    """A layer number as some label states it, what that number counts (:class:`Index`) and where the
    label came from (:class:`LabelSource`; plain strings are accepted and checked)."""

    value: int
    index: Index = Index.BOUNDARY
    source: LabelSource = LabelSource.KEY
    #: how this label counts was confirmed by value (a dumper's tag 0 that is, or is not, the embedding
    #: lookup: :mod:`hsdiff.comparison.tags`), so it outweighs a label nothing confirmed
    checked: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", Index(self.index))
        object.__setattr__(self, "source", LabelSource(self.source))

    @property
    def boundary(self) -> int:
        return self.value + 1 if self.index == Index.OUTPUT else self.value

    def __str__(self) -> str:
        return f"B{self.boundary}" if self.index == Index.BOUNDARY else f"O{self.value} (B{self.boundary})"


@dataclass(frozen=True, eq=False)
class Observation:
    """Printed values: a few rows (tokens) and columns of a tensor, not the whole of it.

    ``rows`` are token positions relative to the start of the printed tensor (negative counts
    from its end; ``None`` when unknown); ``cols`` are column positions (negative from the end).
    ``values`` has shape ``[len(rows), len(cols)]`` and may hold NaN.
    """

    values: np.ndarray
    rows: tuple[int, ...]
    cols: tuple[int, ...]
    rows_known: bool = True

    @property
    def size(self) -> int:
        return int(np.isfinite(self.values).sum())

    def __repr__(self) -> str:
        return f"<Observation {self.values.shape[0]}x{self.values.shape[1]} values>"


@dataclass(frozen=True, eq=False)
class Capture:
    """One hidden-state tensor (or a printed part of one), its labels and its provenance.

    ``width`` is the size of the last dimension as stored; a training ``aux_hidden_state`` holds
    several slots side by side (``concat=True``) until :meth:`split` cuts it by hidden size.
    ``group`` names the sequence the tensor covers (a training sample, an inference forward
    pass); captures of one group share ``token_ids``.
    """

    side: str
    origin: Origin
    shape: tuple[int, ...] | None
    dtype: str
    width: int | None
    group: str | None = None
    slot: int | None = None
    layer: Layer | None = None
    token_ids: tuple[int, ...] | None = None
    concat: bool = False
    post_norm: bool = False
    rank: int | None = None
    norm: float | None = None
    observation: Observation | None = None
    loader: Callable[[], np.ndarray] | None = field(default=None, repr=False)
    col_start: int = 0
    col_stop: int | None = None
    rows: Callable[..., np.ndarray] | None = field(default=None, repr=False)  # (i0, i1, c0, c1, out, raw) -> float32
    #: the target's hidden size as the file shows it apart from this tensor (a training file's final
    #: post-norm ``hidden_state`` beside a concatenated ``aux_hidden_state``), or None
    final_width: int | None = None
    #: loads that final post-norm state (the target's greedy reference for a predicted acceptance), or None
    final_loader: Callable[[], np.ndarray] | None = field(default=None, repr=False, compare=False)
    #: loads the file's ``loss_mask`` [T] (1 on the assistant's reply: where generation starts), or None
    mask_loader: Callable[[], np.ndarray] | None = field(default=None, repr=False, compare=False)
    #: the final state ``final_loader`` gives is the last layer's output *before* the final norm (a
    #: vLLM-extracted B = L), not after it
    final_pre_norm: bool = False
    #: the layer of each slot of a concatenated capture, as the file's provenance states them (empty: unknown)
    slot_layers: tuple[Layer | None, ...] = ()
    #: the last slot of a concatenated capture is the file's final state, bit for bit (TensorRT-LLM's -1
    #: capture kept in the aux buffer, HF's ``hidden_states[-1]``): a slot of its own, which :meth:`split`
    #: marks ``post_norm`` unless :attr:`final_pre_norm`
    final_last: bool = False
    #: which variant of its format the file is, and how that was told (for ``inspect``), or ""
    variant: str = ""

    @property
    def boundary(self) -> int | None:
        return None if self.layer is None else self.layer.boundary

    @property
    def is_partial(self) -> bool:
        return self.observation is not None

    @property
    def tokens(self) -> int | None:
        if self.shape is None or len(self.shape) == 0:
            return None
        if len(self.shape) == 1:
            return 1
        return int(math.prod(self.shape[:-1]))

    def label(self) -> str:
        parts = [self.origin.key or self.origin.path.rsplit("/", 1)[-1]]
        if self.slot is not None:
            parts.append(f"slot {self.slot}")
        if self.layer is not None:
            parts.append(str(self.layer))
        if self.rank is not None:
            parts.append(f"rank {self.rank}")
        return " ".join(parts)

    def load(self) -> Any:
        """The tensor as a torch ``[tokens, width]`` tensor in its stored dtype (imports torch; the
        comparison itself reads :meth:`array`; torch is the ``torch`` extra)."""
        require("torch", "torch", "Capture.load()")
        return to_torch(self.array())

    def array(self) -> np.ndarray:
        """The tensor as a numpy ``[tokens, width]`` array (leading batch dims of 1 dropped), not converted:
        memory-mapped when the file allows; bfloat16 and float8 as tagged bits (values through
        :func:`hsdiff.arrays.as_f32`)."""
        if self.loader is None:
            raise ValueError(f"{self.origin}: a printed observation has no tensor to load")
        t = self.loader()
        if t.ndim == 1:
            t = t[None, :]
        elif t.ndim > 2:
            t = t.reshape(-1, t.shape[-1])
        if self.col_start or self.col_stop is not None:
            t = t[:, self.col_start : self.col_stop]
        return t

    @property
    def reads_rows(self) -> bool:
        """Whether :meth:`read_rows` reads only the rows asked for (else it loads the whole tensor)."""
        return self.rows is not None

    def read_rows(self, i0: int, i1: int, out: np.ndarray | RowBuffer | None = None, raw: bool = False) -> np.ndarray:
        """Rows ``[i0, i1)`` of the ``[tokens, width]`` tensor as float32, reading only their bytes when
        the file allows it (safetensors, ``torch.save`` zip); written into ``out`` (float32
        ``[i1 - i0, width]``, returned) when given. ``raw``: in the stored dtype, not converted: the
        file's whole rows read into ``out`` (a :class:`RowBuffer`) or a buffer of the calling thread,
        valid until the next read into it."""
        if self.rows is not None:
            return self.rows(i0, i1, self.col_start, self.col_stop, out, raw)
        rows = self.array()[i0:i1]
        return rows if raw else as_f32(rows, out=out if isinstance(out, np.ndarray) else None)

    def replace(self, **changes: Any) -> Capture:
        return dataclasses.replace(self, **changes)

    def split(self, hidden_size: int, layers: Sequence[Layer | None] | None = None) -> list[Capture]:
        """Cut a concatenated capture into ``width // hidden_size`` slot captures (lazy views)."""
        if self.width is None or self.width % hidden_size:
            raise ValueError(f"width {self.width} is not a multiple of {hidden_size}")
        k = self.width // hidden_size
        layers = layers if layers is not None else (self.slot_layers or None)
        out = []
        for s in range(k):
            layer = layers[s] if layers is not None and s < len(layers) else self.layer
            post = self.post_norm or (self.final_last and s == k - 1 and not self.final_pre_norm)
            obs = self.observation
            if obs is not None:
                keep = [i for i, c in enumerate(obs.cols) if _col_in(c, s, hidden_size, self.width)]
                cols = tuple(_local_col(obs.cols[i], hidden_size, self.width) for i in keep)
                obs = Observation(obs.values[:, keep], obs.rows, cols, obs.rows_known)
            out.append(
                self.replace(
                    slot=s,
                    layer=layer,
                    width=hidden_size,
                    concat=False,
                    observation=obs,
                    shape=None if self.shape is None else tuple(self.shape[:-1]) + (hidden_size,),
                    col_start=self.col_start + s * hidden_size,
                    col_stop=self.col_start + (s + 1) * hidden_size,
                    norm=None,
                    slot_layers=(),
                    final_last=False,
                    post_norm=post,
                )
            )
        return out

    def __repr__(self) -> str:
        shape = "x".join(map(str, self.shape)) if self.shape else "?"
        return f"<Capture {self.side} {self.label()} {shape} {self.dtype}>"


def _col_in(col: int, slot: int, h: int, width: int) -> bool:
    c = col if col >= 0 else width + col
    return slot * h <= c < (slot + 1) * h


def _local_col(col: int, h: int, width: int) -> int:
    c = col if col >= 0 else width + col
    return c % h


@dataclass(frozen=True)
class NormPrint:
    """Per-token norms a log printed for one capture, without its values: weak evidence, which can rule a
    layer out (its norms differ beyond what any match allows) but never prove one.

    ``rows`` are the token positions of ``norms`` (from the start of the sequence); ``slot`` and ``layer``
    are what the print's label says, None when it says nothing; ``group`` names the forward pass it was
    printed in (the prints of one pass cover the same tokens)."""

    origin: Origin
    norms: tuple[float, ...]
    rows: tuple[int, ...]
    slot: int | None = None
    layer: Layer | None = None
    group: str | None = None


@dataclass(frozen=True, eq=False)
class Dump:
    """What reading one side gave: captures, configs found beside them, and warnings.

    ``rank_conflicts`` says, one sentence each, where tensor-parallel ranks hold different values
    for one tensor: one of them is wrong, whichever was compared. ``norm_prints``: see :class:`NormPrint`.
    """

    captures: tuple[Capture, ...]
    configs: tuple[tuple[str, dict], ...] = ()
    warnings: tuple[str, ...] = ()
    files: int = 0
    rank_conflicts: tuple[str, ...] = ()
    #: per-token norms printed without values (a log that prints nothing else), in slot order
    norm_prints: tuple[NormPrint, ...] = ()

    def __repr__(self) -> str:
        return f"<Dump {len(self.captures)} captures from {self.files} files>"
