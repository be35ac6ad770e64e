"""How far apart neighbouring layers are, read from the data: the separation a match must beat to
rule out the layers next to it. No torch, no files: functions over scored candidates.

Captured neighbours give it directly; a capture farther away bounds it from below (triangle
inequality over the layer updates between the two); the model depth gives it when nothing else
does. Measured on real states (``fixtures/README.md``): SmolLM2-135M's neighbouring boundaries
differ by 19-35 % on ordinary tokens, the 61-layer seed target's by 3.7-10 % in its middle.

    >>> from hsdiff.model import Capture, Layer, Metrics, Origin
    >>> def c(b, err): return Candidate(Capture("infer", Origin(f"{b}.pt"), (8, 16), "bfloat16", 16, layer=Layer(b)),
    ...                                 None, 0, Metrics(err, 0.9, err, 1.0, 8, 128))
    >>> round(neighbour_separation(c(5, 0.01), [c(5, 0.01), c(15, 0.9)], 30).value, 3)  # 0.9 over 10 layers
    0.09
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .model import Candidate, pct

__all__ = ["DEPTH_SPAN", "DEFAULT_DEPTH", "SIDE_SPREAD", "BEST_OF_NEIGHBOURS", "BEST_MIN_TOKENS", "NOISE_FLOOR_RATIO",
           "Separation", "neighbour_separation", "best_of_neighbours", "clears_noise_floor", "what_to_dump"]

#: The smallest neighbour separation times the number of layers, measured on ordinary tokens: 5.6 on
#: SmolLM2-135M (30 layers, 19 % at the closest pair), 2.25 on the 61-layer seed target (3.7 % at
#: B 8-16, each layer applied twice). Used as ``DEPTH_SPAN / L`` only when no capture bounds the
#: separation of a match's neighbours.
DEPTH_SPAN = 2.2
#: Depth assumed when the layer count is unknown: the deepest target measured (the seed's 61 layers).
DEFAULT_DEPTH = 61
#: The separations on the two sides of one boundary differ by up to this factor (SmolLM2 B2: 61 %
#: below, 27 % above; the seed at B50: 35 % and 8.6 %): when only one neighbour was captured, the
#: other side is estimated as its separation divided by it.
SIDE_SPREAD = 4.0
#: With both neighbouring boundaries captured, the best of B-1, B, B+1 decides when its error is below
#: this fraction of the next best, over at least :data:`BEST_MIN_TOKENS` ordinary tokens. A neighbour's
#: error is the noise plus one layer update, but the two are not independent: on SmolLM2 depth
#: up-scaled to 126 layers (bf16 against fp32, every boundary captured) the best was a neighbour once
#: (B37 matched B38 at 4.9 %, B37 itself at 5.5 %: 1.13 times), and 12 of 124 boundaries had their
#: next best within 1.25 times; at 61 layers the next best was at least 2.2 times away.
BEST_OF_NEIGHBOURS = 0.8
BEST_MIN_TOKENS = 8
#: A separation that was estimated (neighbours not captured) must clear this multiple of the noise
#: floor seen on the other slots, as it must clear the match's own error: an off-by-one error is that
#: noise plus one layer update.
NOISE_FLOOR_RATIO = 3.0


@dataclass(frozen=True)
class Separation:
    """How far (median per-token error) a match's neighbouring layers are from it, and from what
    that was read: ``measured`` when every neighbour was captured."""

    value: float
    basis: str
    measured: bool = False


def neighbour_separation(top: Candidate, cands: Sequence[Candidate], num_layers: int | None) -> Separation:
    """The separation between ``top``'s layer and its neighbours, from the data wherever possible.

    Captured neighbours give it directly. A capture ``d`` layers away bounds the mean neighbour
    separation over that stretch from below (triangle inequality: the ``d`` layer updates add up to
    at least the difference), measured against the larger of the two norms (the norm growth between
    the two layers). A side with no capture takes the other side's estimate (a captured neighbour's
    error over ``SIDE_SPREAD``); with no other capture at all, the model depth (``DEPTH_SPAN / L``).
    """
    b = top.boundary
    others = [c for c in cands if c is not top and not c.metrics.sink_only and math.isfinite(c.metrics.rel_err)]
    runner = min((c.metrics.rel_err for c in others if c.boundary != b or b is None), default=math.inf)
    if b is None:
        return Separation(runner, "the runner-up", True)
    exists = {-1: b - 1 >= 0, 1: num_layers is None or b + 1 <= num_layers}
    sides: dict[int, tuple[float, str, bool]] = {}  # side -> (separation, whence, a direct neighbour)
    for side in (-1, 1):
        near = [c for c in others if c.boundary is not None and (c.boundary - b) * side > 0]
        if not near:
            continue
        d = min(abs(c.boundary - b) for c in near)  # type: ignore[operator]
        e = min((c for c in near if abs(c.boundary - b) == d), key=lambda c: c.metrics.rel_err)  # type: ignore[operator]
        if d == 1:
            sides[side] = (e.metrics.rel_err, f"B{b + side} captured", True)
        else:
            bound = e.metrics.rel_err / (max(1.0, _finite(e.metrics.norm_ratio, 1.0)) * d)
            sides[side] = (bound, f"B{b + side * d}, {d} layers away: at least {pct(bound)} a layer", False)
    needed = [s for s in (-1, 1) if exists[s]]
    if needed and all(s in sides and sides[s][2] for s in needed):
        return Separation(runner, "neighbours captured", True)
    if not sides:
        depth = num_layers or DEFAULT_DEPTH
        return Separation(min(DEPTH_SPAN / depth, runner),
                          f"the model depth ({depth} layers{'' if num_layers else ', assumed'})")
    values = [v for v, _, _ in sides.values()]
    basis = "; ".join(w for _, w, _ in sides.values())
    if any(s not in sides for s in needed):
        # one side only: a captured neighbour is exact for its side alone; a bound over a stretch is not local
        values.append(min(v / SIDE_SPREAD if direct else v for v, _, direct in sides.values()))
        basis += "; the other side not captured"
    return Separation(min([*values, runner]), basis)


def _finite(x: float, default: float) -> float:
    return x if math.isfinite(x) else default


def best_of_neighbours(top: Candidate, sep: Separation, runner: Candidate) -> bool:
    """Whether ``top`` (a whole tensor, ordinary tokens) is clearly the best of its layer and both its
    captured neighbours: then it is the layer, however close the neighbours."""
    m = top.metrics
    return (sep.measured and top.boundary is not None and not top.capture.is_partial and not m.sink_only
            and m.tokens >= BEST_MIN_TOKENS and m.rel_err < BEST_OF_NEIGHBOURS * runner.metrics.rel_err)


def clears_noise_floor(separation: float, err: float, floor: float) -> bool:
    """Whether an estimated separation clearly exceeds the noise floor ``floor`` seen on other slots
    (nothing to clear when the match's own error ``err`` is at least that floor)."""
    return floor <= err or separation >= NOISE_FLOOR_RATIO * floor


def what_to_dump(b: int | None, measured: bool) -> str:
    """What to dump to tell B{b} from its neighbours: more tokens when they were captured, else them."""
    return "dump more tokens" if measured or b is None else f"dump the neighbouring layers B{max(b - 1, 0)} and B{b + 1} or more tokens"
