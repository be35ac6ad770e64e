"""``hsdiff fix-config``: write the right layer ids where the engine reads them.

The ids come from a report (``hsdiff gate --json`` or ``hsdiff compare --json``) whose verdict was
confident, or are given explicitly. The config is rewritten atomically (a temporary file beside it,
then a rename), the original is kept byte for byte as ``config.json.bak`` (``.bak.1`` ... if that
exists), and the change is returned as a unified diff. Nothing else is written.

>>> result = fix_config("draft/config.json", [2, 30, 58], engine="sglang")   # doctest: +SKIP
>>> print(result.diff)                                                       # doctest: +SKIP
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .configs import config_value, parse_json, read_config_ids, read_json
from .errors import ConfigError, InputError
from .model import EngineVersion, Settings
from .model.results import why_not_writable
from .rules import conventions as conv
from .rules.serving import ObstacleKind, as_written, serve
from .rules.settings import TITLES, engine_version, family_key

__all__ = ["FixResult", "fix_config", "ids_from_report", "ReportIds"]


@dataclass(frozen=True)
class ReportIds:
    """The ids a report recommends, for the engine and version they are written for.

    ``at`` is the engine, version and convention-table row the ids are right for: the report's own, or,
    when the caller asked to translate, the one asked for (``translated_from`` then names the report's).
    """

    ids: tuple[int, ...]
    boundaries: tuple[int, ...]
    num_layers: int | None
    model_family: str | None
    verdict: str
    at: EngineVersion
    translated_from: EngineVersion | None = None
    notes: tuple[str, ...] = ()
    #: the dumps the report read (training, inference): a config inside one is their label, not a draft's
    dumps: tuple[tuple[str, str], ...] = ()
    kind: str = "eagle3"  #: the draft kind the report read the ids for

    @property
    def engine(self) -> str:
        return self.at.engine

    @property
    def version(self) -> str | None:
        return self.at.version


@dataclass(frozen=True)
class FixResult:
    path: str
    backup: str | None
    engine: str
    key: str
    old: Any
    new: tuple[int, ...]
    diff: str
    changed: bool
    written: bool
    warnings: tuple[str, ...] = ()
    version: str | None = None  # the engine version the ids are written for

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "backup": self.backup,
            "engine": self.engine,
            "version": self.version,
            "key": self.key,
            "old": self.old,
            "new": list(self.new),
            "changed": self.changed,
            "written": self.written,
            "warnings": list(self.warnings),
        }


def ids_from_report(
    path: str | os.PathLike,
    engine: str | None = None,
    *,
    model_family: str | None = None,
    engine_versions: Sequence[str] = (),
    translate: bool = False,
) -> ReportIds:
    """The ids a JSON report recommends, for the engine and version the report was made for; refuses a
    report that is not confident.

    ``engine``, its version and ``model_family`` (None: the report's) must agree with the report's
    settings: the same layers are other ids on another engine, version or model family, so a
    contradiction is an :class:`InputError` naming both, unless ``translate`` asks for the ids that
    make the engine asked for capture the report's layers. ``engine_versions`` are ``--engine-version``
    values (``sglang==0.5.23``); one naming another engine than the report's asks for that engine.
    A report of schema 1 recorded no engine version: its ids are taken when they read back as its
    layers at the version given (default the newest).
    Accepts the JSON of ``hsdiff compare --json`` and of ``hsdiff gate --json``.
    """
    p = Path(path)
    report = _confident_report(p)
    settings = Settings.from_doc(report, TITLES)
    own = settings.engine
    rec = report["recommended"]
    bs = [int(b) for b in rec["boundary_indices"]]
    L = report.get("num_hidden_layers")
    key = rule_key(engine or _named_engine(engine_versions, own.engine))
    family = settings.model_family if model_family is None else family_key(model_family)
    version = conv.versions(engine_versions, [key])[key] if engine_versions else None
    if version is None:  # the report's own version, or the one it assumed for ``key`` in by_engine
        assumed = settings.version_of(key)
        version = assumed.version if assumed is not None else None
    at = engine_version(key, version, family)
    differs = _contradiction(
        own,
        settings.model_family,
        at,
        family,
        f"--engine {key}" if engine else "--engine-version " + ", ".join(engine_versions),
    )
    if differs and not translate:
        fam = (
            (f" ({settings.model_family} family)", f" ({family} family)") if differs.startswith("--model") else ("", "")
        )
        raise InputError(
            f"the report was made for {own.words()}{fam[0]}, but {differs} asks for {at.words()}{fam[1]}: "
            "its ids are right only for the engine, version and family they were derived for",
            path=p,
            hint=f"drop the option to write the report's ids for {own.title}"
            f"{' ' + own.version if own.version else ''}, or add --translate to write the ids of the same "
            f"layers for {at.title} {at.version}",
        )
    kind = settings.draft_kind
    served = serve(bs, key, num_layers=L, model_family=family, version=at.version, kind=kind)
    if not served.ok or any(i is None for i in served.ids):
        raise InputError(
            "no ids make the engine feed the draft what it was trained on: " + " ".join(served.sentences()),
            path=p,
            hint="serve the draft where the report says it can be served, or retrain it",
        )
    ids = [int(i) for i in served.ids if i is not None]
    notes: list[str] = []
    if not differs:
        ids, notes = _own_ids(p, rec, own, at, (bs, L, family, kind), ids)
    inputs = report.get("inputs")
    dumps = tuple(
        (side, inputs[side])
        for side in ("train", "infer")
        if isinstance(inputs, dict) and isinstance(inputs.get(side), str)
    )
    return ReportIds(
        tuple(ids),
        tuple(bs),
        L,
        family,
        str(report.get("verdict")),
        at,
        own if differs else None,
        tuple(notes),
        dumps,
        kind,
    )


def _named_engine(given: Sequence[str], own: str) -> str:
    """The engine ``--engine-version`` values name, when they do not name ``own`` (or its alias, SpecForge's
    ``sglang==``); else ``own``."""
    try:
        conv.versions(given, [own])
        return own
    except InputError:  # another engine's version: the one asked for
        pass
    for v in given:
        try:
            return conv.rule(v.split("==")[0].strip()).key
        except InputError:
            continue
    return own


def _confident_report(p: Path) -> dict:
    """The report in a compare or gate JSON file, refused when its ids would be a guess."""
    obj = read_json(
        p,
        what="report",
        error=InputError,
        missing="no such report",
        missing_hint="give the file written by hsdiff gate/compare --json",
        bad_hint="give the file written by --json",
    )
    report = obj.get("report") if isinstance(obj, dict) and isinstance(obj.get("report"), dict) else obj
    if not isinstance(report, dict) or "slots" not in report or "recommended" not in report:
        if isinstance(obj, dict) and obj.get("command") == "gate" and obj.get("report") is None:
            raise InputError(
                "the gate stopped before comparing, so this report recommends no ids",
                path=p,
                hint="fix the failed checks it lists, or give --layer-ids",
            )
        raise InputError(
            "not an hsdiff report (no slots/recommended)",
            path=p,
            hint="give the file written by hsdiff gate --json or hsdiff compare --json",
        )
    problems = why_not_writable(
        str(report.get("verdict")),
        [(s.get("boundary_index"), s.get("status"), s.get("evidence")) for s in report.get("slots") or []],
        (report.get("recommended") or {}).get("boundary_indices") or [],
    )
    if problems:
        raise InputError(
            f"the report is not confident ({'; '.join(problems)}): its ids would be a guess",
            path=p,
            hint="capture more layers (docs/capture.md) and re-run hsdiff gate, or give --layer-ids explicitly",
        )
    return report


def _contradiction(own: EngineVersion, own_family: str, at: EngineVersion, family: str, engine_option: str) -> str:
    """Which option asks for other ids than the report's ("--engine vllm"), or ""."""
    if at.engine != own.engine:
        return engine_option
    if own.version is not None and at.version != own.version:
        return f"--engine-version {at.engine}=={at.version}"
    if family != own_family and at.rule != own.rule:
        return f"--model-family {family}"
    return ""


def _own_ids(
    p: Path,
    rec: dict,
    own: EngineVersion,
    at: EngineVersion,
    layers: tuple[list[int], int | None, str, str],
    derived: list[int],
) -> tuple[list[int], list[str]]:
    """The report's own ids, once read back as ``at`` reads them they capture the report's layers
    (``layers``: the report's boundaries, L, model family and draft kind)."""
    bs, L, family, kind = layers
    ids = [int(i) for i in rec.get("eagle_aux_hidden_state_layer_ids") or () if i is not None]
    try:
        read = conv.to_boundary(ids, at.engine, num_layers=L, model_family=family, version=at.version, kind=kind)
    except InputError:
        read = []
    if read == conv.slot_order(bs, at.engine, L, at.version) and len(ids) == len(bs):
        notes = (
            []
            if own.version
            else [
                f"the report does not record the engine version (schema 1); its ids {ids} capture its layers on "
                f"{at.words()}, the version assumed"
            ]
        )
        return ids, notes
    if own.version is None:
        raise InputError(
            f"the report does not record the engine version (schema 1), and its ids {ids} do not capture its layers "
            f"B{bs} on {at.words()}",
            path=p,
            hint=f"give --engine-version {at.engine}==VERSION, the version the report was made for, or re-run "
            "hsdiff compare to get a report that records it",
        )
    raise InputError(
        f"the report's ids {ids} do not capture its layers B{bs} on {at.words()} as this hsdiff reads them "
        f"({derived} would): its convention table differs from the one that wrote the report",
        path=p,
        hint="re-run hsdiff compare (or gate) with this hsdiff and fix the config from the new report",
    )


def rule_key(engine: str) -> str:
    return conv.rule(engine).key


def _capturable(ids: Sequence[int], engine: str, family: str | None, version: str, kind: str) -> None:
    """Refuse ids naming a layer the engine never captures, where that is known without the target's layer
    count (an id below the lowest it takes: -1 on an engine whose loop never names the embeddings)."""
    try:
        b = conv.to_boundary(ids, engine, model_family=family, version=version, kind=kind, check_range=False)
        served = serve(b, engine, model_family=family, version=version, kind=kind)
    except InputError:  # a rule that needs the layer count: check-config, with the target, judges it
        return
    lost = [o for o in served.obstacles if o.kind == ObstacleKind.UNCAPTURABLE]
    if lost:
        raise InputError(
            f"{ids} names a layer {conv.rule(engine).title} never captures: " + " ".join(o.sentence() for o in lost),
            hint="write ids the engine captures (`hsdiff ids --explain`), or serve the draft elsewhere",
        )


def _writes_some_key(engine: str, kind: str | None) -> None:
    """Raise what :func:`hsdiff.rules.conventions.write_key` says when ``engine`` reads no draft-config key for
    ``kind`` (None: for any kind; the config's own kind is known only once it is read)."""
    errors: list[InputError] = []
    for k in [kind] if kind else list(conv.DRAFT_KINDS):
        try:
            conv.write_key(engine, k)
            return
        except InputError as e:
            errors.append(e)
    raise errors[0]


def fix_config(
    path: str | os.PathLike,
    ids: Sequence[int],
    *,
    engine: str = "sglang",
    dry_run: bool = False,
    model_family: str | None = None,
    version: str | None = None,
    dumps: Sequence[tuple[str, str]] = (),
    kind: str | None = None,
) -> FixResult:
    """Write ``ids`` into the draft config at the key ``engine`` reads for a draft of ``kind`` (None: the kind
    the config's architectures state, :func:`hsdiff.rules.kinds.kind_from_config`); keep a byte-exact backup.

    Refuses an engine that reads no ids from a draft config (TensorRT-LLM reads ``eagle3_layers_to_capture``
    from its speculative config), so that nothing is written where no engine looks; and a config inside
    one of ``dumps`` (``(side, path)``, the dumps a report read): hsdiff reads a config beside a dump as
    that dump's labels, so rewriting it would change the evidence of the next comparison.
    """
    engine = rule_key(engine)
    _writes_some_key(engine, kind)  # refuse an engine that reads no draft config before reading anything
    version = conv.parse_version(engine, version)
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    _outside_dumps(p, dumps)
    ids = [int(i) for i in ids]
    if not ids:
        raise InputError("no layer ids to write", hint="give them, e.g. --layer-ids 2,30,58")
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError("no such config file", path=p, hint="give the draft model's config.json") from None
    except OSError as e:
        raise ConfigError(f"cannot read ({e.strerror or e})", path=p) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"not a readable JSON config ({e})", path=p, hint="fix the file by hand first") from None
    cfg = parse_json(text, p, bad_hint="fix the file by hand first")
    if not isinstance(cfg, dict):
        raise ConfigError("config is not a JSON object", path=p)
    stated = conv.kind_from_config(cfg)
    kind = conv.draft_kind(kind or stated.key).key
    key = conv.write_key(engine, kind)
    if not as_written(ids, engine, model_family=model_family, version=version, kind=kind):
        raise InputError(
            f"{ids} is not ascending without repeats; engines capture in layer order and once per layer",
            hint=f"write {sorted(set(ids))} if that is the order the draft was trained in",
        )
    _capturable(ids, engine, model_family, version, kind)
    new_cfg = copy.deepcopy(cfg)
    node = new_cfg
    for part in key[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{part} is not a JSON object", path=p, hint="fix the file by hand first")
        node = child
    old = node.get(key[-1])
    node[key[-1]] = ids
    new_text = json.dumps(new_cfg, indent=_indent(text), ensure_ascii=False) + "\n"
    own = (
        _other_key_warnings(new_cfg, engine)
        if conv.draft_kind(kind).reading == conv.EAGLE3
        else _left_keys(new_cfg, engine, key, kind, ids)
    )
    warnings = own + _shadowed(new_cfg, engine, key, kind, stated)
    changed = old != ids
    diff = "".join(
        difflib.unified_diff(
            text.splitlines(keepends=True),
            new_text.splitlines(keepends=True),
            fromfile=f"{p} (before)",
            tofile=f"{p} (after)",
        )
    )
    if not changed or dry_run:
        return FixResult(
            str(p),
            None,
            engine,
            conv.key_name(key),
            old,
            tuple(ids),
            diff if changed else "",
            changed,
            False,
            tuple(warnings),
            version,
        )
    backup = _backup_path(p)
    _atomic_write(backup, raw, like=p)
    _atomic_write(p, new_text.encode("utf-8"), like=p)
    return FixResult(
        str(p), str(backup), engine, conv.key_name(key), old, tuple(ids), diff, True, True, tuple(warnings), version
    )


def _outside_dumps(p: Path, dumps: Sequence[tuple[str, str]]) -> None:
    """Refuse a config that sits in a dump's folder (a dump given as a file: the folder holding it)."""
    where = p.resolve()
    for side, d in dumps:
        folder = Path(d).resolve()
        if not folder.is_dir():
            folder = folder.parent
        if where.is_relative_to(folder):
            what = "training" if side == "train" else "inference"
            raise InputError(
                f"this config sits in the {what} dump the report read ({d}): hsdiff reads it as that dump's "
                "labels, so rewriting it would change the evidence of the next comparison",
                path=p,
                hint="write the config of the draft you deploy: copy it out of the dump and give that copy",
            )


def _indent(text: str) -> int:
    for line in text.splitlines()[1:]:
        stripped = line.lstrip(" ")
        if stripped and len(line) != len(stripped):
            return len(line) - len(stripped)
    return 2


def _other_key_warnings(cfg: dict[str, Any], engine: str) -> list[str]:
    """What to say about the key ``engine``'s profile names as left in place although another engine reads it."""
    info = conv.rule(engine)
    value = config_value(cfg, info.left_key)[1] if info.left_key else None
    return [] if value is None else [info.left_key_note.format(value=value)]


def _left_keys(cfg: dict[str, Any], engine: str, key: tuple[str, ...], kind: str, ids: list[int]) -> list[str]:
    """A DFlash-family draft: the other id keys left in place that hold other ids, and who reads them (they then
    feed the draft other layers there)."""
    out = []
    for k in conv.id_keys(kind):
        value = config_value(cfg, k)[1]
        if tuple(k) == tuple(key) or not isinstance(value, list) or not value or value == ids:
            continue
        readers = [
            conv.rule(e).title
            for e in conv.readers_of(k, kind)
            if e != engine
            and any(
                (found := read_config_ids(cfg, e, vllm_runner=r, kind=kind)[1]) is not None and tuple(found) == tuple(k)
                for r in conv.rule(e).runners or (conv.DEFAULT_RUNNER,)
            )
        ]  # those that read it first, with the written key in place
        who = f"{', '.join(readers)} read{'s' if len(readers) == 1 else ''} it" if readers else "no engine reads it"
        out.append(
            f"{conv.key_name(k)} {value} was left as it is ({who}): check that it names the same layers there "
            "(`hsdiff ids`), or remove it"
        )
    return out


def _shadowed(cfg: dict[str, Any], engine: str, key: tuple[str, ...], kind: str, stated: Any) -> list[str]:
    """What to say when ``engine`` would not read the key just written: another key it reads first holds ids
    (for each of its model runners), or the config states another draft kind."""
    out = []
    if conv.draft_kind(kind).reading != stated.reading:
        out.append(
            f"the draft config's architectures say {stated.title}, but the ids were written for "
            f"{_article(conv.draft_kind(kind).title)} draft (--draft-kind); check which it is"
        )
    for runner in conv.rule(engine).runners or (conv.DEFAULT_RUNNER,):
        _, read = read_config_ids(cfg, engine, vllm_runner=runner, kind=kind)
        if read is not None and tuple(read) != tuple(key):
            where = f" ({runner} runner)" if conv.rule(engine).runners else ""
            out.append(
                f"{conv.rule(engine).title}{where} reads {conv.key_name(read)} before "
                f"{conv.key_name(key)}, so it never sees the ids written: remove {conv.key_name(read)}"
            )
    return out


def _article(title: str) -> str:
    """``title`` after "a" or "an" ("an EAGLE-3", "a DFlash")."""
    return ("an " if title[:1] in "AEIOU" else "a ") + title


def _backup_path(p: Path) -> Path:
    candidate = p.with_name(p.name + ".bak")
    n = 1
    while candidate.exists():
        candidate = p.with_name(f"{p.name}.bak.{n}")
        n += 1
    return candidate


def _atomic_write(target: Path, data: bytes, *, like: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        shutil.copymode(like, tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
