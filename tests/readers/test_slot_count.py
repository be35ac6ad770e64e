"""For every training format, the slots read are the slots the trainer feeds the draft: the aux tensor's
width over H (or the per-layer tensors present), whatever the values — a last block equal to the final
state, blocks equal to each other, zeros. Files built here as each writer lays them out (the modules
of :mod:`hsdiff.readers` cite the writers' lines)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

import hsdiff
from hsdiff.comparison.slots import split_train

H = 16

#: format -> (writer of one sample with ``blocks`` [k, T, H] as the aux slots and ``final`` [T, H], extra blocks
#: the trainer does not feed the draft)
WRITERS = {}


def _writer(name):
    def deco(f):
        WRITERS[name] = f
        return f

    return deco


def _ids(t):
    return torch.arange(100, 100 + t)


@_writer("specforge")
def _specforge(root: Path, blocks, final):
    d = root / "rows_0-2000"
    d.mkdir(parents=True)
    t = final.shape[0]
    torch.save(
        {
            "input_ids": _ids(t),
            "loss_mask": torch.ones(t, dtype=torch.long),
            "aux_hidden_state": torch.cat(list(blocks), dim=-1)[None].clone(),
            "hidden_state": final[None].clone(),
        },
        d / "data_0.ckpt",
    )


@_writer("specforge_dflash")
def _dspark(root: Path, blocks, final):
    d = root / "rows_0-2000"
    d.mkdir(parents=True)
    t = final.shape[0]
    torch.save(
        {
            "input_ids": _ids(t),
            "loss_mask": torch.ones(t, dtype=torch.long),
            "hidden_states": torch.cat(list(blocks), dim=-1)[None].clone(),
            "target_last_hidden_states": final[None].clone(),
        },
        d / "data_0.ckpt",
    )


@_writer("modelopt")
def _modelopt(root: Path, blocks, final):
    root.mkdir(parents=True)
    t = final.shape[0]
    torch.save(
        {
            "input_ids": _ids(t),
            "hidden_states": final.clone(),
            "aux_hidden_states": torch.cat(list(blocks), dim=-1).clone(),
            "conversation_id": "c",
        },
        root / "c.pt",
    )


@_writer("trtllm")
def _trtllm(root: Path, blocks, final):
    root.mkdir(parents=True)
    t = final.shape[0]
    if len(blocks) == 1:  # one layer captured (-1): SaveHiddenStates writes it as the final state alone
        rec = {"id": 1, "input_ids": _ids(t), "hidden_state": blocks[0].clone()}
    else:
        rec = {"id": 1, "input_ids": _ids(t), "hidden_state": final.clone()}
        rec["aux_hidden_states"] = torch.cat(list(blocks), dim=-1).clone()
    torch.save([rec], root / "data_1.pt")


@_writer("speculators")
def _speculators(root: Path, blocks, final):
    """The connector's [T, k+1, H]: the trainer feeds the first k, the last is the verifier's state."""
    root.mkdir(parents=True)
    hs = torch.stack([*blocks, final], dim=1).contiguous()
    save_file({"hidden_states": hs, "token_ids": _ids(final.shape[0])}, str(root / "hs_0.safetensors"))


@_writer("verl_speco")
def _verl(root: Path, blocks, final):
    """``eagle3_aux_plus_last``: [T, (k+1)·H], the trainer takes the first k·H columns as aux."""
    root.mkdir(parents=True)
    t = final.shape[0]
    meta = {"format": "torch_shard", "created_by": "verl_speco"}
    sample = {
        "input_ids": _ids(t),
        "loss_mask": torch.ones(t),
        "hidden_states": torch.cat([*blocks, final], dim=-1).clone(),
        "metadata": {"hidden_states_layout": "eagle3_aux_plus_last", "target_layer_ids": list(range(len(blocks)))},
    }
    torch.save({"samples": [sample], "metadata": meta}, root / "s_000000.pt")
    (root / "manifest.jsonl").write_text(json.dumps({"path": "s_000000.pt", "num_samples": 1}) + "\n")


@st.composite
def _tensors(draw):
    k = draw(st.integers(1, 4))
    t = draw(st.integers(2, 6))
    kind = draw(st.sampled_from(["random", "last-is-final", "repeated", "zeros"]))
    seed = draw(st.integers(0, 2**16))
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16]))
    g = torch.Generator().manual_seed(seed)
    blocks = [torch.randn(t, H, generator=g).to(dtype) for _ in range(k)]
    final = torch.randn(t, H, generator=g).to(dtype)
    if kind == "last-is-final":
        final = blocks[-1].clone()
    elif kind == "repeated":
        blocks = [blocks[0].clone() for _ in blocks]
        final = blocks[0].clone()
    elif kind == "zeros":
        blocks = [torch.zeros(t, H, dtype=dtype) for _ in blocks]
        final = torch.zeros(t, H, dtype=dtype)
    return k, blocks, final, kind


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fmt=st.sampled_from(sorted(WRITERS)), case=_tensors())
def test_slots_read_are_the_slots_the_trainer_feeds(tmp_path_factory, fmt, case):
    k, blocks, final, kind = case
    root = tmp_path_factory.mktemp(fmt)
    WRITERS[fmt](root / "train", blocks, final)
    dump = hsdiff.load(root / "train", "train")
    assert {c.origin.format for c in dump.captures} == {fmt}
    slots = split_train(dump, H)
    assert sorted(slots) == list(range(k)), (fmt, kind)
    for s, caps in slots.items():  # every slot holds its own block's values, the last one included
        got = np.asarray(caps[0].read_rows(0, final.shape[0]))
        assert np.array_equal(got, blocks[s].float().numpy()), (fmt, kind, s)
