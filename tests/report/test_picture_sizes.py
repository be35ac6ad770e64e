"""The pictures at any size: 3, 30 and 124 captures (the last two all-layer stacks of a 61-layer target),
each rendered as the reports save it and measured as a user sees it — on a 1280-pixel-wide screen the
smallest text is at least 8 pixels high, and no picture is a strip (aspect ratio within bounds). With more
than 30 captures the heatmap shows the region around the matches, says which stack each capture is from,
and the HTML page holds the full view behind a toggle. The acceptance chart starts at 1.0 with its values
on the bars."""

from __future__ import annotations

import copy
import json
import struct

import pytest
from click.testing import CliRunner

from hsdiff.cli import cli
from hsdiff.report.document import render_html
from hsdiff.report.pictures import heatmap, norm_trajectory, png_bytes, token_errors, zoomed

from .. import builders as B

pytest.importorskip("matplotlib")

SCREEN = 1280  # pixels: a laptop's browser window
MIN_TEXT = 8.0  # pixels high, on that screen
DPI = 110  # as --plot and the HTML page save them
L = 61


@pytest.fixture(scope="module")
def seed_report(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("sizes") / "r.json"
    r = CliRunner().invoke(
        cli,
        [
            "compare",
            str(B.SEED / "train"),
            str(B.SEED / "infer-wrong"),
            "--layer-ids=-1,2,30",
            "--json",
            str(out),
            "-q",
        ],
    )
    assert r.exit_code == 1, r.output
    return json.loads(out.read_text())


def with_captures(base: dict, n: int) -> dict:
    """The seed report with ``n`` inference captures: the real 3, or every layer of one or two stacks."""
    if n == 3:
        return base
    d = copy.deepcopy(base)
    stacks = 1 if n <= L + 1 else 2
    layers = range(L + 1) if stacks == 2 else range(1, 2 * n, 2)  # 30: every other layer, B3, B31 and B59 among them
    caps = [(f"file=stack-{k}.safetensors hidden_states B{b}", b, k) for k in range(stacks) for b in layers]
    assert len(caps) == n
    first = {b: name for name, b, k in reversed(caps)}
    d["scores"] = [
        {
            "slot": s["slot"],
            "sample": "data_1",
            "capture": name,
            "capture_boundary": b,
            "label_source": "stack",
            "token_offset": 0,
            "rel_err": 0.004 + 0.001 * k if b == s["boundary_index"] else min(1.5, 0.08 * abs(b - s["boundary_index"])),
            "cosine": 0.99,
            "tokens": 25,
            "sink_only": False,
        }
        for s in d["slots"]
        for name, b, k in caps
    ]
    for s in d["slots"]:
        b = s["boundary_index"]
        s["matched"] = {**(s["matched"] or {}), "label": first[b], "capture_boundary_index": b}
    train = [r for r in d["profiles"]["norms"] if r["side"] == "train"]
    infer = [
        {"side": "infer", "capture": name, "boundary": b, "label_source": "stack", "median_norm": 10.0 + 3 * b + k}
        for name, b, k in caps
    ]
    d["profiles"]["norms"] = train + infer
    return d


def png_size(png: bytes) -> tuple[int, int]:
    w, h = struct.unpack(">II", png[16:24])
    return w, h


def smallest_text_on_screen(fig) -> float:
    """The smallest font of the figure's visible text, in pixels on a :data:`SCREEN`-wide display (a wider
    picture is shown scaled down), and the picture's aspect ratio."""
    from matplotlib.text import Text

    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    w, h = png_size(png_bytes(fig, dpi=DPI))
    return min(sizes) * DPI / 72 * min(1.0, SCREEN / w), w / h


@pytest.mark.parametrize("n", [3, 30, 124])
@pytest.mark.parametrize("draw", [heatmap, norm_trajectory, token_errors], ids=lambda f: f.__name__)
def test_every_picture_is_legible_at_any_number_of_captures(seed_report, draw, n):
    data = with_captures(seed_report, n)
    text, aspect = smallest_text_on_screen(draw(data))
    assert text >= MIN_TEXT, f"{draw.__name__} at {n} captures: smallest text {text:.1f} px"
    assert 0.4 <= aspect <= 4.0, f"{draw.__name__} at {n} captures: aspect ratio {aspect:.2f}"


def _ticks(fig) -> list[str]:
    fig.canvas.draw()
    return [t.get_text() for t in fig.axes[0].get_xticklabels() if t.get_text()]


def test_many_captures_show_the_region_around_the_matches_with_the_stack_named(seed_report):
    data = with_captures(seed_report, 124)
    assert zoomed(data) and not zoomed(with_captures(seed_report, 30))
    labels = _ticks(heatmap(data))
    layers = {int(t.split()[0][1:]) for t in labels}
    assert layers == set(range(0, 7)) | set(range(28, 35)) | set(range(56, 62))  # ±3 around B3, B31, B59, B0
    assert {t.split()[1] for t in labels} == {"s1", "s2"}  # which stack: no "B0 B0 B1 B1"
    assert len(set(labels)) == len(labels)
    full = _ticks(heatmap(data, full=True))
    assert full[:3] == ["B0", "B1", "B2"] and len(set(full)) == len(full) == 62  # a label per layer, not per column
    assert len(_ticks(heatmap(with_captures(seed_report, 30)))) == 30
    legend = [t.get_text() for t in norm_trajectory(data).axes[0].get_legend().get_texts()]
    assert sum(t.startswith("inference stack s") for t in legend) == 2  # a line per stack, not one zigzag


def test_the_html_page_holds_the_full_view_behind_a_toggle(seed_report):
    page = render_html(with_captures(seed_report, 124))
    assert page.count("<details><summary>Full view: every inference capture</summary><img") == 1
    assert "<details><summary>Full view" not in render_html(seed_report)


def test_the_acceptance_chart_starts_at_one_with_the_values_on_the_bars():
    pytest.importorskip("torch")
    import matplotlib.pyplot as plt

    from hsdiff.draft.records import PredictedAcceptance, Prediction

    def row(name: str, side: str, value: float) -> Prediction:
        return Prediction(name, side, None, None, value, 0.5, (0.5,), 10, 20, 2, (0.5,))

    pa = PredictedAcceptance(
        draft="draft/",
        num_steps=5,
        topk=1,
        num_draft_tokens=6,
        reference="the dump's next token",
        rows=(row("training", "train", 1.86), row("configured", "infer", 1.11), row("recommended", "infer", 1.23)),
    )
    ax = pa.plot()
    assert ax.get_ylim()[0] == 1.0
    shown = [t.get_text() for t in ax.texts]
    assert shown == ["1.86", "1.11", "1.23"]
    text, aspect = smallest_text_on_screen(ax.figure)
    assert text >= MIN_TEXT and 0.4 <= aspect <= 4.0
    plt.close("all")
