"""Draft kinds (``--draft-kind``): the DFlash family's rows, vLLM's per-key reading, SGLang's families, MTP
refused, and the round trip ``fix-config`` -> the config read back as each engine reads it (this test's own
arithmetic from the cited source) -> the same layers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hsdiff.cli import cli
from hsdiff.configs import config_value, read_ids
from hsdiff.errors import InputError
from hsdiff.fix_config import fix_config
from hsdiff.gate.checks import static_checks
from hsdiff.ids import translate_ids
from hsdiff.rules import conventions as conv
from hsdiff.rules.serving import serve

pytestmark = pytest.mark.core

L = 30  # SmolLM2-135M's layers, as elsewhere in the tests


def _run(*args: str):
    return CliRunner().invoke(cli, list(args))


def _dflash(path: Path, *, arch: str = "DFlashDraftModel", layers: int = 5, **keys) -> Path:
    cfg = {"architectures": [arch], "num_hidden_layers": layers, "hidden_size": 576}
    cfg.update(keys)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg, indent=2))
    return path


# --------------------------------------------------------------------------- the acceptance commands


def test_qwen3_next_dflash_ids_from_specforge_to_sglang_are_the_engines_own() -> None:
    """SpecForge's DFlash ids are HF layer outputs (hidden_states[id + 1]); SGLang's Qwen3-Next DFlash setter adds 1
    and captures before that layer: the same output indices, written to dflash_config.target_layer_ids."""
    r = _run(
        "ids",
        "1,9,17,25,33",
        "--draft-kind",
        "dflash",
        "--from",
        "specforge",
        "--to",
        "sglang",
        "--model-family",
        "qwen3_next",
        "--num-layers",
        "48",
    )
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == "1,9,17,25,33"
    assert "Qwen3-Next" in r.stderr and "dflash_config.target_layer_ids" in r.stderr


@pytest.mark.parametrize(
    "runner_key,expect",
    [
        ("dflash_config", [2, 10, 18, 26, 34]),  # + 1 (eagle3_utils.py:120-124)
        ("dspark_target_layer_ids", [2, 10, 18, 26, 34]),  # + 1 (:125-135)
        ("target_layer_ids", [2, 10, 18, 26, 34]),  # + 1 (:136-140)
        ("eagle_aux_hidden_state_layer_ids", [1, 9, 17, 25, 33]),  # raw (:119)
    ],
)
def test_vllm_v2_reads_each_dflash_key_with_its_own_meaning(tmp_path: Path, runner_key: str, expect: list[int]) -> None:
    ids = [1, 9, 17, 25, 33]
    keys = {"dflash_config": {"target_layer_ids": ids}} if runner_key == "dflash_config" else {runner_key: ids}
    cfg = json.loads(_dflash(tmp_path / "c.json", **keys).read_text())
    got = read_ids(cfg, "vllm", num_layers=36, kind="dflash")
    assert list(got.boundaries) == expect and not got.fallback


def test_vllm_adds_one_to_dflash_config_ids_whatever_the_draft_kind() -> None:
    """One reading function for every method (eagle3_utils.py:113-150): an EAGLE-3 draft whose ids sit only in
    dflash_config.target_layer_ids gets them + 1, while its own top-level key is raw."""
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "dflash_config": {"target_layer_ids": [1, 14, 26]}}
    got = read_ids(cfg, "vllm", num_layers=L, kind="eagle3")
    assert got.key == "dflash_config.target_layer_ids" and list(got.boundaries) == [2, 15, 27]


def test_vllm_reads_the_top_level_eagle_key_before_dflash_config(tmp_path: Path) -> None:
    cfg = json.loads(
        _dflash(
            tmp_path / "c.json", eagle_aux_hidden_state_layer_ids=[3, 11], dflash_config={"target_layer_ids": [1, 9]}
        ).read_text()
    )
    got = read_ids(cfg, "vllm", num_layers=36, kind="dflash")
    assert got.key == "eagle_aux_hidden_state_layer_ids" and list(got.boundaries) == [3, 11]


def test_vllm_reads_deepseek_v41_dspark_ids_raw() -> None:
    cfg = {"architectures": ["DSparkV41DraftModel"], "model_type": "deepseek_v41", "dspark_target_layer_ids": [4, 20]}
    assert list(read_ids(cfg, "vllm", num_layers=61).boundaries) == [4, 20]


def test_vllm_dflash_rows_translate_like_the_engine() -> None:
    """vLLM's DFlash reading is an output index too, and it captures B = L (after its layer loop)."""
    assert conv.translate([1, 9, 17, 25, 33], "sglang", "vllm", num_layers=48, kind="dflash") == [1, 9, 17, 25, 33]
    assert conv.from_boundary([48], "vllm", num_layers=48, kind="dflash") == [47]
    assert conv.from_boundary([48], "sglang", num_layers=48, kind="dflash") == [None]


# --------------------------------------------------------------------------- SGLang's families


def test_qwen3_next_id_past_the_last_layer_fails_at_startup_not_silently() -> None:
    s = serve([10, 48], "sglang", num_layers=48, model_family="qwen3_next", kind="dflash")
    assert not s.ok and "startup" in " ".join(s.sentences())
    llama = serve([10, 48], "sglang", num_layers=48, model_family="llama", kind="dflash")
    assert not llama.ok and "dropped" in " ".join(llama.sentences())
    assert "startup" in " ".join(serve([10, 48], "sglang", num_layers=48, model_family="qwen3_5_moe").sentences())


def test_after_layer_families_capture_the_last_layer_output() -> None:
    assert conv.from_boundary([L], "sglang", num_layers=L, model_family="beam", kind="dflash") == [L - 1]


def test_muse_glimmer_shifts_only_layer_output_drafts() -> None:
    assert conv.to_boundary([3, 9], "sglang", model_family="muse_glimmer", kind="dflash2") == [4, 10]
    assert conv.to_boundary([3, 9], "sglang", model_family="muse_glimmer", kind="dflash") == [3, 9]


@pytest.mark.parametrize("model_type", ["kimi_k3", "mimo_v2", "step3p7", "beam", "muse_glimmer"])
def test_models_without_eagle3_capture_are_refused_for_eagle3(model_type: str) -> None:
    family = conv.family_from_config({"model_type": model_type})
    with pytest.raises(InputError, match="EAGLE-3"):
        conv.to_boundary([2, 15, 27], "sglang", model_family=family)


def test_family_detection_of_the_new_sglang_families() -> None:
    assert conv.family_from_config({"model_type": "qwen3_5_moe"}) == "qwen3_next"
    assert conv.family_from_config({"model_type": "kimi_linear"}) == "no_eagle3"
    assert conv.family_from_config({"model_type": "kimi_k2"}) == "deepseek"
    assert conv.family_from_config({"model_type": "deepseek_v32"}) == "deepseek"
    assert conv.family_from_config({"model_type": "glm5_next"}) == "llama"


def test_sglang_dflash_default_is_evenly_spaced_over_the_draft_layers() -> None:
    """SGLang's build_target_layer_ids for a 36-layer target and a 5-layer draft gives [1, 9, 17, 25, 33], the
    target_layer_ids of the published Qwen3-8B DFlash draft; vLLM falls back to the EAGLE-3 default instead."""
    assert conv.default_ids("sglang", 36, kind="dflash", count=5) == [1, 9, 17, 25, 33]
    assert conv.default_boundaries(36, "vllm", kind="dflash") == [2, 18, 33]
    with pytest.raises(InputError, match="draft layers"):
        conv.default_ids("sglang", 36, kind="dflash")


# --------------------------------------------------------------------------- kinds


@pytest.mark.parametrize(
    "arch,kind",
    [
        ("DFlashDraftModel", "dflash"),
        ("DFlash2DraftModel", "dflash2"),
        ("Qwen3DSparkModel", "dspark"),
        ("DSparkMiniMaxDraftModel", "dspark"),
        ("LlamaForCausalLMEagle3", "eagle3"),
        ("DeepseekV3MTP", "mtp"),
    ],
)
def test_kind_is_detected_from_the_architectures(arch: str, kind: str) -> None:
    assert conv.kind_from_config({"architectures": [arch]}).key == kind


def test_mtp_is_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no layer ids"):
        conv.to_boundary([2], "sglang", kind="mtp")
    r = _run("ids", "2,15", "--from", "sglang", "--to", "vllm", "--draft-kind", "mtp")
    assert r.exit_code == 2 and "MTP" in r.stderr


def test_an_engine_without_dflash_rows_is_refused() -> None:
    r = _run("ids", "1,9", "--from", "sglang", "--to", "trtllm", "--draft-kind", "dflash", "--num-layers", "36")
    assert r.exit_code == 2 and "no row for DFlash" in r.stderr


def test_eagle31_norms_are_reported(tmp_path: Path) -> None:
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "fc_norm": True,
        "norm_output": True,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 14, 26]},
    }
    ids = read_ids(cfg, "sglang", num_layers=L)
    assert ids.kind == "eagle3.1" and list(ids.boundaries) == [2, 15, 27]
    found = {c.name: c for c in static_checks(cfg, ids, num_layers=L)}["draft-kind"]
    assert found.ok and "fc_norm" in found.message and "norm_output" in found.message


# --------------------------------------------------------------------------- silent fallbacks


def test_a_key_only_another_engine_reads_is_an_error(tmp_path: Path) -> None:
    """vLLM's V1 runner reads no top-level target_layer_ids: it silently takes its EAGLE-3 default layers."""
    path = _dflash(tmp_path / "c.json", target_layer_ids=[1, 9, 17, 25, 33])
    t = tmp_path / "t.json"
    t.write_text(json.dumps({"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 576}))
    r = _run(
        "check-config", str(path), "--engine", "vllm", "--vllm-runner", "v1", "--target-config", str(t), "--json", "-"
    )
    assert r.exit_code == 1
    found = {c["name"]: c for c in json.loads(r.stdout)["checks"]}["silent-fallback"]
    assert not found["ok"] and "target_layer_ids" in found["message"] and "SGLang" in found["message"]
    ok = _run("check-config", str(path), "--engine", "sglang", "--target-config", str(t), "-q")
    assert ok.exit_code == 0, ok.output


def test_fix_config_warns_when_a_key_read_first_shadows_the_written_one(tmp_path: Path) -> None:
    path = _dflash(tmp_path / "c.json", eagle_aux_hidden_state_layer_ids=[2, 10])
    result = fix_config(path, [1, 9, 17, 25, 33], engine="vllm", kind="dflash")
    assert result.key == "dflash_config.target_layer_ids"
    assert any("reads eagle_aux_hidden_state_layer_ids before" in w for w in result.warnings)


# --------------------------------------------------------------------------- the round trip


def engine_reads(config: dict, engine: str, family: str, kind: str, runner: str = "v2") -> list[int]:
    """The boundaries the engine captures for a DFlash-family draft config, by this test's reading of the source:
    SGLang dflash_utils.py:656-660 / dspark_config.py:226-310 and its per-family setters; vLLM eagle3_utils.py:113-150
    (V2) and gpu_model_runner.py:5207-5222 (V1); SpecForge dflash.py:284-293."""
    plus = [("dflash_config", "target_layer_ids"), ("dspark_target_layer_ids",), ("target_layer_ids",)]
    if engine == "vllm":
        order = (
            [("eagle_aux_hidden_state_layer_ids",)]
            + plus
            + [("dflash_config", "layer_ids"), ("eagle_config", "layer_ids")]
            if runner == "v2"
            else [
                ("eagle_aux_hidden_state_layer_ids",),
                ("eagle_config", "eagle_aux_hidden_state_layer_ids"),
                ("dflash_config", "target_layer_ids"),
            ]
        )
        key, ids = next((k, v) for k in order if (v := config_value(config, k)[1]))
        return sorted({i + (1 if key in plus else 0) for i in ids})
    if engine == "vllm-tpu":  # tpu-inference==0.32.0 models/jax/llama3.py:323-336,365-369: raw, after layer id
        return sorted({i + 1 for i in config["dflash_config"]["target_layer_ids"] if i >= 0})
    if engine == "automodel":  # Automodel dspark/common.py:64-68 (L-1 post-norm, target.py:277-286); dflash/target.py
        if kind == "dspark":
            return [0 if i == -1 else L + 1 if i == L - 1 else i + 1 for i in config["target_layer_ids"]]
        return [i + 1 for i in config["dflash_config"]["target_layer_ids"]]
    order = plus[:1] if engine == "specforge" else ([plus[1]] if kind == "dspark" else []) + [plus[0], plus[2]]
    ids = next(v for k in order if (v := config_value(config, k)[1]) is not None)
    raw = engine == "sglang" and (family == "deepseek_v4" or (family == "muse_glimmer" and kind != "dflash2"))
    return sorted({i + (0 if raw else 1) for i in ids})


def _top(engine: str, family: str) -> int:
    """The highest boundary it captures: B = L only where capture follows the layer (vLLM, after_layer families)."""
    return L if engine in ("vllm", "vllm-tpu", "automodel") or family == "after_layer" else L - 1


_FAMILIES = {
    "sglang": ["llama", "qwen3_next", "after_layer", "muse_glimmer", "deepseek_v4", "deepseek"],
    "vllm": ["llama", "deepseek"],
    "specforge": ["llama"],
    "vllm-tpu": ["llama"],
    "automodel": ["llama"],
}
_CASES = [(e, f, k) for e, fams in _FAMILIES.items() for f in fams for k in ("dflash", "dflash2", "dspark", "domino")]


@pytest.mark.parametrize("engine,family,kind", _CASES, ids=lambda x: str(x))
def test_dflash_ids_round_trip_through_fix_config(engine: str, family: str, kind: str, tmp_path: Path) -> None:
    low = 1 if engine == "vllm" and family == "deepseek" else 0
    top = L + 1 if engine == "automodel" and kind == "dspark" else _top(engine, family)  # its id L-1 is post-norm
    for bs in ([2, 8, 15, 22, 27], [max(low, 1), 10, top]):
        ids = conv.from_boundary(bs, engine, num_layers=L, model_family=family, kind=kind)
        assert None not in ids, (bs, ids)
        path = _dflash(
            tmp_path / f"{engine}-{family}-{kind}" / "config.json",
            arch={"dflash2": "DFlash2DraftModel", "dspark": "DSparkDraftModel", "domino": "DominoDraftModel"}.get(
                kind, "DFlashDraftModel"
            ),
        )
        result = fix_config(path, [int(i) for i in ids if i is not None], engine=engine, model_family=family)
        assert result.written and not result.warnings, result.warnings
        config = json.loads(path.read_text())
        assert engine_reads(config, engine, family, kind) == bs
        if engine == "vllm" and kind != "dspark":  # the V1 runner reads no dspark_target_layer_ids
            assert engine_reads(config, engine, family, kind, runner="v1") == bs
        assert list(read_ids(config, engine, num_layers=L, model_family=family).boundaries) == bs
        for other in _FAMILIES:  # the same layers written for every other engine, through `hsdiff ids`
            t = translate_ids(
                [int(i) for i in ids if i is not None], engine, other, num_layers=L, model_family=family, kind=kind
            )
            fam = family if family in _FAMILIES[other] else "llama"
            if not t.complete or fam != family:
                continue
            there = _dflash(tmp_path / other / "config.json", arch=config["architectures"][0])
            fix_config(there, [int(i) for i in t.out if i is not None], engine=other, model_family=family)
            assert engine_reads(json.loads(there.read_text()), other, family, kind) == bs


# --------------------------------------------------------------------------- trainers added with the kinds


def test_deepspec_five_layer_eagle3_ids_are_output_indices_in_the_top_level_key(tmp_path: Path) -> None:
    """DeepSpec's Qwen3-8B EAGLE-3 recipe (config/eagle3/eagle3_qwen3_8b.py:14) captures layer outputs."""
    ids = [1, 9, 17, 25, 33]
    assert conv.translate(ids, "deepspec", "sglang", num_layers=36) == ids
    assert conv.translate(ids, "deepspec", "vllm", num_layers=36) == [2, 10, 18, 26, 34]
    path = _dflash(tmp_path / "c.json", arch="LlamaForCausalLMEagle3")
    assert fix_config(path, ids, engine="deepspec").key == "target_layer_ids"
    assert list(read_ids(json.loads(path.read_text()), "deepspec", num_layers=36).boundaries) == [2, 10, 18, 26, 34]
    t = translate_ids(
        [35], "deepspec", "vllm", num_layers=36
    )  # id L-1: refused by DeepSpec (base_evaluator.py:100-112)
    assert any("could not have captured" in w for w in t.warnings)


def test_deepspec_cannot_take_the_last_layer_and_verl_names_the_embeddings() -> None:
    assert not translate_ids([36], "vllm", "deepspec", num_layers=36).complete
    assert conv.to_boundary([-1, 3], "verl", num_layers=36) == [0, 4]
    assert conv.from_boundary([36], "verl", num_layers=36) == [None]


def test_tokenspeed_adds_one_for_deepseek_too_and_cannot_capture_the_last_layer() -> None:
    """TokenSpeed's setters add 1 for every family (causal_lm.py:133-144, deepseek_v3.py:1688-1695): SGLang's DeepSeek
    ids [2, 30, 58] (B as written, ids[0] != 1) are [1, 29, 57] there; B = L has no id it offers."""
    assert conv.translate([2, 30, 58], "sglang", "tokenspeed", num_layers=61, src_family="deepseek") == [1, 29, 57]
    assert conv.from_boundary([61], "tokenspeed", num_layers=61) == [None]
    s = serve([10, L], "tokenspeed", num_layers=L, kind="dflash")
    assert not s.ok and "startup" in " ".join(s.sentences())


@pytest.mark.parametrize("trainer", ["torchspec", "automodel"])
def test_trainers_with_the_output_index_default(trainer: str) -> None:
    """TorchSpec (misc.py:76-88) and NeMo Automodel (target.py:42-61) default to O[1, L//2-1, L-4], which is vLLM's
    and speculators' B[2, L//2, L-3]; neither reads a draft config, so fix-config refuses them."""
    assert conv.default_ids(trainer, L) == [1, 14, 26]
    assert conv.translate([1, 14, 26], trainer, "vllm", num_layers=L) == [2, 15, 27]
    with pytest.raises(InputError, match="reads no layer ids"):
        conv.write_key(trainer)


def test_only_automodel_captures_the_last_layer_output() -> None:
    """Automodel hooks layers[L-1] (target.py:285); TorchSpec's vLLM path drops an id whose + 1 reaches L."""
    assert conv.from_boundary([L], "automodel", num_layers=L) == [L - 1]
    assert conv.from_boundary([L], "torchspec", num_layers=L) == [None]


# --------------------------------------------------------------------------- engines and trainers of conventions v3


def test_vllm_tpu_jax_models_capture_their_own_eagle3_layers_whatever_the_config(tmp_path: Path) -> None:
    """tpu-inference 0.32.0 llama3.py:312-321,338-340: B(2, L//2, L-3), no id read. The right layers need no
    id; any other is refused with the way out (MODEL_IMPL_TYPE=vllm) and the layers it captures instead."""
    ok = translate_ids([2, 15, 27], "vllm", "vllm-tpu", num_layers=L)
    assert ok.complete and any("whatever the config says" in w for w in ok.warnings)
    other = translate_ids([3, 16, 28], "vllm", "vllm-tpu", num_layers=L)
    assert not other.complete and "MODEL_IMPL_TYPE=vllm" in " ".join(other.obstacles)
    assert "B[2, 15, 27]" in " ".join(other.obstacles)
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "eagle_aux_hidden_state_layer_ids": [3, 16, 28]}
    read = read_ids(cfg, "vllm-tpu", num_layers=L)
    assert read.fallback and list(read.boundaries) == [2, 15, 27] and "MODEL_IMPL_TYPE=vllm" in read.note
    r = _run("ids", "3,16,28", "--from", "vllm", "--to", "vllm-tpu", "--num-layers", str(L))
    assert r.exit_code == 1 and "whatever the config says" in r.output
    with pytest.raises(InputError, match="reads no layer ids"):
        fix_config(_dflash(tmp_path / "c.json", arch="LlamaForCausalLMEagle3"), [2, 15, 27], engine="vllm-tpu")


def test_vllm_tpu_dflash_ids_are_layer_outputs_as_written_and_reach_the_last_layer(tmp_path: Path) -> None:
    """llama3.py:323-336 (dflash_config.target_layer_ids as written), :365-369 (after layer i): an output index
    like SpecForge's, but the last layer's output (B = L, pre-norm) is captured, which SGLang cannot; -1 names
    nothing there."""
    assert conv.translate([1, 9, 17, 25, 33], "specforge", "vllm-tpu", num_layers=48, kind="dflash") == [
        1,
        9,
        17,
        25,
        33,
    ]
    assert conv.from_boundary([L], "vllm-tpu", num_layers=L, kind="dflash") == [L - 1]
    assert conv.from_boundary([L], "sglang", num_layers=L, kind="dflash") == [None]
    assert conv.from_boundary([0], "vllm-tpu", num_layers=L, kind="dflash") == [None]
    path = _dflash(tmp_path / "c.json")
    assert fix_config(path, [1, 9, 29], engine="vllm-tpu").key == "dflash_config.target_layer_ids"
    assert "every layer" in conv.kind_default("vllm-tpu", "dflash")


def test_automodel_dspark_ids_read_minus_one_as_embeddings_and_the_last_layer_post_norm(tmp_path: Path) -> None:
    """Automodel dspark/common.py:64-68 (hidden_states[0 if id == -1 else id + 1]) and target.py:277-286 (id L-1
    from a hook on the final norm): a DSpark draft trained on id L-1 saw the post-norm state, which vLLM's + 1 and
    SGLang cannot deliver — said, not silently translated to B = L."""
    assert conv.to_boundary([-1, 5, L - 1], "automodel", num_layers=L, kind="dspark") == [0, 6, L + 1]
    assert conv.translate([-1, 5, 20], "automodel", "vllm", num_layers=L, kind="dspark") == [-1, 5, 20]
    t = translate_ids([-1, 5, L - 1], "automodel", "vllm", num_layers=L, kind="dspark")
    assert t.out[2] is None and "after the norm" in " ".join(t.obstacles)
    cfg = json.loads(
        _dflash(tmp_path / "c.json", arch="DSparkDraftModel", target_layer_ids=[1, 7, 14, 21, 26]).read_text()
    )
    assert list(read_ids(cfg, "automodel", num_layers=28).boundaries) == [2, 8, 15, 22, 27]
    assert fix_config(tmp_path / "c.json", [1, 7, 14], engine="automodel").key == "target_layer_ids"
    # its DFlash drafts: dflash_config.target_layer_ids, hooks on layers[id] (the last one before the norm)
    assert conv.from_boundary([L], "automodel", num_layers=L, kind="dflash") == [L - 1]
    assert conv.from_boundary([0], "automodel", num_layers=L, kind="dflash") == [None]  # -1 refused (target.py:117-125)
    assert "1..L-1" in conv.kind_default("automodel", "dspark")


def test_modelopt_vllm_dumps_are_boundary_indices_one_layer_shallower_than_modelopt_s_own() -> None:
    """compute_hidden_states_vllm.py:258-264 hands --aux-layers to vLLM unshifted; the HF script takes
    hidden_states[id + 1]. The same numbers are different layers: 2,15,27 through vLLM is 1,14,26 for ModelOpt's
    HF dump and for SGLang, and stays 2,15,27 for vLLM itself."""
    assert conv.translate([2, 15, 27], "modelopt-vllm", "vllm", num_layers=L) == [2, 15, 27]
    assert conv.translate([2, 15, 27], "modelopt-vllm", "modelopt", num_layers=L) == [1, 14, 26]
    assert conv.translate([2, 15, 27], "modelopt-vllm", "sglang", num_layers=L) == [1, 14, 26]
    assert conv.from_boundary([L], "modelopt-vllm", num_layers=L) == [None]  # its own appended L is the final slot


def test_a_speculators_converted_config_without_ids_says_the_converter_dropped_them() -> None:
    """speculators 0.9.0 eagle3_converter.py:137-147 sets the ids only from --algorithm-kwargs: vLLM falls back
    silently, and the note says where the ids went."""
    cfg = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3"}
    read = read_ids(cfg, "vllm", num_layers=L)
    assert read.fallback and "speculators convert" in read.note and "eagle3_converter.py" in read.note


def test_a_norm_flag_the_engine_does_not_read_is_a_warning() -> None:
    """vLLM reads fc_norm at the top level only (llama_eagle3.py:231-240, 0.33): the legacy use_aux_norm, which
    SGLang takes, and a nested fc_norm leave the per-chunk norms off there."""
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "use_aux_norm": True,
        "eagle_aux_hidden_state_layer_ids": [2, 15, 27],
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 14, 26]},
    }
    found = {
        e: {c.name: c for c in static_checks(cfg, read_ids(cfg, e, num_layers=L), num_layers=L)}
        for e in ("vllm", "sglang")
    }
    assert not found["vllm"]["draft-kind"].ok and "does not read use_aux_norm" in found["vllm"]["draft-kind"].message
    assert found["sglang"]["draft-kind"].ok
    cfg = {**cfg, "use_aux_norm": False, "fc_norm": True}
    assert {c.name: c for c in static_checks(cfg, read_ids(cfg, "vllm", num_layers=L), num_layers=L)}["draft-kind"].ok


@pytest.mark.extra("draft")
def test_a_four_layer_draft_with_top_level_ids_only_fails_to_load_on_vllm(tmp_path: Path) -> None:
    """vLLM sizes the fc from num_aux_hidden_states, else the nested ids, else 3 (llama_eagle3.py:209-220, 0.33):
    a speculators draft of four layers with its ids at the top level only is built for three (vLLM #54526)."""
    import torch
    from safetensors.torch import save_file

    h = 8
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": h,
        "target_hidden_size": h,
        "eagle_aux_hidden_state_layer_ids": [2, 10, 18, 27],
    }
    folder = tmp_path / "draft"
    folder.mkdir()
    save_file({"fc.weight": torch.zeros(h, 4 * h)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(cfg))

    def fc(config: dict) -> object:
        (folder / "config.json").write_text(json.dumps(config))
        ids = read_ids(config, "vllm", num_layers=L)
        return {c.name: c for c in static_checks(config, ids, num_layers=L, path=folder / "config.json")}["fc-width"]

    bad = fc(cfg)
    assert not bad.ok and "= 24: loading the weights fails" in bad.message and "num_aux_hidden_states" in bad.message
    assert fc({**cfg, "num_aux_hidden_states": 4}).ok


def test_p_eagle_drafts_take_the_eagle3_ids() -> None:
    """vLLM registry.py:699 runs PeagleLlamaForCausalLM as its EAGLE-3 model, ids from the same key (algos.py:53-87)."""
    cfg = {"architectures": ["PeagleLlamaForCausalLM"], "eagle_aux_hidden_state_layer_ids": [2, 15, 27]}
    assert conv.kind_from_config(cfg).key == "peagle"
    ids = read_ids(cfg, "vllm", num_layers=L)
    assert ids.kind == "peagle" and list(ids.boundaries) == [2, 15, 27]
    assert conv.translate([2, 15, 27], "vllm", "sglang", num_layers=L, kind="peagle") == [1, 14, 26]


# --------------------------------------------------------------------------- the draft kind through gate and reports


def test_gate_reads_a_dflash_draft_with_its_own_rows_end_to_end(tmp_path: Path) -> None:
    """A DFlash draft on vLLM: the gate compares the layers vLLM captures for dflash_config.target_layer_ids (+ 1),
    the report names the DFlash row and the key to write, and fix-config --from-report writes that key."""
    seed = conv_root() / "fixtures" / "seed"
    cfg = json.loads((seed / "draft-fixed" / "config.json").read_text())
    cfg.pop("eagle_config", None)
    cfg.pop("eagle_aux_hidden_state_layer_ids", None)
    cfg.update(architectures=["DFlashDraftModel"], dflash_config={"target_layer_ids": [2, 30, 58]})
    draft = tmp_path / "draft" / "config.json"
    draft.parent.mkdir()
    draft.write_text(json.dumps(cfg))
    out = tmp_path / "gate.json"
    r = _run(
        "gate",
        str(seed / "train"),
        str(seed / "infer-fixed-neighbours"),
        "--draft-config",
        str(draft),
        "--target-config",
        str(seed / "model" / "config.json"),
        "--engine",
        "vllm",
        "--json",
        str(out),
    )
    doc = json.loads(out.read_text())
    rep = doc["report"]
    assert r.exit_code == 0, r.output
    assert rep["configured"]["boundary_indices"] == [3, 31, 59] and "DFlash" in rep["configured"]["rule"]
    assert rep["recommended"]["config_key"] == "dflash_config.target_layer_ids"
    assert rep["recommended"]["draft_kind"] == "dflash" and rep["settings"]["draft_kind"] == "dflash"
    assert "DFlash" in rep["settings"]["rule"]
    target = tmp_path / "fixed" / "config.json"
    target.parent.mkdir()
    target.write_text(json.dumps({**cfg, "dflash_config": {"target_layer_ids": [0, 1, 2]}}))
    fixed = _run("fix-config", str(target), "--from-report", str(out))
    assert fixed.exit_code == 0, fixed.output
    assert json.loads(target.read_text())["dflash_config"]["target_layer_ids"] == [2, 30, 58]


def conv_root() -> Path:
    return Path(__file__).resolve().parents[1]


def test_fix_config_refuses_an_id_the_engine_never_captures(tmp_path: Path) -> None:
    """vLLM TPU's DFlash loop index is never -1 (llama3.py:356-369): writing it would capture nothing."""
    path = _dflash(tmp_path / "c.json")
    with pytest.raises(InputError, match="never captures.*B0"):
        fix_config(path, [-1, 8, 15], engine="vllm-tpu")
    assert fix_config(path, [1, 8, 15], engine="vllm-tpu").written


def test_check_config_fails_ids_the_tpu_would_not_capture(tmp_path: Path) -> None:
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "eagle_aux_hidden_state_layer_ids": [3, 16, 28]}
    found = {c.name: c for c in static_checks(cfg, read_ids(cfg, "vllm-tpu", num_layers=L), num_layers=L)}
    assert not found["ignored-key"].ok and "MODEL_IMPL_TYPE=vllm" in found["ignored-key"].message
    assert found["silent-fallback"].ok
    right = {**cfg, "eagle_aux_hidden_state_layer_ids": [2, 15, 27]}
    found = {c.name: c for c in static_checks(right, read_ids(right, "vllm-tpu", num_layers=L), num_layers=L)}
    assert found["ignored-key"].ok


def test_ids_from_the_tpu_are_its_own_layers_and_need_the_layer_count() -> None:
    t = translate_ids([3, 16, 28], "vllm-tpu", "sglang", num_layers=L)
    assert list(t.out) == [1, 14, 26] and any("reads no ids" in w for w in t.warnings)
    with pytest.raises(InputError, match="layer count"):
        translate_ids([2, 15, 27], "vllm", "vllm-tpu")


def test_fix_config_names_who_reads_a_dflash_key_it_left_in_place(tmp_path: Path) -> None:
    """Writing SGLang's dspark_target_layer_ids beside an old top-level target_layer_ids: the engines that still
    read the old key first (TokenSpeed, Automodel, DeepSpec; not vLLM, whose V2 runner reads the new key first)."""
    path = _dflash(tmp_path / "c.json", arch="DSparkDraftModel", target_layer_ids=[-1, 14, 29])
    result = fix_config(path, [1, 10, 20], engine="sglang", kind="dspark")
    said = " ".join(result.warnings)
    assert "target_layer_ids [-1, 14, 29] was left as it is" in said and "NeMo Automodel" in said
    assert "vLLM read" not in said and "vLLM," not in said


def test_compare_on_the_tpu_reads_its_own_layers_and_offers_nothing_to_paste() -> None:
    from hsdiff import compare
    from hsdiff.report.text import render_text

    seed = conv_root() / "fixtures" / "seed"
    report = compare(
        seed / "train",
        seed / "infer-fixed-neighbours",
        engine="vllm-tpu",
        layer_ids=[3, 31, 59],
        model_config=str(seed / "model" / "config.json"),
    )
    assert report.configured is not None and list(report.configured.boundary_indices) == [2, 30, 58]
    assert "(nothing: vLLM TPU (tpu-inference, JAX models) reads no layer ids" in render_text(report)


def test_ids_from_a_trainer_that_takes_three_warn_of_four() -> None:
    """Automodel raises for anything but three EAGLE-3 ids (target.py:64-83): four said to come from it are suspect."""
    t = translate_ids([1, 14, 26, 27], "automodel", "vllm", num_layers=L)
    assert any("takes exactly 3 ids" in w for w in t.warnings)
    assert not any("takes exactly" in w for w in translate_ids([1, 14, 26], "automodel", "vllm", num_layers=L).warnings)
