"""Every reader, on files written the way the real tools write them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from hsdiff.errors import FormatError, InputError
from hsdiff.readers import read_file, scan
from hsdiff.readers._common import ReadContext, layer_from_name
from hsdiff.readers.sglang_dumper import parse_tags

from . import builders as B


def test_modelopt_real_files_written_by_modelopt():
    dump = scan(B.REAL / "modelopt", "train")
    assert [c.origin.format for c in dump.captures] == ["modelopt", "modelopt"]
    first = dump.captures[0]
    assert first.concat and first.width == 1728 and first.group == "example-0"
    assert first.token_ids is not None and len(first.token_ids) == 61
    assert first.load().shape == (61, 1728)


def test_sglang_dumper_real_directory_written_by_sglang():
    dump = scan(B.REAL / "sglang-dumper", "infer")
    assert len(dump.captures) == 30
    by_b = {c.boundary: c for c in dump.captures}
    assert sorted(by_b) == list(range(30))
    assert by_b[15].layer.source == "tag" and by_b[15].dtype == "bfloat16"
    assert by_b[15].load().shape == (61, 576)


def test_sglang_layer_ids_can_count_outputs():
    dump = scan(B.REAL / "sglang-dumper", "infer", index="output")
    assert sorted(c.boundary for c in dump.captures) == list(range(1, 31))


def test_specforge_plain_and_gzipped(tmp_path):
    B.specforge(tmp_path / "a", [0, 1], [2, 15, 27])
    B.specforge(tmp_path / "b", [2], [2, 15, 27], gz=True)
    a = scan(tmp_path / "a", "train")
    assert [c.group for c in a.captures] == ["data_0", "data_1"]
    assert all(c.concat and c.width == 3 * B.H for c in a.captures)
    b = scan(tmp_path / "b", "train")
    (cap,) = b.captures
    assert cap.origin.format == "specforge" and cap.origin.path.endswith("data_2.ckpt.gz")
    # the gzip member is decompressed to a private temp file that is already gone; data still loads
    assert torch.equal(cap.load(), B.concat(2, [2, 15, 27]))
    assert list((tmp_path / "b" / "rows_0-2000").iterdir()) == [tmp_path / "b" / "rows_0-2000" / "data_2.ckpt.gz"]


def test_eagle_ge_data(tmp_path):
    s = B.states(0)
    torch.save({"input_ids": s["input_ids"], "hidden_state": s["fp32"][B.L][None], "loss_mask": torch.ones(3)},
               tmp_path / "data_0.ckpt")
    (cap,) = scan(tmp_path, "train").captures
    assert cap.origin.format == "eagle" and cap.post_norm and cap.width == B.H


def test_vllm_connector_file(tmp_path):
    B.vllm_file(tmp_path, 1, [2, 15, 27])
    caps = scan(tmp_path, "infer").captures
    assert [c.slot for c in caps] == [0, 1, 2]
    assert all(c.origin.format == "vllm" and c.layer is None for c in caps)
    assert torch.equal(caps[1].load(), B.states(1)["bf16"][15])


def test_sglang_dumper_replicated_ranks_collapse(tmp_path):
    B.sglang_dump(tmp_path, 0, [3, 16, 28], ranks=2)
    (cap,) = scan(tmp_path, "infer").captures
    assert cap.rank is None and cap.width == 3 * B.H
    assert cap.token_ids == tuple(B.states(0)["input_ids"].tolist())


def test_sglang_dumper_disagreeing_ranks_are_reported(tmp_path):
    B.sglang_dump(tmp_path, 0, [3], ranks=2, concat_slots=True)
    exp = next(tmp_path.iterdir())
    f = exp / "step=0___rank=1___dump_index=1___name=aux_hidden_states___recompute_status=disabled.pt"
    obj = torch.load(f, weights_only=True)
    obj["value"] = obj["value"] * 1.5
    torch.save(obj, f)
    dump = scan(tmp_path, "infer")
    assert len(dump.captures) == 1
    assert any("ranks disagree" in w for w in dump.warnings)


def test_sglang_dumper_older_format_raw_tensor(tmp_path):
    d = tmp_path / "sglang_dump_1700000000"
    d.mkdir()
    torch.save(B.states(0)["bf16"][5].clone(), d / "forward_pass_id=3___rank=0___name=layer_input___layer_id=5___dump_index=7.pt")
    (cap,) = scan(tmp_path, "infer").captures
    assert cap.boundary == 5 and cap.group.endswith("step=3")


def test_per_layer_tensors_in_every_container(tmp_path):
    s = B.states(0)["bf16"]
    save_file({"hidden_states.layer_3": s[3].contiguous(), "hidden_states.layer_31": s[16].contiguous()},
              str(tmp_path / "caps.safetensors"))
    np.save(tmp_path / "h59.npy", s[20].float().numpy())
    np.savez(tmp_path / "more.npz", **{"layers.7": s[7].float().numpy()})
    torch.save({"layers.9": s[9].clone()}, tmp_path / "more.pth")
    caps = scan(tmp_path, "infer").captures
    got = sorted((c.origin.path, c.boundary) for c in caps)
    assert got == [("caps.safetensors", 3), ("caps.safetensors", 31), ("h59.npy", 59), ("more.npz", 7), ("more.pth", 9)]


def test_hf_stack_and_tuple(tmp_path):
    s = B.states(0)
    save_file({"hidden_states": s["fp32"].contiguous(), "input_ids": s["input_ids"]}, str(tmp_path / "stack.safetensors"),
              metadata={"index": "boundary"})
    caps = scan(tmp_path / "stack.safetensors", "train").captures
    assert [c.boundary for c in caps] == list(range(31))  # B30 pre-norm: metadata says boundary
    torch.save({"hidden_states": tuple(s["fp32"][i].clone() for i in range(31))}, tmp_path / "tuple.pt")
    caps = scan(tmp_path / "tuple.pt", "train").captures
    assert [c.boundary for c in caps][:30] == list(range(30))
    assert caps[30].post_norm and caps[30].boundary is None  # HF's last entry is post-norm


def test_detection_is_by_content_not_suffix(tmp_path):
    s = B.states(0)
    torch.save({"input_ids": s["input_ids"], "aux_hidden_state": B.concat(0, [2, 15, 27])[None].clone(),
                "loss_mask": torch.ones(3), "hidden_state": s["fp32"][30][None].clone()}, tmp_path / "weird.bin")
    (cap,) = scan(tmp_path, "train").captures
    assert cap.origin.format == "specforge"


def test_unsafe_pickle_is_refused_and_not_executed(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            import os

            return (os.system, (f"touch {marker}",))

    torch.save({"aux_hidden_state": torch.zeros(2, 2), "x": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(FormatError, match="refused to load.*os.system|refused to load.*posix.system"):
        scan(tmp_path / "evil.pt", "train")
    assert not marker.exists()


def test_empty_and_missing_inputs(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        scan(tmp_path / "nope", "train")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FormatError, match="no hidden states found"):
        scan(tmp_path / "empty", "train")
    (tmp_path / "zero.pt").write_bytes(b"")
    with pytest.raises(FormatError, match="empty"):
        read_file(tmp_path / "zero.pt", ReadContext("train"))


@pytest.mark.parametrize(
    "name,expected",
    [("hidden_states.layer_3", 3), ("layers.31", 31), ("h59", 59), ("layer_id=12", 12), ("blk.7.out", 7),
     ("aux_hidden_state", None), ("hs[2]", 2), ("model.layers.40.output", 40)],
)
def test_layer_from_name(name, expected):
    assert layer_from_name(name) == expected


def test_parse_tags():
    assert parse_tags("step=0___rank=1___dump_index=3___name=eagle3_aux___layer_id=9.pt") == {
        "step": "0", "rank": "1", "dump_index": "3", "name": "eagle3_aux", "layer_id": "9"}
    assert parse_tags("data_0.pt") is None
    assert parse_tags("rank=0___dump_index=1.pt") is None  # no name tag
