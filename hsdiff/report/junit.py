"""JUnit XML for CI: one testcase per static check and one per training slot; a failure carries
the explanation (what is wrong and how to fix it), so the CI page says why the gate failed.

The layout is the common denominator that Jenkins, GitLab, GitHub test reporters and Azure read:
``<testsuites><testsuite><testcase classname name><failure message type>text</failure>``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ..rules.conventions import describe_boundary
from ._doc import Doc, DocLike, as_doc, check_fails, check_warns, config_line, nested_in, rec_words

__all__ = ["render_junit"]


def render_junit(result: DocLike) -> str:
    """The JUnit XML document (UTF-8, with declaration) for a gate or check-config result."""
    d = as_doc(result)
    command = d["command"]
    suite = ET.Element("testsuite", name=f"hsdiff.{command}")
    props = ET.SubElement(suite, "properties")
    for k in ("engine", "model_family", "draft_config", "target_config", "gate"):
        if d[k] is not None:
            ET.SubElement(props, "property", name=k, value=str(d[k]))
    for c in d["checks"]:
        case = ET.SubElement(suite, "testcase", classname=f"hsdiff.{command}.checks", name=c["name"])
        if c["path"]:
            case.set("file", c["path"])
        if c["skipped"]:
            ET.SubElement(case, "skipped", message=c["message"])
        elif check_fails(c, d["strict"]):
            f = ET.SubElement(case, "failure", message=c["message"], type=c["severity"])
            f.text = f"{c['name']} ({c['severity']}): {c['message']}"
        elif check_warns(c):
            ET.SubElement(case, "system-out").text = f"warning: {c['message']}"
    if command == "gate":
        _report_cases(suite, d)
    cases = suite.findall("testcase")
    failures = sum(1 for t in cases if t.find("failure") is not None)
    skipped = sum(1 for t in cases if t.find("skipped") is not None)
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(skipped))
    root = ET.Element("testsuites", name="hsdiff", tests=str(len(cases)), failures=str(failures), errors="0")
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=False).join(
        ['<?xml version="1.0" encoding="UTF-8"?>\n', "\n"]
    )


def _report_cases(suite: ET.Element, result: Doc) -> None:
    report = result["report"]
    case = ET.SubElement(suite, "testcase", classname="hsdiff.gate.compare", name="verdict")
    if report is None:
        f = ET.SubElement(case, "failure", message="the comparison did not run", type="not-run")
        f.text = "\n".join(result["notes"]) or result["cause"]
        return
    if report["verdict"] != "ok":
        f = ET.SubElement(case, "failure", message=report["cause"], type=report["verdict"])
        f.text = _body(report, report["cause"])
    for s in report["slots"]:
        case = ET.SubElement(suite, "testcase", classname="hsdiff.gate.slots", name=_slot_name(s))
        if s["status"] != "ok":
            msg = _slot_message(s, report)
            f = ET.SubElement(case, "failure", message=msg, type=s["status"] or "failed")
            f.text = _body(report, msg)


def _slot_name(s: Doc) -> str:
    trained = "?" if s["boundary_index"] is None else f"B{s['boundary_index']}"
    return f"slot {s['slot']} (training {trained})"


def _slot_message(s: Doc, report: Doc) -> str:
    L = report["num_hidden_layers"]
    b, cfg = s["boundary_index"], s["configured_boundary_index"]
    trained = "an unidentified layer" if b is None else f"B{b}, {describe_boundary(b, L)}"
    engine = "nothing" if cfg is None else f"B{cfg}, {describe_boundary(cfg, L)}"
    return f"slot {s['slot']} {s['status']}: training used {trained}; the engine captures {engine}. {s['note']}"


def _body(report: Doc, first: str) -> str:
    rec = report["recommended"]
    lines = [
        first,
        "",
        f"cause: {report['cause']}",
        "",
        f"fix: {config_line(rec)}" + (f' (under "{nested_in(rec)}")' if nested_in(rec) else "") + f" {rec_words(rec)}",
    ]
    return "\n".join(lines)
