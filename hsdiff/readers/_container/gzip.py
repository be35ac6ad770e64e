"""Compressed tensor files, gzip (``data_1.ckpt.gz``) or zstd (vLLM's ``{req_id}.safetensors.zst``):
streamed to a private temporary file, bounded.

Nothing is ever written next to the user's files. The expansion is capped in size
(``GZIP_LIMIT``) and in ratio (``GZIP_MAX_RATIO`` once ``GZIP_RATIO_AFTER`` bytes came out), so a
decompression bomb is refused after a bounded amount of work. zstd needs the optional ``zstandard``
package (``pip install 'hsdiff[zstd]'``), imported only when such a file is met.
"""

from __future__ import annotations

import gzip
import os
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...errors import FormatError, HsdiffError, MissingExtraError
from . import limits
from .sniff import sniff_container
from .table import Table, short


def _gzip_stream(path: Path) -> Any:
    return gzip.open(path, "rb")


def _zstd_stream(path: Path) -> Any:
    try:
        import zstandard
    except ModuleNotFoundError:
        raise MissingExtraError(
            "a zstd-compressed file", "zstandard", "zstd", path=path, alternative="decompress it yourself (zstd -d)"
        ) from None
    return zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True)  # noqa: SIM115


#: container -> how its stream is opened, and the errors that mean damage
STREAMS: dict[str, Callable[[Path], Any]] = {"gzip": _gzip_stream, "zstd": _zstd_stream}
_DAMAGE: tuple[type[BaseException], ...] = (OSError, EOFError, gzip.BadGzipFile, zlib.error)


def open_table(path: Path, container: str, *, open_inner: Callable[[Path, str], Table]) -> Table:
    """Decompress ``path`` (``container`` ``gzip`` or ``zstd``) to a temporary file and open what it holds
    with ``open_inner``; :func:`cleanup` removes the file."""
    GZIP_LIMIT, GZIP_MAX_RATIO, GZIP_RATIO_AFTER = limits.GZIP_LIMIT, limits.GZIP_MAX_RATIO, limits.GZIP_RATIO_AFTER

    stream = STREAMS[container](path)  # before the temporary file: a missing zstandard leaves nothing behind
    fd, tmp = tempfile.mkstemp(prefix="hsdiff-", suffix=".bin")
    tmp_path = Path(tmp)
    packed = max(path.stat().st_size, 1)
    try:
        with os.fdopen(fd, "wb") as out, stream as src:
            copied = 0
            while True:
                chunk = src.read(1 << 20)
                if not chunk:
                    break
                copied += len(chunk)
                if copied > GZIP_LIMIT:
                    raise FormatError(
                        f"{container} expands past {GZIP_LIMIT / 2**30:.0f} GiB; "
                        f"refused as a possible {container} bomb",
                        path=path,
                        hint="decompress it yourself if it is genuine, or raise HSDIFF_GZIP_LIMIT (bytes)",
                    )
                if copied > GZIP_RATIO_AFTER and copied > GZIP_MAX_RATIO * packed:
                    raise FormatError(
                        f"{container} expands more than {GZIP_MAX_RATIO}x "
                        f"({packed} bytes give over {copied // 2**20} MiB); "
                        f"refused as a possible {container} bomb",
                        path=path,
                        hint="hidden states do not compress that well; decompress it yourself if it is genuine",
                    )
                out.write(chunk)
        whole = _zstd_size(path) if container == "zstd" else None
        if whole is not None and copied != whole:
            raise FormatError(
                f"zstd stream is damaged or truncated ({copied} of the {whole} bytes its frame declares)",
                path=path,
                hint="re-copy the file",
            )
        try:
            inner = sniff_container(tmp_path)
            if inner in ("text", "binary", "empty", "gzip", "zstd"):
                raise FormatError(
                    f"{container} holds no tensor file ({inner})",
                    path=path,
                    hint="expected a compressed torch.save or safetensors file",
                )
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
    except _DAMAGE + _zstd_errors() as e:
        tmp_path.unlink(missing_ok=True)
        raise FormatError(
            f"{container} stream is damaged or truncated ({short(e)})", path=path, hint="re-copy the file"
        ) from None
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def _zstd_size(path: Path) -> int | None:
    """The decompressed size a zstd frame declares in its header (None when it does not say)."""
    import zstandard

    with open(path, "rb") as f:
        head = f.read(18)  # the longest frame header
    try:
        size = zstandard.frame_content_size(head)
    except zstandard.ZstdError:
        return None
    return size if size >= 0 else None


def _zstd_errors() -> tuple[type[BaseException], ...]:
    try:
        import zstandard
    except ImportError:
        return ()
    return (zstandard.ZstdError,)


def _constant(value: Any) -> Callable[[], Any]:
    return lambda: value


def cleanup(table: Table) -> None:
    """Remove a temporary file made for a compressed file (the mapping stays valid on POSIX)."""
    if table.temp is not None:
        table.temp.unlink(missing_ok=True)
        table.temp = None
