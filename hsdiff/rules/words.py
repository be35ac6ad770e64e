"""Words for boundaries and parsing of id lists: what reports and help texts say about a layer.

>>> name_boundary(3)
'B3 (the output of layer 2)'
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import InputError

__all__ = ["describe_boundary", "name_boundary", "parse_ids", "final_boundary"]


def final_boundary(num_layers: int) -> int:
    """The boundary hsdiff gives the final hidden state *after* the norm (TensorRT-LLM -1, HF index L)."""
    return num_layers + 1


def describe_boundary(b: int | None, num_layers: int | None = None) -> str:
    """Words for a boundary index: ``"embeddings"``, ``"output of layer 2 (input of layer 3)"``..."""
    if b is None:
        return "unknown"
    if b == 0:
        return "embeddings (input of layer 0)"
    if num_layers is not None and b == num_layers:
        return f"output of the last layer {b - 1}, before the final norm"
    if num_layers is not None and b == final_boundary(num_layers):
        return "the final hidden state, after the final norm"
    if num_layers is not None and b > num_layers:
        return f"boundary {b}, beyond a {num_layers}-layer model"
    return f"output of layer {b - 1} (input of layer {b})"


def name_boundary(b: int | None, num_layers: int | None = None) -> str:
    """A boundary with its meaning, for sentences: ``"B0 (the embeddings)"``, ``"B3 (the output of layer 2)"``."""
    if b is None:
        return "an unknown layer"
    if b == 0:
        return "B0 (the embeddings)"
    if num_layers is not None and b == num_layers:
        return f"B{b} (the last layer's output before the final norm)"
    if num_layers is not None and b == final_boundary(num_layers):
        return "the final hidden state after the norm"
    return f"B{b} (the output of layer {b - 1})"


def parse_ids(text: str | Sequence[int], *, what: str = "--layer-ids") -> list[int]:
    """Parse ``"-1,2,30"``, ``"[2, 30, 58]"`` or a list into ints; raises :class:`InputError`."""
    if not isinstance(text, str):
        return [int(i) for i in text]
    cleaned = text.strip().strip("[]()")
    if not cleaned:
        raise InputError(f"{what} is empty", hint='give comma-separated integers, e.g. "2,30,58"')
    try:
        return [int(p) for p in cleaned.replace(" ", ",").split(",") if p.strip()]
    except ValueError:
        raise InputError(
            f"{what} {text!r} is not a list of integers", hint='give comma-separated integers, e.g. "2,30,58"'
        ) from None
