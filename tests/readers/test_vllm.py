"""The vLLM extract_hidden_states connector reader, with its .lock companion and include_output_tokens."""

from __future__ import annotations

import fcntl
import os

import pytest
import torch

import hsdiff
from hsdiff.readers import scan

from .. import builders as B
from .cli import refusal


def test_vllm_connector_file(tmp_path):
    B.vllm_file(tmp_path, 1, [2, 15, 27])
    caps = scan(tmp_path, "infer").captures
    assert [c.slot for c in caps] == [0, 1, 2]
    assert all(c.origin.format == "vllm" and c.layer is None for c in caps)
    assert torch.equal(caps[1].load(), B.states(1)["bf16"][15])


@pytest.mark.parametrize("include_output_tokens", [False, True])
def test_prompt_or_all_tokens_with_the_lock_beside_are_compared(tmp_path, include_output_tokens):
    infer = B.vllm_file(tmp_path / "i", 1, [2, 15, 27], prompt=18, include_output_tokens=include_output_tokens, lock=True)
    dump = scan(infer, "infer")
    assert not dump.warnings and [c.tokens for c in dump.captures] == [23 if include_output_tokens else 18] * 3
    train = B.specforge(tmp_path / "train", [0, 1, 2], [2, 15, 27])
    r = hsdiff.compare(train, infer, layer_ids=[2, 15, 27], engine="vllm", hidden_size=B.H)
    assert r.verdict == "ok" and r.exit_code == 0 and [s.boundary_index for s in r.slots] == [2, 15, 27]
    assert {s.match.sample for s in r.slots} == {"data_1"}


def test_a_file_vllm_is_still_writing_is_one_line(tmp_path):
    infer = B.vllm_file(tmp_path, 1, [2, 15, 27], lock=True)
    fd = os.open(infer / "req-1.safetensors.lock", os.O_WRONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what the connector holds until save_file returns
        line = refusal(["inspect", str(infer)])
    finally:
        os.close(fd)
    assert "req-1.safetensors" in line and "still writing" in line and "req-1.safetensors.lock is locked" in line
    assert scan(infer, "infer").captures  # once released, the same file reads
