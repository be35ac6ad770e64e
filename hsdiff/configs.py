"""Model and draft ``config.json`` files: reading them, and what they say about the target's shape
and the draft's layer ids.

Every other module asks this one; nothing else opens a config file. Conventions (how an engine
*counts* the ids read here) live in :mod:`hsdiff.conventions`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .errors import ConfigError

__all__ = ["load_config", "is_draft_config", "draft_ids"]


def load_config(path: str | os.PathLike) -> dict:
    """Read a ``config.json`` (or the one in a folder); :class:`ConfigError` names the file and the problem.

    >>> load_config("fixtures/seed/model")["num_hidden_layers"]   # doctest: +SKIP
    61
    """
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        with open(p, encoding="utf-8") as f:
            obj = json.load(f)
    except FileNotFoundError:
        raise ConfigError("no such config file", path=p, hint="give the path of a config.json") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"not a readable JSON config ({e})", path=p, hint="fix the file") from None
    if not isinstance(obj, dict):
        raise ConfigError("config is not a JSON object", path=p)
    return obj


def is_draft_config(cfg: dict) -> bool:
    """Whether ``cfg`` describes an EAGLE draft rather than a target model."""
    archs = " ".join(str(a) for a in cfg.get("architectures", []) or [])
    return "eagle_config" in cfg or "eagle_aux_hidden_state_layer_ids" in cfg or "Eagle" in archs or "Draft" in archs


def draft_ids(cfg: dict) -> list[int] | None:
    """The aux layer ids a draft config states (the nested ``eagle_config`` key first), as written."""
    nested = cfg.get("eagle_config")
    if isinstance(nested, dict) and isinstance(nested.get("eagle_aux_hidden_state_layer_ids"), list):
        return [int(i) for i in nested["eagle_aux_hidden_state_layer_ids"]]
    if isinstance(cfg.get("eagle_aux_hidden_state_layer_ids"), list):
        return [int(i) for i in cfg["eagle_aux_hidden_state_layer_ids"]]
    return None
