"""Labels read around a print (:mod:`hsdiff.readers.debuglog.labels`): norms and token/column positions."""

from __future__ import annotations

import pytest

from .logs import read_text


@pytest.mark.parametrize(
    "line, norm",
    [
        ("h first5=[0.1, 0.2, 0.3, 0.4, 0.5] norm=12.5", 12.5),
        ("h first5=[0.1, 0.2, 0.3, 0.4, 0.5] norm(dim=-1).mean()=3.25", 3.25),
        ("h norm: tensor(1.0312, device='cuda:0', dtype=torch.bfloat16) first5=[0.1, 0.2, 0.3, 0.4, 0.5]", 1.0312),
        ("h ||x||=7e2 first5=[0.1, 0.2, 0.3, 0.4, 0.5]", 700.0),
    ],
)
def test_norm_forms(tmp_path, line, norm):
    (c,) = read_text(tmp_path, line + "\n")
    assert c.norm == pytest.approx(norm)


@pytest.mark.parametrize(
    "line, row, cols",
    [
        ("h[5, :4]=[0.1, 0.2, 0.3, 0.4]", (5,), (0, 1, 2, 3)),
        ("h[-1, -4:]=[0.1, 0.2, 0.3, 0.4]", (-1,), (-4, -3, -2, -1)),
        ("aux_hidden_states[2][3, 100:104]=[0.1, 0.2, 0.3, 0.4]", (3,), (100, 101, 102, 103)),
        ("token=7 values=[0.1, 0.2, 0.3, 0.4]", (7,), (0, 1, 2, 3)),
        ("h.flatten()[-4:]=[0.1, 0.2, 0.3, 0.4]", (-1,), (-4, -3, -2, -1)),
    ],
)
def test_positions_from_index_expressions(tmp_path, line, row, cols):
    (c,) = read_text(tmp_path, line + "\n")
    assert c.observation.rows == row and c.observation.cols == cols


def test_positions_printed_beside_a_decode_capture(tmp_path):
    text = (
        "positions=tensor([17, 18, 19], device='cuda:0') aux_hidden_states[0] h[:, :4]="
        "[[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8], [0.9, 1.0, 1.1, 1.2]]\n"
    )
    (c,) = read_text(tmp_path, text)
    assert c.observation.rows == (17, 18, 19)
