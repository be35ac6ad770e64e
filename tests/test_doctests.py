"""The examples in the docstrings of the pure modules run as written."""

from __future__ import annotations

import doctest
import importlib

import pytest

pytestmark = pytest.mark.core

MODULES = [
    "hsdiff.arrays",
    "hsdiff.rules.conventions",
    "hsdiff.rules.serving",
    "hsdiff.decide",
    "hsdiff.align.separation",
    "hsdiff.configs",
    "hsdiff.ids",
    "hsdiff.request",
    "hsdiff.model.results",
    "hsdiff.errors",
    "hsdiff.extras",
    "hsdiff.engine_log",
    "hsdiff.watch.collapse",
    pytest.param("hsdiff.watch.scrape", marks=pytest.mark.extra("watch")),  # prometheus-client parses the page
    "hsdiff.progress",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_trtllm_two_model_path_moves_the_final_state_last() -> None:
    from hsdiff.rules import conventions as conv

    assert conv.to_boundary([-1, 2, 30], "trtllm", num_layers=61) == [62, 3, 31]
    assert conv.to_boundary([-1, 2, 30], "trtllm", num_layers=61, version="two-model") == [3, 31, 62]
    assert conv.parse_version("trtllm", "tensorrt_llm==two-model") == "two-model"
    assert conv.parse_version("trtllm", None) == "main"


def test_an_id_shifted_past_the_last_layer_is_out_of_range_not_the_final_state() -> None:
    # SGLang <= 0.5.16 adds 1 to every gpt-oss id (sglang==0.5.16 gpt_oss.py set_eagle3_layers_to_capture):
    # id 36 on a 36-layer model asks for a capture index that never runs; it is not the post-norm state,
    # which only TensorRT-LLM's -1 and HF's index L name
    import pytest

    from hsdiff.errors import InputError
    from hsdiff.rules import conventions as conv

    with pytest.raises(InputError, match="boundary 37, outside 0..36"):
        conv.to_boundary([24, 30, 36], "sglang", num_layers=36, model_family="gpt_oss", version="0.5.16")
    assert conv.to_boundary([24, 30, 36], "sglang", num_layers=36, model_family="gpt_oss") == [24, 30, 36]
    assert conv.to_boundary([-1], "trtllm", num_layers=36) == [37]
