"""`hsdiff request`: request bodies that replay a training sample's exact token ids."""

from __future__ import annotations

import json
import shlex

import pytest
import torch
from click.testing import CliRunner

from hsdiff.cli import cli
from hsdiff.request import request_body

from . import builders as B

SAMPLE = B.SEED / "train" / "rows_0-2000" / "data_1.ckpt"


def run(*args: str):
    return CliRunner().invoke(cli, ["request", *args])


def sample_ids() -> list[int]:
    return torch.load(SAMPLE, weights_only=True)["input_ids"].tolist()


def test_sglang_generate_body_carries_the_exact_token_ids():
    r = run(str(SAMPLE))
    assert r.exit_code == 0, r.output
    body = json.loads(r.stdout)
    assert body == {"input_ids": sample_ids(), "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
    assert len(body["input_ids"]) == 25
    assert "--disable-radix-cache" in r.stderr and "/generate" in r.stderr


def test_vllm_completions_body_takes_the_ids_as_prompt():
    r = run(str(B.SEED / "train"), "--sample", "data_1", "--engine", "vllm", "--model", "seed-target")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"model": "seed-target", "prompt": sample_ids(), "max_tokens": 1, "temperature": 0}
    assert "--no-enable-prefix-caching" in r.stderr


def test_curl_command_posts_to_the_endpoint():
    r = run(str(SAMPLE), "--url", "http://localhost:30000")
    argv = shlex.split(r.stdout)
    assert argv[:3] == ["curl", "-sS", "http://localhost:30000/generate"]
    assert json.loads(argv[argv.index("-d") + 1])["input_ids"] == sample_ids()
    r = run(str(SAMPLE), "--engine", "vllm", "--url", "http://h:8000/v1/completions")
    assert shlex.split(r.stdout)[2] == "http://h:8000/v1/completions"


def test_json_input_and_other_formats(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps({"input_ids": [5, 6, 7]}))
    assert json.loads(run(str(tmp_path / "s.json")).stdout)["input_ids"] == [5, 6, 7]
    B.modelopt_file(tmp_path / "mo", 2, [2, 15, 27])
    ids = json.loads(run(str(tmp_path / "mo")).stdout)["input_ids"]
    assert ids == B.states(2)["input_ids"].tolist()


@pytest.mark.parametrize(
    "args",
    [
        (str(B.SEED / "train"),),  # two samples: which one?
        (str(B.SEED / "train"), "--sample", "data_9"),
        ("/nonexistent/sample.ckpt",),
    ],
)
def test_bad_input_exits_2(args):
    r = run(*args)
    assert r.exit_code == 2
    assert "data_0" in r.output or "no such file" in r.output


def test_library():
    assert request_body([1, 2], "vllm") == {"prompt": [1, 2], "max_tokens": 1, "temperature": 0}
