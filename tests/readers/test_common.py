"""Helpers shared by the readers: layer numbers from names."""

from __future__ import annotations

import pytest

from hsdiff.readers._common import layer_from_name

pytestmark = pytest.mark.core


@pytest.mark.parametrize(
    "name,expected",
    [
        ("hidden_states.layer_3", 3),
        ("layers.31", 31),
        ("h59", 59),
        ("layer_id=12", 12),
        ("blk.7.out", 7),
        ("aux_hidden_state", None),
        ("hs[2]", 2),
        ("model.layers.40.output", 40),
    ],
)
def test_layer_from_name(name, expected):
    assert layer_from_name(name) == expected
