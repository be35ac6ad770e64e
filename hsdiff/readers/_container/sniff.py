"""Which container a file is, decided from its first bytes (never its suffix), and what its name claims."""

from __future__ import annotations

import re
import struct
import zipfile
from pathlib import Path

from ...errors import FormatError

#: Bytes read from the start of a file to decide its container.
SNIFF_BYTES = 8192
#: Largest safetensors header (bytes) accepted; a larger length prefix is not safetensors.
MAX_SAFETENSORS_HEADER = 100 * 2**20

_OLD_PICKLE_RE = re.compile(rb"[(]?c[A-Za-z_][\w.]*\n[A-Za-z_][\w.]*\n")
#: Suffixes that promise a tensor container; a file named so whose content is none is damaged.
_CLAIMS = {
    ".gz": "gzip",
    ".zst": "zstd",
    ".safetensors": "safetensors",
    ".pt": "torch",
    ".pth": "torch",
    ".ckpt": "torch",
    ".npy": "numpy",
    ".npz": "numpy",
}


def sniff_container(path: Path) -> str:
    """``torch``, ``torch-legacy``, ``safetensors``, ``npy``, ``npz``, ``gzip``, ``zstd``, ``text``, ``binary``
    or ``empty``."""
    with open(path, "rb") as f:
        head = f.read(SNIFF_BYTES)
    size = path.stat().st_size
    if not head:
        return "empty"
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head[:4] == b"\x28\xb5\x2f\xfd":
        return "zstd"
    if head[:6] == b"\x93NUMPY":
        return "npy"
    if head[:4] == b"PK\x03\x04" or head[:4] == b"PK\x05\x06":
        try:
            with zipfile.ZipFile(path) as z:
                names = z.namelist()
        except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError, struct.error) as e:
            raise FormatError(
                f"zip archive is damaged or truncated ({e})",
                path=path,
                hint="re-copy the file; a torch.save that was interrupted leaves such files",
            ) from None
        if any(n.endswith("data.pkl") for n in names):
            return "torch"
        if names and all(n.endswith(".npy") for n in names):
            return "npz"
        raise FormatError(
            "zip archive holds neither a torch.save archive nor .npy arrays",
            path=path,
            hint="hsdiff reads torch .pt/.ckpt/.bin, safetensors, .npy/.npz and text logs",
        )
    if head[:1] == b"\x80" and len(head) > 1 and head[1] in range(2, 6):
        return "torch-legacy"
    if _OLD_PICKLE_RE.match(head) and (claimed_format(path) == "torch" or path.suffix.lower() in (".bin", ".pkl")):
        return "torch-legacy"  # a text (protocol 0/1) pickle opening with a global: the torch loader refuses it
    if len(head) >= 9 and head[8:9] == b"{":
        (n,) = struct.unpack("<Q", head[:8])
        if 2 <= n <= MAX_SAFETENSORS_HEADER:
            return "safetensors"
    if size >= 8 and path.suffix == ".safetensors":
        return "safetensors"
    return "binary" if b"\x00" in head else "text"


def claimed_format(path: Path) -> str | None:
    """The container a file's name promises (``data_1.ckpt.gz`` -> ``gzip``), or None."""
    return _CLAIMS.get(path.suffix.lower())


def not_what_it_claims(path: Path, container: str) -> FormatError:
    """The error for a file named like a tensor container whose content is text, binary junk or too short."""
    size = path.stat().st_size
    what = {"text": "text", "binary": "unrecognised binary data"}.get(container, container)
    if size < 64:
        what = f"only {size} bytes"
    return FormatError(
        f"named like a {claimed_format(path)} file but holds {what}",
        path=path,
        hint="the file is truncated or is not a dump (an HTML error page from a failed download?); re-copy it or "
        "leave it out",
    )
