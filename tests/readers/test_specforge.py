"""The SpecForge reader, plain and gzipped."""

from __future__ import annotations

import torch

from hsdiff.readers import scan

from .. import builders as B


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
