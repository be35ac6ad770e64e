"""Versions of each engine the convention table was checked against, and ``--engine-version`` parsing.

>>> versions(["sglang==0.5.12"], ["sglang", "vllm"])
{'sglang': '0.5.12', 'vllm': '0.33'}
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import InputError
from .profile import DEFAULT_VERSIONS, ENGINE_INFO, VERSIONS, EngineInfo, Rule

__all__ = [
    "ENGINES",
    "rule",
    "version_tuple",
    "default_version",
    "parse_version",
    "version_for",
    "versions",
    "in_range",
]

ENGINES: tuple[str, ...] = tuple(ENGINE_INFO)


def rule(engine: str) -> EngineInfo:
    """The :class:`EngineInfo` for ``engine``; raises :class:`InputError` naming the valid keys."""
    try:
        return ENGINE_INFO[engine.lower()]
    except KeyError:
        raise InputError(f"unknown engine {engine!r}", hint=f"choose one of: {', '.join(ENGINES)}") from None


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def default_version(engine: str) -> str:
    """The newest version of ``engine`` the table was checked against (the default of --engine-version)."""
    key = rule(engine).key
    return DEFAULT_VERSIONS.get(key, VERSIONS[key][-1])


def parse_version(engine: str, text: str | None) -> str:
    """``"sglang==0.5.12"`` or ``"0.5.12"`` -> ``"0.5.12"``, checked against ``engine`` and the table.

    SpecForge captures through SGLang, so its version is the SGLang version it runs (``sglang==0.5.12``).
    """
    key = rule(engine).key
    if text is None or not text.strip():
        return default_version(key)
    name, _, ver = text.strip().rpartition("==")
    name = name.strip().lower().replace("-", "_")
    known_names = {n.replace("-", "_") for n in rule(key).names}
    ver = ver.strip().lstrip("v")
    if ver in VERSIONS[key] and not version_tuple(ver):
        return ver  # a label such as TensorRT-LLM's "main": one rule for all
    if (
        (name and name not in known_names)
        or not ver
        or not version_tuple(ver)
        or not all(p.isdigit() for p in ver.split("."))
    ):
        raise InputError(
            f"--engine-version {text!r} is not a version of {rule(key).title}",
            hint=f"write it as {key}=={default_version(key)}",
        )
    oldest = VERSIONS[key][0]
    if version_tuple(ver) < version_tuple(oldest):
        raise InputError(
            f"{rule(key).title} {ver} is older than any version hsdiff's convention table was checked "
            f"against ({oldest}–{default_version(key)})",
            hint="upgrade the engine, or check its set_eagle3_layers_to_capture by hand",
        )
    return ver


def version_for(engine: str, given: Sequence[str] | str | None) -> str:
    """The version of ``engine`` among ``--engine-version`` values (``sglang==0.5.12``, ``vllm==0.33``...):
    the one naming ``engine``, a bare version when it is the only value, else the default.

    >>> version_for("vllm", ["sglang==0.5.12", "vllm==0.31"])
    '0.31'
    """
    key = rule(engine).key
    values = [given] if isinstance(given, str) else list(given or ())
    names = rule(key).names
    named = [v for v in values if "==" in v and v.split("==")[0].strip().lower() in names]
    if len({parse_version(key, v) for v in named}) > 1:  # one engine, one version: the last must not win silently
        raise InputError(f"--engine-version names {key} twice ({', '.join(named)})", hint=f"give one version of {key}")
    if named:
        return parse_version(key, named[-1])
    bare = [v for v in values if "==" not in v]
    if bare and len(values) == 1:
        return parse_version(key, bare[0])
    return default_version(key)


def versions(given: Sequence[str] | None, engines: Sequence[str]) -> dict[str, str]:
    """The version of each of ``engines`` from ``--engine-version`` values; a bare version applies to the
    first engine. Raises :class:`InputError` for a value that names none of them.

    >>> versions(["sglang==0.5.12"], ["sglang", "vllm"])
    {'sglang': '0.5.12', 'vllm': '0.33'}
    """
    keys = [rule(e).key for e in engines]
    values = list(given or ())
    for v in values:
        if "==" not in v:
            if len(values) > 1:
                raise InputError(
                    f"--engine-version {v!r} names no engine",
                    hint=f"write NAME==VERSION, e.g. {keys[0]}=={default_version(keys[0])}",
                )
            continue
        name = v.split("==")[0].strip().lower()
        if not any(name in rule(k).names for k in keys):
            raise InputError(
                f"--engine-version {v!r} names an engine this command does not use",
                hint=f"give a version of {' or '.join(dict.fromkeys(keys))}",
            )
    out: dict[str, str] = {}
    for i, k in enumerate(keys):
        vals = values if i == 0 else [v for v in values if "==" in v]
        out.setdefault(k, version_for(k, vals))
    return out


def in_range(r: Rule, version: str) -> bool:
    """Whether ``version`` lies in the versions of row ``r`` (inclusive)."""
    v = version_tuple(version)
    return (r.since is None or v >= version_tuple(r.since)) and (
        r.until is None or v[: len(version_tuple(r.until))] <= version_tuple(r.until)
    )
