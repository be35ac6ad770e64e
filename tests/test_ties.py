"""Choices between candidates whose errors agree up to rounding do not depend on the rounding
(:func:`hsdiff.model.best_of`, :func:`hsdiff.model.ranked`): another CPU's BLAS kernel moves the
last bits of an error, and must not move the sample, offset or capture a report names."""

from __future__ import annotations

import math
import random

from hypothesis import given
from hypothesis import strategies as st

from hsdiff.model import best_of, ranked
from hsdiff.model.results import TIE_REL

# (name, error, tokens compared, offset)
ITEMS = [("a", 1.0004, 9, -52), ("b", 1.0001, 35, 17), ("c", 1.0, 13, 48), ("d", 1.5, 60, 0), ("e", math.nan, 60, 0)]


def _prefer(x: tuple) -> tuple[int, int]:
    return -x[2], abs(x[3])


def test_a_tie_goes_to_more_tokens_then_nearer_offset_then_the_first() -> None:
    assert best_of(ITEMS, lambda x: x[1], _prefer)[0] == "b"
    same = [("x", 0.5, 10, 3), ("y", 0.5, 10, -3), ("z", 0.5, 10, 1)]
    assert best_of(same, lambda x: x[1], _prefer)[0] == "z"
    assert best_of(same[:2], lambda x: x[1], _prefer)[0] == "x"


def test_a_real_difference_is_not_a_tie() -> None:
    items = [("far", 1.0 + 3 * TIE_REL, 100, 0), ("near", 1.0, 1, 9)]
    assert best_of(items, lambda x: x[1], _prefer)[0] == "near"


def test_nan_counts_as_infinite_and_all_nan_still_chooses() -> None:
    assert best_of(ITEMS[3:], lambda x: x[1], _prefer)[0] == "d"
    assert best_of([("p", math.nan, 1, 0), ("q", math.inf, 2, 0)], lambda x: x[1], _prefer)[0] == "q"


@given(st.lists(st.floats(0.001, 3.0), min_size=1, max_size=12), st.integers(0, 2**31))
def test_rounding_noise_does_not_change_the_choice_or_the_order(errs: list[float], seed: int) -> None:
    """Errors moved by 1e-6 relative (far more than float32 sums over a row move between kernels)
    give the same choice and the same ranking, unless an error sits within that noise of a tie's edge."""
    rng = random.Random(seed)
    items = [(i, e, rng.randrange(1, 50), rng.randrange(-5, 5)) for i, e in enumerate(errs)]
    noisy = [(i, e * (1 + rng.uniform(-1e-6, 1e-6)), t, o) for i, e, t, o in items]
    edges = [e * (1 + TIE_REL) for e in errs]
    if any(abs(a - b) <= 3e-6 * max(a, b) for a in edges for b in errs):
        return  # an error on the edge of a tie window: no rule can make that robust
    assert best_of(items, lambda x: x[1], _prefer)[0] == best_of(noisy, lambda x: x[1], _prefer)[0]
    assert [x[0] for x in ranked(items, lambda x: x[1], _prefer)] == [
        x[0] for x in ranked(noisy, lambda x: x[1], _prefer)
    ]


def test_ranked_starts_with_the_best_and_keeps_every_item() -> None:
    got = ranked(ITEMS, lambda x: x[1], _prefer)
    assert got[0] == best_of(ITEMS, lambda x: x[1], _prefer)
    assert sorted(x[0] for x in got) == sorted(x[0] for x in ITEMS)
    assert [x[0] for x in got][-2:] == ["d", "e"]
