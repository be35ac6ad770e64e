"""The SGLang dumper file reader, on files written by SGLang, both generations, and its tag grammar."""

from __future__ import annotations

import torch

from hsdiff.readers import scan
from hsdiff.readers._common import ReadContext
from hsdiff.readers.sglang_dumper import parse_tags

from .. import builders as B


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
    torch.save(
        B.states(0)["bf16"][5].clone(),
        d / "forward_pass_id=3___rank=0___name=layer_input___layer_id=5___dump_index=7.pt",
    )
    (cap,) = scan(tmp_path, "infer").captures
    assert cap.boundary == 5 and cap.group.endswith("step=3")


def test_parse_tags():
    assert parse_tags("step=0___rank=1___dump_index=3___name=eagle3_aux___layer_id=9.pt") == {
        "step": "0",
        "rank": "1",
        "dump_index": "3",
        "name": "eagle3_aux",
        "layer_id": "9",
    }
    assert parse_tags("data_0.pt") is None
    assert parse_tags("rank=0___dump_index=1.pt") is None  # no name tag


def test_one_tag_grammar_for_files_and_printed_records():
    from hsdiff.readers.sglang_dumper import read_tags

    t = read_tags(parse_tags("step=2___rank=1___dump_index=7___name=eagle3_aux___world_size=2___layer_id=9.pt"))
    assert (t.key, t.layer, t.slot, t.rank, t.dump_index) == ("name=eagle3_aux layer_id=9", 9, None, 1, "7")
    assert t.group("exp") == "exp:step=2"
    assert read_tags({"name": "x", "rank": "0", "world_size": "1", "slot": "2"}).rank is None
    assert read_tags({"name": "x", "slot": "2"}).slot == 2


def test_a_tensor_read_from_its_file_and_from_the_log_has_one_key_layer_and_pass():
    """The dumper's files and what it printed while writing them: the same tensors, keyed alike."""
    from hsdiff.readers import debuglog

    files = scan(B.REAL / "sglang-dumper", "infer").captures
    printed = debuglog.read(B.REAL / "sglang-dumper.log", ReadContext(side="infer", root=B.REAL))
    assert sorted((c.origin.key, c.boundary) for c in files) == sorted((c.origin.key, c.boundary) for c in printed)
    # the pass is {where}:step={step}: the run's directory for files, the log and the run's name for a log
    assert {c.group for c in files} == {"dump_20261130_023047_011830:step=0"}
    assert {c.group for c in printed} == {"sglang-dumper.log:dump_20261130_023047_011830:step=0"}
