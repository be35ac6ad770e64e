"""Gzip-wrapped tensor files (``data_1.ckpt.gz``): streamed to a private temporary file, bounded.

Nothing is ever written next to the user's files. The expansion is capped in size
(``GZIP_LIMIT``) and in ratio (``GZIP_MAX_RATIO`` once ``GZIP_RATIO_AFTER`` bytes came out), so a
gzip bomb is refused after a bounded amount of work.
"""

from __future__ import annotations

import gzip
import os
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...errors import FormatError, HsdiffError
from . import limits
from .sniff import sniff_container
from .table import Table, short


def open_table(path: Path, container: str, *, open_inner: Callable[[Path, str], Table]) -> Table:
    """Decompress ``path`` to a temporary file and open what it holds with ``open_inner``;
    :func:`cleanup` removes the file."""
    GZIP_LIMIT, GZIP_MAX_RATIO, GZIP_RATIO_AFTER = limits.GZIP_LIMIT, limits.GZIP_MAX_RATIO, limits.GZIP_RATIO_AFTER

    fd, tmp = tempfile.mkstemp(prefix="hsdiff-", suffix=".bin")
    tmp_path = Path(tmp)
    packed = max(path.stat().st_size, 1)
    try:
        with os.fdopen(fd, "wb") as out, gzip.open(path, "rb") as src:
            copied = 0
            while True:
                chunk = src.read(1 << 20)
                if not chunk:
                    break
                copied += len(chunk)
                if copied > GZIP_LIMIT:
                    raise FormatError(
                        f"gzip expands past {GZIP_LIMIT / 2**30:.0f} GiB; refused as a possible gzip bomb",
                        path=path,
                        hint="decompress it yourself if it is genuine, or raise HSDIFF_GZIP_LIMIT (bytes)",
                    )
                if copied > GZIP_RATIO_AFTER and copied > GZIP_MAX_RATIO * packed:
                    raise FormatError(
                        f"gzip expands more than {GZIP_MAX_RATIO}x ({packed} bytes give over {copied // 2**20} MiB); "
                        "refused as a possible gzip bomb",
                        path=path,
                        hint="hidden states do not compress that well; decompress it yourself if it is genuine",
                    )
                out.write(chunk)
        try:
            inner = sniff_container(tmp_path)
            if inner in ("text", "binary", "empty", "gzip"):
                raise FormatError(f"gzip holds no tensor file ({inner})", path=path, hint="expected a gzipped torch.save file")
            table = open_inner(tmp_path, inner)
            if inner == "safetensors":  # read now: the temporary file is removed when the table is closed
                for e in table.entries.values():
                    e.loader = _constant(e.loader())
                    e.rows = None
        except HsdiffError as e:
            if e.path is None or e.path == str(path):
                raise
            raise type(e)(f"{e.detail} (in the file it decompresses to)", path=path, hint=e.hint) from None
        table.path = path
        table.temp = tmp_path
        return table
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as e:
        tmp_path.unlink(missing_ok=True)
        raise FormatError(f"gzip stream is damaged or truncated ({short(e)})", path=path, hint="re-copy the file") from None
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def _constant(value: Any) -> Callable[[], Any]:
    return lambda: value


def cleanup(table: Table) -> None:
    """Remove a temporary file made for a gzip member (the mapping stays valid on POSIX)."""
    if table.temp is not None:
        table.temp.unlink(missing_ok=True)
        table.temp = None
