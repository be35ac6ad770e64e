"""Running an audit: list the files, fan the per-file pass out on Dask, keep a checkpoint, reduce.

Workers run :func:`~.fingerprint.summarise_batch` on batches of files and send back small
summaries; this process appends each finished batch to a checkpoint (JSON lines) and, once every
file is summarised, runs the grouping pass on the summaries alone. ``workers=0`` runs the same
per-file pass in this process without Dask (a baseline, and for ``memory://`` URLs).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..configs import stated_hidden_size
from ..errors import InputError
from ..extras import needs
from .fingerprint import FileSummary, Job, list_files, summarise_batch
from .groups import analyse
from .report import AuditReport

log = logging.getLogger("hsdiff.audit")

_CHECKPOINT_MAGIC = "hsdiff-audit-checkpoint"


@dataclass(frozen=True)
class AuditOptions:
    """How to run an audit.

    ``workers``: local worker processes (``None``: up to 4, one per core; ``0``: this process, no
    Dask). ``cluster``: a scheduler address (``tcp://host:8786``) instead of local processes.
    ``sample``: audit a random subset of that many files (``seed`` fixes it). ``checkpoint``: the
    JSON-lines file of finished files (default: :func:`default_checkpoint`); ``resume`` reuses it.
    ``tolerance``: the grouping tolerance for every slot; ``None`` measures one per slot from the set's
    own rounding spread (:func:`~.prefix.calibrate`).
    """

    workers: int | None = None
    cluster: str | None = None
    sample: int | None = None
    seed: int = 0
    resume: bool = False
    checkpoint: str | None = None
    hidden_size: int | None = None
    tolerance: float | None = None
    batch_size: int | None = None
    progress: Callable[[str, int, int], None] | None = None


def audit(dataset: str | os.PathLike, options: AuditOptions | None = None, **kwargs: object) -> AuditReport:
    """Audit every training file under ``dataset`` (a directory or an fsspec URL).

    >>> from hsdiff.audit import audit
    >>> report = audit("train_dump/", workers=2)                 # doctest: +SKIP
    >>> report.exit_code, report.majority, [g.files for g in report.groups]
    (1, 'A', [12, 4])
    """
    opts = options or AuditOptions(**kwargs)  # type: ignore[arg-type]
    url = _normalise(str(dataset))
    _check_options(url, opts)
    listed, config = list_files(url)
    _refuse_datasets(url, listed)
    if not listed:
        raise InputError("no files to audit here", path=url, hint="point hsdiff audit at the training-data directory")
    chosen = _sample(listed, opts.sample, opts.seed)
    checkpoint = Path(opts.checkpoint) if opts.checkpoint else default_checkpoint(url)
    check_outside(url, checkpoint)
    sizes = _sizes(url, chosen)
    done = _checkpointed(checkpoint, url) if opts.resume else {}
    reuse = {n for _, n in chosen if n in done and done[n] == sizes.get(n)}
    hint = _config_hidden_size(config)
    todo = [Job(u, n, opts.hidden_size, hint) for u, n in chosen if n not in reuse]
    log.info("audit: %d files, %d from the checkpoint", len(chosen), len(reuse))
    order = {n: i for i, (_, n) in enumerate(chosen)}
    store = CheckpointStore(checkpoint, url, order)
    store.start(keep=reuse)
    total, finished = len(chosen), len(reuse)
    if opts.progress:
        opts.progress("auditing files", finished, total)
    execution = {
        "mode": "in-process" if opts.workers == 0 else ("cluster" if opts.cluster else "local"),
        "files_read": len(todo),
    }
    for batch in _execute(todo, opts, execution):
        store.append(batch)
        finished += len(batch)
        if opts.progress:
            opts.progress("auditing files", finished, total)
    found = analyse(store, tolerance=opts.tolerance, config=config)
    return AuditReport(
        dataset=str(dataset),
        files_listed=len(listed),
        files_scanned=total,
        bytes_read=store.bytes,
        groups=tuple(found.groups),
        problems=tuple(found.problems),
        majority=found.majority,
        warnings=tuple(found.warnings),
        sample=opts.sample,
        files_resumed=len(reuse),
        checkpoint=str(checkpoint),
        execution=execution,
        tolerance=found.tolerance,
        tolerance_source=found.tolerance_source,
    )


def _refuse_datasets(url: str, listed: list[tuple[str, str]]) -> None:
    """An audit reads one sample per file; a dataset packing many samples into shards is refused by name."""
    from ..readers.registry import DATASETS

    for reader in (r for r in DATASETS if r.ENTRY):
        entry = next((n for _, n in listed if n.rsplit("/", 1)[-1] == reader.ENTRY), None)
        if entry is not None:
            raise InputError(
                f"{entry} makes this {reader.TITLE}, whose samples are packed into shards; hsdiff audit reads "
                "training data stored one sample per file",
                path=url,
                hint="compare or inspect it instead (hsdiff compare, hsdiff inspect read every sample)",
            )


def _config_hidden_size(config: dict | None) -> int | None:
    """The target's hidden size a draft or model config.json at the dataset's top states, if any."""
    return stated_hidden_size(config)


def default_checkpoint(url: str) -> Path:
    """``$XDG_CACHE_HOME/hsdiff/audit/<hash of the dataset URL>.jsonl`` (never inside the dataset)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hsdiff" / "audit"
    base.mkdir(parents=True, exist_ok=True)
    return base / f"{hashlib.blake2b(url.encode(), digest_size=8).hexdigest()}.jsonl"


def _normalise(url: str) -> str:
    if "://" in url:
        return url.rstrip("/") if not url.endswith(":///") else url
    return str(Path(url).resolve())


def _check_options(url: str, opts: AuditOptions) -> None:
    if opts.workers is not None and opts.workers < 0:
        raise InputError(f"--workers {opts.workers}: give a number of processes (0 = this process, no Dask)")
    if opts.cluster and opts.workers is not None:
        raise InputError(
            "--workers applies to local processes; with --cluster the cluster's workers are used",
            hint="leave out one of the two",
        )
    if opts.sample is not None and opts.sample < 1:
        raise InputError(f"--sample {opts.sample}: give a positive number of files")
    if url.startswith("memory://") and opts.workers != 0:
        raise InputError(
            "a memory:// filesystem exists only in this process",
            path=url,
            hint="use --workers 0, or a filesystem the workers can reach",
        )
    if "://" not in url and not Path(url).exists():
        raise InputError("no such file or directory", path=url, hint="check the path")


def _sample(listed: list[tuple[str, str]], n: int | None, seed: int) -> list[tuple[str, str]]:
    if n is None or n >= len(listed):
        return listed
    keep = set(random.Random(seed).sample(range(len(listed)), n))
    return [x for i, x in enumerate(listed) if i in keep]


def _sizes(url: str, chosen: list[tuple[str, str]]) -> dict[str, int]:
    from .fingerprint import _fs

    fs, _ = _fs(url)
    out = {}
    for u, n in chosen:
        try:
            out[n] = os.stat(u).st_size if fs is None else int(fs.size(_fs(u)[1]))
        except (OSError, ValueError, TypeError):
            out[n] = -1
    return out


# -- checkpoint --------------------------------------------------------------------------------


def check_outside(dataset: str | os.PathLike, path: str | os.PathLike, what: str = "the checkpoint") -> None:
    """Raise :class:`InputError` when ``path`` lies inside a local ``dataset``: hsdiff never writes there."""
    url = str(dataset)
    if "://" in url and not url.startswith("file://"):
        return
    root = Path(url.removeprefix("file://"))
    root = root if root.is_dir() else root.parent
    try:
        Path(path).resolve().relative_to(root.resolve())
    except ValueError:
        return
    raise InputError(
        f"{what} would be written inside the dataset",
        path=path,
        hint="hsdiff never writes into a dump directory: write it elsewhere",
    )


def _checkpointed(path: Path, url: str) -> dict[str, int]:
    """Name -> size of every file a checkpoint of ``url`` holds (arrays are not decoded)."""
    if not path.exists():
        return {}
    out: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        _check_header(f.readline(), path, url)
        for line in f:
            try:
                d = json.loads(line)
                FileSummary.from_record(d)
            except (ValueError, TypeError, KeyError):
                continue  # the last line of an interrupted write
            out[d["file"]] = d["size"]
    return out


def _check_header(head: str, path: Path, url: str) -> None:
    try:
        meta = json.loads(head)
    except ValueError:
        meta = {}
    if not isinstance(meta, dict) or meta.get("magic") != _CHECKPOINT_MAGIC:
        raise InputError("not an hsdiff audit checkpoint", path=path, hint="remove it or audit without --resume")
    if meta.get("dataset") != url:
        raise InputError(
            f"this checkpoint belongs to another dataset ({meta.get('dataset')})",
            path=path,
            hint="audit without --resume to start anew",
        )


class CheckpointStore:
    """The checkpoint of one audit: summaries appended as batches finish, read back in file order.

    Iterating it yields the summaries in the order of ``order`` (name -> position), one line at a time:
    the central pass never holds them all. Each file's line offset is kept (8 bytes a file).
    """

    def __init__(self, path: Path, url: str, order: dict[str, int]):
        self.path, self.url, self.order = path, url, order
        self.offsets = array("q", [-1]) * len(order)
        self.bytes = 0

    def start(self, keep: set[str]) -> None:
        """Write a new checkpoint holding the lines of the old one for the files in ``keep``."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "wb") as out:
            out.write(json.dumps({"magic": _CHECKPOINT_MAGIC, "version": 1, "dataset": self.url}).encode() + b"\n")
            if keep:
                with open(self.path, "rb") as old:
                    old.readline()
                    for line in old:
                        try:
                            d = json.loads(line)
                        except ValueError:
                            continue
                        name = d.get("file") if isinstance(d, dict) else None
                        if name in keep and self.offsets[self.order[name]] < 0:
                            self.offsets[self.order[name]] = out.tell()
                            self.bytes += d["size"]
                            out.write(line if line.endswith(b"\n") else line + b"\n")
        os.replace(tmp, self.path)

    def append(self, batch: list[FileSummary]) -> None:
        with open(self.path, "ab") as ck:
            for s in batch:
                self.offsets[self.order[s.file]] = ck.tell()
                self.bytes += s.size
                ck.write(json.dumps(s.to_record()).encode() + b"\n")

    def __iter__(self) -> Iterator[FileSummary]:
        with open(self.path, "rb") as f:
            for pos in self.offsets:
                if pos >= 0:
                    f.seek(pos)
                    yield FileSummary.from_record(json.loads(f.readline()))


# -- execution ---------------------------------------------------------------------------------


def _batches(jobs: list[Job], n: int) -> list[list[Job]]:
    return [jobs[i : i + n] for i in range(0, len(jobs), n)]


def _execute(jobs: list[Job], opts: AuditOptions, execution: dict) -> Iterator[list[FileSummary]]:
    if not jobs:
        return
    if opts.workers == 0:
        execution["workers"] = 0
        for batch in _batches(jobs, opts.batch_size or 1):
            yield summarise_batch(batch)
        return
    yield from _execute_dask(jobs, opts, execution)


def _execute_dask(jobs: list[Job], opts: AuditOptions, execution: dict) -> Iterator[list[FileSummary]]:
    with needs("audit", "worker processes and clusters (--workers 0 audits in this process without them)"):
        from dask.distributed import Client, LocalCluster, as_completed
    cluster = None
    if opts.cluster:
        try:
            client = Client(opts.cluster, timeout="30s")
        except (OSError, TimeoutError, ValueError) as e:
            raise InputError(
                f"cannot reach the Dask scheduler ({e})",
                path=opts.cluster,
                hint="check the address (tcp://host:8786) and that dask-scheduler is running",
            ) from None
    else:
        n = opts.workers or max(1, min(4, os.cpu_count() or 1))
        cluster = LocalCluster(
            n_workers=n,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            scheduler_port=0,
            silence_logs=logging.ERROR,
        )
        client = Client(cluster)
    try:
        workers = max(1, len(client.scheduler_info().get("workers", {})))
        execution["workers"] = workers
        size = opts.batch_size or max(1, min(32, math.ceil(len(jobs) / (workers * 8))))
        execution["batch_size"] = size
        futures = client.map(summarise_batch, _batches(jobs, size), pure=False)
        for fut in as_completed(futures):
            yield fut.result()
            fut.release()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def summaries_in(path: str | os.PathLike) -> Iterable[FileSummary]:
    """The summaries a checkpoint holds (for inspection)."""
    with open(path, encoding="utf-8") as f:
        f.readline()
        for line in f:
            yield FileSummary.from_record(json.loads(line))
