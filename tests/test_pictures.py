"""The three pictures and the reports to attach: `compare --plot DIR`, `--markdown`, `--html`;
drawn from a saved JSON report without torch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser

import pytest
from click.testing import CliRunner

from hsdiff.cli import cli
from hsdiff.report.pictures import PICTURES, heatmap, heatmap_grid, norm_trajectory, token_errors, write_pictures

from . import builders as B

SEED = B.SEED
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    """The seed story with the ids the server ran with: JSON report, pictures, Markdown, HTML."""
    d = tmp_path_factory.mktemp("seed")
    r = CliRunner().invoke(
        cli,
        [
            "compare",
            str(SEED / "train"),
            str(SEED / "infer-wrong"),
            "--layer-ids=-1,2,30",
            "--json",
            str(d / "report.json"),
            "--plot",
            str(d / "pictures"),
            "--markdown",
            str(d / "report.md"),
            "--html",
            str(d / "report.html"),
            "-q",
        ],
    )
    assert r.exit_code == 1, r.output
    return d


def test_plot_dir_writes_the_three_pictures(seed):
    for name in PICTURES:
        data = (seed / "pictures" / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 20_000, name


def test_heatmap_marks_the_match_and_the_configured_capture_where_the_report_says(seed):
    import matplotlib.pyplot as plt

    doc = json.loads((seed / "report.json").read_text())
    fig = heatmap(doc)
    ax = fig.axes[0]
    rows, cols, _ = heatmap_grid(doc)
    marks = {
        p.get_gid(): (round(p.get_x() + p.get_width() / 2), round(p.get_y() + p.get_height() / 2))
        for p in ax.patches
        if p.get_gid()
    }
    slots = {s["slot"]: s for s in doc["slots"]}
    matched = [s for s in slots.values() if s["matched"]]
    assert len(matched) == 2  # slots 0 and 1 are observed; slot 2 (B59) was never captured
    for s in matched:
        col, row = marks[f"match:slot{s['slot']}"]
        assert rows[row]["slot"] == s["slot"]
        assert cols[col]["capture"] == s["matched"]["label"]
    for s in slots.values():
        col, row = marks[f"configured:slot{s['slot']}"]
        assert rows[row]["slot"] == s["slot"] and cols[col]["boundary"] == s["configured_boundary_index"]
    # the off-by-one reads as the match one column right of what the configured ids give
    assert [marks[f"match:slot{s}"][0] - marks[f"configured:slot{s}"][0] for s in (0, 1)] == [1, 1]
    assert [c["boundary"] for c in cols] == [0, 3, 31]
    assert "slot 0 = B3" in [t.get_text() for t in ax.get_yticklabels()]
    assert fig.axes[1].get_ylabel().startswith("median per-token relative error")  # the colour bar says what it shows
    plt.close(fig)


def _drawn(fig) -> list:
    """What a figure says: per axes its title, texts, tick labels, legend entries and marked patches."""
    out = []
    for ax in fig.axes:
        legend = ax.get_legend()
        out.append(
            (
                ax.get_title() + ax.get_title(loc="left"),
                [t.get_text() for t in ax.texts],
                [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()],
                [t.get_text() for t in legend.get_texts()] if legend else [],
                sorted(p.get_gid() for p in ax.patches if p.get_gid()),
            )
        )
    return out


def test_every_picture_takes_a_report_its_document_or_a_saved_path(seed, tmp_path):
    """``pictures.heatmap("report.json")`` raised AttributeError: each picture takes a Report, the dict
    of its JSON, or the path (str or PathLike) of the saved file — a gate result's too — and draws the
    same from each; a result with no comparison in it is a user error naming the file."""
    import matplotlib.pyplot as plt

    import hsdiff
    from hsdiff.errors import InputError

    saved = seed / "report.json"
    report = hsdiff.compare(str(SEED / "train"), str(SEED / "infer-wrong"), layer_ids=[-1, 2, 30])
    gate = tmp_path / "gate.json"
    r = CliRunner().invoke(
        cli,
        [
            "gate",
            str(SEED / "train"),
            str(SEED / "infer-wrong"),
            "--draft-config",
            str(SEED / "draft-wrong" / "config.json"),
            "--target-config",
            str(SEED / "model" / "config.json"),
            "--json",
            str(gate),
        ],
    )
    assert r.exit_code == 1, r.output
    for draw in (heatmap, norm_trajectory, token_errors):
        drawn = []
        for given in (report, json.loads(saved.read_text()), str(saved), saved):
            fig = draw(given)
            drawn.append(_drawn(fig))
            plt.close(fig)
        assert drawn[0][0][0], draw.__name__  # a titled picture, not an empty one
        assert all(d == drawn[0] for d in drawn[1:]), draw.__name__
        fig = draw(gate)  # the gate's comparison (knowing the target's depth, it also marks B61)
        assert _drawn(fig)[0][0] == drawn[0][0][0] and _drawn(fig)[0][4] == drawn[0][0][4], draw.__name__
        plt.close(fig)
    assert sorted(p.name for p in write_pictures(str(saved), tmp_path / "pics")) == sorted(PICTURES)
    check = tmp_path / "check.json"
    model = ("--target-config", str(SEED / "model" / "config.json"))
    r = CliRunner().invoke(
        cli, ["check-config", str(SEED / "draft-wrong" / "config.json"), *model, "--json", str(check)]
    )
    assert r.exit_code in (0, 1), r.output
    with pytest.raises(InputError, match="holds no comparison to draw") as e:
        heatmap(check)
    assert str(check) in str(e.value)


def test_norm_trajectory_and_token_errors_draw_what_the_report_holds(seed):
    import matplotlib.pyplot as plt

    doc = json.loads((seed / "report.json").read_text())
    norms = doc["profiles"]["norms"]
    train = {r["slot"]: r for r in norms if r["side"] == "train"}
    infer = {r["boundary"]: r for r in norms if r["side"] == "infer"}
    assert sorted(train) == [0, 1, 2] and sorted(infer) == [0, 3, 31]
    # the engine's B3 is the training slot 0 (B3) tensor: same median norm within bf16 noise
    assert abs(infer[3]["median_norm"] / train[0]["median_norm"] - 1) < 0.02
    assert infer[0]["median_norm"] < train[0]["median_norm"] / 10  # the embeddings the draft receives instead
    fig = norm_trajectory(doc)
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    cfg = next(v for k, v in lines.items() if "configured" in k)
    assert list(cfg.get_xdata()) == [0, 3, 31]
    plt.close(fig)
    curves = doc["profiles"]["tokens"]
    match = {c["slot"]: c for c in curves if c["role"] == "match"}
    assert sorted(match) == [0, 1]
    assert match[1]["sink_tokens"] == [0] and len(match[1]["error"]) == 25
    assert max(match[0]["error"]) < 0.05
    fig = token_errors(doc)
    assert len(fig.axes) == 3 and "sink" in " ".join(
        t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts()
    )
    plt.close(fig)


def test_plot_png_path_still_writes_one_picture(tmp_path):
    out = tmp_path / "errors.png"
    r = CliRunner().invoke(
        cli,
        [
            "compare",
            str(SEED / "train"),
            str(SEED / "infer-fixed-neighbours"),
            "--layer-ids=2,30,58",
            "--plot",
            str(out),
            "-q",
        ],
    )
    assert r.exit_code == 0, r.output
    assert out.read_bytes().startswith(PNG)
    assert not (tmp_path / "heatmap.png").exists()


def test_plot_onto_an_existing_file_is_a_one_line_user_error(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    r = CliRunner().invoke(
        cli,
        [
            "compare",
            str(SEED / "train"),
            str(SEED / "infer-fixed-neighbours"),
            "--layer-ids=2,30,58",
            "--plot",
            str(f),
            "-q",
        ],
    )
    assert r.exit_code == 2
    assert "--plot wants a folder" in r.output and "Traceback" not in r.output
    assert f.read_text() == "mine"


def test_markdown_has_the_table_and_the_fix(seed):
    md = (seed / "report.md").read_text()
    assert md.startswith("## hsdiff compare: ❌ MISMATCH")
    assert "| slot | training layer | engine captures | status |" in md
    assert "| 0 | B3: output of layer 2 (input of layer 3) | B0: embeddings (input of layer 0) | mismatch |" in md
    assert "**Fix:**" in md and '"eagle_aux_hidden_state_layer_ids": [2, 30, 58]' in md
    assert "shifted by 1 slot" in md


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []
        self.images = 0

    def handle_starttag(self, tag, attrs):
        self.images += tag == "img"
        self.refs += [v or "" for k, v in attrs if k in ("src", "href", "srcset", "poster", "data", "action")]


def test_html_is_self_contained(seed):
    page = (seed / "report.html").read_text()
    parser = _Links()
    parser.feed(page)
    assert parser.images == 3
    assert parser.refs and all(r.startswith("data:image/png;base64,") for r in parser.refs)
    assert "http://" not in page and "https://" not in page and "url(" not in page and "@import" not in page
    assert "MISMATCH" in page and "[2, 30, 58]" in page


def _browser() -> str | None:
    return next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser")) if p), None)


@pytest.mark.skipif(_browser() is None, reason="no Chromium installed (apt-get install chromium)")
def test_html_opens_in_headless_chromium(seed, tmp_path):
    shot = tmp_path / "shot.png"
    profile = tempfile.mkdtemp(prefix="hsdiff-chromium-")
    try:
        proc = subprocess.run(
            [
                _browser(),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--window-size=1200,2400",
                f"--screenshot={shot}",
                (seed / "report.html").as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert shot.exists(), proc.stderr[-2000:]
    data = shot.read_bytes()
    assert data.startswith(PNG) and len(data) > 50_000  # a rendered page with pictures, not a blank one


def test_saved_report_renders_without_torch(seed, tmp_path):
    code = f"""
import sys
sys.modules["torch"] = None  # any import of torch now fails
import json
from hsdiff.report.document import render_html, render_report_markdown
from hsdiff.report.pictures import write_pictures
doc = json.load(open({str(seed / "report.json")!r}))
write_pictures(doc, {str(tmp_path / "pics")!r})
open({str(tmp_path / "r.html")!r}, "w").write(render_html(doc, pictures=False))  # the same drawing code as above
print(render_report_markdown(doc)[:40])
"""
    env = {**os.environ, "MPLBACKEND": "Agg"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "MISMATCH" in r.stdout
    assert sorted(p.name for p in (tmp_path / "pics").iterdir()) == sorted(PICTURES)
    assert "<table>" in (tmp_path / "r.html").read_text()
