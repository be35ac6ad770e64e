"""`hsdiff ids`: the same layers in another convention, and round trips between every pair of engines."""

from __future__ import annotations

import itertools

import pytest
from click.testing import CliRunner

from hsdiff import conventions as conv
from hsdiff.cli import cli
from hsdiff.ids import translate_ids


def ids(*args: str):
    return CliRunner().invoke(cli, ["ids", *args])


def test_sglang_to_vllm_on_the_seed_target():
    r = ids("2,30,58", "--from", "sglang", "--to", "vllm", "--num-layers", "61")
    assert r.exit_code == 0, r.output
    assert r.stdout == "3,31,59\n"


@pytest.mark.parametrize("L", [30, 61])
@pytest.mark.parametrize("src,dst", list(itertools.product(conv.ENGINES, repeat=2)))
def test_defaults_round_trip_between_every_pair(L, src, dst):
    start = conv.default_ids(src, L)
    there = ids(",".join(map(str, start)), "--from", src, "--to", dst, "--num-layers", str(L))
    assert there.exit_code == 0, there.output
    assert there.stdout.strip() == ",".join(map(str, conv.default_ids(dst, L)))
    back = ids(there.stdout.strip(), "--from", dst, "--to", src, "--num-layers", str(L))
    assert back.exit_code == 0, back.output
    assert back.stdout.strip() == ",".join(map(str, start))


@pytest.mark.parametrize("family", ["deepseek", "gpt-oss", "deepseek-legacy"])
@pytest.mark.parametrize("L", [30, 61])
@pytest.mark.parametrize("other", ["vllm", "trtllm", "hf"])
def test_defaults_round_trip_under_sglang_family_rules(family, L, other):
    start = conv.default_ids("sglang", L, family)
    there = ids(",".join(map(str, start)), "--from", "sglang", "--to", other, "--num-layers", str(L), "--model-family", family)
    assert there.exit_code == 0, there.output
    assert there.stdout.strip() == ",".join(map(str, conv.default_boundaries(L) if other != "trtllm"
                                                else [b - 1 for b in conv.default_boundaries(L)]))
    back = ids(there.stdout.strip(), "--from", other, "--to", "sglang", "--num-layers", str(L), "--model-family", family)
    assert back.stdout.strip() == ",".join(map(str, start))


def test_explain_says_which_tensor_each_id_names():
    r = ids("-1,2,30", "--from", "sglang", "--to", "vllm", "--num-layers", "61", "--explain")
    assert r.exit_code == 0
    assert r.stdout == "0,3,31\n"
    assert "SGLang id -1 → B0: embeddings" in r.stderr
    assert "SGLang id 2 → B3: output of layer 2" in r.stderr and "vLLM id 3" in r.stderr


def test_a_layer_the_target_engine_cannot_capture_exits_1():
    r = ids("3,31,61", "--from", "vllm", "--to", "sglang", "--num-layers", "61")
    assert r.exit_code == 1
    assert r.stdout == ""
    assert "SGLang cannot capture B[61]" in r.stderr
    assert translate_ids([3, 31, 61], "vllm", "sglang", num_layers=61).line() == "2,30,?"


@pytest.mark.parametrize("args", [
    ("2,x,58", "--from", "sglang", "--to", "vllm"),
    ("2,30,58", "--from", "sglang", "--to", "nope"),
    ("2,30,70", "--from", "sglang", "--to", "vllm", "--num-layers", "61"),
    ("24,30,36", "--from", "sglang", "--to", "vllm", "--model-family", "gpt-oss"),  # needs --num-layers
])
def test_bad_input_exits_2(args):
    assert ids(*args).exit_code == 2
