"""The fingerprint file: ``hsdiff-fingerprint.safetensors``, three tensors and one JSON document.

=============  ========  ==================  =====================================================
tensor         dtype     shape               holds
=============  ========  ==================  =====================================================
``probe_ids``  int32     [N]                 the probe token ids, one probe after another
``norms``      float32   [B, N]              per boundary and probe token, the norm ``‖h‖``
``sketches``   float16   [B, N, d]           per boundary and probe token, the unit sketch ``P·h/‖h‖``
=============  ========  ==================  =====================================================

Row ``b`` of ``norms`` and ``sketches`` is boundary ``b`` (B0 the embeddings … BL the last layer's output
before the final norm); row ``L + 1``, when present, is the final post-norm state. The safetensors header's
``__metadata__`` holds ``{"format": "hsdiff-fingerprint", "hsdiff_fingerprint": <JSON>}``: the JSON
document (schema ``hsdiff/schemas/fingerprint.schema.json``) says the target's identity, the sketch's seed
and dimension, the probes, the noise floor, the training slots identified by value and the draft.

Reading is safe on any file: safetensors and JSON only (never pickle); the header length is checked
against :data:`MAX_HEADER` and the file's size before it is read, every tensor's dtype, shape and byte
span against the JSON document and the file, and the tensors are memory-mapped, never allocated from a
size a header states. A damaged or hostile file is one :class:`~hsdiff.errors.FormatError`.

>>> fp = load("draft/hsdiff-fingerprint.safetensors")      # doctest: +SKIP
>>> fp.num_layers, fp.hidden_size, fp.tokens, [s.boundary for s in fp.training]
(61, 576, 56, [3, 31, 59])
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import FormatError, InputError
from ..jsonout import dumps
from ..readers import read_safetensors_header
from ..readers._container import open_table

__all__ = [
    "FILENAME",
    "FORMAT",
    "SCHEMA_VERSION",
    "MAX_HEADER",
    "MAX_TOKENS",
    "MAX_BOUNDARIES",
    "MAX_DIM",
    "TrainingSlot",
    "Fingerprint",
    "is_fingerprint",
    "load",
    "summary",
    "write",
    "config_digest",
    "embedding_digest",
]

FILENAME = "hsdiff-fingerprint.safetensors"
FORMAT = "hsdiff-fingerprint"
META_KEY = "hsdiff_fingerprint"
SCHEMA_VERSION = 1
#: Largest header (bytes) a fingerprint may have: its JSON document is a few kB.
MAX_HEADER = 4 * 2**20
#: Largest number of probe tokens, boundaries and sketch numbers a fingerprint may hold.
MAX_TOKENS = 16384
MAX_BOUNDARIES = 4097
MAX_DIM = 1024
_TENSORS = {"probe_ids": "I32", "norms": "F32", "sketches": "F16"}


@dataclass(frozen=True)
class TrainingSlot:
    """One training slot as the fingerprint knows it: the boundary the values identified (None: not
    identified), how (``evidence``: ``observed`` by value, ``labelled`` from the training labels alone,
    ``none``), the identification's confidence, smallest share of tokens nearer it than any other
    boundary, tokens compared, median error, and its strongest competitor."""

    slot: int
    boundary: int | None
    evidence: str
    confidence: float = 0.0
    share: float = 0.0
    tokens: int = 0
    error: float | None = None
    runner_up: int | None = None
    runner_up_error: float | None = None

    def to_dict(self) -> dict:
        return {
            "slot": self.slot,
            "boundary": self.boundary,
            "evidence": self.evidence,
            "confidence": round(self.confidence, 4),
            "share": round(self.share, 4),
            "tokens": self.tokens,
            "error": None if self.error is None or not math.isfinite(self.error) else round(self.error, 6),
            "runner_up": self.runner_up,
            "runner_up_error": None
            if self.runner_up_error is None or not math.isfinite(self.runner_up_error)
            else round(self.runner_up_error, 6),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrainingSlot:
        return cls(
            int(d["slot"]),
            None if d.get("boundary") is None else int(d["boundary"]),
            str(d.get("evidence", "none")),
            float(d.get("confidence") or 0.0),
            float(d.get("share") or 0.0),
            int(d.get("tokens") or 0),
            None if d.get("error") is None else float(d["error"]),
            None if d.get("runner_up") is None else int(d["runner_up"]),
            None if d.get("runner_up_error") is None else float(d["runner_up_error"]),
        )


@dataclass(frozen=True, eq=False)
class Fingerprint:
    """A fingerprint in memory: the JSON document ``meta`` and the three tensors (memory-mapped when
    loaded). ``path``: the file it was read from, if any."""

    meta: dict[str, Any]
    probe_ids: np.ndarray
    norms: np.ndarray
    sketches: np.ndarray
    path: str | None = field(default=None, compare=False)

    # ------------------------------------------------------------------ what the document says
    @property
    def target(self) -> dict[str, Any]:
        return dict(self.meta["target"])

    @property
    def num_layers(self) -> int:
        return int(self.meta["target"]["num_hidden_layers"])

    @property
    def hidden_size(self) -> int:
        return int(self.meta["target"]["hidden_size"])

    @property
    def vocab_size(self) -> int | None:
        v = self.meta["target"].get("vocab_size")
        return None if v is None else int(v)

    @property
    def dim(self) -> int:
        return int(self.meta["sketch"]["dim"])

    @property
    def seed(self) -> int:
        return int(self.meta["sketch"]["seed"])

    @property
    def boundaries(self) -> int:
        """Rows stored: L + 1 boundaries, and the final post-norm state when :attr:`has_final`."""
        return int(self.norms.shape[0])

    @property
    def has_final(self) -> bool:
        return bool(self.meta["boundaries"]["final_post_norm"])

    @property
    def tokens(self) -> int:
        return int(self.probe_ids.shape[0])

    @cached_property
    def probes(self) -> tuple[tuple[int, ...], ...]:
        """The probe token ids, one tuple per probe."""
        out, start = [], 0
        ids = self.probe_ids.tolist()
        for p in self.meta["probes"]["items"]:
            n = int(p["tokens"])
            out.append(tuple(ids[start : start + n]))
            start += n
        return tuple(out)

    @cached_property
    def starts(self) -> tuple[int, ...]:
        """Where each probe starts among the :attr:`tokens` (and the end, last)."""
        out = [0]
        for p in self.probes:
            out.append(out[-1] + len(p))
        return tuple(out)

    @cached_property
    def first_of(self) -> np.ndarray:
        """Per stored token, the index of the first stored token with the same prefix (itself when no
        earlier probe shares its prefix up to it): probes that share a system prompt hold equal states
        there, which count once."""
        out = np.arange(self.tokens)
        for j, p in enumerate(self.probes):
            for i in range(len(p)):
                for q in range(j):
                    other = self.probes[q]
                    if len(other) > i and other[: i + 1] == p[: i + 1]:
                        out[self.starts[j] + i] = self.starts[q] + i
                        break
        return out

    @property
    def training(self) -> tuple[TrainingSlot, ...]:
        t = self.meta.get("training") or {}
        return tuple(TrainingSlot.from_dict(s) for s in t.get("slots") or ())

    @property
    def noise_floor(self) -> tuple[float | None, ...] | None:
        """Per stored row, the median error of a second pass in other numerics (None: not measured)."""
        got = (self.meta.get("noise_floor") or {}).get("per_boundary")
        return None if got is None else tuple(None if x is None else float(x) for x in got)

    @property
    def draft(self) -> dict[str, Any] | None:
        d = self.meta.get("draft")
        return None if d is None else dict(d)

    def name(self) -> str:
        """How a report names this fingerprint: its file, else its target."""
        if self.path:
            return self.path
        return str(self.meta["target"].get("name") or f"{self.num_layers}-layer target")

    def describe(self) -> str:
        """One sentence: what the fingerprint holds."""
        t = self.meta["target"]
        slots = self.training
        train = (
            f"training slots B{[s.boundary if s.boundary is not None else '?' for s in slots]}"
            if slots
            else "no training slots"
        )
        probes = self.meta["probes"]
        size = int(self.norms.nbytes + self.sketches.nbytes + self.probe_ids.nbytes)
        return (
            f"hsdiff fingerprint of a {t['num_hidden_layers']}-layer, {t['hidden_size']}-wide "
            f"{t.get('model_type') or 'model'} target: {self.boundaries} boundaries "
            f"(B0..B{self.num_layers}{' and the final post-norm state' if self.has_final else ''}), "
            f"{len(self.probes)} probes of {probes['source']} ({self.tokens} tokens), "
            f"{self.dim}-number sketches (seed {self.seed}), {train}; {size / self.boundaries / 1024:.1f} kB "
            "per boundary"
        )

    def __repr__(self) -> str:
        return f"<Fingerprint {self.num_layers} layers x {self.hidden_size}, {self.tokens} probe tokens>"


def summary(fp: Fingerprint) -> list[str]:
    """What a fingerprint holds, one line per part (``hsdiff inspect`` and ``hsdiff fingerprint`` print them)."""
    t = fp.target
    lines = [fp.describe()]
    ident = [f"model_type {t.get('model_type') or '?'}", f"vocabulary {t.get('vocab_size') or '?'}"]
    for key in ("config_digest", "embedding_digest", "tokenizer_digest"):
        if t.get(key):
            ident.append(f"{key.replace('_', ' ')} {str(t[key])[:19]}…")
    lines.append("target: " + ", ".join(ident))
    ref = fp.meta.get("reference") or {}
    how = f", {ref['how']}" if ref.get("how") else ""
    lines.append(f"reference pass: {ref.get('dtype', '?')} ({ref.get('source', '?')}{how})")
    noise = fp.noise_floor
    if noise:
        known = [x for x in noise if x is not None]
        method = (fp.meta.get("noise_floor") or {}).get("method", "")
        lines.append(
            f"noise floor: {min(known):.2%}..{max(known):.2%} per boundary ({method})" if known else "noise floor: none"
        )
    else:
        lines.append("noise floor: not measured (no second pass)")
    names = [str(p.get("name")) for p in fp.meta["probes"]["items"]]
    lines.append(
        f"probes ({fp.meta['probes']['source']}): "
        + ", ".join(f"{n} ({len(ids)} tokens)" for n, ids in zip(names[:6], fp.probes[:6]))
        + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    )
    for s in fp.training:
        where = "?" if s.boundary is None else f"B{s.boundary}" if s.boundary <= fp.num_layers else "final post-norm"
        if s.evidence == "observed":
            lines.append(
                f"training slot {s.slot}: {where}, identified by value ({s.share:.0%} of {s.tokens} tokens nearer it "
                f"than any other boundary; runner-up B{s.runner_up} at {(s.runner_up_error or 0):.1%})"
            )
        else:
            lines.append(f"training slot {s.slot}: {where} ({s.evidence}: not identified by value)")
    d = fp.draft
    if d:
        lines.append(f"draft: {d.get('kind')} ids {d.get('ids')} ({d.get('key') or 'no ids'} in {d.get('config')})")
    return lines


#: Config keys that say nothing about the weights or the layers (left out of the config digest).
_VOLATILE = {
    "_name_or_path",
    "transformers_version",
    "torch_dtype",
    "dtype",
    "use_cache",
    "_commit_hash",
    "_attn_implementation",
    "_attn_implementation_autoset",
    "architectures",
    "auto_map",
    "quantization_config",
    "output_hidden_states",
    "return_dict",
}


def config_digest(config: Mapping[str, Any] | None) -> str | None:
    """``sha256:…`` of a target config, without the keys that say nothing of the weights (names, dtypes,
    versions): two configs of one architecture and size have the same digest."""
    if not config:
        return None
    keep = {k: v for k, v in config.items() if k not in _VOLATILE}
    text = json.dumps(keep, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def embedding_digest(rows: np.ndarray) -> str:
    """``sha256:…`` of embedding rows as float32, little-endian: a bf16 checkpoint and its fp32 copy agree."""
    return "sha256:" + hashlib.sha256(np.ascontiguousarray(rows, dtype="<f4").tobytes()).hexdigest()


# ---------------------------------------------------------------------------------------------- reading


def _prefix(path: Path) -> int:
    """The header length a file's first 8 bytes state (raises FormatError when it cannot be one)."""
    with open(path, "rb") as f:
        head = f.read(8)
    if len(head) < 8:
        raise FormatError("is not a fingerprint: too short for a safetensors header", path=path)
    (n,) = struct.unpack("<Q", head)
    return int(n)


def is_fingerprint(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an hsdiff fingerprint file (its header says so); reads the header alone."""
    p = Path(path)
    try:
        if not p.is_file() or p.stat().st_size < 16:
            return False
        n = _prefix(p)
        if not 2 <= n <= min(MAX_HEADER, p.stat().st_size - 8):
            return False
        with open(p, "rb") as f:
            f.seek(8)
            raw = f.read(n)
        header = json.loads(raw)
    except (OSError, FormatError, ValueError, RecursionError):
        return False
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    return isinstance(meta, dict) and meta.get("format") == FORMAT


def load(path: str | os.PathLike) -> Fingerprint:
    """Read and check a fingerprint file; :class:`FormatError` (one line, naming the damage) otherwise."""
    p = Path(path)
    if not p.exists():
        raise InputError(
            "no such file", path=p, hint="give the hsdiff-fingerprint.safetensors file written beside the draft"
        )
    if p.is_dir():
        if (p / FILENAME).is_file():
            p = p / FILENAME
        else:
            raise InputError(f"holds no {FILENAME}", path=p, hint="run `hsdiff fingerprint` first, or give the file")
    n = _prefix(p)
    size = p.stat().st_size
    if n > MAX_HEADER or n > size - 8:
        raise FormatError(
            f"is not a fingerprint: its header claims {n} bytes (the file has {size}, a fingerprint's header "
            f"at most {MAX_HEADER})",
            path=p,
            hint="the file is truncated or not an hsdiff fingerprint; record it again with `hsdiff fingerprint`",
        )
    header = read_safetensors_header(p)
    meta_raw = header.get("__metadata__") or {}
    if meta_raw.get("format") != FORMAT or not isinstance(meta_raw.get(META_KEY), str):
        raise FormatError(
            "is a safetensors file but not an hsdiff fingerprint (no fingerprint document in its metadata)",
            path=p,
            hint="give the file `hsdiff fingerprint` wrote (hsdiff-fingerprint.safetensors)",
        )
    try:
        meta = json.loads(meta_raw[META_KEY])
    except (ValueError, RecursionError) as e:
        raise FormatError(
            f"fingerprint document is not JSON ({type(e).__name__})", path=p, hint="record it again"
        ) from None
    _check_meta(meta, p)
    _check_entries(header, meta, p)
    table = open_table(p, "safetensors")
    arrays = {k: table.entries[k].loader() for k in _TENSORS}
    fp = Fingerprint(meta, arrays["probe_ids"], arrays["norms"], arrays["sketches"], str(p))
    _check_values(fp, p)
    return fp


def _bad(p: Path, what: str) -> FormatError:
    return FormatError(f"fingerprint document is damaged: {what}", path=p, hint="record the fingerprint again")


def _int(v: Any, lo: int, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _check_meta(meta: Any, p: Path) -> None:
    """The document's structure, before any size it states is used."""
    if not isinstance(meta, dict):
        raise _bad(p, "not a JSON object")
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise FormatError(
            f"fingerprint schema version {str(meta.get('schema_version'))[:20]!r} is not one this hsdiff reads "
            f"({SCHEMA_VERSION})",
            path=p,
            hint="record it again with this hsdiff, or upgrade hsdiff",
        )
    for key in ("target", "sketch", "boundaries", "probes"):
        if not isinstance(meta.get(key), dict):
            raise _bad(p, f"no {key!r} object")
    t, s, b, pr = meta["target"], meta["sketch"], meta["boundaries"], meta["probes"]
    if not _int(t.get("num_hidden_layers"), 1, MAX_BOUNDARIES - 2) or not _int(t.get("hidden_size"), 1, 2**20):
        raise _bad(p, "the target's num_hidden_layers or hidden_size is missing or out of range")
    if t.get("vocab_size") is not None and not _int(t.get("vocab_size"), 1, 2**31 - 1):
        raise _bad(p, "the target's vocab_size is out of range")
    if not _int(s.get("dim"), 1, MAX_DIM) or not _int(s.get("seed"), 0, 2**63 - 1):
        raise _bad(p, "the sketch's dim or seed is missing or out of range")
    if not isinstance(b.get("final_post_norm"), bool):
        raise _bad(p, "boundaries.final_post_norm is not a boolean")
    items = pr.get("items")
    if not isinstance(items, list) or not items or len(items) > MAX_TOKENS:
        raise _bad(p, "probes.items is not a non-empty list")
    if not all(isinstance(i, dict) and _int(i.get("tokens"), 1, MAX_TOKENS) for i in items):
        raise _bad(p, "a probe's token count is missing or out of range")
    if sum(i["tokens"] for i in items) > MAX_TOKENS:
        raise _bad(p, f"more than {MAX_TOKENS} probe tokens")
    training = meta.get("training")
    if training is not None:
        slots = training.get("slots") if isinstance(training, dict) else None
        if not isinstance(slots, list) or len(slots) > 64:
            raise _bad(p, "training.slots is not a list")
        rows = t["num_hidden_layers"] + 2
        for sl in slots:
            if not isinstance(sl, dict) or not _int(sl.get("slot"), 0, 63):
                raise _bad(p, "a training slot has no slot number")
            if sl.get("boundary") is not None and not _int(sl.get("boundary"), 0, rows - 1):
                raise _bad(p, "a training slot's boundary is out of range")
    noise = meta.get("noise_floor")
    if noise is not None:
        per = noise.get("per_boundary") if isinstance(noise, dict) else None
        if per is not None and (
            not isinstance(per, list) or not all(x is None or isinstance(x, (int, float)) for x in per)
        ):
            raise _bad(p, "noise_floor.per_boundary is not a list of numbers")


def _check_entries(header: dict[str, Any], meta: dict[str, Any], p: Path) -> None:
    """Each tensor's dtype and shape against what the document implies (sizes were checked against the file)."""
    L = meta["target"]["num_hidden_layers"]
    rows = L + 1 + (1 if meta["boundaries"]["final_post_norm"] else 0)
    n = sum(i["tokens"] for i in meta["probes"]["items"])
    d = meta["sketch"]["dim"]
    want = {"probe_ids": [n], "norms": [rows, n], "sketches": [rows, n, d]}
    for name, dtype in _TENSORS.items():
        info = header.get(name)
        if not isinstance(info, dict):
            raise FormatError(f"fingerprint has no tensor {name!r}", path=p, hint="record the fingerprint again")
        if info.get("dtype") != dtype or list(info.get("shape") or []) != want[name]:
            raise FormatError(
                f"fingerprint tensor {name!r} is {info.get('dtype')} {info.get('shape')}, the document implies "
                f"{dtype} {want[name]}",
                path=p,
                hint="the file is damaged; record the fingerprint again",
            )
    extra = sorted(set(header) - set(_TENSORS) - {"__metadata__"})
    if extra:
        raise FormatError(f"fingerprint holds unexpected tensors {extra[:5]}", path=p, hint="record it again")


def _check_values(fp: Fingerprint, p: Path) -> None:
    vocab = fp.vocab_size
    ids = fp.probe_ids
    if ids.size and (int(ids.min()) < 0 or (vocab is not None and int(ids.max()) >= vocab)):
        raise _bad(p, f"probe token ids outside the vocabulary (0..{vocab})")
    noise = fp.noise_floor
    if noise is not None and len(noise) != fp.boundaries:
        raise _bad(p, f"noise_floor.per_boundary holds {len(noise)} values for {fp.boundaries} boundaries")


# ---------------------------------------------------------------------------------------------- writing


def write(fp: Fingerprint, path: str | os.PathLike) -> Path:
    """Write ``fp`` as a safetensors file, atomically (a temporary file beside it, then a rename)."""
    from safetensors.numpy import save_file

    out = Path(path)
    if out.is_dir():
        out = out / FILENAME
    out.parent.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, np.ndarray] = {
        "probe_ids": np.ascontiguousarray(fp.probe_ids, dtype=np.int32),
        "norms": np.ascontiguousarray(fp.norms, dtype=np.float32),
        "sketches": np.ascontiguousarray(fp.sketches, dtype=np.float16),
    }
    metadata = {"format": FORMAT, META_KEY: dumps(fp.meta, None)}
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata=metadata)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def document(
    *,
    target: Mapping[str, Any],
    dim: int,
    seed: int,
    final: bool,
    probes: Sequence[Mapping[str, Any]],
    probe_source: str,
    reference: Mapping[str, Any],
    noise_floor: Mapping[str, Any] | None,
    training: Mapping[str, Any] | None,
    draft: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The JSON document of a fingerprint, in the schema's order."""
    from .. import __version__

    return {
        "schema_version": SCHEMA_VERSION,
        "format": FORMAT,
        "hsdiff_version": __version__,
        "target": dict(target),
        "sketch": {
            "dim": dim,
            "seed": seed,
            "projection": "Gaussian N(0, 1/dim) [hidden_size, dim], numpy PCG64(seed) standard_normal in float64",
            "stored": "per token: float32 norm ‖h‖ and float16 unit sketch P·h/‖h‖",
        },
        "boundaries": {"count": None, "final_post_norm": final},
        "reference": dict(reference),
        "noise_floor": None if noise_floor is None else dict(noise_floor),
        "probes": {"source": probe_source, "items": [dict(p) for p in probes]},
        "training": None if training is None else dict(training),
        "draft": None if draft is None else dict(draft),
    }
