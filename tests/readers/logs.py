"""Shared by the debug-log reader tests: the fixture logs and a helper that reads a log written on the spot."""

from __future__ import annotations

from pathlib import Path

from hsdiff.readers import debuglog
from hsdiff.readers._common import ReadContext

from .. import builders as B

LOGS = B.FIXTURES / "logs"
REAL_LOG = B.REAL / "sglang-dumper.log"
REAL_DIR = B.REAL / "sglang-dumper" / "dump_20261130_023047_011830"


def read_text(tmp_path: Path, text: str | bytes, name: str = "server.log", **ctx) -> list:
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return debuglog.read(p, ReadContext(side="infer", root=tmp_path, **ctx))
