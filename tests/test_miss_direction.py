"""When no capture matches, which way they miss: real SmolLM2 states and its depth up-scaled 61- and
126-layer versions, the engine configured one layer off and only its configured captures dumped
(``hsdiff.diagnose.miss``, ``hsdiff.align.separation.miss_direction``). Genuinely different tensors keep
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
    return dumper_records(
        root / "dump_20261202_000000_000001",
        [("input_ids", s["input_ids"], {}), ("aux_hidden_states", torch.cat(values, dim=-1), {})],
    ).parent


#: (engine, where it captures against training, the engine whose reading of the ids names the training
#: layers): SGLang's ids on vLLM capture one layer shallow, vLLM's (boundary) ids on SGLang one layer
#: deep; ids one too high on vLLM, or SGLang given ids two below the training layers' output indices,
#: are one layer off in the engine's own convention, which no engine's reading explains
WAYS = [("vllm", -1, "SGLang"), ("sglang", 1, "vLLM"), ("vllm", 1, None), ("sglang", -1, None)]


@pytest.mark.parametrize(
    "depth,train_b", CASES, ids=lambda v: str(v) if isinstance(v, int) else "B" + "-".join(map(str, v))
)
@pytest.mark.parametrize(
    "engine,shift,other", WAYS, ids=["vllm-shallow", "sglang-deep", "vllm-deep-own", "sglang-shallow-own"]
)
def test_one_layer_off_names_the_direction_and_infers_the_training_ids(tmp_path, depth, train_b, engine, shift, other):
    train = B.specforge(tmp_path / "train", [1], train_b, depth=depth)
    captured = [b + shift for b in train_b]
    below = 1 if engine == "sglang" else 0  # SGLang's id i captures B i+1, vLLM's B i
    r = hsdiff.compare(
        train,
        _dump(tmp_path / "infer", depth, captured),
        engine=engine,
        layer_ids=[b - below for b in captured],
        num_layers=depth,
    )
    way = "shallower" if shift < 0 else "deeper"
    assert r.verdict == "mismatch" and r.exit_code == 1
    assert f"about one layer {way}" in r.cause, r.cause
    assert list(r.recommended.ids) == [b - below for b in train_b]
    assert all(s.evidence == "inferred" and s.confidence < 0.5 for s in r.slots)
    d = r.to_dict()["diagnosis"]
    assert d["kind"] == "no-match" and d["offset"] == shift and d["miss"]["direction"] == way
    assert d["miss"]["layers"] == 1
    if other:
        assert other in d["miss"]["explained_by"]
    else:  # the distance read from the errors: the cause says so and names the training layers to dump
        assert d["miss"]["explained_by"] == [] and "No engine's reading" in r.cause, r.cause
        assert f"one layer {'deeper' if shift < 0 else 'shallower'} in" in r.cause and "low confidence" in r.cause
        named = [f"B{b}" for b in train_b]
        assert "dump the layers " + ", ".join(named[:-1]) + " and " + named[-1] in r.cause


def test_one_slot_alone_says_no_direction(tmp_path):
    # a single capture's norm says little: on SmolLM2 up-scaled to 126 layers, training B40 and the
    # engine one layer shallow (B39), the capture's norm is 1.15 times higher, where a layer's weights change
    train = B.specforge(tmp_path / "train", [1], (40,), depth=126)
    r = hsdiff.compare(train, _dump(tmp_path / "infer", 126, (39,)), engine="vllm", layer_ids=[39], num_layers=126)
    assert r.verdict == "mismatch" and list(r.recommended.ids) == [None]
    assert r.to_dict()["diagnosis"]["miss"] is None and "different tensors" in r.cause


@pytest.mark.parametrize("engine,ids", [("sglang", [1, 14, 26]), ("vllm", [2, 15, 27])])
@pytest.mark.parametrize("what", ["post-norm", "another sample"])
def test_genuinely_different_tensors_keep_the_different_tensors_cause(tmp_path, what, engine, ids):
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
        infer = dumper_records(
            tmp_path / "infer" / "dump_20261202_000000_000001",
            [("input_ids", s["input_ids"], {}), ("aux_hidden_states", torch.cat(values, -1), {})],
        ).parent
    r = hsdiff.compare(train, infer, engine=engine, layer_ids=ids, num_layers=30)
    assert r.verdict == "mismatch" and list(r.recommended.ids) == [None, None, None]
    assert all(s.evidence != "inferred" for s in r.slots)
    assert "the two sides hold different tensors" in r.cause and "norm ratio" in r.cause
    assert r.to_dict()["diagnosis"]["miss"] is None
