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
    infer = B.vllm_file(
        tmp_path / "i", 1, [2, 15, 27], prompt=18, include_output_tokens=include_output_tokens, lock=True
    )
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


@pytest.mark.parametrize("compress", [True, False])
def test_the_online_connector_s_prefill_and_decode_files_are_compared(tmp_path, compress):
    infer = B.vllm_online(tmp_path / "i", 1, [2, 15, 27], prompt=18, compress=compress, lora="my-adapter")
    dump = scan(infer, "infer")
    assert not dump.warnings and {c.group for c in dump.captures} == {"req-1", "req-1_decode"}
    decode = [c for c in dump.captures if c.group == "req-1_decode"]
    assert [c.tokens for c in decode] == [5, 5, 5] and decode[0].token_ids == tuple(
        B.states(1)["input_ids"][18:23].tolist()
    )
    train = B.specforge(tmp_path / "train", [0, 1, 2], [2, 15, 27])
    r = hsdiff.compare(train, infer, layer_ids=[2, 15, 27], engine="vllm", hidden_size=B.H)
    assert r.verdict == "ok" and r.exit_code == 0 and [s.boundary_index for s in r.slots] == [2, 15, 27]


def test_a_zstd_bomb_and_a_damaged_zstd_file_are_one_line(tmp_path):
    import zstandard

    chunks = zstandard.ZstdCompressor(level=19).compressobj()
    zeros = bytes(1 << 20)
    packed = b"".join(chunks.compress(zeros) for _ in range(80)) + chunks.flush()  # 80 MiB of zeros in a few KB
    (tmp_path / "bomb").mkdir()
    (tmp_path / "bomb" / "req.safetensors.zst").write_bytes(packed)
    line = refusal(["inspect", str(tmp_path / "bomb")])
    assert "req.safetensors.zst" in line and "zstd expands more than 100x" in line
    B.vllm_online(tmp_path / "cut", 1, [2, 15, 27], prompt=18)
    (f,) = (tmp_path / "cut" / "base").glob("req-1.safetensors.zst")
    f.write_bytes(f.read_bytes()[:200])
    line = refusal(["inspect", str(f)])
    assert "req-1.safetensors.zst" in line and "zstd stream is damaged or truncated" in line
