"""The C loop for per-row norms (hsdiff/_fused.c): the same bits with and without AVX2, the values of a
float64 reference to float32 accuracy, the same answers as the numpy path on real hidden states, and
each file row read once by the slots of a concatenated tensor."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hsdiff import compare
from hsdiff.arrays import as_f32, np_dtype
from hsdiff.comparison import scoring
from hsdiff.largedump import SampleCache, TrainSlot, backend, sketch, sketch_all
from hsdiff.model import TRAIN
from hsdiff.readers import scan

from .golden.compare import summed_noise

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import gen  # noqa: E402

needs_loop = pytest.mark.skipif(not backend.BACKEND.loop, reason="the C loop was not built here")


def _bf16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 bits (round to nearest even)."""
    u = x.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).view(np_dtype("bfloat16"))


@needs_loop
@pytest.mark.parametrize("k", [1, 3, 4, 5, 9])
@pytest.mark.parametrize("width", [7, 16, 33, 576])
def test_one_x_against_many_gives_the_bits_of_one_call_per_pair(k, width):
    """rows_sq_many reads x once for several training slots (slices of one concatenated block, so row
    strides wider than the rows, and mixed dtypes): each norm has the bits of rows_sq pair by pair."""
    rng = np.random.default_rng(k * 1000 + width)
    x = _bf16(rng.standard_normal((6, width)).astype(np.float32) * np.float32(20))
    block = rng.standard_normal((6, k * width)).astype(np.float32) * np.float32(20)
    ys = [(_bf16(block) if j % 2 else block)[:, j * width : (j + 1) * width] for j in range(k)]
    for portable in (False, True):
        nx2, d2s = np.full(6, np.nan), [np.full(6, np.nan) for _ in range(k)]
        backend.rows_sq_many(x, ys, nx2, d2s, portable)
        for y, d2 in zip(ys, d2s):
            one_nx2, one_d2 = backend.rows_sq(x, y, portable=portable)
            assert np.array_equal(nx2, one_nx2) and np.array_equal(d2, one_d2)


def test_the_loop_is_built_where_a_compiler_is():
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the numpy path is used")
    if os.environ.get("HSDIFF_NO_C") == "1":
        pytest.skip("HSDIFF_NO_C=1: the numpy path on request")
    assert backend.BACKEND.loop, "hsdiff/_fused.c should have been built by pip install"


@needs_loop
@pytest.mark.parametrize("width", [1, 7, 16, 17, 576, 1000])
@pytest.mark.parametrize(
    "kinds", [("bfloat16", "bfloat16"), ("float32", "bfloat16"), ("bfloat16", "float32"), ("float32", "float32")]
)
def test_loop_matches_a_float64_reference_and_its_portable_twin(width, kinds):
    rng = np.random.default_rng(width)
    base = rng.standard_normal((9, width)).astype(np.float32) * np.float32(30)
    base[0, 0] = 4000.0  # a massive activation
    base[3] = 0  # an all-zero row
    other = base + rng.standard_normal(base.shape).astype(np.float32) * np.float32(0.3)
    x = _bf16(base) if kinds[0] == "bfloat16" else base
    y = _bf16(other) if kinds[1] == "bfloat16" else other
    nx2, d2 = backend.rows_sq(x, y)
    px2, pd2 = backend.rows_sq(x, y, portable=True)
    assert np.array_equal(nx2, px2) and np.array_equal(d2, pd2)  # AVX2 and portable give the same bits
    xf, yf = as_f32(x).astype(np.float64), as_f32(y).astype(np.float64)
    np.testing.assert_allclose(nx2, (xf * xf).sum(1), rtol=1e-6)
    np.testing.assert_allclose(d2, ((xf - yf) ** 2).sum(1), rtol=1e-5, atol=1e-30)
    assert nx2[3] == 0.0


@needs_loop
def test_loop_reads_strided_rows_and_passes_nan_and_inf_on():
    rng = np.random.default_rng(0)
    wide = rng.standard_normal((6, 3 * 40)).astype(np.float32)
    wide[2, 45] = np.nan
    wide[4, 50] = np.inf
    raw = _bf16(wide)
    slot = raw[:, 40:80]  # the middle slot of a concatenated [T, 3H] tensor: rows 240 bytes apart
    assert backend.BACKEND.handles(slot)
    nx2, _ = backend.rows_sq(slot)
    ref = (as_f32(slot).astype(np.float64) ** 2).sum(1)
    assert np.isnan(nx2[2]) and np.isinf(nx2[4])
    ok = [0, 1, 3, 5]
    np.testing.assert_allclose(nx2[ok], ref[ok], rtol=1e-6)


def _answers(report):
    out = []
    for s in report.slots:
        m = s.match
        out.append((s.slot, s.status, s.boundary_index, None if m is None else (m.capture.label(), m.offset)))
    return report.verdict, report.cause, out, report.warnings


@needs_loop
def test_the_loop_and_numpy_give_the_same_answers_and_metrics_to_float32_accuracy(tmp_path, monkeypatch):
    monkeypatch.setenv("HSDIFF_BENCH_CACHE", str(tmp_path))
    pair = gen.pair(gen.load_source(), 320, 576)  # real SmolLM2 states, bf16, as a 31-layer stack
    monkeypatch.setattr(scoring, "SKETCH_ABOVE", 0)  # the large-dump path on a small pair
    monkeypatch.setattr(backend, "WORTH", 1 << 62)  # numpy's sums
    with_numpy = compare(pair.train, pair.infer, layer_ids="1,14,26")
    monkeypatch.setattr(backend, "WORTH", 0)  # the C loop's: verification and training norms
    with_loop = compare(pair.train, pair.infer, layer_ids="1,14,26")
    assert with_loop.scores != with_numpy.scores  # two computations (equal to the last bits only)
    assert _answers(with_loop) == _answers(with_numpy)
    assert [s.boundary_index for s in with_loop.slots] == list(gen.TRAIN_B)
    for a, b in zip(with_loop.slots, with_numpy.slots):
        assert a.match is not None and b.match is not None
        assert a.match.metrics.tokens == b.match.metrics.tokens
        # numpy's float32 sums over a row of 576 values, in the order the CPU's BLAS kernel takes, against
        # the loop's: within the noise the golden comparison derives for them (tests/golden/compare.py)
        delta = summed_noise(576)
        for name in ("rel_err", "p90_err", "norm_ratio"):
            assert getattr(a.match.metrics, name) == pytest.approx(getattr(b.match.metrics, name), rel=delta)
        r = b.match.metrics.norm_ratio
        assert a.match.metrics.cosine == pytest.approx(b.match.metrics.cosine, abs=delta * (r + 1 / r + 2))


@needs_loop
def test_the_slots_of_a_concatenated_tensor_read_each_row_once(tmp_path, monkeypatch):
    monkeypatch.setenv("HSDIFF_BENCH_CACHE", str(tmp_path))
    pair = gen.pair(gen.load_source(), 320, 576)
    aux = scan(pair.train, TRAIN).captures[0]
    slots = aux.split(576)
    read: list[int] = []
    real = os.preadv

    def counting(fd, buffers, offset):
        got = real(fd, buffers, offset)
        read.append(got)
        return got

    monkeypatch.setattr(os, "preadv", counting)
    monkeypatch.setattr(backend, "WORTH", 0)
    loaded = TrainSlot.load_all(slots)
    assert sum(read) == 320 * 3 * 576 * 2  # the file's rows, once, though three slots read them
    whole = as_f32(aux.array()).astype(np.float64)
    for s, ts in enumerate(loaded):
        ref = np.sqrt((whole[:, s * 576 : (s + 1) * 576] ** 2).sum(1))
        np.testing.assert_allclose(ts.norms, ref, rtol=1e-6)


def test_without_the_loop_compare_gives_the_same_answer(tmp_path, monkeypatch):
    """HSDIFF_NO_C=1: the numpy path, as on a machine without a C compiler (a process each)."""
    monkeypatch.setenv("HSDIFF_BENCH_CACHE", str(tmp_path))
    pair = gen.pair(gen.load_source(), 320, 576)
    code = (
        "import sys; from hsdiff import compare; from hsdiff.comparison import scoring; "
        "from hsdiff.largedump import backend; "
        "scoring.SKETCH_ABOVE = 0; backend.WORTH = 0; r = compare(sys.argv[1], sys.argv[2], layer_ids='1,14,26'); "
        "print(backend.BACKEND.loop, r.verdict, [s.boundary_index for s in r.slots], "
        "[round(s.match.metrics.rel_err, 4) for s in r.slots])"
    )
    args = [sys.executable, "-c", code, str(pair.train), str(pair.infer)]
    off = subprocess.run(args, env=dict(os.environ, HSDIFF_NO_C="1"), capture_output=True, text=True, timeout=300)
    on = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert off.returncode == on.returncode == 0, off.stderr + on.stderr
    flag, rest = off.stdout.split(" ", 1)
    assert flag == "False" and f"ok {list(gen.TRAIN_B)}" in rest
    assert on.stdout.split(" ", 1)[1] == rest  # the same verdict, boundaries and errors to 4 decimals


def test_a_capture_sampled_against_slots_of_other_dtypes_gives_each_its_own_sketch(tmp_path):
    """One capture's samples are shared by the training slots that sample the same rows; a slot the C
    loop reads in its stored dtype (bfloat16) and one it does not (float16) must not share the
    capture's rows as read for the other (bfloat16 bits are not float32 values)."""
    import torch
    from safetensors.torch import save_file

    from hsdiff.model import INFER

    rng = np.random.default_rng(5)
    base = torch.from_numpy(rng.standard_normal((128, 64)).astype(np.float32) * 3)
    noise = torch.from_numpy(rng.standard_normal((128, 64)).astype(np.float32) * 0.01)
    caps = {}
    for name, t in [
        ("x", base.to(torch.bfloat16)),
        ("bf16", (base + noise).to(torch.bfloat16)),
        ("f16", (base + noise).to(torch.float16)),
    ]:
        save_file({"hidden_states.layer_2": t.contiguous()}, str(tmp_path / f"{name}.safetensors"))
        caps[name] = scan(tmp_path / f"{name}.safetensors", INFER).captures[0]
    x, a, b = caps["x"], TrainSlot.load(caps["bf16"]), TrainSlot.load(caps["f16"])
    alone = [sketch(t, x, 0, 64, SampleCache()) for t in (a, b)]
    assert alone[1].rel_err < 0.01 and alone[1].cosine > 0.999
    cache = SampleCache()
    assert [sketch(t, x, 0, 64, cache) for t in (a, b)] == alone
    assert sketch_all([b, a], x, 0, 64, SampleCache()) == alone[::-1]
    assert sketch_all([a, b], x, 0, 64, cache) == alone


_STRATEGY_AND_WARNINGS = """
import json, sys
from hsdiff import compare
from hsdiff.comparison import scoring
from hsdiff.largedump import backend

seen = []
score_all = scoring.score_all


def spy(*a, **k):
    got = score_all(*a, **k)
    seen.append(got.strategy.value)
    return got


scoring.score_all = spy
scoring.SKETCH_ABOVE = 0  # the large-dump path on a small pair
out = {}
for walk_below in (scoring.WHOLE_WALK_BELOW, 0):
    scoring.WHOLE_WALK_BELOW = walk_below
    r = compare(sys.argv[1], sys.argv[2], layer_ids="1,14,26")
    out[seen[-1]] = [r.verdict, [s.boundary_index for s in r.slots], list(r.warnings)]
print(json.dumps([backend.BACKEND.name, out]))
"""


def test_the_strategy_and_the_warnings_do_not_depend_on_the_backend(tmp_path, monkeypatch):
    """HSDIFF_NO_C=1 and without (a process each): the same strategy for the same work (one walk over
    every token, or a sample then a shortlist) and the same data-quality warnings about the NaN value and
    the all-zero row of the inference capture, whichever backend sums the rows."""
    from safetensors.torch import load_file, save_file

    monkeypatch.setenv("HSDIFF_BENCH_CACHE", str(tmp_path / "cache"))
    pair = gen.pair(gen.load_source(), 320, 576)
    tensors = load_file(str(pair.infer))
    tensors["hidden_states"][14, 100, 7] = float("nan")
    tensors["hidden_states"][14, 200] = 0
    infer = tmp_path / "infer" / "hidden_states.safetensors"
    infer.parent.mkdir()
    save_file(tensors, str(infer))
    args = [sys.executable, "-c", _STRATEGY_AND_WARNINGS, str(pair.train), str(infer)]
    off = subprocess.run(args, env=dict(os.environ, HSDIFF_NO_C="1"), capture_output=True, text=True, timeout=300)
    on = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert off.returncode == on.returncode == 0, off.stderr + on.stderr
    (name_off, got_off), (_, got_on) = json.loads(off.stdout), json.loads(on.stdout)
    assert name_off == "numpy"
    assert got_off == got_on
    assert set(got_off) == {"walk", "sketch"}
    walked = " ".join(got_off["walk"][2])
    assert "1 NaN/Inf values" in walked and "zero" in walked  # every row was read
