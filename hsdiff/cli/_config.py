"""The project's settings file: ``hsdiff.toml``, or ``[tool.hsdiff]`` in ``pyproject.toml``, found from
the working directory upward (the nearest wins). Its keys become the defaults of ``gate``, ``compare``
and ``check-config`` (click's ``default_map``); a flag given on the command line overrides them. Paths
in the file are relative to the file's folder.

.. code-block:: toml

    # hsdiff.toml (or the same keys under [tool.hsdiff] in pyproject.toml)
    engine = "sglang"
    version = "0.5.23"              # the engine's; or versions = {sglang = "0.5.23", vllm = "0.33"}
    family = "llama"
    draft-config = "draft/config.json"
    target-config = "target/config.json"
    draft = "draft/"                # --draft: predict the acceptance length (optional)

    [dumps]
    train = "dumps/train"
    infer = "dumps/sglang"

    [thresholds]
    tolerance = 0.10
    min-acceptance = 1.5
    strict = true

    [outputs]                       # the gate's
    json = "out/gate.json"
    junit = "out/gate.xml"
    markdown = "out/gate.md"
    html = "out/gate.html"

    [compare]                       # a command's own table: its settings alone
    layer-ids = "2,30,58"
    json = "out/compare.json"

:func:`sources` says, for the JSON report, where each setting of a run came from: ``flag``, the
settings file's path, or ``default``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from ..errors import InputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (setup.cfg installs tomli there)
    import tomli as tomllib

#: The commands the file configures (each may have a table of its own).
COMMANDS = ("gate", "compare", "check-config")
#: File keys (dashes or underscores) and the option each sets.
KEYS = {
    "train": "train",
    "infer": "infer",
    "fingerprint": "fingerprint",
    "engine": "engine",
    "family": "model_family",
    "model-family": "model_family",
    "draft-config": "draft_config",
    "target-config": "target_config",
    "model-config": "model_config",
    "layer-ids": "layer_ids",
    "train-engine": "train_engine",
    "vllm-runner": "vllm_runner",
    "draft-kind": "draft_kind",
    "draft": "draft_dir",
    "target-model": "target_model",
    "num-steps": "num_steps",
    "tolerance": "tolerance",
    "min-acceptance": "min_acceptance",
    "strict": "strict",
    "json": "json_path",
    "junit": "junit_path",
    "markdown": "markdown_path",
    "html": "html_path",
    "plot": "plot_path",
}
#: The tables that group keys (their keys are read as the top-level ones).
TABLES = ("dumps", "thresholds", "outputs")
#: Keys whose values are paths, relative to the file's folder.
PATHS = {
    "train",
    "infer",
    "fingerprint",
    "draft_config",
    "target_config",
    "model_config",
    "draft_dir",
    "target_model",
    "json_path",
    "junit_path",
    "markdown_path",
    "html_path",
    "plot_path",
}
#: What check-config takes of them: no dumps, no outputs (they are the gate's files).
_NOT_FOR_CHECK_CONFIG = {
    "train",
    "infer",
    "fingerprint",
    "json_path",
    "junit_path",
    "markdown_path",
    "html_path",
    "plot_path",
}


def find(start: str | os.PathLike | None = None) -> tuple[Path, dict[str, Any]] | None:
    """The nearest settings file from ``start`` (the working directory) upward and its table, or None:
    ``hsdiff.toml``, else a ``pyproject.toml`` with a ``[tool.hsdiff]`` table."""
    here = Path(start if start is not None else os.getcwd()).resolve()
    for folder in (here, *here.parents):
        own = folder / "hsdiff.toml"
        if own.is_file():
            return own, _read(own)
        project = folder / "pyproject.toml"
        if project.is_file():
            table = _read(project).get("tool", {}).get("hsdiff")
            if isinstance(table, dict):
                return project, table
    return None


def _read(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise InputError(f"cannot read the settings file ({e})", path=path, hint="fix its TOML") from None


def settings(path: Path, table: Mapping[str, Any]) -> dict[str, Any]:
    """The file's keys as option names and values (paths relative to the file's folder made usable from
    the working directory); an unknown key is an error naming it."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        k = key.replace("_", "-")
        if k in TABLES and isinstance(value, dict):
            flat.update({kk.replace("_", "-"): vv for kk, vv in value.items()})
        else:
            flat[k] = value
    out: dict[str, Any] = {}
    engine = str(flat.get("engine", "sglang")).lower()
    for key, value in flat.items():
        if key in ("version", "engine-version"):
            out["engine_versions"] = (value if "==" in str(value) else f"{engine}=={value}",)
        elif key == "versions" and isinstance(value, dict):
            out["engine_versions"] = tuple(f"{k}=={v}" for k, v in value.items())
        elif key in KEYS:
            name = KEYS[key]
            out[name] = _path(path, value) if name in PATHS else value
        else:
            known = ", ".join(sorted({*KEYS, "version", "versions", *TABLES, *COMMANDS}))
            raise InputError(f"unknown setting {key!r}", path=path, hint=f"the settings are: {known}")
    return out


def _path(path: Path, value: Any) -> str:
    p = Path(str(value))
    if p.is_absolute() or str(value) == "-":
        return str(value)
    return os.path.relpath(path.parent / p)


def default_map(ctx: click.Context, path: Path, table: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """click's ``default_map`` for the configured commands: each gets the settings it has an option for,
    then those of its own table (``[gate]``, ``[compare]``, ``[check-config]``). The ``[outputs]`` table
    is the gate's alone (a compare writing the same files would overwrite them). ``ctx``: the group's."""
    group = ctx.command
    assert isinstance(group, click.Group)
    own = {name: table.get(name) or {} for name in COMMANDS}
    shared = {k: v for k, v in table.items() if k not in COMMANDS}
    outputs = shared.pop("outputs", {})
    values = settings(path, shared)
    out: dict[str, dict[str, Any]] = {}
    for name in COMMANDS:
        command = group.get_command(ctx, name)
        assert command is not None
        have = {p.name for p in command.params}
        mine = {**values, **settings(path, {"outputs": outputs} if name == "gate" else {}), **settings(path, own[name])}
        if name == "check-config":
            mine = {k: v for k, v in mine.items() if k not in _NOT_FOR_CHECK_CONFIG}
            if "draft_config" in mine:
                mine["draft_configs"] = (mine.pop("draft_config"),)
        if "target_config" not in have and "target_config" in mine:  # compare calls it --model-config
            mine.setdefault("model_config", mine.pop("target_config"))
        if "model_config" not in have and "model_config" in mine:
            mine.setdefault("target_config", mine.pop("model_config"))
        out[name] = {k: v for k, v in mine.items() if k in have}
    return out


def sources(ctx: click.Context | None = None) -> dict[str, str]:
    """Where each setting of this run came from: ``flag``, the settings file's path, ``environment`` or
    ``default`` (the settings the file can set, those the command has)."""
    ctx = ctx or click.get_current_context()
    config = (ctx.find_root().obj or {}).get("config_file")
    wanted = set(KEYS.values()) | {"engine_versions", "draft_configs"}
    out = {}
    for p in ctx.command.params:
        if p.name not in wanted:
            continue
        src = ctx.get_parameter_source(p.name)
        if src == click.core.ParameterSource.COMMANDLINE:
            out[p.name] = "flag"
        elif src == click.core.ParameterSource.DEFAULT_MAP and config:
            out[p.name] = str(config)
        elif src == click.core.ParameterSource.ENVIRONMENT:
            out[p.name] = "environment"
        else:
            out[p.name] = "default"
    return out
