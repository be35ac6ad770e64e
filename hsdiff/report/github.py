"""GitHub Actions workflow commands (``::error::``, ``::warning::``, ``::notice::``) for a gate
result: each failed check and each failed slot becomes an annotation on the draft config."""

from __future__ import annotations

from ..model.gate import GateVerdict
from ._doc import DocLike, as_doc, check_fails, check_warns, config_line, rec_words

__all__ = ["render_github"]


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def _line(level: str, title: str, message: str, file: str | None) -> str:
    props = [f"title={_prop(title)}"]
    if file:
        props.insert(0, f"file={_prop(file)}")
    return f"::{level} {','.join(props)}::{_data(message)}"


def render_github(result: DocLike) -> str:
    """One workflow command per line; a passing result gives a single ``::notice::``."""
    d = as_doc(result)
    lines = []
    for c in d["checks"]:
        if check_fails(c, d["strict"]):
            lines.append(_line("error", f"hsdiff {c['name']}", c["message"], c["path"]))
        elif check_warns(c):
            lines.append(_line("warning", f"hsdiff {c['name']}", c["message"], c["path"]))
    report = d["report"]
    if report is not None:
        for s in report["slots"]:
            if s["status"] != "ok":
                b, cfg = s["boundary_index"], s["configured_boundary_index"]
                trained = "?" if b is None else f"B{b}"
                got = "nothing" if cfg is None else f"B{cfg}"
                lines.append(
                    _line(
                        "error",
                        f"hsdiff slot {s['slot']}",
                        f"slot {s['slot']} {s['status']}: training {trained}, engine captures {got}. {s['note']}",
                        d["draft_config"],
                    )
                )
        if report["verdict"] != "ok":
            lines.append(
                _line(
                    "error",
                    f"hsdiff gate {report['verdict']}",
                    f"{report['cause']} Fix ({rec_words(report['recommended'])}): {config_line(report['recommended'])}",
                    d["draft_config"],
                )
            )
    elif d["command"] == "gate":
        lines.append(_line("error", "hsdiff gate", d["cause"], d["draft_config"]))
    if d["gate"] == GateVerdict.PASS:
        lines.append(_line("notice", f"hsdiff {d['command']}", f"pass: {d['cause']}", None))
    return "\n".join(lines)
