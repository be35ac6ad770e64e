"""Opening containers (:mod:`hsdiff.readers._container`): the backend table and the one safetensors header reader."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from hsdiff.arrays import to_torch
from hsdiff.errors import FormatError
from hsdiff.readers import read_safetensors_header
from hsdiff.readers._container import BACKENDS, open_table, sniff_container


def test_every_tensor_container_has_a_backend(tmp_path):
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    save_file({"x": t}, str(tmp_path / "a.safetensors"))
    torch.save({"x": t}, tmp_path / "a.pt")
    np.save(tmp_path / "a.npy", t.numpy())
    np.savez(tmp_path / "a.npz", x=t.numpy())
    for f in sorted(tmp_path.iterdir()):
        container = sniff_container(f)
        assert container in BACKENDS
        table = open_table(f, container)
        (entry,) = table.entries.values()
        assert torch.equal(to_torch(entry.loader()), t), f.name


def test_read_safetensors_header_gives_the_header_as_written(tmp_path: Path):
    f = tmp_path / "model.safetensors"
    save_file({"fc.weight": torch.zeros(4, 12), "norm.weight": torch.ones(4)}, str(f), metadata={"format": "pt"})
    header = read_safetensors_header(f)
    assert header["__metadata__"] == {"format": "pt"}
    assert header["fc.weight"]["shape"] == [4, 12] and header["fc.weight"]["dtype"] == "F32"
    assert sorted(header) == ["__metadata__", "fc.weight", "norm.weight"]


def _raw(header: dict, data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


@pytest.mark.parametrize(
    "header,data,words",
    [
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4, "points past the end"),
        (
            {
                "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
            },
            b"\0" * 12,
            "overlap",
        ),
        ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8, "needs 12"),
        ({"a": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}, b"\0" * 8, "does not read"),
        ({"__metadata__": [1]}, b"", "__metadata__ is not a JSON object"),
    ],
)
def test_read_safetensors_header_names_the_damage(tmp_path: Path, header, data, words):
    f = tmp_path / "bad.safetensors"
    f.write_bytes(_raw(header, data))
    with pytest.raises(FormatError, match=words) as e:
        read_safetensors_header(f)
    assert e.value.path == str(f)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_read_into_buffers_at_any_alignment_are_the_rows(tmp_path, dtype):
    """Rows are read from the file into buffers placed to share the file's alignment (a skewed copy
    is slow): whatever the caller's buffer offset, the values are the tensor's rows."""
    from hsdiff.arrays import as_f32
    from hsdiff.model import INFER
    from hsdiff.readers import scan
    from hsdiff.rowio import RowBuffer

    rng = np.random.default_rng(7)
    t = torch.from_numpy(rng.standard_normal((50, 36)).astype(np.float32)).to(dtype)
    save_file({"hidden_states.layer_3": t}, str(tmp_path / "a.safetensors"))
    cap = scan(tmp_path / "a.safetensors", INFER).captures[0]
    assert cap.reads_rows
    want = t.float().numpy()
    buf = RowBuffer()
    big = np.empty(50 * 36 + 64, dtype=np.float32)
    for i0, i1 in [(0, 50), (1, 2), (3, 17), (17, 49), (3, 17)]:
        assert np.array_equal(as_f32(cap.read_rows(i0, i1, buf, raw=True)), want[i0:i1])
        for skew in range(16):  # float32 offsets: 0 to 60 bytes
            out = big[skew : skew + (i1 - i0) * 36].reshape(i1 - i0, 36)
            assert np.array_equal(cap.read_rows(i0, i1, out), want[i0:i1])
