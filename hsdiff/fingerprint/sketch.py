"""The sketch: each token's hidden state as its norm and :data:`DIM` numbers, whatever the hidden size.

A fixed-seed Gaussian matrix ``P`` [H, d] (entries N(0, 1/d), numpy's PCG64, so every platform draws
the same numbers) maps a row ``h`` to ``P·h``, whose length is ``‖h‖`` within a few percent and whose
distances to other sketches are those of the rows within a few percent (Johnson–Lindenstrauss). A
fingerprint keeps, per token, the float32 norm ``‖h‖`` and the float16 unit sketch ``P·h/‖h‖``;
``P`` is rebuilt from the stored seed, never shipped (1.8 MB at H = 7168, against 132 bytes a token).

Errors are measured in sketch space: ``‖P·x − P·h‖ / ‖P·h‖`` estimates the relative error
``‖x − h‖ / ‖h‖`` that :mod:`hsdiff.align` measures on whole rows.

>>> import numpy as np
>>> rows = np.random.default_rng(0).standard_normal((4, 576)).astype(np.float32)
>>> norms, unit = sketch(rows, projection(576))
>>> unit.shape, unit.dtype
((4, 64), dtype('float16'))
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..arrays import row_norms

__all__ = ["DIM", "SEED", "projection", "sketch", "project", "references", "errors"]

#: Numbers per token: 64 keep errors within a few percent of the full-width ones (measured on SmolLM2 and
#: its 61- and 126-layer up-scaled versions: the same boundary is nearest at d = 64 as on whole rows).
DIM = 64
#: The default seed of the projection (a file states the seed it was recorded with).
SEED = 20261207
_EPS = 1e-30


@lru_cache(maxsize=4)
def projection(hidden: int, dim: int = DIM, seed: int = SEED) -> np.ndarray:
    """The ``[hidden, dim]`` float32 projection of ``seed``: the same numbers on every machine (PCG64)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    p = rng.standard_normal((hidden, dim), dtype=np.float64) / np.sqrt(dim)
    out = p.astype(np.float32)
    out.flags.writeable = False
    return out


def project(rows: np.ndarray, p: np.ndarray) -> np.ndarray:
    """``rows`` [T, H] float32 projected: ``[T, d]`` float32 (not normalised)."""
    return np.asarray(rows @ p, dtype=np.float32)


def sketch(rows: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``rows`` [T, H] (float32): its norm (float32 [T]) and its unit sketch ``P·h/‖h‖``
    (float16 [T, d]; zero for a zero row)."""
    norms = row_norms(rows).astype(np.float32)
    y = project(rows, p)
    unit = y / np.maximum(norms, _EPS)[:, None]
    return norms, unit.astype(np.float16)


def references(unit: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """The stored sketches scaled back to ``P·h`` (float32, ``unit``'s shape with ``norms`` broadcast)."""
    return unit.astype(np.float32) * norms[..., None].astype(np.float32)


def errors(y: np.ndarray, refs: np.ndarray) -> np.ndarray:
    """Per token the relative error of each projected capture row ``y`` [n, d] against each reference
    ``refs`` [B, n, d] (boundary by token): ``‖y − r‖ / ‖r‖`` as float32 [B, n] (inf where ``r`` is 0)."""
    diff = refs - y[None]
    num = np.sqrt(np.einsum("bnd,bnd->bn", diff, diff))
    den = np.sqrt(np.einsum("bnd,bnd->bn", refs, refs))
    with np.errstate(divide="ignore", invalid="ignore"):
        e = num / den
    return np.where(den > 0, e, np.inf).astype(np.float32)
