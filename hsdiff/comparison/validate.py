"""Data quality, kept apart from accuracy: empty tensors, token ids that do not fit, NaN/Inf, all-zero
tokens, slot order, the same sample twice. Each check returns warnings; none decides a verdict."""

from __future__ import annotations

import dataclasses

from ..errors import AlignmentError
from ..largedump.rows import RowStats
from ..model import Capture, Dump
from .slots import Slots


def with_values(dump: Dump, side: str, path: str) -> tuple[Dump, list[str]]:
    """``dump`` without captures that hold no values, and without token ids that do not fit their
    tensor; :class:`AlignmentError` when nothing is left."""
    keep = []
    warnings: list[str] = []
    for c in dump.captures:
        if c.observation is None and c.shape is not None:
            if len(c.shape) == 0 or 0 in c.shape:
                warnings.append(f"{c.origin}: the {side} tensor holds no hidden state (shape {list(c.shape)}); skipped")
                continue
            if c.token_ids is not None and c.tokens is not None and len(c.token_ids) != c.tokens:
                warnings.append(
                    f"{c.origin}: {len(c.token_ids)} token ids but {c.tokens} tokens in the tensor; "
                    "the ids are not used to align it"
                )
                c = c.replace(token_ids=None)
        keep.append(c)
    if not keep:
        raise AlignmentError(
            f"the {side} side holds no tensor with a hidden state ({warnings[-1]})",
            path=path,
            hint="the dump was not written completely; re-run it",
        )
    return dataclasses.replace(dump, captures=tuple(keep)), warnings


def inference_rows(c: Capture, stats: RowStats, tokens: int) -> list[str]:
    """Warnings about the rows read of an inference capture (all of them, or those a sketch read)."""
    warnings = []
    part = "" if stats.rows >= tokens else f" (in the {stats.rows} of {tokens} tokens read)"
    if stats.nonfinite:
        warnings.append(f"{c.origin}: {stats.nonfinite} NaN/Inf values in the inference capture{part}")
    if stats.rows and not stats.nonzero:
        warnings.append(f"{c.origin}: the capture is all zeros{part} (nothing was written into it?)")
    elif stats.zero_rows:
        warnings.append(f"{c.origin}: {_zero_text(stats.zero_rows, stats.rows if part else tokens, 'capture')}{part}")
    return warnings


def training_rows(c: Capture, slot: int, stats: RowStats, tokens: int) -> list[str]:
    """Warnings about one training slot, from the pass that read its norms: NaN/Inf values, all-zero tokens."""
    warnings = []
    if stats.nonfinite:
        warnings.append(f"{c.origin} slot {slot}: {stats.nonfinite} NaN/Inf values in the training tensor")
    if stats.zero_rows:
        warnings.append(f"{c.origin} slot {slot}: {_zero_text(stats.zero_rows, tokens, 'training tensor')}")
    return warnings


def training_set(slots: Slots, train: Dump) -> list[str]:
    """Slots out of ascending layer order (engines capture ascending); the same sample twice."""
    warnings = []
    for s, caps in slots.items():
        b, prev = caps[0].boundary, slots[s - 1][0].boundary if s > 0 else None
        if b is not None and prev is not None and b < prev:
            warnings.append(
                f"training slots are not in ascending layer order (slot {s - 1} B{prev}, slot {s} "
                f"B{b}): engines capture in ascending order, so the draft's fc input blocks are permuted"
            )
    first_with: dict[tuple[int, ...], str] = {}
    for c in train.captures:
        if c.token_ids and c.group is not None:
            first = first_with.setdefault(c.token_ids, c.group)
            if first != c.group:
                warnings.append(
                    f"training samples {first} and {c.group} hold the same {len(c.token_ids)} tokens "
                    "(the same sample twice?)"
                )
    return warnings


def _zero_text(zero: int, tokens: int, what: str) -> str:
    if zero == tokens:
        return f"the {what} is all zeros (zero norm: nothing was written into it?)"
    return f"{zero} of {tokens} tokens of the {what} are all zeros (zero norm: was it written only partly?)"
