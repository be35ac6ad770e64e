"""`hsdiff ids`: the same layers in another convention, and round trips between every pair of engines."""

from __future__ import annotations

import itertools

import pytest
from click.testing import CliRunner

from hsdiff.cli import cli
from hsdiff.ids import translate_ids
from hsdiff.rules import conventions as conv

pytestmark = pytest.mark.core


def ids(*args: str):
    return CliRunner().invoke(cli, ["ids", *args])


def test_sglang_to_vllm_on_the_seed_target():
    r = ids("2,30,58", "--from", "sglang", "--to", "vllm", "--num-layers", "61")
    assert r.exit_code == 0, r.output
    assert r.stdout == "3,31,59\n"


@pytest.mark.parametrize(("version", "want"), [("0.5.12", "3,31,59"), ("0.5.23", "2,30,58")])
def test_the_answer_names_the_versions_it_assumed(version, want):
    """stdout stays one line of ids for scripts; stderr says which engine versions and rules they rest on
    (SGLang's DeepSeek-family rule changed at 0.5.13)."""
    r = ids(
        "2,30,58",
        "--from",
        "sglang",
        "--to",
        "vllm",
        "--num-layers",
        "61",
        "--model-family",
        "kimi_k25",
        "--engine-version",
        f"sglang=={version}",
    )
    assert r.exit_code == 0, r.output
    assert r.stdout == want + "\n"
    assert f"SGLang {version}, rule:" in r.stderr and "vLLM 0.33" in r.stderr


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
    there = ids(
        ",".join(map(str, start)), "--from", "sglang", "--to", other, "--num-layers", str(L), "--model-family", family
    )
    assert there.exit_code == 0, there.output
    assert there.stdout.strip() == ",".join(
        map(str, conv.default_boundaries(L) if other != "trtllm" else [b - 1 for b in conv.default_boundaries(L)])
    )
    back = ids(
        there.stdout.strip(), "--from", other, "--to", "sglang", "--num-layers", str(L), "--model-family", family
    )
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
    assert "cannot capture B61 (the last layer's output before the final norm)" in r.stderr
    assert "B3" not in r.stderr and "vLLM (id 61)" in r.stderr  # only the uncapturable layer, and what captures it
    assert translate_ids([3, 31, 61], "vllm", "sglang", num_layers=61).line() == "2,30,?"


def test_deepseek_rule_writes_b1_after_another_id():
    # sglang==0.5.23 deepseek_v2.py:3470-3473 (+1 only when ids[0] == 1), :3176-3194 (captured in layer order)
    r = ids(
        "1,24,44", "--from", "vllm", "--to", "sglang", "--num-layers", "61", "--model-family", "deepseek", "--explain"
    )
    assert r.exit_code == 0 and r.stdout.strip() == "24,1,44"
    assert "id 24 first" in r.stderr and "B[2, 25, 45]" in r.stderr  # why not the ascending list
    assert "vLLM id 1 → B1: output of layer 0 (input of layer 1) → SGLang id 1" in r.stderr
    back = ids("24,1,44", "--from", "sglang", "--to", "vllm", "--num-layers", "61", "--model-family", "deepseek")
    assert back.exit_code == 0 and back.stdout.strip() == "1,24,44"
    alone = ids("1", "--from", "vllm", "--to", "sglang", "--num-layers", "61", "--model-family", "deepseek")
    assert alone.exit_code == 1 and "B1 (the output of layer 0) cannot be captured on its own" in alone.stderr


def test_the_final_post_norm_state_is_named_in_words():
    r = ids("-1,2,30", "--from", "trtllm", "--to", "vllm", "--num-layers", "61", "--explain")
    assert r.exit_code == 1
    assert "B62" not in r.stderr and "final hidden state after the norm" in r.stderr
    assert "TensorRT-LLM id 2 → B3: output of layer 2 (input of layer 3) → vLLM id 3" in r.stderr


def test_an_order_the_target_engine_re_sorts_exits_1():
    # Hugging Face keeps the list order; TensorRT-LLM's one-model path sorts with the final state (-1) first
    r = ids("2,30,61", "--from", "hf", "--to", "trtllm", "--num-layers", "61")
    assert r.exit_code == 1 and r.stdout == ""
    assert "no id list reproduces the training order" in r.stderr and "(2, 0, 1)" in r.stderr
    assert "configuring ids [-1, 1, 29]" in r.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("2,x,58", "--from", "sglang", "--to", "vllm"),
        ("2,30,58", "--from", "sglang", "--to", "nope"),
        ("2,30,70", "--from", "sglang", "--to", "vllm", "--num-layers", "61"),
        ("24,30,36", "--from", "sglang", "--to", "vllm", "--model-family", "gpt-oss"),  # needs --num-layers
    ],
)
def test_bad_input_exits_2(args):
    assert ids(*args).exit_code == 2


def test_two_versions_of_one_engine_are_refused_not_silently_the_last():
    r = ids(
        "2,30,58",
        "--from",
        "sglang",
        "--to",
        "sglang",
        "--model-family",
        "kimi_k25",
        "--num-layers",
        "61",
        "--engine-version",
        "sglang==0.5.12",
        "--engine-version",
        "sglang==0.5.23",
    )
    assert r.exit_code == 2 and "names sglang twice" in r.output and "Traceback" not in r.output


def test_an_id_below_the_embeddings_is_refused_without_the_layer_count():
    """SGLang >= 0.5.13 reads DeepSeek-family ids as they are: -1 names no layer, whatever L is; the
    error names the rule that read it."""
    r = ids("-1,2,30", "--from", "sglang", "--to", "vllm", "--model-family", "kimi_k25")
    assert r.exit_code == 2 and "boundary -1, below 0" in r.output and "DeepSeek rule" in r.output
