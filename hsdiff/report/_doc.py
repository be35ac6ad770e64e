"""The renderers' input: a report or gate result as its JSON document.

Renderers read documents, never the pipeline's objects, so a saved ``--json`` file renders exactly
like a fresh result, and rendering imports neither torch nor the comparison pipeline. Each takes a
result object, its document (a dict) or the path of a saved one (:func:`as_doc`); a saved document of
an older schema is read as the current one (:func:`upgrade`).
"""

from __future__ import annotations

import json
import os
from typing import Any, Protocol

from ..errors import InputError
from ..model.gate import fails_gate, warns
from ..model.results import config_line as ids_line
from ..model.results import why_not_writable
from ..model.settings import Settings, by_engine_entries
from ..rules.conventions import ENGINE_INFO, applied, rule
from ..rules.settings import TITLES

Doc = dict[str, Any]


class _HasDict(Protocol):
    def to_dict(self) -> dict: ...


#: What a renderer takes: a result object, its document, or the path of a saved document.
DocLike = Doc | _HasDict | str | os.PathLike


def as_doc(obj: DocLike) -> Doc:
    """``obj``'s JSON document: a result object's ``to_dict()``, a document (a dict, read as the current
    schema: :func:`upgrade`), or the path of a saved one (:func:`load_doc`).

    >>> as_doc("report.json")["verdict"]       # doctest: +SKIP
    'mismatch'
    """
    if isinstance(obj, (str, os.PathLike)):
        return load_doc(obj)
    if isinstance(obj, dict):
        return upgrade(obj)
    if not hasattr(obj, "to_dict"):
        raise TypeError(
            f"cannot render a {type(obj).__name__}: give a Report or GateResult, its to_dict() document, "
            "or the path of a file written with --json"
        )
    return obj.to_dict()


def load_doc(path: str | os.PathLike) -> Doc:
    """A saved ``hsdiff compare --json`` report or ``gate``/``check-config`` result, read as the current
    schema (:func:`upgrade`)."""
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(
            f"not a readable JSON report ({e})", path=path, hint="give a file written with --json"
        ) from None
    if not isinstance(obj, dict) or "schema_version" not in obj or not ({"verdict", "gate"} & obj.keys()):
        raise InputError("not an hsdiff report", path=path, hint="give a file written by hsdiff compare/gate --json")
    return upgrade(obj)


def is_gate(d: Doc) -> bool:
    return "command" in d and "checks" in d


def upgrade(d: Doc) -> Doc:
    """A gate or check-config result of schema 1-3 as schema 4 (:data:`hsdiff.model.gate.SCHEMA_VERSION`):
    its ``verdict`` (``pass``/``fail``) becomes ``gate``, so that ``verdict`` is only ever the comparison's
    (``report.verdict``); ``schema_version`` still says what the file was. Any other document is returned
    as it is (a dict given is never modified)."""
    if not is_gate(d) or "gate" in d or d.get("verdict") not in ("pass", "fail"):
        return d
    return {("gate" if k == "verdict" else k): v for k, v in d.items()}


def check_fails(check: Doc, strict: bool) -> bool:
    """A saved check that fails the gate, by the gate's own rule (:func:`hsdiff.model.gate.fails_gate`)."""
    return fails_gate(check["ok"], check["skipped"], check["severity"], strict)


def writable(report: Doc) -> bool:
    """Whether ``hsdiff fix-config --from-report`` takes this report's ids (its one rule:
    :func:`hsdiff.model.results.why_not_writable`)."""
    slots = [(s.get("boundary_index"), s.get("status"), s.get("evidence")) for s in report.get("slots") or []]
    return not why_not_writable(
        str(report.get("verdict")), slots, (report.get("recommended") or {}).get("boundary_indices") or []
    )


def check_warns(check: Doc) -> bool:
    return warns(check["ok"], check["skipped"], check["severity"])


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
    """The config.json line of a recommendation as a report document holds it."""
    engine = str(rec.get("engine"))
    if engine in ENGINE_INFO and _fixed(rec):
        return f"(nothing: {TITLES.get(engine, engine)} reads no layer ids and captures its own, {rec.get('rule')})"
    ids = rec["eagle_aux_hidden_state_layer_ids"]
    missing = [s for s, i in enumerate(ids) if i is None]
    if missing:  # a line with a null in it would break the config it is pasted into
        bs = rec.get("boundary_indices") or []
        finals = set(rec.get("final_post_norm_slots") or ())
        unknown = [s for s in missing if (s >= len(bs) or bs[s] is None) and s not in finals]
        unserved = [s for s in missing if s not in unknown]
        why = []
        if unserved:
            post = [s for s in unserved if s in finals]
            what = f" (the final post-norm state{'' if len(post) == 1 else 's'}: {_slots(post)})" if post else ""
            why.append(f"no id makes {TITLES.get(engine, engine)} feed {_slots(unserved)}{what}: the cause says why")
        if unknown:
            why.append(f"{_slots(unknown)} {'is' if len(unknown) == 1 else 'are'} not identified")
        return f"(nothing to paste: {'; '.join(why)})"
    return ids_line(ids, str(rec.get("config_key") or ""))


def _slots(slots: list[int]) -> str:
    return f"slot{'s' if len(slots) > 1 else ''} {', '.join(map(str, slots))}"


def _fixed(rec: Doc) -> bool:
    """Whether the recommendation's engine, as its row reads a draft of the report's kind, reads no ids at all."""
    try:
        fam = rule(str(rec["engine"])).family_for(rec.get("model_family"))
        return applied(str(rec["engine"]), fam, rec.get("engine_version"), rec.get("draft_kind")).fixed
    except (InputError, KeyError):
        return False


def nested_in(rec: Doc) -> str:
    """The object of the draft config.json the recommended ids go under, as ``hsdiff fix-config`` writes them
    (:func:`hsdiff.rules.conventions.write_key`); ``""`` for the top level or an engine that reads no draft config."""
    if rec.get("config_key"):  # the key the report's engine reads for its draft kind
        return ".".join(str(rec["config_key"]).split(".")[:-1])
    info = ENGINE_INFO.get(str(rec["engine"]))
    key = info.writes if info else ()
    return key[0] if len(key) > 1 else ""


def rec_words(rec: Doc) -> str:
    """What a recommendation's ids are right for: ``"for SGLang 0.5.12, rule: SGLang ≤ 0.5.12, DeepSeek
    family (+1 always)"``; a report of schema 1 did not record the version, and says so."""
    title = TITLES.get(rec["engine"], rec["engine"])
    if not rec.get("engine_version"):
        return f"for {title} (engine version not recorded: check it before pasting)"
    return f"for {title} {rec['engine_version']}, rule: {rec.get('rule') or '?'}"


def other_engines(rec: Doc, engines: tuple[str, ...] | None = None) -> str:
    """The same layers on the other engines, each at the version assumed: ``"vLLM 0.33 [3, 31, 59], ..."``."""
    out, none = [], []
    for e, (version, ids) in by_engine_entries(rec).items():
        if e == rec["engine"] or (engines is not None and e not in engines):
            continue
        title = TITLES.get(e, e) + (f" {version}" if version else "")
        if ids and all(i is None for i in ids):  # no id serves any slot there: said apart, not as a row of nulls
            none.append(title)
            continue
        out.append(f"{title} [{', '.join('null' if i is None else str(i) for i in ids)}]")
    return "; ".join(x for x in (", ".join(out), f"no ids on {', '.join(none)}" if none else "") if x)


def settings_lines(d: Doc) -> list[str]:
    """The settings a report or gate result rests on, one line each (a schema-1 report: what it recorded)."""
    return Settings.from_doc(d, TITLES).lines()


def rel_err(part: Doc | None) -> float | None:
    """The median error of a slot's match or runner-up (``None`` when there is none)."""
    if not part or not part.get("metrics"):
        return None
    return part["metrics"].get("rel_err")
