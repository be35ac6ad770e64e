"""The examples in the docstrings of the pure modules run as written."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["hsdiff.conventions", "hsdiff.decide", "hsdiff.configs", "hsdiff.ids", "hsdiff.request", "hsdiff.model.results"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_trtllm_two_model_path_moves_the_final_state_last() -> None:
    from hsdiff import conventions as conv

    assert conv.to_boundary([-1, 2, 30], "trtllm", num_layers=61) == [62, 3, 31]
    assert conv.to_boundary([-1, 2, 30], "trtllm", num_layers=61, version="two-model") == [3, 31, 62]
    assert conv.parse_version("trtllm", "tensorrt_llm==two-model") == "two-model"
    assert conv.parse_version("trtllm", None) == "main"
