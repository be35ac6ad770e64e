"""The ModelOpt reader, on files written by ModelOpt."""

from __future__ import annotations

from hsdiff.readers import scan

from .. import builders as B


def test_modelopt_real_files_written_by_modelopt():
    dump = scan(B.REAL / "modelopt", "train")
    assert [c.origin.format for c in dump.captures] == ["modelopt", "modelopt"]
    first = dump.captures[0]
    assert first.concat and first.width == 1728 and first.group == "example-0"
    assert first.token_ids is not None and len(first.token_ids) == 61
    assert first.load().shape == (61, 1728)
