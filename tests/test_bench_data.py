"""The benchmark data generator keeps what makes real hidden states hard to compare, and the
benchmark's baseline and process runner report what they claim. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import gen  # noqa: E402


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    cache = tmp_path_factory.mktemp("bench-cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("HSDIFF_BENCH_CACHE", str(cache))
    src = gen.load_source()
    yield src, gen.pair(src, 96, 1152)
    mp.undo()


def _err(x: torch.Tensor, y: torch.Tensor) -> float:
    return float(((x - y).norm(dim=-1) / x.norm(dim=-1))[1:].median())


def test_generated_pair_behaves_like_real_states(pair):
    src, p = pair
    with safe_open(str(p.infer), "pt") as f:
        stack = f.get_tensor("hidden_states").float()
        assert f.metadata()["index"] == "boundary"
        assert f.get_tensor("input_ids")[0] == 1  # the real chat prefix starts the sample
    train = torch.load(next(p.train.rglob("data_0.ckpt")), weights_only=True)
    assert stack.shape == (31, 96, 1152) and train["aux_hidden_state"].shape == (1, 96, 3 * 1152)
    assert train["aux_hidden_state"].dtype == torch.bfloat16
    norms = stack.norm(dim=-1)
    assert norms[15, 0] > 50 * norms[15, 1:].median()  # attention sink: massive activations on token 0
    assert norms[28, 1:].median() > 3 * norms[2, 1:].median()  # residual stream grows with depth
    aux = train["aux_hidden_state"][0].float().chunk(3, dim=-1)
    for slot, b in enumerate(gen.TRAIN_B):
        same, nearest = _err(aux[slot], stack[b]), min(_err(aux[slot], stack[b - 1]), _err(aux[slot], stack[b + 1]))
        assert 0.001 < same < 0.03 < 0.15 < nearest  # bf16 noise between sides, neighbours far apart


def test_generation_is_deterministic_and_cached(pair):
    src, p = pair
    before = p.infer.stat().st_mtime_ns
    again = gen.pair(src, 96, 1152)
    assert again.infer.stat().st_mtime_ns == before
    r1, r2 = gen.recipe(src, 40, 600, 5), gen.recipe(src, 40, 600, 5)
    assert torch.equal(gen.boundary(src, r1, 3, "bf16"), gen.boundary(src, r2, 3, "bf16"))


def test_naive_baseline_finds_the_training_layers(pair):
    _, p = pair
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "naive.py"), str(p.train), str(p.infer)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert [s["boundary"] for s in json.loads(out.stdout)["slots"]] == list(gen.TRAIN_B)


def test_runner_reports_the_child_not_the_parent(tmp_path):
    ballast = torch.ones(100_000_000)  # 400 MB in this process must not show in the child's peak RSS  # noqa: F841
    res = tmp_path / "r.json"
    cmd = [sys.executable, "-c", "b = bytearray(200_000_000); b[::4096] = b'x' * len(b[::4096])"]
    subprocess.run([sys.executable, "-S", str(ROOT / "benchmarks" / "measure.py"), str(res), *cmd], check=True)
    r = json.loads(res.read_text())
    assert r["exit"] == 0 and 190 < r["peak_rss_mb"] < 350 and r["cpu_s"] > 0
