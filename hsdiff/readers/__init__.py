"""Readers: one module per dump format, a registry built from them, and detection by content.

:func:`scan` walks a file or directory and returns a :class:`~hsdiff.model.Dump` of lazy captures;
:func:`read_file` reads one file. The format of each file is decided from what it holds (magic
bytes, then keys), not its suffix; ``fmt`` forces one format for every file.

The package:

* one module per format, its name the format's key (the same string in ``--format`` and in the
  JSON report): ``specforge``, ``modelopt``, ``eagle``, ``sglang_dumper``, ``vllm``, ``hf``,
  ``tensors`` (tensor files) and the ``debuglog`` package (text logs). Each declares its ``KEY``,
  what it ``READS``, its detection ``PRIORITY`` and ``sniff``; :mod:`~hsdiff.readers.registry` lists them,
  each typed as its kind's Protocol (``TableReader``, ``TextReader``, ``DatasetReader``);
* ``_container/``: opening files safely, one backend module per container (torch, safetensors,
  numpy, gzip) behind a small table; :func:`read_safetensors_header` is the one safetensors header
  reader;
* ``_common``: what the format modules share (the read context, layer numbers from names, token ids).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from ..arrays import as_f32, lower_median
from ..errors import FormatError, HsdiffError, InputError
from ..model import Capture, Dump, pct
from ..sinks import ordinary_mask
from . import sglang_dumper, speculators
from ._common import ReadContext
from ._container import (
    claimed_format,
    cleanup,
    not_what_it_claims,
    open_table,
    read_safetensors_header,
    sniff_container,
)
from .registry import BY_KEY, DATASETS, DETECTION, FORMATS, LOG_SUFFIXES, TABLES, TEXT_READER, DatasetReader, accepts

__all__ = [
    "FORMATS",
    "ReadContext",
    "scan",
    "read_file",
    "read_safetensors_header",
    "replica_groups",
    "replica_difference",
    "RANK_SEQUENCE",
    "rank_sequence",
]

log = logging.getLogger("hsdiff.readers")

#: The safetensors metadata ``format`` of an hsdiff fingerprint (:mod:`hsdiff.fingerprint`): no dump, never read as one.
FINGERPRINT = "hsdiff-fingerprint"

#: Suffixes of files no reader looks into when scanning a folder (configs, text, code, pictures).
SKIP_SUFFIXES = {
    ".json",
    ".jsonl",
    ".md",
    ".py",
    ".sh",
    ".yaml",
    ".yml",
    ".toml",
    ".cfg",
    ".lock",
    ".png",
    ".csv",
    ".ipynb",
}


def read_file(path: Path, ctx: ReadContext, fmt: str | None = None) -> list[Capture]:
    """Captures in one file; raises :class:`FormatError` when the file is damaged or unreadable.

    ``fmt`` forces a format; otherwise text goes to the text reader and a tensor file to the first
    table reader (by ``PRIORITY``) whose ``sniff`` accepts it.

    >>> caps = read_file(Path("fixtures/seed/train/rows_0-2000/data_0.ckpt"), ReadContext("train"))  # doctest: +SKIP
    >>> caps[0].origin.format  # doctest: +SKIP
    'specforge'
    """
    dataset = _dataset(path, fmt)
    if dataset is not None:
        try:
            return list(dataset.read(path, ctx))
        except OSError as e:  # the index, a shard or a manifest that cannot be read
            where = e.filename or path
            raise InputError(
                f"cannot read ({e.strerror or e})",
                path=where,
                hint="make the dataset's files readable (chmod +r) or leave it out",
            ) from None
    try:
        container = sniff_container(path)
    except PermissionError:
        raise InputError(
            "permission denied", path=path, hint="make the file readable (chmod +r) or leave it out"
        ) from None
    except IsADirectoryError:
        raise InputError("is a directory", path=path) from None
    except OSError as e:
        raise InputError(f"cannot read ({e.strerror or e})", path=path) from None
    if container == "empty":
        raise FormatError("file is empty", path=path, hint="the dump was not written completely; re-run it")
    reads_text = fmt is not None and fmt == TEXT_READER.KEY
    if container in ("text", "binary") and not reads_text and claimed_format(path) is not None:
        raise not_what_it_claims(path, container)
    if container == "binary" and not reads_text and path.suffix.lower() not in LOG_SUFFIXES:
        raise FormatError(
            "not in any format hsdiff reads (unrecognised binary data)",
            path=path,
            hint=f"hsdiff reads {', '.join(FORMATS)}; point it at the dump itself",
        )
    if container in ("text", "binary") or reads_text:
        if fmt is not None and not reads_text:
            raise FormatError(f"not a {fmt} file: it holds text", path=path)
        return list(TEXT_READER.read(path, ctx))
    table = open_table(path, container)
    try:
        if table.metadata.get("format") == FINGERPRINT:
            ctx.warnings.append(
                f"{ctx.rel(path)}: an hsdiff fingerprint, not a dump: skipped (give it as TRAIN to compare, or to "
                "gate --fingerprint)"
            )
            ctx.consumed.add(path)
            return []
        if fmt is not None:
            forced = TABLES.get(fmt)
            if forced is None:
                raise InputError(f"unknown format {fmt!r}", hint=f"choose one of: {', '.join(FORMATS)}")
            if not accepts(forced, table):
                raise FormatError(f"does not look like a {fmt} file (keys: {sorted(table.keys())[:8]})", path=path)
            return list(forced.read(table, ctx))
        for reader in DETECTION:
            if reader.sniff(table):
                return list(reader.read(table, ctx))
        return []
    finally:
        cleanup(table)


def _dataset(path: Path, fmt: str | None) -> DatasetReader | None:
    """The dataset reader whose entry point ``path`` is (with ``fmt``, that format's only), or None."""
    found = next((r for r in DATASETS if (fmt is None or fmt == r.KEY) and path.is_file() and r.claims(path)), None)
    if found is None and fmt is not None and BY_KEY.get(fmt) in DATASETS:
        raise FormatError(
            f"not the entry point of a {fmt} dataset",
            path=path,
            hint=f"point hsdiff at the {fmt} dataset's directory or its index file",
        )
    return found


def _walk(root: Path) -> Iterable[Path]:
    seen: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False, onerror=_walk_error):
        st = os.stat(dirpath)
        if (st.st_dev, st.st_ino) in seen:
            dirnames[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames, key=_natural):
            if not name.startswith("."):
                yield Path(dirpath) / name


def _walk_error(e: OSError) -> None:
    raise InputError(
        f"cannot list directory ({e.strerror or e})",
        path=e.filename,
        hint="make it readable (chmod +rx) or leave it out",
    )


def _natural(name: str) -> tuple:
    import re

    return tuple(int(p) if p.isdecimal() else p for p in re.split(r"(\d+)", name))  # "²" is a digit, not decimal


def scan(
    path: str | os.PathLike,
    side: str,
    *,
    fmt: str | None = None,
    index: str = "boundary",
    progress: Callable[[int, int, Path], None] | None = None,
    log_pattern: str | None = None,
    keep_ranks: bool = False,
    format_name: str = "fmt",
) -> Dump:
    """Read every capture under ``path`` (a file or a directory, scanned recursively).

    ``log_pattern`` is a regular expression with a named group ``values`` for debug logs in an
    unusual format (see :mod:`hsdiff.readers.debuglog`). ``keep_ranks`` leaves the captures of
    each tensor-parallel rank apart (by default replicas collapse into one, loading them to check).
    ``format_name`` is the parameter that forces a format where the caller reads it (named in hints).

    >>> dump = scan("fixtures/seed/train", "train")          # doctest: +SKIP
    >>> dump.captures[0].shape
    (1, 33, 1728)
    """
    root = Path(path)
    try:
        exists = root.exists()
    except OSError as e:  # a parent directory that cannot be entered
        raise InputError(
            f"cannot look at this path ({e.strerror or e})",
            path=root,
            hint="make it and the directories above it readable (chmod +rx)",
        ) from None
    if not exists:
        if root.is_symlink():
            raise InputError(
                "symbolic link that leads nowhere (broken, or a loop)", path=root, hint="check the link target"
            )
        raise InputError("no such file or directory", path=root, hint="check the path")
    if fmt is not None and fmt not in FORMATS:
        raise InputError(
            f"unknown format {fmt!r} for `{format_name}`",
            hint=f"choose one of: {', '.join(FORMATS)}",
            options=(format_name,),
        )
    ctx = ReadContext(side=side, index=index, root=root if root.is_dir() else root.parent, log_pattern=log_pattern)
    if root.is_dir():
        files = [
            p
            for p in _walk(root)
            if (p.suffix.lower() not in SKIP_SUFFIXES or p.name == "config.json" or _dataset(p, None) is not None)
            and p.name not in speculators.PROVENANCE_FILES
        ]
        explicit = False
    else:
        files = [root]
        explicit = True
    captures: list[Capture] = []
    configs: list[tuple[str, dict]] = []
    skipped: list[str] = []
    for i, p in enumerate(files):
        if progress is not None:
            progress(i, len(files), p)
        if p in ctx.consumed:  # read with a file before it (a dataset's shards, a pair's second half)
            continue
        if p.suffix.lower() == ".json" and _dataset(p, None) is None:
            configs.append((str(p), _read_json(p)))
            continue
        if not explicit and p.is_symlink() and not p.exists():
            ctx.warnings.append(f"{ctx.rel(p)}: broken symbolic link, skipped")
            continue
        if not explicit and fmt is None:
            try:
                container = sniff_container(p)
                if (
                    container in ("text", "binary")
                    and claimed_format(p) is None
                    and p.suffix.lower() not in LOG_SUFFIXES
                    and _dataset(p, None) is None
                ):
                    skipped.append(ctx.rel(p))
                    continue
            except OSError as e:
                raise InputError(
                    f"cannot read ({e.strerror or e})", path=p, hint="make it readable or leave it out"
                ) from None
        norms_before = len(ctx.norm_prints)
        try:
            found = read_file(p, ctx, fmt)
        except FormatError:
            # a server log beside the dumps that prints no tensor is no error: skip it
            if explicit or p.suffix.lower() not in LOG_SUFFIXES or fmt not in (None, "debuglog"):
                raise
            found = []
        if not found and p not in ctx.consumed and len(ctx.norm_prints) == norms_before:
            skipped.append(ctx.rel(p))
        captures.extend(found)
    if skipped:
        ctx.warnings.append(
            f"{len(skipped)} file(s) held no hidden states hsdiff recognises and were skipped: "
            + ", ".join(skipped[:5])
            + (" ..." if len(skipped) > 5 else "")
        )
    captures = _attach_token_ids(captures, ctx.warnings)
    if not keep_ranks:
        captures = _collapse_ranks(captures, ctx.warnings, ctx.rank_conflicts)
    if not captures and ctx.norm_prints:
        return Dump((), tuple(configs), tuple(ctx.warnings), files=len(files), norm_prints=tuple(ctx.norm_prints))
    if not captures:
        where = "directory" if root.is_dir() else "file"
        why = f" ({ctx.warnings[0] if len(ctx.warnings) == 1 else '; '.join(ctx.warnings[:2])})" if ctx.warnings else ""
        raise FormatError(
            f"no hidden states found in this {where}{why[:400]}",
            path=root,
            hint=f"hsdiff reads {', '.join(FORMATS)}; point it at the dump itself or pass `{format_name}=FORMAT`",
            options=(format_name,),
        )
    return Dump(
        tuple(captures), tuple(configs), tuple(ctx.warnings), files=len(files), rank_conflicts=tuple(ctx.rank_conflicts)
    )


def _read_json(p: Path) -> dict:
    try:
        with open(p, encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"config is not valid JSON ({e})", path=p, hint="fix or remove the file") from None
    return obj if isinstance(obj, dict) else {}


def _attach_token_ids(captures: list[Capture], warnings: list[str]) -> list[Capture]:
    """SGLang dumper writes ``input_ids`` as its own capture: give its ids to the rest of the group."""
    ids_by_group: dict[tuple[str | None, int | None], tuple[int, ...]] = {}
    rest = []
    for c in captures:
        if sglang_dumper.is_token_ids(c) or (
            c.dtype.startswith(("int", "uint")) and c.origin.format == "sglang_dumper"
        ):
            if sglang_dumper.is_token_ids(c):
                ids_by_group[(c.group, c.rank)] = tuple(int(v) for v in c.array().reshape(-1).tolist())
            else:
                warnings.append(f"{c.origin}: integer tensor ({c.dtype}) is not a hidden state; skipped")
            continue
        rest.append(c)
    if not ids_by_group:
        return rest
    out = []
    for c in rest:
        ids = ids_by_group.get((c.group, c.rank)) or ids_by_group.get((c.group, 0))
        out.append(c.replace(token_ids=ids) if ids is not None and c.token_ids is None else c)
    return out


#: Replicas of one tensor agree when no ordinary token differs by more than this (relative to its norm):
#: tensor-parallel ranks hold the same all-reduced residual stream, bit for bit or within rounding.
_REPLICA_TOLERANCE = 1e-2


def replica_groups(captures: Iterable[Capture]) -> list[list[Capture]]:
    """The captures of one tensor (forward pass, key, slot, layer) from different TP ranks, lowest rank
    first; a capture with no rank is a group of its own. The same tensor dumped twice by one rank (a
    later ``dump_index``) is another tensor, not another rank."""
    by_key: dict[tuple, list[Capture]] = {}
    seen: dict[tuple, int] = {}
    for c in captures:
        if c.rank is None:
            key: tuple = ("single", id(c))
        else:
            tensor = (c.group, c.origin.key, c.slot, c.boundary)
            repeat = seen.get((tensor, c.rank), 0)  # files come in dump_index order within a rank
            seen[(tensor, c.rank)] = repeat + 1
            key = (*tensor, repeat)
        by_key.setdefault(key, []).append(c)
    return [sorted(g, key=lambda c: c.rank or 0) for g in by_key.values()]


def _collapse_ranks(captures: list[Capture], warnings: list[str], conflicts: list[str]) -> list[Capture]:
    """Replicas of one tensor from several TP ranks become one capture; disagreement is reported.

    Ranks are compared token by token on ordinary tokens (:func:`replica_difference`): an attention
    sink's norm would hide a broken rank in a whole-tensor error. Disagreements go to ``conflicts``
    (one sentence each).
    """
    out = []
    for group in replica_groups(captures):
        if len(group) == 1:
            out.append(group[0])
            continue
        base = group[0]
        apart = _tokens_apart(group)
        if apart:
            warnings.append(
                f"{base.origin.path} [{base.origin.key}]: {apart}; read as separate sequences (data "
                "parallel, or parts of one sequence), not as tensor-parallel replicas"
            )
            out.extend(c.replace(group=rank_sequence(c.group, c.rank)) for c in group)
            continue
        disagree = []
        try:
            ref = as_f32(base.array())
            for other in group[1:]:
                why = replica_difference(ref, as_f32(other.array()))
                if why:
                    disagree.append(f"rank {other.rank} {why} rank {base.rank}")
        except HsdiffError:
            raise
        except (RuntimeError, ValueError) as e:  # pragma: no cover - damaged member already reported
            disagree.append(str(e))
        if disagree:
            name = base.origin.key or base.origin.path
            conflicts.append(f"{'; '.join(disagree)} on {name} ({base.origin.path})")
            warnings.append(
                f"{base.origin.path} [{base.origin.key}]: tensor-parallel ranks disagree ({'; '.join(disagree)}); "
                f"using rank {base.rank}"
            )
        out.append(base.replace(rank=None) if not disagree else base)
    return out


#: Joins a forward pass's name and a rank whose tokens are its own (:func:`rank_sequence`).
RANK_SEQUENCE = "@rank"


def rank_sequence(group: str | None, rank: int | None) -> str:
    """The name of the sequence one rank holds when the ranks hold different tokens."""
    return f"{group or ''}{RANK_SEQUENCE}{rank}"


def _tokens_apart(group: Sequence[Capture]) -> str:
    """Why the ranks of one tensor hold different tokens, as their token ids say (other ids, or another
    count of them), in words; "" when they may be replicas. Tensor-parallel replicas run the same
    tokens; ranks that hold other requests (data-parallel attention) or other tokens of one (sequence
    parallelism) do not. Without token ids, a rank with another token count stays a replica that
    disagrees (a tensor cut short says nothing of which tokens it holds)."""
    base = group[0]
    for other in group[1:]:
        if base.token_ids is not None and other.token_ids is not None and other.token_ids != base.token_ids:
            return (
                f"ranks {base.rank} and {other.rank} hold different token ids ({len(base.token_ids)} and "
                f"{len(other.token_ids)} tokens)"
            )
    return ""


def replica_difference(ref: np.ndarray, t: np.ndarray) -> str | None:
    """How replica ``t`` (``[tokens, width]``) differs from ``ref``, in words ending before the rank it is
    compared with (``"differs by 37% (median over 23 ordinary tokens; 23 beyond 1%) from"``), or None
    when every ordinary token agrees within :data:`_REPLICA_TOLERANCE`."""
    if t.shape != ref.shape:
        return f"has shape {tuple(t.shape)}, against {tuple(ref.shape)} on"
    with np.errstate(all="ignore"):
        norms = np.linalg.norm(ref, axis=-1)
        err = np.linalg.norm(t - ref, axis=-1) / np.maximum(norms, 1e-12)
        ordinary = ordinary_mask(norms)
    used = err[ordinary] if bool(ordinary.any()) else err
    bad = ~np.isfinite(used) | (used > _REPLICA_TOLERANCE)
    if not bool(bad.any()):
        return None
    what = "ordinary tokens" if bool(ordinary.any()) and not bool(ordinary.all()) else "tokens"
    finite_err = used[np.isfinite(used)]
    median = pct(lower_median(finite_err)) if finite_err.size else "non-finite values"
    return (
        f"differs by {median} (median over {used.size} {what}; {int(bad.sum())} beyond {_REPLICA_TOLERANCE:.0%}) from"
    )
