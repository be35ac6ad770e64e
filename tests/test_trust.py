"""Right or honestly open on every realistic case: one reproduction per class of failure, on real
SmolLM2-135M states (30 layers, H=576; fp32 training side, bf16/fp16/fp8/noisy engine side).

Values are the evidence, labels (configs, key names, engine tags, configured ids) the priors. Each test
states what a correct tool answers: ids, verdict, exit code and the key words of the cause or warning.
Training slots are B 2, 15, 27 (SGLang ids [1, 14, 26], vLLM ids [2, 15, 27]) unless said otherwise.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import hsdiff
from hsdiff.cli._group import flag

from . import builders as B
from .scenarios.noise import apply
from .scenarios.write import dumper_records

TRAIN_B = [2, 15, 27]
SGL = (1, 14, 26)
GEN = 1234


def text(r) -> str:
    """Everything the report says in words."""
    return " ".join([r.cause, *r.explanation, *r.warnings])


def matched_files(r) -> list[str | None]:
    return [None if s["matched"] is None else s["matched"]["file"] for s in r.to_dict()["slots"]]


def noisy(sample: int, b: int, kind: str = "bf16", level: float = 0.0) -> torch.Tensor:
    return apply(sample, b, kind, level, torch.Generator().manual_seed(GEN + b))


@pytest.fixture(scope="module")
def train(tmp_path_factory) -> Path:
    """SpecForge data of samples 0-2 at B 2, 15, 27 with a draft config claiming ids [1, 14, 26]."""
    root = B.specforge(tmp_path_factory.mktemp("train"), [0, 1, 2], TRAIN_B)
    B.draft_config(root / "config.json", list(SGL))
    return root


def concat_dump(
    root: Path, sample: int, bs: list[int], *, kind: str = "bf16", level: float = 0.0, tokens: slice = slice(None)
) -> Path:
    ids = B.states(sample)["input_ids"][tokens]
    aux = torch.cat([noisy(sample, b, kind, level)[tokens] for b in bs], dim=-1)
    dumper_records(root / "dump_20261201_000000_000001", [("input_ids", ids, {}), ("aux_hidden_states", aux, {})])
    return root


def log_file(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(["[2026-12-01 00:00:01 TP0] The server is fired up and ready to roll!", *lines]) + "\n")
    return path


def flist(v: torch.Tensor) -> str:
    return "[" + ", ".join(f"{float(x):.4g}" for x in v) + "]"


# ------------------------------------------------------------------------- 1. shape guessing
def test_1_connector_without_token_ids_is_not_an_all_layer_stack(tmp_path, train):
    # vLLM's connector layout [T=24, k=3, H]; token_ids left out by whoever copied the file
    hs = torch.stack([noisy(1, b) for b in TRAIN_B], dim=1).contiguous()
    save_file({"hidden_states": hs}, str(tmp_path / "req-1.safetensors"))
    r = hsdiff.compare(train, tmp_path / "req-1.safetensors", engine="vllm", layer_ids=[2, 15, 27])
    assert r.recommended.ids == (2, 15, 27)  # k = 3 from the ids, T = 24 from the training input_ids
    assert r.verdict == "ok" and r.exit_code == 0
    for s in r.slots:  # never a match whose cosine contradicts its error
        assert s.match is not None and s.match.metrics.cosine > 0.99


# ------------------------------------------------------------------------- 2. a minority decides
@pytest.mark.parametrize(
    "rows",
    [
        pytest.param([5, 6], id="two-ordinary"),
        pytest.param([0, 5, 6], id="sink-and-two-ordinary"),
    ],
)
def test_2_one_match_one_miss_over_two_ordinary_tokens_is_not_a_match(tmp_path, train, rows):
    # two ordinary tokens (and maybe the sink); the last token's rows come from three layers deeper
    cols = []
    for b in TRAIN_B:
        x = noisy(1, b)[rows].clone()
        x[-1] = noisy(1, b + 3)[rows[-1]]
        cols.append(x)
    ids = B.states(1)["input_ids"][rows]
    dumper_records(tmp_path / "dump", [("input_ids", ids, {}), ("aux_hidden_states", torch.cat(cols, dim=-1), {})])
    r = hsdiff.compare(train, tmp_path, layer_ids=list(SGL))
    assert r.verdict != "ok" and r.exit_code == 1
    assert all(s.confidence < 0.9 for s in r.slots)


# ------------------------------------------------------------------------- 3. hidden size
def test_3a_a_hidden_size_that_cannot_fit_is_a_user_error(tmp_path, train):
    infer = concat_dump(tmp_path, 1, TRAIN_B)
    with pytest.raises(hsdiff.HsdiffError, match=r"(?i)hidden.size"):
        hsdiff.compare(train, infer, layer_ids=list(SGL), hidden_size=192)


def test_3b_four_slot_draft_served_with_two_ids(tmp_path):
    train4 = B.specforge(tmp_path / "train", [0, 1, 2], [2, 9, 15, 27])
    infer = concat_dump(tmp_path / "infer", 1, [2, 15])
    r = hsdiff.compare(train4, infer, layer_ids=[1, 14])
    assert r.hidden_size == B.H and len(r.slots) == 4
    assert [r.slots[0].boundary_index, r.slots[2].boundary_index] == [2, 15]
    assert r.verdict == "mismatch" and r.exit_code == 1


def test_3c_single_aux_slot_needs_no_hidden_size_flag(tmp_path):
    train1 = B.specforge(tmp_path / "train", [0, 1, 2], [15])
    B.draft_config(train1 / "config.json", [14])  # target_hidden_size 576
    infer = concat_dump(tmp_path / "infer", 1, [15])
    r = hsdiff.compare(train1, infer, layer_ids=[14])
    assert r.recommended.ids == (14,)
    # the layer count unknown (61 assumed), 1.3 % bf16 noise does not rule out B14 and B16: the labels
    # name the layer, the gate does not pass on them
    assert r.verdict == "inconclusive" and r.exit_code == 1 and "B14 and B16" in r.cause
    r = hsdiff.compare(train1, infer, layer_ids=[14], model_config=str(B.SMOLLM2 / "config.json"))
    assert r.verdict == "ok" and r.exit_code == 0 and r.slots[0].evidence == "observed"  # 30 layers: they are


# ------------------------------------------------------------------------- 4. conflicting labels are said
@pytest.fixture(scope="module")
def every_layer(tmp_path_factory) -> Path:
    """An SGLang dumper run at the input of every layer (layer_id tags B 0..29), sample 1."""
    return B.sglang_dump(tmp_path_factory.mktemp("all"), 1, list(range(30)), concat_slots=False, tag_layers=True)


def test_4a_training_labels_off_by_one_are_a_warning(tmp_path, every_layer):
    train = B.specforge(tmp_path / "train", [0, 1, 2], TRAIN_B)
    B.draft_config(train / "config.json", [2, 15, 27])  # claims B 3, 16, 28
    r = hsdiff.compare(train, every_layer, layer_ids=list(SGL))
    assert r.recommended.ids == SGL and r.verdict == "ok" and r.exit_code == 0
    assert any(re.search(r"(?i)label", w) and re.search(r"(?i)\b(1|one) layer", w) for w in r.warnings)


def test_4b_hook_output_labels_against_the_training_config(tmp_path, train):
    # hooks on the layer outputs: 'output of model.layers.i' prints B i+1
    lines = [
        f"[2026-12-01 00:00:05 TP0] output of model.layers.{b - 1}: h[4:8, :8]="
        + json.dumps([[round(float(v), 4) for v in row] for row in noisy(1, b)[4:8, :8]])
        for b in TRAIN_B
    ]
    r = hsdiff.compare(train, log_file(tmp_path / "server.log", lines))
    if r.recommended.ids != SGL:  # labels read as boundaries: the contradiction must be said and fail
        assert r.exit_code == 1 and re.search(r"(?i)label", text(r)) and re.search(r"(?i)\b(1|one) layer", text(r))
    assert r.exit_code == 1 or r.recommended.ids == SGL


# ------------------------------------------------------------------------- 5. engines that sort
def test_5_unsorted_training_slots_cannot_be_served(tmp_path, every_layer):
    train = B.specforge(tmp_path / "train", [0, 1, 2], [27, 2, 15])
    r = hsdiff.compare(train, every_layer, layer_ids=list(SGL))
    assert [s.boundary_index for s in r.slots] == [27, 2, 15]
    assert r.verdict == "mismatch" and r.exit_code == 1
    assert r.recommended.ids != (26, 1, 14)  # SGLang would capture them in layer order
    words = text(r)
    assert re.search(r"(?i)sort|order", words) and re.search(r"(?i)fc|permut|retrain", words)
    assert "(1, 2, 0)" in r.cause and "[1, 14, 26]" in r.cause  # the fc permutation, then the ids


def test_5_fc_permutation_reproduces_the_training_input(tmp_path, every_layer):
    """The permutation the report names, applied to the fixture draft's real fc, gives on the engine's
    layer-ordered concatenation exactly what the draft computed in training."""
    from safetensors.torch import load_file

    train = B.specforge(tmp_path / "train", [0, 1, 2], [27, 2, 15])
    r = hsdiff.compare(train, every_layer, layer_ids=list(SGL))
    order = [int(x) for x in re.search(r"per slot, to \(([\d, ]+)\)", r.cause).group(1).split(",")]
    w = load_file(str(B.FIXTURES / "draft-smollm2" / "model.safetensors"))["fc.weight"].float()
    h = B.H
    permuted = torch.cat([w[:, j * h : (j + 1) * h] for j in order], dim=1)
    trained = B.concat(1, [27, 2, 15]) @ w.T  # what the draft saw in training
    served = B.concat(1, [2, 15, 27]) @ permuted.T  # what the engine feeds it, through the permuted fc
    assert torch.allclose(trained, served, rtol=1e-4, atol=1e-3)
    assert not torch.allclose(trained, B.concat(1, [2, 15, 27]) @ w.T, rtol=1e-2, atol=1e-1)


@pytest.mark.parametrize("engine,ids", [("vllm", [2, 15, 27]), ("trtllm", [1, 14, 26])])
def test_5_sorting_engines(tmp_path, every_layer, engine, ids):
    train = B.specforge(tmp_path / "train", [0, 1, 2], [15, 2, 27])
    r = hsdiff.compare(train, every_layer, engine=engine, layer_ids=ids)
    assert r.verdict == "mismatch" and r.exit_code == 1
    assert r.recommended.ids == (None, None, None) and r.recommended.by_engine["hf"].ids == (15, 2, 27)
    assert "(1, 0, 2)" in r.cause and re.search(r"(?i)no id list reproduces the training order", r.cause)


# ------------------------------------------------------------------------- 6. TP ranks that disagree
def test_6_disagreeing_tensor_parallel_ranks_are_a_mismatch(tmp_path, train):
    exp = tmp_path / "dump_20261201_000000_000001"
    ids = B.states(1)["input_ids"]
    good = torch.cat([noisy(1, b) for b in TRAIN_B], dim=-1)
    bad = good.float().clone()
    g = torch.Generator().manual_seed(7)
    n = torch.randn(bad[1:].shape, generator=g)
    bad[1:] += n / n.norm(dim=-1, keepdim=True) * bad[1:].norm(dim=-1, keepdim=True) * 0.37  # ordinary tokens only
    for rank, v in ((0, good), (1, bad.to(good.dtype))):
        dumper_records(exp, [("input_ids", ids, {}), ("aux_hidden_states", v, {})], rank=rank, ranks=2)
    r = hsdiff.compare(train, tmp_path, layer_ids=list(SGL))
    assert r.verdict == "mismatch" and r.exit_code == 1
    assert re.search(r"(?i)rank", r.cause) and "1" in r.cause


# ------------------------------------------------------------------------- 7. shared prefixes
def test_7_shared_prefix_is_evidence(tmp_path):
    train0 = B.specforge(tmp_path / "train", [0], TRAIN_B)  # training saw sample 0 only
    infer = concat_dump(tmp_path / "infer", 1, TRAIN_B)  # sample 1: the first 11 tokens are the same
    r = hsdiff.compare(train0, infer, layer_ids=list(SGL))
    assert r.recommended.ids == SGL
    assert r.verdict == "ok" and r.exit_code == 0
    assert re.search(r"(?i)prefix", text(r))


# ------------------------------------------------------------------------- 8. several runs in one dumper dir
def test_8_runs_in_one_dumper_directory_are_kept_apart(tmp_path, train):
    ids1, ids2 = B.states(1)["input_ids"], B.states(2)["input_ids"]
    # run 1 (sample 1) with ids [1, 14, 26]; run 2 (sample 2) after a restart with ids [2, 14, 27]
    dumper_records(
        tmp_path / "dump_20261201_000000_000001",
        [("input_ids", ids1, {}), ("aux_hidden_states", torch.cat([noisy(1, b) for b in (2, 15, 27)], -1), {})],
    )
    dumper_records(
        tmp_path / "dump_20261201_010000_000002",
        [("input_ids", ids2, {}), ("aux_hidden_states", torch.cat([noisy(2, b) for b in (3, 15, 28)], -1), {})],
    )
    r = hsdiff.compare(train, tmp_path, layer_ids=list(SGL))
    runs = {Path(f).parent.name for f in matched_files(r) if f}
    assert len(runs) == 1  # every slot from one run ...
    assert re.search(r"(?i)run", text(r)) and any(run in text(r) for run in runs)  # ... and it says which
    assert r.recommended.ids == SGL


# ------------------------------------------------------------------------- 9. label-consistent answers
def test_9a_sink_token_print_with_agreeing_labels_is_consistent(tmp_path, train):
    lines = [
        f"[2026-12-01 00:00:05 TP0] aux_hidden_states[{j}] layer={b} h[0, :5]={flist(noisy(1, b)[0, :5])}"
        for j, b in enumerate(TRAIN_B)
    ]
    r = hsdiff.compare(train, log_file(tmp_path / "server.log", lines), layer_ids=list(SGL))
    assert r.recommended.ids == SGL
    assert [s.evidence for s in r.slots] == ["consistent"] * 3
    assert all(s.confidence < 0.9 for s in r.slots)
    assert r.verdict != "ok" and r.exit_code == 1  # a gate passes only on ordinary tokens


def test_9b_thirty_six_values_at_three_percent_answer_with_training_labels_only(tmp_path):
    # 36 values at 3 % do not rule out a neighbour by themselves; the captures carry no labels, so the
    # configured ids name them, and the configuration under test is not evidence for itself
    lines = [
        f"[2026-12-01 00:00:05 TP0] aux_hidden_states[{j}] h[6:10, :9]="
        + json.dumps([[round(float(v), 4) for v in row] for row in noisy(1, b, "fp32", 0.03)[6:10, :9]])
        for j, b in enumerate(TRAIN_B)
    ]
    log = log_file(tmp_path / "server.log", lines)
    bare = B.specforge(tmp_path / "train", [0, 1, 2], TRAIN_B)
    r = hsdiff.compare(bare, log, layer_ids=list(SGL))
    assert r.verdict == "inconclusive" and r.exit_code == 1
    assert None in r.recommended.ids and "not evidence for itself" in r.cause
    B.draft_config(bare / "config.json", list(SGL))  # the training side's labels settle it with the values
    r = hsdiff.compare(bare, log, layer_ids=list(SGL))
    assert r.recommended.ids == SGL
    assert all(s.evidence in ("observed", "consistent") for s in r.slots)
    assert r.verdict in ("ok", "inconclusive") and r.exit_code == (0 if r.verdict == "ok" else 1)


# ------------------------------------------------------------------------- 10. layer numbers in capture names
NAMES = {
    "dumper model.layers.N.input": ("dumper", "model.layers.{b}.input"),
    "dumper layerN_residual_in": ("dumper", "layer{b}_residual_in"),
    "safetensors blocks.N": ("safetensors", "blocks.{b}"),
    "safetensors h.N": ("safetensors", "h.{b}"),
    "safetensors decoder.layers.N": ("safetensors", "decoder.layers.{b}"),
    "log model.layers.N.input": ("log", "model.layers.{b}.input"),
}


@pytest.mark.parametrize("style", list(NAMES))
def test_10_layer_numbers_in_capture_names_are_labels(tmp_path, train, style):
    kind, pattern = NAMES[style]
    bs = range(0, 30)
    if kind == "dumper":
        dumper_records(
            tmp_path / "dump",
            [("input_ids", B.states(1)["input_ids"], {})] + [(pattern.format(b=b), noisy(1, b), {}) for b in bs],
        )
        infer = tmp_path
    elif kind == "safetensors":
        infer = tmp_path / "hooks.safetensors"
        save_file({pattern.format(b=b): noisy(1, b).contiguous() for b in bs}, str(infer))
    else:
        infer = log_file(
            tmp_path / "server.log",
            [
                f"[2026-12-01 00:00:05 TP0] {pattern.format(b=b)} h[4:8, :8]="
                + json.dumps([[round(float(v), 4) for v in row] for row in noisy(1, b)[4:8, :8]])
                for b in bs
            ],
        )
    r = hsdiff.compare(train, infer)
    assert r.recommended.ids == SGL, style
    assert r.verdict == "ok" and r.exit_code == 0
    assert "unlabelled" not in text(r).lower()


# ------------------------------------------------------------------------- 11. plain shifts in words
def test_11_captured_neighbours_only_say_the_shift(tmp_path, train):
    infer = concat_dump(tmp_path, 1, [3, 16, 28])  # ids [2, 15, 27]: every slot one layer too deep
    r = hsdiff.compare(train, infer, layer_ids=[2, 15, 27])
    assert r.recommended.ids == SGL and [s.evidence for s in r.slots] == ["inferred"] * 3
    assert r.verdict == "mismatch" and r.exit_code == 1
    assert re.search(r"(?i)\b(1|one) layer", r.cause) and "post-norm" not in r.cause


# ------------------------------------------------------------------------- 12. no null after OK
@pytest.mark.parametrize(
    "kind,level",
    [
        pytest.param("fp32", 0.04, id="gauss-4pct"),
        pytest.param("fp8", 0.0, id="fp8-e4m3"),
    ],
)
def test_12_verified_configuration_is_recommended(tmp_path, train, kind, level):
    infer = concat_dump(tmp_path, 1, TRAIN_B, kind=kind, level=level)
    r = hsdiff.compare(train, infer, layer_ids=list(SGL))
    # 4 % noise does not rule out every neighbour: a slot the labels name is not passed, the ids stand
    assert r.verdict in ("ok", "inconclusive") and r.exit_code == (0 if r.verdict == "ok" else 1)
    assert r.recommended.ids == SGL  # never a paste line of nulls, OK or not


# ------------------------------------------------------------------------- 13. OK while the engine cannot serve it
def test_13a_last_boundary_on_sglang_llama(tmp_path):
    train = B.specforge(tmp_path / "train", [0, 1, 2], [2, 15, 30])
    infer = B.sglang_dump(tmp_path / "infer", 1, list(range(31)), concat_slots=False, tag_layers=True)
    r = hsdiff.compare(train, infer, layer_ids=[1, 14, 29], model_config=str(B.SMOLLM2 / "config.json"))
    assert [s.boundary_index for s in r.slots] == [2, 15, 30]
    assert r.verdict != "ok" and r.exit_code == 1
    assert re.search(r"B ?30\b", text(r)) and re.search(r"(?i)cannot|never", text(r))


def test_13b_deepseek_rule_cannot_capture_b1_first(tmp_path):
    # SGLang's DeepSeek rule adds 1 to every id when ids[0] == 1 (sglang==0.5.23 deepseek_v2.py:3470-3473):
    # B1 on its own needs id 1 first, which names B2. (Beside other layers it is written after them: 13c.)
    train = B.specforge(tmp_path / "train", [0, 1, 2], [1])
    infer = B.sglang_dump(tmp_path / "infer", 1, list(range(30)), concat_slots=False, tag_layers=True)
    r = hsdiff.compare(train, infer, model_family="deepseek", model_config=str(B.SMOLLM2 / "config.json"))
    assert [s.boundary_index for s in r.slots] == [1]
    assert r.verdict != "ok" and r.exit_code == 1
    assert re.search(r"B ?1\b", text(r)) and re.search(r"(?i)cannot|never", text(r))
    assert r.recommended.ids == (None,) and r.recommended.by_engine["vllm"].ids == (1,)
    assert re.search(r"(?i)vLLM \(id 1\)", r.cause)  # what would work


def test_13c_deepseek_rule_writes_b1_after_another_id(tmp_path, every_layer):
    # the engine captures in layer order whatever the order of the list (deepseek_v2.py:3176-3194), so
    # B[1, 15, 27] is served by [15, 1, 27]; the ascending [1, 15, 27] would capture B[2, 16, 28]
    train = B.specforge(tmp_path / "train", [0, 1, 2], [1, 15, 27])
    r = hsdiff.compare(train, every_layer, model_family="deepseek", model_config=str(B.SMOLLM2 / "config.json"))
    assert [s.boundary_index for s in r.slots] == [1, 15, 27]
    assert r.recommended.ids == (15, 1, 27)
    assert r.verdict == "ok" and r.exit_code == 0
    assert any("id 15 first" in w and "B[2, 16, 28]" in w for w in r.warnings)
    assert hsdiff.to_boundary([15, 1, 27], "sglang", model_family="deepseek") == [1, 15, 27]


def test_13d_configured_last_boundary_is_named_not_its_neighbours(tmp_path, every_layer):
    # the engine is configured with ids it reads as the training slots, one of which it cannot capture:
    # only that one is named as uncapturable
    train = B.specforge(tmp_path / "train", [0, 1, 2], [2, 15, 30])
    r = hsdiff.compare(
        train,
        B.sglang_dump(tmp_path / "infer", 1, list(range(31)), concat_slots=False, tag_layers=True),
        layer_ids=[1, 14, 29],
        engine="vllm",
        model_config=str(B.SMOLLM2 / "config.json"),
    )
    assert r.verdict == "mismatch"  # vLLM reads [1, 14, 29] as B[1, 14, 29]: a mismatch, but a servable one
    assert r.recommended.ids == (2, 15, 30) and "cannot" not in r.cause
    r = hsdiff.compare(
        train,
        B.sglang_dump(tmp_path / "infer2", 1, list(range(31)), concat_slots=False, tag_layers=True),
        layer_ids=[1, 14, 29],
        model_config=str(B.SMOLLM2 / "config.json"),
    )
    assert r.recommended.ids == (1, 14, None)
    assert re.findall(r"cannot capture (B\d+)", r.cause) == ["B30"]
    assert re.search(r"vLLM \(id 30\)", r.cause)


# ------------------------------------------------------------------------- 14. small
def test_14a_format_hint_names_the_real_options(tmp_path, train):
    (tmp_path / "notes.txt").write_text("nothing here\n")
    with pytest.raises(hsdiff.HsdiffError) as e:
        hsdiff.compare(train, tmp_path)
    msg = str(e.value)  # the library names its own parameter, the command line its flag
    assert "`infer_format=FORMAT`" in msg and "--" not in msg
    said = e.value.in_terms(flag)
    assert not re.search(r"--format\b", said)
    assert "--infer-format FORMAT" in said


def test_14b_layer_ids_as_a_string(tmp_path, train):
    infer = concat_dump(tmp_path, 1, TRAIN_B)
    try:
        r = hsdiff.compare(train, infer, layer_ids="1,14,26")
    except (hsdiff.HsdiffError, TypeError) as e:  # refused: then say what type
        assert "layer_ids" in str(e)
    else:
        assert r.recommended.ids == SGL and r.verdict == "ok"
