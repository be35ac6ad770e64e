"""Where one token sequence sits in another, by token id: the offsets at which a capture's ids equal
a training sample's, and the prefix a different prompt shares with one (a system prompt, a chat
template)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["MIN_PREFIX", "id_offsets", "shared_prefix"]

#: Fewest shared leading tokens that make a different prompt's prefix worth comparing.
MIN_PREFIX = 3


def id_offsets(infer_ids: Sequence[int], train_ids: Sequence[int]) -> list[int]:
    """Offsets ``o`` with ``infer_ids[i] == train_ids[i + o]`` over their whole overlap.

    The overlap must cover all of the shorter sequence (a prefill of the same prompt, a prompt
    that skipped its first token, a few decode tokens from the middle).
    """
    a = np.asarray(infer_ids, dtype=np.int64)
    b = np.asarray(train_ids, dtype=np.int64)
    if a.size == 0 or b.size == 0:
        return []
    out = []
    n = min(a.size, b.size)
    for o in range(min(0, b.size - a.size), max(0, b.size - a.size) + 1):  # the offsets whose overlap is n long
        i0, i1 = max(0, -o), min(a.size, b.size - o)
        if i1 - i0 < n:
            continue
        if np.array_equal(a[i0:i1], b[i0 + o : i1 + o]):
            out.append(o)
    return out


def shared_prefix(infer_ids: Sequence[int], train_ids: Sequence[int]) -> tuple[int, int] | None:
    """``(o, n)``: the inference's first ``n`` tokens equal training tokens ``o .. o+n-1``, the longest
    such run (ties: ``o`` nearest 0); None when no run of :data:`MIN_PREFIX` tokens exists.

    A different prompt that shares a system prompt or chat template with a training sample: in a
    causal model identical token prefixes give identical hidden states, so that prefix (and only
    it) is evidence.
    """
    a = np.asarray(infer_ids, dtype=np.int64)
    b = np.asarray(train_ids, dtype=np.int64)
    best: tuple[int, int] | None = None
    for o in np.flatnonzero(b == a[0]).tolist() if a.size else []:
        m = min(a.size, b.size - o)
        diff = np.flatnonzero(a[:m] != b[o : o + m])
        n = int(diff[0]) if diff.size else m
        if best is None or n > best[1]:
            best = (o, n)
    return best if best is not None and best[1] >= MIN_PREFIX else None
