"""What a prediction is told (``hsdiff.draft.inputs``): the draft tree the engine verifies, and the
layers it takes from a comparison's report, as records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import hsdiff
from hsdiff.cli._group import flag
from hsdiff.draft import ReportLayers, Speculation
from hsdiff.errors import InputError

from .. import builders as B


def test_the_draft_tokens_default_to_the_chain_or_the_whole_tree() -> None:
    assert Speculation(num_steps=3).checked() == Speculation(3, 1, 4)  # a chain: every step's token + 1
    assert Speculation(num_steps=3, topk=2).checked().num_draft_tokens == 2 + 2 * 2 * 2 + 1  # every node + 1
    assert Speculation(3, 2, 5).checked().num_draft_tokens == 5


def test_a_tree_that_cannot_be_drafted_is_refused_in_the_caller_s_terms() -> None:
    with pytest.raises(InputError, match="`num_steps` \\(0\\) and `topk` \\(1\\) must be at least 1") as e:
        Speculation(num_steps=0).checked()
    assert e.value.in_terms(flag).startswith("--num-steps (0) and --topk (1) must be at least 1")
    with pytest.raises(InputError, match="`num_draft_tokens=9` is out of range for 3 steps") as e:
        Speculation(3, 1, 9).checked()
    said = e.value.in_terms(flag)
    assert said.startswith("--num-draft-tokens 9 is out of range") and "give 2..4" in said


def test_the_report_s_layers_from_a_report_and_from_its_json(tmp_path: Path) -> None:
    train = B.specforge(tmp_path / "train", [0], [3, 16, 28])
    infer = B.sglang_dump(tmp_path / "infer", 0, [3, 16, 28])
    report = hsdiff.compare(train, infer, layer_ids=[2, 15, 27])
    got = ReportLayers.of(report)
    assert (got.configured, got.configured_ids, got.recommended) == ((3, 16, 28), (2, 15, 27), (3, 16, 28))
    assert (got.engine, got.family, got.num_layers) == ("sglang", "llama", report.to_dict()["num_hidden_layers"])
    assert ReportLayers.of(json.loads(json.dumps(report.to_dict()))) == got  # a report file read back
    # a slot with no layer: no claim for the training row, no recommendation to predict
    doc = report.to_dict()
    doc["slots"][1]["boundary_index"] = None
    doc["recommended"]["boundary_indices"][1] = None
    partial = ReportLayers.of(doc)
    assert partial.claimed is None and partial.recommended is None
    assert ReportLayers.of(None) == ReportLayers()
