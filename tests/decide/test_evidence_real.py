"""Evidence levels on real states: how far the neighbours of a match are is read from the data (the
61-layer seed target, whose neighbours differ by only 4-10 % in the middle), labels that the values
only agree with answer as ``consistent``, and labels that contradict the training side never pass."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import hsdiff

from .. import builders as B
from ..scenarios.write import dumper_records

SEED_TRAIN = B.SEED / "train"  # B 3, 31, 59 of a 61-layer target, labelled [2, 30, 58] (SpecForge)
SEED_IDS = [2, 30, 58]


@cache
def seed_states() -> dict[str, torch.Tensor]:
    """Sample 1 of the seed target: ``input_ids`` [25] and its bf16 run at every boundary [62, 25, 576]."""
    d = load_file(str(B.SEED / "states-sample-1.safetensors"))
    return {"input_ids": d["input_ids"], "bf16": d["bf16.boundaries"]}


@pytest.fixture(scope="module")
def seed_every_layer(tmp_path_factory) -> Path:
    """An SGLang dumper run at the input of every layer of the seed target (tags B 0..60)."""
    s = seed_states()
    root = tmp_path_factory.mktemp("seed-all")
    dumper_records(
        root / "dump_20261201_000000_000001",
        [("input_ids", s["input_ids"], {})] + [("layer_input", s["bf16"][b], {"layer_id": b}) for b in range(61)],
    )
    return root


def test_captured_neighbours_of_the_seed_target_are_measured_not_assumed(seed_every_layer):
    r = hsdiff.compare(SEED_TRAIN, seed_every_layer, layer_ids=SEED_IDS)
    assert r.recommended.ids == tuple(SEED_IDS) and r.verdict == "ok" and r.exit_code == 0
    assert [s.evidence for s in r.slots] == ["observed"] * 3
    # B31 matches at 2.3 % and its neighbours B30/B32 are 7.9-10 % away: a ratio of ~3.4, no more
    mid = r.slots[1]
    assert mid.runner_up is not None and mid.runner_up.boundary in (30, 32)
    assert 0.45 < mid.confidence < 0.7
    assert r.slots[0].confidence > 0.9  # B3's neighbours differ by ~50 %


def test_uncaptured_neighbours_of_the_seed_target_are_estimated_from_far_captures():
    # only B 3, 31, 59 captured: B31's neighbours cannot be excluded at 2.3 % (they are at 7.9 %)
    r = hsdiff.compare(SEED_TRAIN, B.SEED / "infer-fixed", layer_ids=SEED_IDS)
    assert r.recommended.ids == tuple(SEED_IDS) and r.verdict == "inconclusive" and r.exit_code == 1
    mid = r.slots[1]
    assert mid.evidence == "consistent" and mid.confidence < 0.9 and mid.status == "unverified"
    assert "28 layers away" in mid.note and "comes from the labels" in mid.note
    assert re.search(r"(?i)rest.* on the labels", r.cause)


def test_seed_print_on_the_attention_sink_with_agreeing_labels_is_consistent(tmp_path):
    s = seed_states()
    lines = ["[2026-11-30 01:15:00 TP0] The server is fired up and ready to roll!"] + [
        f"[2026-11-30 01:15:05 TP0] aux_hidden_states[{j}] layer={b} h[0, :5]="
        + "["
        + ", ".join(f"{float(v):.4g}" for v in s["bf16"][b][0, :5].float())
        + "]"
        for j, b in enumerate((3, 31, 59))
    ]
    log = tmp_path / "server.log"
    log.write_text("\n".join(lines) + "\n")
    r = hsdiff.compare(SEED_TRAIN, log, layer_ids=SEED_IDS)
    assert r.recommended.ids == tuple(SEED_IDS)
    assert [s.evidence for s in r.slots] == ["consistent"] * 3
    assert all(s.confidence < 0.9 for s in r.slots)
    assert r.verdict != "ok" and r.exit_code == 1
    assert re.search(r"(?i)attention-sink", r.cause)


def test_an_unlabelled_dump_labelled_by_the_configuration_never_passes_against_the_training_labels(tmp_path):
    # training at B 3, 16, 28 and labelled so; the dump (no labels of its own) holds B 3, 16, 28 too, but
    # the ids under test [1, 14, 26] say B 2, 15, 27: the dump was captured with another configuration
    train = B.specforge(tmp_path / "train", [0, 1, 2], [3, 16, 28])
    B.draft_config(train / "config.json", [2, 15, 27])
    infer = B.sglang_dump(tmp_path / "infer", 1, [3, 16, 28])
    r = hsdiff.compare(train, infer, layer_ids=[1, 14, 26])
    assert r.verdict != "ok" and r.exit_code == 1
    assert all(s.confidence <= 0.5 for s in r.slots)
    assert any(re.search(r"(?i)label", w) and re.search(r"\bone layer\b", w) for w in r.warnings)
