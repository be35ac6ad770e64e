"""The number grammar of printed tensors (:mod:`hsdiff.readers.debuglog.numbers`): every float
notation, and refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hsdiff.readers import debuglog

pytestmark = pytest.mark.core


@pytest.mark.parametrize(
    "text, values, rows, cols",
    [
        (
            "[0.0295, -0.0114, -0.017, -0.0179, -0.0183]",
            [[0.0295, -0.0114, -0.017, -0.0179, -0.0183]],
            (0,),
            (0, 1, 2, 3, 4),
        ),
        (
            "[ 2.9e-02 -1.1E-02  3. -4.  nan inf -inf ]",
            [[0.029, -0.011, 3.0, -4.0, math.nan, math.inf, -math.inf]],
            (0,),
            tuple(range(7)),
        ),
        ("[[1.5, 2.0, ..., 3.0], [4.0, 5.0, ..., 6.0]]", [[1.5, 2.0, 3.0], [4.0, 5.0, 6.0]], (0, 1), (0, 1, -1)),
        ("[[1., 2.],\n ...,\n [5., 6.]]", [[1.0, 2.0], [5.0, 6.0]], (0, -1), (0, 1)),
        ("[.5, +1.25, 1e3, -.75,]", [[0.5, 1.25, 1000.0, -0.75]], (0,), (0, 1, 2, 3)),
    ],
)
def test_parse_values_reads_every_float_notation(text, values, rows, cols):
    got = debuglog.parse_values(text)
    assert got is not None
    v, r, c = got
    np.testing.assert_array_equal(v, np.asarray(values, dtype=float))
    assert r == rows and c == cols


@pytest.mark.parametrize(
    "text", ["[2026-11-30 01:15:02 TP0]", "[Dumper, rank=0]", "[1, 2, 3", "no list", "[00:01<00:00]"]
)
def test_parse_values_refuses_what_is_not_a_list_of_numbers(text):
    assert debuglog.parse_values(text) is None
