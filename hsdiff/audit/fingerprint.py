"""The per-file pass of an audit: read one training file once and keep a small summary of it.

This is the only code that touches hidden-state files; it runs on Dask workers (or in this process
with ``workers=0``). A :class:`FileSummary` holds what the central pass needs, a few kilobytes per
file whatever the file's size: shape and dtype, token counts, non-finite token ranges, digests for
duplicates, per-slot norm profiles, and a *prefix fingerprint* — a fixed random projection of the
first :data:`PREFIX_TOKENS` tokens of every slot. In a causal model the hidden states of a shared
token prefix depend only on that prefix, so two files that start with the same tokens and hold the
same layers carry the same prefix fingerprint; the grouping pass compares these instead of
re-reading files.

Memory: one worker reads one file at a time; readers memory-map torch and safetensors files and
the tensor is walked in token chunks of :data:`CHUNK_TOKENS`, so a worker holds at most one file.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import shutil
import tempfile
import threading
import zipfile
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from ..arrays import as_f32, dtype_name, row_norms
from ..errors import HsdiffError
from ..extras import require
from ..sinks import ordinary_median

log = logging.getLogger("hsdiff.audit")

#: Leading tokens of every slot kept as a fingerprint (chat templates share at least this many).
PREFIX_TOKENS = 16
#: Width of the random projection of each prefix token (relative errors keep within a few percent).
PROJECTION_DIM = 32
#: Tokens walked at a time when checking values, so memory stays bounded on long samples.
CHUNK_TOKENS = 4096


@dataclass(frozen=True)
class Job:
    """What a worker needs to summarise one file: where it is, how to name it, the hidden size if known."""

    url: str  # a local path or an fsspec URL
    name: str  # the path relative to the dataset root, as reported
    hidden_size: int | None = None  # --hidden-size
    config_hidden_size: int | None = None  # target_hidden_size / hidden_size of a config.json beside the data


@dataclass(frozen=True)
class NonFinite:
    """Tokens ``first..last`` (``count`` of them) of ``slot`` hold NaN (``nan``) or Inf values."""

    slot: int
    first: int
    last: int
    count: int
    nan: int
    inf: int


@dataclass(frozen=True)
class FileSummary:
    """Everything the central pass knows about one file. ``error`` is set when it could not be read."""

    file: str
    size: int
    error: str | None = None
    format: str | None = None
    dtype: str | None = None
    tokens: int | None = None
    slots: int | None = None
    hidden_size: int | None = None
    hidden_size_source: str | None = None
    ids_tokens: int | None = None
    mask_tokens: int | None = None
    ids_digest: str | None = None
    values_digest: str | None = None
    non_finite: tuple[NonFinite, ...] = ()
    prefix_ids: tuple[int, ...] = ()
    prefix_proj: np.ndarray | None = field(default=None, compare=False)  # [P, slots, r] float32
    prefix_norms: np.ndarray | None = field(default=None, compare=False)  # [P, slots] float32
    median_norms: tuple[float, ...] = ()  # per slot, over ordinary (non-sink) tokens

    @property
    def readable(self) -> bool:
        return self.error is None

    def to_record(self) -> dict:
        """A JSON-able dict (arrays as base64), one line of a checkpoint."""
        d = asdict(self)
        for k in ("prefix_proj", "prefix_norms"):
            a = getattr(self, k)
            d[k] = (
                None
                if a is None
                else {"shape": list(a.shape), "b64": base64.b64encode(a.astype("<f4").tobytes()).decode()}
            )
        d["non_finite"] = [asdict(n) for n in self.non_finite]
        return d

    @classmethod
    def from_record(cls, d: dict) -> FileSummary:
        d = dict(d)
        for k in ("prefix_proj", "prefix_norms"):
            v = d.get(k)
            d[k] = (
                None if v is None else np.frombuffer(base64.b64decode(v["b64"]), dtype="<f4").reshape(v["shape"]).copy()
            )
        d["non_finite"] = tuple(NonFinite(**n) for n in d.get("non_finite") or ())
        d["prefix_ids"] = tuple(d.get("prefix_ids") or ())
        d["median_norms"] = tuple(d.get("median_norms") or ())
        return cls(**d)


def summarise_batch(jobs: list[Job]) -> list[FileSummary]:
    """Summarise several files in turn (one Dask task); a damaged file never stops the batch."""
    return [summarise(job) for job in jobs]


def summarise(job: Job) -> FileSummary:
    """Read ``job.url`` once and summarise it; unreadable files give a summary with ``error`` set."""
    size = 0
    try:
        with _local_copy(job.url) as (path, size):
            return _summarise_local(path, job, size)
    except HsdiffError as e:
        return FileSummary(file=job.name, size=size, error=_one_line(e))
    except OSError as e:  # vanished, unreadable, or a remote read that failed
        return FileSummary(file=job.name, size=size, error=f"cannot read ({e.strerror or e})")


def _one_line(e: HsdiffError) -> str:
    return e.detail + (f" — {e.hint}" if e.hint else "")


class _local_copy:
    """A local path for ``url``: the file itself, or a private temporary copy of a remote file."""

    def __init__(self, url: str):
        self.url = url
        self.tmpdir: str | None = None

    def __enter__(self) -> tuple[Path, int]:
        fs, path = _fs(self.url)
        if fs is None:
            p = Path(path)
            try:
                return p, p.stat().st_size
            except OSError:
                return p, 0
        self.tmpdir = tempfile.mkdtemp(prefix="hsdiff-audit-")
        local = Path(self.tmpdir) / Path(path).name
        with fs.open(path, "rb") as src, open(local, "wb") as dst:
            shutil.copyfileobj(src, dst, 8 * 2**20)  # streamed: memory stays at one buffer
        return local, local.stat().st_size

    def __exit__(self, *exc: object) -> None:
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)


def _fs(url: str) -> tuple[Any, str]:
    """(fsspec filesystem, path) for a remote URL; (None, local path) for a local one."""
    if "://" not in url:
        return None, url
    fsspec = require("fsspec", "audit", f"a URL ({url})")

    fs, path = fsspec.core.url_to_fs(url)
    if "file" in _protocols(fs):
        return None, path
    return fs, path


def _protocols(fs: Any) -> tuple[str, ...]:
    p = fs.protocol
    return (p,) if isinstance(p, str) else tuple(p)


def _summarise_local(path: Path, job: Job, size: int) -> FileSummary:
    from ..readers import scan

    dump = scan(path, "train")
    caps = list(dump.captures)
    samples = {c.group for c in caps}
    if len(samples) > 1:  # TensorRT-LLM's record lists, verl-SpeCo's shards: an audit's unit is one sample per file
        raise HsdiffError(
            f"holds {len(samples)} samples (a {caps[0].origin.format} file packs several); hsdiff audit "
            "reads one sample per file",
            path=path,
            hint="compare or inspect it instead",
        )
    extras = _side_tensors(path)
    hidden, source = _hidden_size(job, caps, extras)
    slots = []
    for c in caps:
        splittable = c.concat and c.width and hidden and c.width != hidden and c.width % hidden == 0
        slots.extend(c.split(hidden) if splittable else [c])  # a width that does not split: a shape mismatch
    if not slots:  # pragma: no cover - scan raises when a file holds nothing
        raise HsdiffError("holds no hidden states", path=path)
    tensors = [s.array() for s in slots]
    tokens = {int(t.shape[0]) for t in tensors}
    widths = {int(t.shape[1]) for t in tensors}
    first = slots[0]
    ids = first.token_ids
    summary: dict[str, Any] = {
        "file": job.name,
        "size": size,
        "format": first.origin.format,
        "dtype": dtype_name(tensors[0]),
        "tokens": min(tokens) if len(tokens) == 1 else -1,
        "slots": len(slots),
        "hidden_size": widths.pop() if len(widths) == 1 else -1,
        "hidden_size_source": source,
        "ids_tokens": None if ids is None else len(ids),
        "mask_tokens": extras.get("mask_tokens"),
        "ids_digest": None
        if ids is None
        else hashlib.blake2b(np.asarray(ids, dtype="<i8").tobytes(), digest_size=12).hexdigest(),
        "prefix_ids": () if ids is None else tuple(int(v) for v in ids[:PREFIX_TOKENS]),
    }
    digest = hashlib.blake2b(digest_size=12)
    bad: list[NonFinite] = []
    medians: list[float] = []
    p = min(PREFIX_TOKENS, min(int(t.shape[0]) for t in tensors))
    proj = np.zeros((p, len(slots), PROJECTION_DIM), dtype=np.float32)
    pnorms = np.zeros((p, len(slots)), dtype=np.float32)
    for s, t in enumerate(tensors):
        norms, nf = _walk_slot(t, s, digest)
        bad.extend(nf)
        medians.append(ordinary_median(norms))
        head = as_f32(t[:p])
        proj[:, s, :] = head @ _projection(int(t.shape[1]))
        pnorms[:, s] = norms[:p]
    summary.update(
        values_digest=digest.hexdigest(),
        non_finite=tuple(bad),
        prefix_proj=proj,
        prefix_norms=pnorms,
        median_norms=tuple(medians),
    )
    return FileSummary(**summary)


def _walk_slot(t: Any, slot: int, digest: Any) -> tuple[np.ndarray, list[NonFinite]]:
    """Per-token norms of one slot, its non-finite token ranges, and its bytes fed to ``digest``."""
    norms = np.empty(int(t.shape[0]), dtype=np.float32)
    nan_rows: list[np.ndarray] = []
    inf_rows: list[np.ndarray] = []
    for a in range(0, int(t.shape[0]), CHUNK_TOKENS):
        part = t[a : a + CHUNK_TOKENS]
        chunk = _scratch("bits", part.shape, part.dtype)
        np.copyto(chunk, part, casting="no")
        digest.update(chunk.view(np.uint8))
        f = as_f32(chunk, out=_scratch("f32", part.shape, np.dtype(np.float32)))
        with np.errstate(all="ignore"):
            n = row_norms(f)
        norms[a : a + chunk.shape[0]] = n
        suspect = np.flatnonzero(~np.isfinite(n))  # a NaN or Inf makes the row's norm non-finite
        if suspect.size:
            rows = f[suspect]
            nan, inf = np.isnan(rows).any(axis=1), np.isinf(rows).any(axis=1)
            nan_rows.append(a + suspect[nan])
            inf_rows.append(a + suspect[inf])
    out = []
    if nan_rows or inf_rows:
        nan_idx = np.concatenate(nan_rows) if nan_rows else np.zeros(0, dtype=np.int64)
        inf_idx = np.concatenate(inf_rows) if inf_rows else np.zeros(0, dtype=np.int64)
        rows = np.union1d(nan_idx, inf_idx)
        out.append(
            NonFinite(slot, int(rows.min()), int(rows.max()), int(rows.size), int(nan_idx.size), int(inf_idx.size))
        )
    return norms, out


_buffers = threading.local()


def _scratch(key: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised array of ``shape`` reused by this thread from file to file.

    Allocating each chunk anew costs a page fault per 4 kB where the allocator returns large blocks to
    the system at once: Dask's nanny sets ``MALLOC_TRIM_THRESHOLD_`` for its workers, which made the
    per-file pass 1.4x slower (in CPU) on a worker than in the client process.
    """
    need = int(np.prod(shape)) * dtype.itemsize
    buf = getattr(_buffers, key, None)
    if buf is None or buf.size < need:
        buf = np.empty(max(need, 1), dtype=np.uint8)
        setattr(_buffers, key, buf)
    return buf[:need].view(dtype).reshape(shape)


@cache
def _projection(width: int) -> np.ndarray:
    """The same [width, r] Gaussian projection on every worker (fixed seed, numpy's stable PCG64)."""
    rng = np.random.Generator(np.random.PCG64(20261201 + width))
    return (rng.standard_normal((width, PROJECTION_DIM)) / np.sqrt(PROJECTION_DIM)).astype(np.float32)


def _side_tensors(path: Path) -> dict[str, int]:
    """``loss_mask`` length and final ``hidden_state`` width of a torch.save'd dict, if it has them.

    Read only after the readers accepted the file (so it is a safe torch archive), through the same
    restricted reader: nothing but plain tensors can come out of it, and no tensor bytes are read.
    """
    out: dict[str, int] = {}
    if not zipfile.is_zipfile(path):
        return out
    from ..readers._container import open_table

    try:
        entries = open_table(path, "torch").entries
    except HsdiffError as e:  # a file the readers accepted; keep its summary without extras
        log.debug("%s: side tensors not read (%s)", path, e)
        return out
    mask = entries.get("loss_mask")
    if mask is not None:
        out["mask_tokens"] = int(np.prod(mask.shape))
    for key in ("hidden_state", "hidden_states"):
        final = entries.get(key)
        if final is not None and len(final.shape) >= 1:
            out["final_width"] = int(final.shape[-1])
            break
    return out


def _hidden_size(job: Job, caps: list[Any], extras: dict[str, int]) -> tuple[int, str]:
    if job.hidden_size:
        return job.hidden_size, "given"
    plain = [c.width for c in caps if not c.concat and c.width]
    if plain:
        return plain[0], "slot width"
    final = extras.get("final_width") or next((c.final_width for c in caps if c.final_width), None)
    if final:  # the readers give it for every container (legacy and gzipped files too)
        return final, "final hidden_state width"
    if job.config_hidden_size:
        return job.config_hidden_size, "config.json"
    width = caps[0].width or 0
    if width and width % 3 == 0:
        return width // 3, "assumed three EAGLE-3 slots"
    return width, "one slot assumed"


def list_files(root_url: str) -> tuple[list[tuple[str, str]], dict | None]:
    """(url, name) of every candidate training file under ``root_url``, and a config.json found at its top.

    Hidden files and folders are skipped, as are text files (json, yaml, logs, ...): an audit reads
    training data. Names are relative to the root, ``/``-separated, in natural order.
    """
    import re

    fs, root = _fs(root_url)
    from ..readers import SKIP_SUFFIXES

    skip = SKIP_SUFFIXES | {".txt", ".log"}  # an audit reads training data, never text or logs

    def natural(name: str) -> tuple:
        return tuple((0, int(p), "") if p.isdecimal() else (1, 0, p) for p in re.split(r"(\d+)", name))

    found: list[tuple[str, str]] = []
    config: dict | None = None
    if fs is None:
        base = Path(root)
        if base.is_file():
            return [(str(base), base.name)], None
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for n in filenames:
                if n.startswith("."):
                    continue
                p = Path(dirpath) / n
                rel = p.relative_to(base).as_posix()
                if rel == "config.json":
                    config = _json(p.read_bytes())
                if p.suffix.lower() not in skip:
                    found.append((str(p), rel))
    else:
        root = root.rstrip("/")
        if fs.isfile(root):
            return [(root_url, root.rsplit("/", 1)[-1])], None
        for p in fs.find(root):
            rel = p[len(root) :].lstrip("/")
            if any(part.startswith(".") for part in rel.split("/")):
                continue
            if rel == "config.json":
                with fs.open(p, "rb") as f:
                    config = _json(f.read())
            if Path(rel).suffix.lower() not in skip:
                found.append((fs.unstrip_protocol(p), rel))
    found.sort(key=lambda x: natural(x[1]))
    return found, config


def _json(data: bytes) -> dict | None:
    import json

    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return obj if isinstance(obj, dict) else None
