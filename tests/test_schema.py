"""The JSON Schemas shipped with hsdiff hold for every report it writes."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from hsdiff.cli import cli
from hsdiff.schemas import NAMES, load, validate

from . import builders as B

SEED = B.SEED
GOLDEN = Path(__file__).resolve().parent / "golden"


def _json(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "out.json"
    r = CliRunner().invoke(cli, [*args, "--json", str(out)])
    assert r.exit_code in (0, 1), r.output
    return json.loads(out.read_text())


#: report and gate 2: the settings every answer rests on, and by_engine's version per engine; gate 4: its
#: pass/fail is ``gate``, apart from the report's ``verdict``
VERSIONS = {"report": 3, "gate": 4, "inspect": 1, "fingerprint": 1}


def test_schemas_are_valid_and_versioned():
    for name in NAMES:
        schema = load(name)
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["properties"]["schema_version"] == {"const": VERSIONS[name]}
        assert schema["$id"].endswith(f":{VERSIONS[name]}")


@pytest.mark.parametrize("infer,ids", [("infer-wrong", "-1,2,30"), ("infer-fixed-neighbours", "2,30,58")])
def test_compare_reports_follow_the_schema(tmp_path, infer, ids):
    doc = _json(tmp_path, "compare", str(SEED / "train"), str(SEED / infer), f"--layer-ids={ids}")
    validate(doc, "report")


def test_a_debug_log_report_follows_the_schema(tmp_path):
    doc = _json(
        tmp_path, "compare", str(SEED / "train"), str(B.FIXTURES / "logs" / "seed-first5.log"), "--layer-ids=-1,2,30"
    )
    validate(doc, "report")


def test_gate_and_check_config_results_follow_the_schema(tmp_path):
    gate = _json(
        tmp_path,
        "gate",
        str(SEED / "train"),
        str(SEED / "infer-wrong"),
        "--draft-config",
        str(SEED / "draft-wrong" / "config.json"),
        "--target-config",
        str(SEED / "model" / "config.json"),
    )
    validate(gate, "gate")
    assert gate["report"] is not None
    check = _json(
        tmp_path,
        "check-config",
        str(SEED / "draft-fixed" / "config.json"),
        "--target-config",
        str(SEED / "model" / "config.json"),
    )
    validate(check, "gate")


def test_a_report_that_breaks_the_schema_is_refused(tmp_path):
    doc = _json(tmp_path, "compare", str(SEED / "train"), str(SEED / "infer-fixed-neighbours"), "--layer-ids=2,30,58")
    doc["verdict"] = "fine"
    with pytest.raises(jsonschema.ValidationError):
        validate(doc, "report")
    doc["verdict"] = "ok"
    del doc["slots"][0]["evidence"]
    with pytest.raises(jsonschema.ValidationError):
        validate(doc, "report")


def _goldens() -> list[Path]:
    return sorted(GOLDEN.rglob("*.json")) if GOLDEN.is_dir() else []


@pytest.mark.skipif(not _goldens(), reason="no golden reports in tests/golden")
@pytest.mark.parametrize("path", _goldens(), ids=lambda p: p.name)
def test_golden_reports_follow_the_schema(path):
    doc = json.loads(path.read_text())
    doc = doc.get("report", doc) if "exit_code" in doc and "schema_version" not in doc else doc  # {exit_code, report}
    validate(doc, "gate" if "command" in doc else "inspect" if "captures" in doc else "report")
