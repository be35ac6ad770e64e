"""The format registry and read_file: detection by content, refusals, empty and missing inputs."""

from __future__ import annotations

import pytest
import torch

from hsdiff.errors import FormatError, InputError
from hsdiff.readers import read_file, scan
from hsdiff.readers._common import ReadContext

from .. import builders as B


def test_detection_is_by_content_not_suffix(tmp_path):
    s = B.states(0)
    torch.save(
        {
            "input_ids": s["input_ids"],
            "aux_hidden_state": B.concat(0, [2, 15, 27])[None].clone(),
            "loss_mask": torch.ones(3),
            "hidden_state": s["fp32"][30][None].clone(),
        },
        tmp_path / "weird.bin",
    )
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


def test_every_reader_declares_its_key_as_its_module_name():
    from hsdiff.readers.registry import DATASETS, READERS, TABLES, TEXT_READER

    for m in READERS:
        assert m.KEY == m.__name__.rsplit(".", 1)[-1]
    # each module is listed under the kind it says it reads (mypy checks it against that kind's Protocol)
    kinds = {m.KEY: "table" for m in TABLES.values()} | {m.KEY: "dataset" for m in DATASETS}
    kinds[TEXT_READER.KEY] = "text"
    assert {m.KEY: m.READS for m in READERS} == kinds


def test_formats_are_listed_and_detected_in_their_documented_orders():
    from hsdiff.readers import FORMATS
    from hsdiff.readers.registry import DETECTION

    assert FORMATS == (
        "specforge",
        "modelopt",
        "eagle",
        "sglang_dumper",
        "vllm",
        "hf",
        "speculators",
        "trtllm",
        "specforge_dflash",
        "sglang_hook",
        "trtllm_debug",
        "deepspec",
        "verl_speco",
        "sglang_http",
        "tensors",
        "debuglog",
    )
    assert [m.KEY for m in DETECTION] == [
        "sglang_dumper",
        "specforge",
        "sglang_hook",
        "trtllm_debug",
        "trtllm",
        "verl_speco",
        "modelopt",
        "specforge_dflash",
        "speculators",
        "vllm",
        "eagle",
        "hf",
        "tensors",
    ]


def test_the_inspect_schema_and_the_docs_name_every_format():
    import re

    from hsdiff.readers import FORMATS
    from hsdiff.schemas import load

    item = load("inspect")["properties"]["formats"]["items"]["properties"]["format"]
    assert tuple(item["enum"]) == FORMATS
    formats = (B.ROOT / "docs" / "formats.md").read_text()
    table = formats.split("# Formats read", 1)[1].split("\n\n", 2)[1]
    assert re.findall(r"^\| `(\w+)` \|", table, re.MULTILINE) == list(FORMATS)
    compare = (B.ROOT / "docs" / "compare.md").read_text()
    choices = re.search(r"\| `--train-format`, `--infer-format` \| force a format: (.*) \|", compare)
    assert choices is not None and re.findall(r"`(\w+)`", choices.group(1)) == list(FORMATS)


@pytest.mark.parametrize(
    "key",
    [
        "specforge",
        "modelopt",
        "vllm",
        "sglang_dumper",
        "speculators",
        "trtllm",
        "specforge_dflash",
        "sglang_hook",
        "trtllm_debug",
        "deepspec",
        "verl_speco",
        "sglang_http",
    ],
)
def test_the_key_is_the_format_of_every_capture_and_forces_it(tmp_path, key):
    make = {
        "specforge": lambda: B.specforge(tmp_path, [0], [2, 15, 27]),
        "modelopt": lambda: B.modelopt_file(tmp_path, 0, [2, 15, 27]),
        "vllm": lambda: B.vllm_file(tmp_path, 0, [2, 15, 27]),
        "sglang_dumper": lambda: B.sglang_dump(tmp_path, 0, [3, 16, 28]),
        "speculators": lambda: B.speculators_dir(tmp_path, [0], [2, 15, 27, 30]),
        "trtllm": lambda: B.trtllm_file(tmp_path),
        "specforge_dflash": lambda: B.specforge_dflash(tmp_path, [0], [2, 15, 27]),
        "sglang_hook": lambda: B.sglang_hook_dump(tmp_path, 0, layers=[1, 2]),
        "trtllm_debug": lambda: B.trtllm_debug_dump(tmp_path, 0),
        "deepspec": lambda: B.deepspec_cache(tmp_path),
        "verl_speco": lambda: B.verl_feature_store(tmp_path),
        "sglang_http": lambda: B.sglang_response(tmp_path / "resp.json", 0, [2, 15, 27]),
    }[key]
    make()
    found = scan(tmp_path, "infer").captures
    assert found and {c.origin.format for c in found} == {key}
    forced = scan(tmp_path, "infer", fmt=key).captures
    assert [(c.origin.path, c.origin.key) for c in forced] == [(c.origin.path, c.origin.key) for c in found]


def test_a_forced_format_that_does_not_fit_is_refused(tmp_path):
    B.specforge(tmp_path, [0], [2, 15, 27])
    (f,) = tmp_path.rglob("data_0.ckpt")
    with pytest.raises(FormatError, match="does not look like a vllm file"):
        read_file(f, ReadContext("train"), "vllm")
    with pytest.raises(InputError, match="unknown format 'nope'"):
        read_file(f, ReadContext("train"), "nope")
    log = tmp_path / "server.log"
    log.write_text("aux_hidden_states[0] = [0.1, 0.2, 0.3, 0.4]\n")
    with pytest.raises(FormatError, match="not a specforge file: it holds text"):
        read_file(log, ReadContext("infer"), "specforge")
    (cap,) = read_file(log, ReadContext("infer"), "debuglog")
    assert cap.origin.format == "debuglog" and cap.slot == 0


def test_forced_sglang_dumper_reads_a_value_file_of_any_name(tmp_path):
    value = B.states(0)["bf16"][3].clone()
    torch.save({"value": value, "meta": {"name": "eagle3_aux", "layer_id": 3}}, tmp_path / "capture.pt")
    assert read_file(tmp_path / "capture.pt", ReadContext("infer"))[0].origin.format == "tensors"
    (cap,) = read_file(tmp_path / "capture.pt", ReadContext("infer"), "sglang_dumper")
    assert cap.boundary == 3 and cap.origin.key == "name=eagle3_aux layer_id=3"
    assert torch.equal(cap.load(), value)
