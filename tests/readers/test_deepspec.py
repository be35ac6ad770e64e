"""The DeepSpec target-cache reader: manifest, packed index and memory-mapped shards, as DeepSpec writes them."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import hsdiff
from hsdiff.readers import scan

from .. import builders as B
from .cli import inspected, refusal


def test_the_cache_is_read_labelled_and_its_layers_identified(tmp_path):
    cache = B.deepspec_cache(tmp_path / "cache", max_shard_bytes=200_000)  # one sample per shard
    dump = scan(cache, "train")
    assert not dump.warnings  # the shards are read through the index, not reported as skipped
    assert [c.group for c in dump.captures] == ["sample-0", "sample-1"]
    cap = dump.captures[1]
    assert cap.origin.format == "deepspec" and cap.width == 1728 and cap.final_width == 576 and cap.tokens == 52
    assert [x.boundary for x in cap.slot_layers] == [2, 15, 27] and cap.slot_layers[0].source == "claimed"
    real = torch.load(B.REAL / "modelopt" / "example-1.pt", weights_only=True)
    assert cap.token_ids == tuple(real["input_ids"].tolist())
    np.testing.assert_array_equal(cap.load().float().numpy(), real["aux_hidden_states"].bfloat16().float().numpy())
    assert cap.read_rows(0, 3).shape == (3, 1728)
    r = hsdiff.compare(cache, B.REAL / "sglang-dumper", layer_ids=[1, 14, 26])
    assert r.verdict == "ok" and r.exit_code == 0 and [s.boundary_index for s in r.slots] == [2, 15, 27]
    r = hsdiff.compare(cache, B.REAL / "sglang-dumper", layer_ids=[-1, 1, 14])
    assert r.verdict == "mismatch" and r.recommended.ids == (1, 14, 26)


def test_inspect_names_the_cache(tmp_path):
    summary = inspected(B.deepspec_cache(tmp_path), "deepspec", "version 2", "target_layer_ids [1, 14, 26]")
    assert summary.startswith("DeepSpec target cache: 2 samples, 52–61 tokens; 3 slots × 576, labelled B[2, 15, 27]")


@pytest.mark.parametrize(
    "damage,words",
    [
        ("version", "'version': 1"),
        ("shard", "shard path"),
        ("index", "bytes for 2 records of 56"),
        ("offset", "points past the end of shard-00000.bin"),
    ],
)
def test_a_cache_of_another_version_or_damaged_is_one_line(tmp_path, damage, words):
    cache = B.deepspec_cache(tmp_path, version=1 if damage == "version" else 2)
    if damage == "shard":
        m = json.loads((cache / "manifest.json").read_text())
        m["shards"][0]["file_name"] = "../elsewhere.bin"
        (cache / "manifest.json").write_text(json.dumps(m))
    elif damage == "index":
        (cache / "samples.idx").write_bytes((cache / "samples.idx").read_bytes()[:-8])
    elif damage == "offset":
        idx = bytearray((cache / "samples.idx").read_bytes())
        idx[40:48] = (10**9).to_bytes(8, "little")  # sample 0's target_hidden_states offset
        (cache / "samples.idx").write_bytes(bytes(idx))
    line = refusal(["inspect", str(cache)])
    assert ("manifest.json" in line or "samples.idx" in line) and words in line


def test_audit_refuses_the_packed_cache_with_one_line(tmp_path):
    line = refusal(["audit", str(B.deepspec_cache(tmp_path)), "--checkpoint", str(tmp_path.parent / "ck.jsonl")])
    assert "samples.idx makes this a DeepSpec target cache" in line and "one sample per file" in line


def test_a_shard_that_cannot_be_read_is_one_line(tmp_path, monkeypatch):
    cache = B.deepspec_cache(tmp_path)
    real = np.fromfile

    def denying(file, *args, **kwargs):  # what reading a shard the user may not read raises (root may read any)
        if str(file).endswith(".bin"):
            raise PermissionError(13, "Permission denied", str(file))
        return real(file, *args, **kwargs)

    monkeypatch.setattr(np, "fromfile", denying)
    line = refusal(["inspect", str(cache)])
    assert "shard-00000.bin" in line and "cannot read (Permission denied)" in line
