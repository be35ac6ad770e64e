"""Renderers read a saved JSON report or gate result without the pipeline: no torch import, and the
same text as the fresh result."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from hsdiff.cli import cli

from .. import builders as B

SEED = B.SEED


def _saved(tmp_path: Path, *argv: str) -> tuple[Path, str]:
    out = tmp_path / "result.json"
    r = CliRunner().invoke(cli, [*argv, "--json", str(out)])
    assert r.exit_code in (0, 1), r.output
    return out, r.output


def _render_in_fresh_process(path: Path, kind: str) -> tuple[str, list[str]]:
    code = (
        "import json, sys\n"
        "from hsdiff.report import load_doc, render_text, render_gate_text, "
        "render_junit, render_markdown, render_github\n"
        f"d = load_doc({str(path)!r})\n"
        + (
            "print(render_text(d))\n"
            if kind == "compare"
            else "print(render_gate_text(d)); render_junit(d); render_markdown(d); render_github(d)\n"
        )
        + "heavy = sorted(m for m in ('torch', 'hsdiff.comparison', 'hsdiff.align', "
        "'hsdiff.readers', 'hsdiff.gate', 'click')"
        " if m in sys.modules)\n"
        "print('HEAVY=' + json.dumps(heavy), file=sys.stderr)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    heavy = json.loads(p.stderr.strip().rsplit("HEAVY=", 1)[1])
    return p.stdout, heavy


def test_saved_compare_report_renders_without_torch(tmp_path: Path) -> None:
    path, fresh = _saved(tmp_path, "compare", str(SEED / "train"), str(SEED / "infer-wrong"), "--layer-ids=-1,2,30")
    text, heavy = _render_in_fresh_process(path, "compare")
    assert heavy == []
    assert text.split() == fresh.split()
    assert "MISMATCH" in text and '"eagle_aux_hidden_state_layer_ids": [2, 30, 58]' in text


def test_saved_gate_result_renders_without_torch(tmp_path: Path) -> None:
    path, fresh = _saved(
        tmp_path,
        "gate",
        str(SEED / "train"),
        str(SEED / "infer-wrong"),
        "--draft-config",
        str(SEED / "draft-wrong" / "config.json"),
        "--target-config",
        str(SEED / "model" / "config.json"),
    )
    text, heavy = _render_in_fresh_process(path, "gate")
    assert heavy == []
    assert text.split() == fresh.split()
    assert "gate: FAIL" in text
    assert json.loads(path.read_text())["gate"] == "fail"


def test_a_gate_result_saved_under_schema_3_still_renders(tmp_path: Path) -> None:
    """Schema 3 named the gate's pass/fail ``verdict``, the key the report's ok/mismatch/inconclusive has;
    schema 4 names it ``gate``. A file saved under 3 renders exactly as the fresh result, by every renderer,
    from its path or its dict (which is left as it was)."""
    from hsdiff.report import load_doc, render_gate_text, render_github, render_junit, render_markdown

    seed = ("--target-config", str(SEED / "model" / "config.json"))
    for name, argv in {
        "gate-fail": (
            "gate",
            str(SEED / "train"),
            str(SEED / "infer-wrong"),
            "--draft-config",
            str(SEED / "draft-wrong" / "config.json"),
            *seed,
        ),
        "check-pass": ("check-config", str(SEED / "draft-fixed" / "config.json"), *seed),
    }.items():
        (tmp_path / name).mkdir()
        path, _ = _saved(tmp_path / name, *argv)
        new = json.loads(path.read_text())
        assert new["schema_version"] == 4 and new["gate"] in ("pass", "fail") and "verdict" not in new
        old = {("verdict" if k == "gate" else k): v for k, v in new.items()} | {"schema_version": 3}
        old_path = tmp_path / name / "schema-3.json"
        old_path.write_text(json.dumps(old))
        given = json.dumps(old)
        for render in (render_gate_text, render_junit, render_markdown, render_github):
            assert render(old_path) == render(old) == render(path) == render(new), (name, render.__name__)
        assert json.dumps(old) == given
        assert load_doc(old_path)["gate"] == new["gate"] and "verdict" not in load_doc(old_path)
    assert "PASS" in render_gate_text(old_path) and "::notice" in render_github(old_path)


def test_renderers_offer_fix_config_only_when_it_would_take_the_report(tmp_path: Path) -> None:
    """One rule says whether a report's ids can be written: the Markdown report offers
    ``fix-config --from-report`` on the seed's mismatch (every slot settled), not on the fix dumped
    without its neighbours (inconclusive), and fix-config itself agrees both times."""
    from hsdiff.errors import InputError
    from hsdiff.fix_config import ids_from_report
    from hsdiff.report import load_doc, render_markdown

    (tmp_path / "w").mkdir()
    (tmp_path / "f").mkdir()
    wrong, _ = _saved(tmp_path / "w", "compare", str(SEED / "train"), str(SEED / "infer-wrong"), "--layer-ids=-1,2,30")
    fixed, _ = _saved(tmp_path / "f", "compare", str(SEED / "train"), str(SEED / "infer-fixed"), "--layer-ids=2,30,58")
    assert "fix-config DRAFT_CONFIG --from-report" in render_markdown(load_doc(wrong))
    assert ids_from_report(wrong).ids == (2, 30, 58)
    assert "fix-config DRAFT_CONFIG --from-report" not in render_markdown(load_doc(fixed))
    try:
        ids_from_report(fixed)
    except InputError as e:
        assert "not confident" in str(e)
    else:
        raise AssertionError("fix-config took an inconclusive report")
