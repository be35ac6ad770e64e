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

from ..model import Candidate, Direction, Metrics, pct
from ..rules.words import final_boundary

__all__ = [
    "DEPTH_SPAN",
    "DEFAULT_DEPTH",
    "SIDE_SPREAD",
    "BEST_OF_NEIGHBOURS",
    "BEST_MIN_TOKENS",
    "BEST_REF_TOKENS",
    "NOISE_FLOOR_RATIO",
    "MISS_NORM_MARGIN",
    "MISS_MIN_COSINE",
    "MISS_MAX_ERR",
    "MISS_MAX_RATIO",
    "MISS_MIN_SLOTS",
    "Separation",
    "neighbour_separation",
    "separation_at",
    "best_of_neighbours",
    "best_fraction",
    "clears_noise_floor",
    "slot_direction",
    "miss_direction",
    "one_layer_floor",
    "one_layer_apart",
    "what_to_dump",
]

#: The smallest neighbour separation times the number of layers, measured on ordinary tokens: 5.6 on
#: SmolLM2-135M (30 layers, 19 % at the closest pair), 2.25 on the 61-layer seed target (3.7 % at
#: B 8-16, each layer applied twice). Used as ``DEPTH_SPAN / L`` only when no capture bounds the
#: separation of a match's neighbours. Out of sample: 2.3 on the 126-layer up-scaled SmolLM2 (1.85 %),
#: 2.1 on Gemma 3 270M (18 layers, 11.7 % at the closest pair), a little under the constant, with no
#: wrong id at confidence >= 0.9 over the held-out deployments (``make calibrate``).
DEPTH_SPAN = 2.2
#: Depth assumed when neither an option, a config nor the data tells the layer count: the deepest
#: plausible target (Llama 3.1 405B's 126 layers; DeepSeek V3 and Kimi K2 have 61, Qwen3-235B 94).
#: Assuming a shallower one would over-estimate a deeper target's neighbour separation (anti-
#: conservative); captures labelled deeper than it raise it.
DEFAULT_DEPTH = 126
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
#: The ordinary tokens :data:`BEST_OF_NEIGHBOURS` was measured on (16-24 per sample: the middle layers
#: mark a few more tokens as attention sinks). A median over fewer tokens moves more: over 12 tokens or
#: fewer of SmolLM2 up-scaled to 100 and 120 layers (each layer applied 4 times), bf16 B+1 came out
#: closer to fp32 B than bf16 B itself by up to 1.37 times. Below this many tokens the next best must be
#: farther by 1.25 times sqrt(BEST_REF_TOKENS / tokens): 1.44 at 12 tokens, 1.77 at 8.
BEST_REF_TOKENS = 16
#: A separation that was estimated (neighbours not captured) must clear this multiple of the noise
#: floor seen on the other slots, as it must clear the match's own error: an off-by-one error is that
#: noise plus one layer update.
NOISE_FLOOR_RATIO = 3.0
#: How far the final post-norm state (boundary L + 1) is from its one neighbour, the last layer's output
#: before the final norm (B = L), at the least: the norm rescales every token and weights every channel.
#: Measured on SmolLM2-135M, every token of the three fixture samples: 893 % at the least (median 14x),
#: relative to the post-norm state, as every error here is; a tenth of that is assumed where B = L was not
#: captured. No other state an engine captures is normalised.
FINAL_SEPARATION = 0.89


@dataclass(frozen=True)
class Separation:
    """How far (median per-token error) a match's neighbouring layers are from it, and from what
    that was read: ``measured`` when every neighbour was captured."""

    value: float
    basis: str
    measured: bool = False
    #: read from :data:`DEFAULT_DEPTH` (or a deeper labelled capture): no option, config or data gave the depth
    depth_assumed: bool = False

    def settled_up_to(self, err: float, ratio: float) -> int:
        """The deepest target for which the depth estimate (``DEPTH_SPAN / L``) clears ``ratio`` times the
        match's error ``err``: the layer counts that would settle a slot left open by the assumed depth."""
        return int(DEPTH_SPAN / (ratio * max(err, 1e-9)))


def neighbour_separation(top: Candidate, cands: Sequence[Candidate], num_layers: int | None) -> Separation:
    """The separation between ``top``'s layer and its neighbours, from the data wherever possible.

    Captured neighbours give it directly. A capture ``d`` layers away bounds the mean neighbour
    separation over that stretch from below (triangle inequality: the ``d`` layer updates add up to
    at least the difference), measured against the larger of the two norms (the norm growth between
    the two layers). A side with no capture takes the other side's estimate (a captured neighbour's
    error over ``SIDE_SPREAD``); with no other capture at all, the model depth (``DEPTH_SPAN / L``).
    """
    return separation_at(top.boundary, [c for c in cands if c is not top], num_layers)


def separation_at(b: int | None, others: Sequence[Candidate], num_layers: int | None) -> Separation:
    """:func:`neighbour_separation` of a training slot taken to be boundary ``b``, from the errors of
    ``others`` against that slot (a slot no capture matched: ``b`` is where a miss places it)."""
    others = [c for c in others if not c.metrics.sink_only and math.isfinite(c.metrics.rel_err)]
    runner = min((c.metrics.rel_err for c in others if c.boundary != b or b is None), default=math.inf)
    if b is None:
        return Separation(runner, "the runner-up", True)
    if num_layers is not None and b == final_boundary(num_layers) and not any(c.boundary == num_layers for c in others):
        return Separation(
            min(FINAL_SEPARATION, runner),
            f"the final norm (B{num_layers} before it is at least {pct(FINAL_SEPARATION)} away, measured on SmolLM2)",
        )
    exists = {-1: b - 1 >= 0, 1: num_layers is None or b + 1 <= num_layers}
    sides: dict[int, tuple[float, str, bool]] = {}  # side -> (separation, whence, a direct neighbour)
    for side in (-1, 1):
        near = [(c, abs(c.boundary - b)) for c in others if c.boundary is not None and (c.boundary - b) * side > 0]
        if not near:
            continue
        d = min(dist for _, dist in near)
        e = min((c for c, dist in near if dist == d), key=lambda c: c.metrics.rel_err)
        if d == 1:
            sides[side] = (e.metrics.rel_err, f"B{b + side} captured", True)
        else:
            bound = e.metrics.rel_err / (max(1.0, _finite(e.metrics.norm_ratio, 1.0)) * d)
            sides[side] = (bound, f"B{b + side * d}, {d} layers away: at least {pct(bound)} a layer", False)
    needed = [s for s in (-1, 1) if exists[s]]
    if needed and all(s in sides and sides[s][2] for s in needed):
        return Separation(runner, "neighbours captured", True)
    if not sides:
        depth = num_layers or max([DEFAULT_DEPTH, *(x for x in (b, *(c.boundary for c in others)) if x is not None)])
        return Separation(
            min(DEPTH_SPAN / depth, runner),
            f"the model depth ({depth} layers)"
            if num_layers
            else f"the model depth ({depth} layers assumed, the deepest plausible: pass --num-layers or "
            "--model-config)",
            depth_assumed=not num_layers and DEPTH_SPAN / depth <= runner,
        )
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
    return (
        sep.measured
        and top.boundary is not None
        and not top.capture.is_partial
        and not m.sink_only
        and m.tokens >= BEST_MIN_TOKENS
        and m.rel_err < best_fraction(m.tokens) * runner.metrics.rel_err
    )


def best_fraction(tokens: int) -> float:
    """The fraction of the next best's error the best of B-1, B, B+1 must be below, over ``tokens``
    ordinary tokens: :data:`BEST_OF_NEIGHBOURS`, stricter below :data:`BEST_REF_TOKENS` tokens."""
    return BEST_OF_NEIGHBOURS / math.sqrt(max(1.0, BEST_REF_TOKENS / max(tokens, 1)))


def clears_noise_floor(separation: float, err: float, floor: float) -> bool:
    """Whether an estimated separation clearly exceeds the noise floor ``floor`` seen on other slots
    (nothing to clear when the match's own error ``err`` is at least that floor)."""
    return floor <= err or separation >= NOISE_FLOOR_RATIO * floor


#: A capture that matches no training slot misses it towards shallower (deeper) layers when its median
#: norm on the same ordinary tokens is below (above) the training slot's by more than this fraction.
#: The residual stream grows through the layers: on SmolLM2 a capture one layer off differs in norm by
#: 3-40 % (B15: 0.95 shallower, 1.12 deeper); near the last layers of its depth up-scaled versions the
#: norm can fall for a layer (126 layers, B124 one layer shallower: 1.05), which is why every slot must
#: agree before a direction is said.
MISS_NORM_MARGIN = 0.02
#: ... and the two must still point the same way: neighbouring layers keep a median cosine of 0.80-0.99
#: on SmolLM2 and its up-scaled versions (0.73 at the last boundary of 61 layers), 0.70 for B1 against
#: B2 on the first 16 tokens of a chat template (an audit's shared prefix), with errors up to about
#: 100 %; another text under the same token ids gives 0.48-0.62. Below this the capture is another
#: tensor, not a neighbouring layer.
MISS_MIN_COSINE = 0.65
MISS_MAX_ERR = 1.2
#: ... nor move the norm by more than a factor of 2 (one layer: 0.60-1.66 on SmolLM2 and its up-scaled
#: versions, the embeddings aside): the final norm applied to a captured state scales it by 0.05-0.32
#: there at a cosine of 1.00, a different tensor, not a shallower layer.
MISS_MAX_RATIO = 2.0
#: ... and at least this many slots must agree: one capture's norm says little alone (SmolLM2 up-scaled
#: to 126 layers, training B40, engine B39: the norm 1.15 times higher, where a layer's weights change).
MISS_MIN_SLOTS = 2


def slot_direction(m: Metrics) -> int | None:
    """Which way one capture misses the slot it is weighed against (``m``: the pair's metrics on the
    same tokens): -1 shallower, +1 deeper, None when the pair is not neighbour-like (cosine, error,
    norm ratio), rests on sink tokens, or the norms are within :data:`MISS_NORM_MARGIN`."""
    if m.sink_only or not (
        m.cosine >= MISS_MIN_COSINE
        and m.rel_err <= MISS_MAX_ERR
        and 1 / MISS_MAX_RATIO <= m.norm_ratio <= MISS_MAX_RATIO
    ):
        return None
    return -1 if m.norm_ratio < 1 - MISS_NORM_MARGIN else 1 if m.norm_ratio > 1 + MISS_NORM_MARGIN else None


def miss_direction(metrics: Sequence[Metrics]) -> Direction | None:
    """Which way captures that match no training slot miss them, from each pair's metrics on the same
    tokens (the capture configured for a slot against that slot): every pair's :func:`slot_direction`
    the same, over at least :data:`MISS_MIN_SLOTS` pairs; None otherwise."""
    ways = {slot_direction(m) for m in metrics}
    sign = ways.pop() if len(ways) == 1 else None
    if len(metrics) < MISS_MIN_SLOTS or sign is None:
        return None
    ratios, errors, cosines = ([getattr(m, k) for m in metrics] for k in ("norm_ratio", "rel_err", "cosine"))
    return Direction(sign, (min(ratios), max(ratios)), (min(errors), max(errors)), (min(cosines), max(cosines)))


def one_layer_floor(sep: Separation) -> float:
    """The least error a capture one layer from a slot shows, given the separation expected between
    neighbours there (:func:`separation_at`, from the other captures or the depth): one layer's update
    can be :data:`SIDE_SPREAD` times smaller than the next one's."""
    return sep.value / SIDE_SPREAD


def one_layer_apart(errors: Sequence[float], separations: Sequence[Separation]) -> bool:
    """Whether misses of ``errors`` (each capture against its slot, which :func:`miss_direction` found
    neighbour-like) are the distance of neighbouring layers: each at least :func:`one_layer_floor`
    where the miss places its slot; a smaller miss is less than a layer. Within :data:`MISS_MAX_ERR`
    one and two layers overlap (SmolLM2: 21-63 % one layer off, 29-110 % two), so one layer is the
    nearer reading, not a measured distance."""
    return bool(errors) and all(math.isfinite(s.value) and e >= one_layer_floor(s) for e, s in zip(errors, separations))


def what_to_dump(b: int | None, measured: bool) -> str:
    """What to dump to tell B{b} from its neighbours: more tokens when they were captured, else them."""
    return (
        "dump more tokens"
        if measured or b is None
        else f"dump the neighbouring layers B{max(b - 1, 0)} and B{b + 1} or more tokens"
    )
