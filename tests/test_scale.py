"""Large dumps: rows read alone (bounded memory), and the sample-then-verify path giving the answers,
and the metrics, that scoring every pair in full gives. Small generated pairs stand in for multi-GB
ones by lowering the threshold above which the sample is taken. No timing is asserted."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from hsdiff import compare
from hsdiff.comparison import scoring
from hsdiff.model import INFER, TRAIN
from hsdiff.readers import scan

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import gen  # noqa: E402

SEED = ROOT / "fixtures" / "seed"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("HSDIFF_BENCH_CACHE", str(tmp_path_factory.mktemp("bench-cache")))
    src = gen.load_source()
    noids, ids = gen.window(src, 240, 96, 37, 576)
    yield {"pair": gen.pair(src, 320, 576), "window": noids, "window-ids": ids}
    mp.undo()


def _both(monkeypatch, train, infer, **kw):
    """Every pair scored in full one by one, and sampled then verified (the large-dump path)."""
    monkeypatch.setattr(scoring, "SKETCH_ABOVE", 1 << 62)
    full = compare(train, infer, **kw)
    monkeypatch.setattr(scoring, "SKETCH_ABOVE", 0)
    monkeypatch.setattr(scoring, "WHOLE_WALK_BELOW", 0)
    return full, compare(train, infer, **kw)


def _answer(report):
    out = []
    for s in report.slots:
        m = s.match
        out.append(
            (
                s.slot,
                s.status,
                s.boundary_index,
                round(s.confidence, 6),
                None if m is None else (m.capture.label(), m.sample, m.offset, m.metrics),
                None if s.runner_up is None else (s.runner_up.capture.label(), s.runner_up.metrics),
            )
        )
    return report.verdict, report.cause, out, report.warnings


@pytest.mark.parametrize(
    "case, ids", [("pair", "1,14,26"), ("pair", "2,15,27"), ("window", "1,14,26"), ("window-ids", None)]
)
def test_sample_then_verify_gives_the_full_answer(data, monkeypatch, case, ids):
    p = data[case]
    full, sketched = _both(monkeypatch, p.train, p.infer, **({"layer_ids": ids} if ids else {}))
    assert _answer(sketched) == _answer(full)
    assert [s.boundary_index for s in full.slots] == list(gen.TRAIN_B)
    if case.startswith("window"):
        assert {s.match.offset for s in full.slots} == {37}
    # the pairs not verified say how few tokens they rest on (with ids: most of them)
    tokens = {(r.slot, r.capture): r.metrics.tokens for r in sketched.scores}
    full_tokens = {(r.slot, r.capture): r.metrics.tokens for r in full.scores}
    assert all(t <= scoring.SKETCH_TOKENS for k, t in tokens.items() if t != full_tokens[k])
    if case == "pair":
        assert sum(t == full_tokens[k] for k, t in tokens.items()) < len(tokens) / 2
    # the pictures' norm profiles say when they rest on a sample
    rows = {r["capture"]: r for r in sketched.profiles["norms"] if r["side"] == "infer"}
    if case == "pair":
        assert any("sampled_tokens" in r for r in rows.values())
    assert sketched.profiles["tokens"] == full.profiles["tokens"]


def test_every_pair_in_one_walk_gives_the_full_answer(data, monkeypatch):
    """Below WHOLE_WALK_BELOW, with token ids, the pairs are all scored on every token in one walk over
    the rows instead of sampled: the answers and metrics of scoring them one by one."""
    from hsdiff.largedump import backend

    p = data["pair"]
    monkeypatch.setattr(scoring, "SKETCH_ABOVE", 1 << 62)
    full = compare(p.train, p.infer, layer_ids="1,14,26")
    monkeypatch.setattr(scoring, "SKETCH_ABOVE", 0)
    monkeypatch.setattr(backend, "WORTH", 1 << 62)  # numpy's sums (the loop's: tests/test_fused.py)
    walked = compare(p.train, p.infer, layer_ids="1,14,26")
    assert _answer(walked) == _answer(full)
    assert {(r.slot, r.capture): r.metrics for r in walked.scores} == {
        (r.slot, r.capture): r.metrics for r in full.scores
    }
    assert walked.profiles["tokens"] == full.profiles["tokens"]


def test_sample_then_verify_on_the_seed_story(monkeypatch):
    full, sketched = _both(monkeypatch, SEED / "train", SEED / "infer-wrong", layer_ids="-1,2,30")
    assert _answer(sketched) == _answer(full)
    assert full.verdict == "mismatch"


def test_rows_are_read_alone_and_equal_the_whole_tensor(data):
    p = data["pair"]
    stack = scan(p.infer, INFER).captures
    with safe_open(str(p.infer), "pt") as f:
        whole = f.get_tensor("hidden_states").float()
    b = stack[15]
    assert b.reads_rows and torch.equal(torch.from_numpy(b.read_rows(10, 42)), whole[15, 10:42])
    assert torch.equal(b.load().float(), whole[15])
    assert b.load().dtype == torch.bfloat16 and b.array().dtype.metadata  # the stored dtype, not converted
    train = scan(p.train, TRAIN).captures[0].split(576)[2]
    aux = torch.load(next(p.train.rglob("data_0.ckpt")), weights_only=True)["aux_hidden_state"][0].float()
    assert train.reads_rows and torch.equal(torch.from_numpy(train.read_rows(5, 70)), aux[5:70, 2 * 576 :])


def test_nan_and_zero_rows_are_counted_from_the_rows_read(tmp_path):
    from safetensors.torch import save_file

    x = torch.randn(40, 64)
    x[3, 7] = float("nan")
    x[11] = 0
    save_file({"hidden_states.layer_2": x.to(torch.bfloat16)}, str(tmp_path / "a.safetensors"))
    cap = scan(tmp_path / "a.safetensors", INFER).captures[0]
    from hsdiff.largedump.rows import RowStats, chunks

    st = RowStats(40)
    a = 0
    for c in chunks(cap, 0, 40, step=7):
        st.add(c, a)
        st.add(c, a)  # read twice, counted once
        a += c.shape[0]
    assert (st.rows, st.nonfinite, st.zero_rows, st.nonzero) == (40, 1, 1, True)


def test_progress_is_a_plain_callable_and_quiet_off_a_terminal(data, monkeypatch):
    import io

    from hsdiff.progress import bars

    monkeypatch.setattr(scoring, "SKETCH_ABOVE", 0)
    monkeypatch.setattr(scoring, "WHOLE_WALK_BELOW", 0)
    seen: list[tuple[str, int, int]] = []
    p = data["pair"]
    compare(p.train, p.infer, layer_ids="1,14,26", progress=lambda what, i, n: seen.append((what, i, n)))
    steps = {w for w, _, _ in seen}
    assert {"reading training samples", "sampling pairs", "verifying pairs"} <= steps
    assert all(any(w == s and i == n for w, i, n in seen) for s in ("sampling pairs", "verifying pairs"))
    assert bars(None, stream=io.StringIO()) is None  # not a terminal: nothing drawn
    quiet = io.StringIO()
    quick = bars(True, delay=3600, stream=quiet)  # a step quicker than the delay is never drawn
    assert quick is not None
    quick("sampling pairs", 1, 2)
    quick("sampling pairs", 2, 2)
    shown = io.StringIO()
    slow = bars(True, delay=0, stream=shown)
    assert slow is not None
    slow("verifying pairs", 1, 2)
    slow("verifying pairs", 2, 2)
    assert quiet.getvalue() == "" and "hsdiff verifying pairs" in shown.getvalue() and "1/2" in shown.getvalue()


def test_compare_runs_without_importing_torch():
    """The comparison path is numpy only: importing torch alone costs about 2 s of a run."""
    import subprocess

    code = (
        "import sys\nfrom hsdiff.cli import cli\n"
        "try:\n    cli.main(args=sys.argv[1:], prog_name='hsdiff')\nexcept SystemExit as e:\n    code = e.code\n"
        "print(code, 'torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "compare",
            str(SEED / "train"),
            str(SEED / "infer-wrong"),
            "--layer-ids=-1,2,30",
            "-q",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.stdout.split()[-2:] == ["1", "False"], out.stdout[-500:] + out.stderr[-2000:]


def test_one_sink_token_recommends_no_null(tmp_path, monkeypatch):
    """A one-token sample (the attention sink) cannot tell middle layers apart: the slots it leaves open
    are OK only as consistent with the configured ids, and the recommendation repeats those ids rather
    than pasting nulls into a config."""
    monkeypatch.setenv("HSDIFF_BENCH_CACHE", str(tmp_path))
    p = gen.pair(gen.load_source(), 1, 576)
    report = compare(p.train, p.infer, layer_ids="1,14,26")
    assert any(s.boundary_index is None for s in report.slots)  # the sink alone leaves some slots open
    if report.verdict == "ok":
        assert None not in report.recommended.ids
        assert list(report.recommended.ids) == [1, 14, 26]


def test_a_curve_is_rounded_in_one_go_as_value_by_value():
    """The report's per-token error curves (thousands of values) are rounded to four significant digits
    in one formatting pass: the same floats as rounding each value, and None where one is not finite."""
    import math

    import numpy as np

    from hsdiff.comparison.profiles import _sig, _sigs

    rng = np.random.default_rng(3)
    for scale in (1e-9, 1e-4, 0.02, 1.0, 3e3, 1e7):
        v = (rng.standard_normal(500) * scale).astype(np.float32)
        assert _sigs(v) == [_sig(x) for x in v.tolist()]
    v[[3, 40, 41]] = [np.nan, np.inf, -np.inf]
    got = _sigs(v)
    assert got[3] is None and got[40] is None and got[41] is None
    assert got == [_sig(x) for x in v.tolist()] and all(x is None or math.isfinite(x) for x in got)
    assert _sigs(np.zeros(0, dtype=np.float32)) == []
