"""The renderers' input: a report or gate result as its JSON document.

Renderers read documents, never the pipeline's objects, so a saved ``--json`` file renders exactly
like a fresh result, and rendering imports neither torch nor the comparison pipeline.
"""

from __future__ import annotations

import json
import os
from typing import Any, Protocol

from ..conventions import rule
from ..errors import InputError

Doc = dict[str, Any]


class _HasDict(Protocol):
    def to_dict(self) -> dict: ...


def as_doc(obj: Doc | _HasDict) -> Doc:
    """``obj``'s JSON document (a dict passes through)."""
    return obj if isinstance(obj, dict) else obj.to_dict()


def load_doc(path: str | os.PathLike) -> Doc:
    """A saved ``hsdiff compare --json`` report or ``gate``/``check-config`` result."""
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"not a readable JSON report ({e})", path=path, hint="give a file written with --json") from None
    if not isinstance(obj, dict) or "schema_version" not in obj or "verdict" not in obj:
        raise InputError("not an hsdiff report", path=path, hint="give a file written by hsdiff compare/gate --json")
    return obj


def is_gate(d: Doc) -> bool:
    return "command" in d and "checks" in d


def check_fails(check: Doc, strict: bool) -> bool:
    """A check that fails the gate: an error, or a warning under ``--strict``."""
    bad = not check["ok"] and not check["skipped"]
    return bad and (check["severity"] == "error" or (strict and check["severity"] == "warning"))


def check_warns(check: Doc) -> bool:
    return not check["ok"] and not check["skipped"] and check["severity"] == "warning"


def engine_title(result: Doc) -> str:
    title = rule(result["engine"]).title
    if result.get("engine_version"):
        title += f" {result['engine_version']}"
    if result.get("model_family"):
        title += f" ({result['model_family']} rule)"
    ids = result.get("ids")
    if ids and ids.get("vllm_runner"):
        title += f" ({ids['vllm_runner'].upper()} runner)"
    return title


def config_line(rec: Doc) -> str:
    ids = ", ".join("null" if i is None else str(i) for i in rec["eagle_aux_hidden_state_layer_ids"])
    return f'"eagle_aux_hidden_state_layer_ids": [{ids}]'


def rel_err(part: Doc | None) -> float | None:
    """The median error of a slot's match or runner-up (``None`` when there is none)."""
    if not part or not part.get("metrics"):
        return None
    return part["metrics"].get("rel_err")
