"""When no capture matches, which way they miss: real SmolLM2 states and its depth up-scaled 61- and
126-layer versions, the engine configured one layer off and only its configured captures dumped
(``hsdiff.diagnose.miss``, ``hsdiff.separation.miss_direction``). Genuinely different tensors keep
the "different tensors" cause."""

from __future__ import annotations

import pytest
import torch

import hsdiff

from . import builders as B
from .scenarios.write import dumper_records

pytestmark = pytest.mark.filterwarnings("ignore")

#: (depth, training boundaries): SmolLM2 itself, and early slots of its up-scaled versions, where one
#: layer moves the states beyond the 10 % tolerance (deeper in, a neighbour is within it: tests/test_deep_targets.py)
CASES = [(30, (2, 15, 27)), (30, (5, 20)), (61, (2, 58)), (126, (3, 5))]


def _dump(root, depth: int, boundaries, transform=None):
    s = B.states(1, depth)
    values = [s["bf16"][b] if transform is None else transform(s["bf16"][b]) for b in boundaries]
    return dumper_records(root / "dump_20261202_000000_000001",
                          [("input_ids", s["input_ids"], {}), ("aux_hidden_states", torch.cat(values, dim=-1), {})]).parent


@pytest.mark.parametrize("depth,train_b", CASES, ids=lambda v: str(v) if isinstance(v, int) else "B" + "-".join(map(str, v)))
@pytest.mark.parametrize("engine,shift", [("vllm", -1), ("sglang", 1)], ids=["vllm-shallow", "sglang-deep"])
def test_one_layer_off_names_the_direction_and_infers_the_training_ids(tmp_path, depth, train_b, engine, shift):
    # vLLM given SGLang's ids captures one layer shallow; SGLang given vLLM's (boundary) ids one layer deep
    train = B.specforge(tmp_path / "train", [1], train_b, depth=depth)
    captured = [b + shift for b in train_b]
    ids = captured if engine == "vllm" else [b - 1 for b in captured]
    r = hsdiff.compare(train, _dump(tmp_path / "infer", depth, captured), engine=engine, layer_ids=ids,
                       num_layers=depth)
    truth = list(train_b) if engine == "vllm" else [b - 1 for b in train_b]
    way = "shallower" if shift < 0 else "deeper"
    assert r.verdict == "mismatch" and r.exit_code == 1
    assert f"about one layer {way}" in r.cause, r.cause
    assert list(r.recommended.ids) == truth
    assert all(s.evidence == "inferred" and s.confidence < 0.5 for s in r.slots)
    d = r.to_dict()["diagnosis"]
    assert d["kind"] == "no-match" and d["offset"] == shift and d["miss"]["direction"] == way
    assert ("SGLang" if engine == "vllm" else "vLLM") in d["miss"]["explained_by"]


def test_a_direction_no_convention_explains_says_the_way_but_infers_nothing(tmp_path):
    # SGLang given ids two below the training layers' output indices captures one layer shallow: no
    # engine's rule reads [0, 13, 25] as B[2, 15, 27], so the distance is not known
    train = B.specforge(tmp_path / "train", [1], (2, 15, 27))
    r = hsdiff.compare(train, _dump(tmp_path / "infer", 30, (1, 14, 26)), layer_ids=[0, 13, 25], num_layers=30)
    assert r.verdict == "mismatch" and list(r.recommended.ids) == [None, None, None]
    assert "sits shallower than its training slot" in r.cause and "distance is not known" in r.cause


def test_one_slot_alone_says_no_direction(tmp_path):
    # a single capture's norm says little: on SmolLM2 up-scaled to 126 layers, training B40 and the
    # engine one layer shallow (B39), the capture's norm is 1.15 times higher, where a layer's weights change
    train = B.specforge(tmp_path / "train", [1], (40,), depth=126)
    r = hsdiff.compare(train, _dump(tmp_path / "infer", 126, (39,)), engine="vllm", layer_ids=[39], num_layers=126)
    assert r.verdict == "mismatch" and list(r.recommended.ids) == [None]
    assert r.to_dict()["diagnosis"]["miss"] is None and "different tensors" in r.cause


@pytest.mark.parametrize("what", ["post-norm", "another sample"])
def test_genuinely_different_tensors_keep_the_different_tensors_cause(tmp_path, what):
    train = B.specforge(tmp_path / "train", [1], (2, 15, 27))
    if what == "post-norm":  # the final RMSNorm applied to each captured state: a norm far from the stream's
        def transform(x):
            x = x.float()
            return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)).to(torch.bfloat16)
        infer = _dump(tmp_path / "infer", 30, (2, 15, 27), transform)
    else:  # another sample's states under this sample's token ids: the same template, another text
        other, s = B.states(2), B.states(1)
        T = s["input_ids"].shape[0]
        values = [torch.roll(other["bf16"][b][:T], shifts=7, dims=0) for b in (2, 15, 27)]
        infer = dumper_records(tmp_path / "infer" / "dump_20261202_000000_000001",
                               [("input_ids", s["input_ids"], {}), ("aux_hidden_states", torch.cat(values, -1), {})]).parent
    r = hsdiff.compare(train, infer, layer_ids=[1, 14, 26], num_layers=30)
    assert r.verdict == "mismatch" and list(r.recommended.ids) == [None, None, None]
    assert "the two sides hold different tensors" in r.cause and "norm ratio" in r.cause
    assert r.to_dict()["diagnosis"]["miss"] is None
