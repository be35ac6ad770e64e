"""The convention model: each row of docs/conventions.md, as code."""

from __future__ import annotations

import itertools

import pytest

from hsdiff.errors import InputError
from hsdiff.rules import conventions as conv

pytestmark = pytest.mark.core


@pytest.mark.parametrize(
    "ids,engine,family,L,expected",
    [
        ([-1, 2, 30], "sglang", None, 61, [0, 3, 31]),  # the seed story's misconfiguration
        ([2, 30, 58], "sglang", None, 61, [3, 31, 59]),  # the fix
        ([1, 14, 26], "sglang", "qwen3", 30, [2, 15, 27]),
        ([2, 30, 58], "sglang", "kimi_k25", 61, [2, 30, 58]),  # PR #25454: as-is unless ids[0] == 1
        ([1, 29, 57], "sglang", "deepseek", 61, [2, 30, 58]),  # ... +1 when ids[0] == 1
        ([2, 30, 58], "sglang", "deepseek-legacy", 61, [3, 31, 59]),  # before PR #25454
        ([24, 30, 36], "sglang", "gpt-oss", 36, [24, 30, 36]),  # PR #32334: as-is when max == L
        ([24, 30, 35], "sglang", "gpt-oss", 36, [25, 31, 36]),
        ([3, 31, 59], "vllm", None, 61, [3, 31, 59]),
        ([59, 3, 31, 31], "vllm", None, 61, [3, 31, 59]),  # vLLM sorts and de-duplicates
        ([2, 30, 58], "trtllm", None, 61, [3, 31, 59]),
        ([1, 14, 26], "modelopt", None, 30, [2, 15, 27]),
        ([1, 29, 57], "specforge", None, 61, [2, 30, 58]),
        ([2, 30, 58], "eagle", None, 61, [2, 30, 58]),
        ([2, 15, 27], "hf", None, 30, [2, 15, 27]),
    ],
)
def test_to_boundary(ids, engine, family, L, expected):
    assert conv.to_boundary(ids, engine, num_layers=L, model_family=family) == expected


def test_engines_capture_in_ascending_order_but_hf_keeps_the_list():
    assert conv.to_boundary([30, 2, 58], "sglang") == [3, 31, 59]
    assert conv.to_boundary([27, 2, 15], "hf") == [27, 2, 15]


@pytest.mark.parametrize("L", [30, 61])
def test_defaults_name_the_same_tensors_everywhere(L):
    expected = [2, L // 2, L - 3]
    for engine in conv.ENGINES:
        ids = conv.default_ids(engine, L)
        assert conv.to_boundary(ids, engine, num_layers=L) == expected, engine
    assert conv.default_ids("sglang", 61) == [1, 29, 57]
    assert conv.default_ids("vllm", 61) == [2, 30, 58]


@pytest.mark.parametrize("L", [30, 61])
def test_translation_round_trips_between_every_pair(L):
    for src, dst in itertools.permutations(conv.ENGINES, 2):
        ids = conv.default_ids(src, L)
        there = conv.translate(ids, src, dst, num_layers=L)
        assert None not in there, (src, dst)
        back = conv.translate(there, dst, src, num_layers=L)  # type: ignore[arg-type]
        assert back == ids, (src, dst)


def test_uncapturable_boundaries_come_back_as_none():
    # SGLang's llama loop captures before each layer: nothing runs after the last one
    assert conv.from_boundary([2, 15, 30], "sglang", num_layers=30) == [1, 14, None]
    assert conv.from_boundary([2, 15, 30], "vllm", num_layers=30) == [2, 15, 30]
    assert conv.from_boundary([24, 30, 36], "sglang", num_layers=36, model_family="gpt-oss") == [24, 30, 36]
    # on SGLang's deepseek rule id 1 first adds 1 to every id (sglang==0.5.23 deepseek_v2.py:3470-3473), but the
    # engine captures in layer order whatever the list's order (:3176-3194): B1 is written after another id ...
    assert conv.from_boundary([1, 30, 58], "sglang", num_layers=61, model_family="deepseek") == [30, 1, 58]
    assert conv.to_boundary([30, 1, 58], "sglang", num_layers=61, model_family="deepseek") == [1, 30, 58]
    # ... and only B1 on its own can be written neither way
    assert conv.from_boundary([1], "sglang", num_layers=61, model_family="deepseek") == [None]


def test_deepseek_recommendation_round_trips():
    for bs in ([2, 31, 59], [3, 31, 59], [0, 3, 31], [1, 31, 59], [1, 2, 3]):
        ids = conv.from_boundary(bs, "sglang", num_layers=61, model_family="kimi_k25")
        assert conv.to_boundary(ids, "sglang", num_layers=61, model_family="kimi_k25") == bs  # type: ignore[arg-type]


def test_describe_boundary():
    assert conv.describe_boundary(0) == "embeddings (input of layer 0)"
    assert conv.describe_boundary(3) == "output of layer 2 (input of layer 3)"
    assert conv.describe_boundary(61, 61) == "output of the last layer 60, before the final norm"


def test_family_from_config():
    assert conv.family_from_config({"model_type": "kimi_k25"}) == "deepseek"
    assert conv.family_from_config({"model_type": "deepseek_v3"}) == "deepseek"
    assert conv.family_from_config({"model_type": "gpt_oss"}) == "gpt-oss"
    assert conv.family_from_config({"model_type": "qwen3"}) == "llama"


def test_bad_input_names_the_choices():
    with pytest.raises(InputError, match="sglang, vllm"):
        conv.rule("tensorrt")
    with pytest.raises(InputError, match="llama"):
        conv.normalize_family("mamba")
    with pytest.raises(InputError, match="outside 0..61"):
        conv.to_boundary([2, 30, 70], "sglang", num_layers=61)
    with pytest.raises(InputError, match="not a list of integers"):
        conv.parse_ids("2,x,58")
    assert conv.parse_ids("[-1, 2, 30]") == [-1, 2, 30]
    assert conv.parse_ids(" 2 30 58") == [2, 30, 58]
