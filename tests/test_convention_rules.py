"""The convention table checked against the engines' source: one test per disagreement found between
hsdiff and the source (each names the line it encodes), the version-dependent rows, and a round trip
over every engine pair, family, version and layer count."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hsdiff.configs import read_ids
from hsdiff.errors import InputError
from hsdiff.rules import conventions as conv
from hsdiff.rules.profile import FAMILIES, RULES, VERSIONS
from hsdiff.rules.serving import max_capturable

NESTED_ONLY = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}}


# -- 1. vLLM's default model runner is V2, which reads only the top-level key --------------------------
def test_vllm_default_runner_is_v2_and_ignores_the_nested_key():
    # vllm==0.33.0 vllm/config/vllm.py:730-766 (V2 unless forced); vllm/v1/worker/gpu/spec_decode/eagle/
    # eagle3_utils.py:113-150 (top-level key only), default (2, L//2, L-3) at interfaces.py:1772
    src = read_ids(NESTED_ONLY, "vllm", num_layers=61)
    assert src.fallback and src.key is None
    assert src.boundaries == (2, 30, 58) and src.vllm_runner == "v2"
    # the V1 runner (only when forced) reads the nested key: vllm==0.33.0 gpu_model_runner.py:5190-5224
    v1 = read_ids(NESTED_ONLY, "vllm", num_layers=61, vllm_runner="v1")
    assert (
        not v1.fallback and v1.boundaries == (2, 30, 58) and v1.key == "eagle_config.eagle_aux_hidden_state_layer_ids"
    )


# -- 2. SpecForge captures through SGLang's own setter: SGLang's family rules apply -------------------
def test_specforge_applies_sglangs_family_rules():
    # SpecForge@a6b6b02 specforge/offline_capture/sglang_backend/capture.py:86-87 calls SGLang's
    # set_eagle3_layers_to_capture; it pins sglang==0.5.14 (pyproject.toml:26), where the DeepSeek rule
    # (sglang==0.5.13 deepseek_v2.py:2740-2755) reads [2, 30, 58] as they are
    assert conv.to_boundary([2, 30, 58], "specforge", num_layers=61, model_family="kimi_k25") == [2, 30, 58]
    assert conv.to_boundary([1, 29, 57], "specforge", num_layers=61, model_family="kimi_k25") == [2, 30, 58]
    assert conv.to_boundary([2, 30, 58], "specforge", num_layers=61) == [3, 31, 59]
    assert "SGLang 0.5.14" in conv.applied("specforge", "kimi_k25").label


# -- 3. more SGLang families use the DeepSeek rule -----------------------------------------------------
@pytest.mark.parametrize("model_type", ["glm4_moe_lite", "glm_moe_dsa", "mistral_large_3", "deepseek_v32"])
def test_more_families_use_the_deepseek_rule(model_type):
    # sglang==0.5.23 glm4_moe_lite.py:805-820, glm4_moe.py:1284 (GlmMoeDsaForCausalLM ⊂ DeepseekV2ForCausalLM),
    # mistral_large_3.py:9-12 (⊂ DeepseekV3ForCausalLM)
    assert conv.family_from_config({"model_type": model_type}) == "deepseek"
    assert conv.to_boundary([2, 30, 58], "sglang", num_layers=61, model_family=model_type) == [2, 30, 58]
    # plain glm4_moe keeps the +1: its setter is llama's
    assert conv.family_from_config({"model_type": "glm4_moe"}) == "llama"


# -- 4. TensorRT-LLM's -1 is the final post-norm hidden state; no id names the embeddings --------------
def test_trtllm_minus_one_is_the_final_post_norm_state():
    # NVIDIA/TensorRT-LLM tensorrt_llm/_torch/models/modeling_speculative.py SpecDecOneEngineForCausalLM:
    # layer_idx -1 captures after self.model(...) returns the normed hidden states
    final = conv.final_boundary(61)
    b = conv.to_boundary([-1, 2, 30], "trtllm", num_layers=61)
    assert 0 not in b and final in b
    assert b[0] == final  # one-model path (the default): -1 stays in slot 0 (eagle3.py Eagle3OneModelSpecMetadata)
    assert conv.from_boundary([0, 3, 31], "trtllm", num_layers=61) == [None, 2, 30]
    assert conv.from_boundary([final], "trtllm", num_layers=61) == [-1]
    # the final post-norm state is Hugging Face's index L, and nothing in vLLM
    assert conv.translate([-1], "trtllm", "hf", num_layers=61) == [61]
    assert conv.translate([-1], "trtllm", "vllm", num_layers=61) == [None]


# -- 5. Hugging Face tuple index L is post-norm -------------------------------------------------------
def test_hf_index_l_is_post_norm():
    # transformers==5.24.0 transformers/utils/output_capturing.py:366-379 replaces the last entry with
    # last_hidden_state (after modeling_llama.py:404 self.norm)
    assert conv.to_boundary([61], "hf", num_layers=61) == [conv.final_boundary(61)]
    assert conv.translate([61], "hf", "vllm", num_layers=61) == [None]  # vLLM's 61 is pre-norm
    assert conv.translate([61], "vllm", "hf", num_layers=61) == [None]  # pre-norm B=L has no HF index
    assert conv.translate([3, 31, 59], "vllm", "hf", num_layers=61) == [3, 31, 59]


# -- 7. deepseek_v4 has no EAGLE-3 capture in SGLang ---------------------------------------------------
def test_deepseek_v4_is_refused():
    # sglang==0.5.23 deepseek_v4.py:4633,4853-4861: only set_dspark_layers_to_capture exists
    assert conv.family_from_config({"model_type": "deepseek_v4"}) == "deepseek_v4"
    with pytest.raises(InputError, match="no EAGLE-3 capture"):
        conv.to_boundary([2, 30, 58], "sglang", num_layers=61, model_family="deepseek_v4")


# -- 9. rules depend on the engine version -------------------------------------------------------------
@pytest.mark.parametrize("version,expected", [("0.5.12", [3, 31, 59]), ("0.5.13", [2, 30, 58]), (None, [2, 30, 58])])
def test_deepseek_rule_from_sglang_0_5_13(version, expected):
    # sglang==0.5.12 deepseek_v2.py:2529-2541 (+1 always); sglang==0.5.13 deepseek_v2.py:2740-2755
    assert conv.to_boundary([2, 30, 58], "sglang", num_layers=61, model_family="kimi_k25", version=version) == expected


def test_gpt_oss_max_rule_from_sglang_0_5_17():
    # sglang==0.5.16 gpt_oss.py:1284-1296 (+1, loop :689-692 never captures B=L); 0.5.17 gpt_oss.py:1328-1343
    assert conv.to_boundary([24, 30, 35], "sglang", num_layers=36, model_family="gpt-oss", version="0.5.16") == [
        25,
        31,
        36,
    ]
    assert max_capturable("sglang", 36, "gpt-oss", "0.5.16") == 35
    assert conv.to_boundary([24, 30, 36], "sglang", num_layers=36, model_family="gpt-oss", version="0.5.17") == [
        24,
        30,
        36,
    ]
    assert conv.from_boundary([24, 30, 36], "sglang", num_layers=36, model_family="gpt-oss", version="0.5.16") == [
        23,
        29,
        None,
    ]


def test_engine_version_is_parsed_and_checked():
    assert conv.parse_version("sglang", "sglang==0.5.12") == "0.5.12"
    assert conv.parse_version("vllm", None) == VERSIONS["vllm"][-1]
    assert conv.parse_version("specforge", "sglang==0.5.14") == "0.5.14"
    with pytest.raises(InputError, match="not a version of SGLang"):
        conv.parse_version("sglang", "vllm==0.33")
    with pytest.raises(InputError, match="older than"):
        conv.parse_version("sglang", "0.4.0")


# -- the smaller findings ------------------------------------------------------------------------------
def test_vllm_deepseek_cannot_take_id_0():
    # vllm==0.33.0 deepseek_v2.py:1525 residual None on the first rank, :1561-1568 hidden_states + residual
    assert conv.from_boundary([0, 3, 31], "vllm", num_layers=61, model_family="deepseek") == [None, 3, 31]
    assert conv.from_boundary([0, 3, 31], "vllm", num_layers=61) == [0, 3, 31]


def test_modelopt_and_specforge_cannot_take_minus_one():
    # nvidia-modelopt==0.47.0 hf_eagle.py:401-406 hooks layers[i] (no layer -1); SpecForge
    # model_providers.py:205-210 demands non-negative ids
    assert conv.from_boundary([0, 3, 31], "modelopt", num_layers=61) == [None, 2, 30]
    assert conv.from_boundary([0, 3, 31], "specforge", num_layers=61) == [None, 2, 30]


def test_specforge_reads_its_run_config_override_first():
    # SpecForge model_providers.py:193 model.aux_hidden_state_layer_ids, :194-200 the nested key
    cfg = {"model": {"aux_hidden_state_layer_ids": [1, 14, 26]}, **NESTED_ONLY}
    src = read_ids(cfg, "specforge", num_layers=30)
    assert src.key == "model.aux_hidden_state_layer_ids" and src.boundaries == (2, 15, 27)


def test_unsorted_ids_on_the_deepseek_rule_capture_in_layer_order():
    # sglang==0.5.23 deepseek_v2.py:3458-3473 tests ids[0]; capture is a membership test in the loop
    assert conv.to_boundary([30, 2, 58], "sglang", num_layers=61, model_family="deepseek") == [2, 30, 58]


def test_minimax_m3_rows():
    # sglang==0.5.23 minimax_m3.py:2056-2075 (B=L through final_norm); 0.5.18 minimax_m3.py:1616-1636 (not)
    assert max_capturable("sglang", 62, "minimax_m3") == 62
    assert max_capturable("sglang", 62, "minimax_m3", "0.5.20") == 61
    with pytest.raises(InputError, match="no aux hidden state"):
        conv.to_boundary([2, 30], "sglang", num_layers=62, model_family="minimax_m3", version="0.5.16")
    # sglang==0.5.23 minimax_m3_vl.py:246-270: +1 on the default too
    assert conv.default_boundaries(62, "sglang", "minimax_m3_vl") == [3, 32, 60]


def test_looped_models_are_refused():
    # sglang==0.5.23 nanbeige.py:351-367,576-587: DFlash capture only
    assert conv.family_from_config({"model_type": "nanbeige", "num_loops": 2}) == "looped"
    with pytest.raises(InputError, match="looped"):
        conv.to_boundary([2, 10], "sglang", num_layers=32, model_family="looped")


def test_speculators_is_an_engine_key():
    # speculators==0.9.0 speculators/models/eagle3/config.py:53-56 top-level key; models/utils.py:117-133
    # 0 <= id <= L (L allowed), boundary index; default [2, L//2, L-3] at :135-139
    assert "speculators" in conv.ENGINES
    assert conv.to_boundary([3, 31, 61], "speculators", num_layers=61) == [3, 31, 61]
    assert conv.default_ids("speculators", 61) == [2, 30, 58]
    assert conv.config_keys("speculators") == (conv.TOP_KEY,)


def test_trtllm_reads_no_draft_config_key():
    # NVIDIA/TensorRT-LLM tensorrt_llm/_torch/speculative/utils.py get_spec_metadata passes only
    # spec_config.eagle3_layers_to_capture; the draft config.json is read for the vocabulary only
    assert conv.config_keys("trtllm") == ()
    with pytest.raises(InputError, match="eagle3_layers_to_capture"):
        conv.write_key("trtllm")


# -- every row ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("row", RULES, ids=repr)
def test_every_row_cites_a_source_and_is_reachable(row):
    assert row.source and ("==" in row.source or "@" in row.source or "/" in row.source)
    family = row.families[0] if row.families else None
    version = row.since or row.until or None
    got = conv.applied(row.engine, family, version)
    if row.engine != "specforge":
        assert got == row


# -- the round trip ----------------------------------------------------------------------------------
_COMBOS = [
    (e, f, v)
    for e in conv.ENGINES
    for f in (FAMILIES if e in ("sglang", "specforge", "vllm") else [None])
    for v in VERSIONS[e]
]


def _usable(engine: str, family: str | None, version: str) -> bool:
    try:
        conv.default_boundaries(40, engine, family, version)
    except InputError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(
    src=st.sampled_from(_COMBOS),
    dst=st.sampled_from(_COMBOS),
    L=st.integers(min_value=6, max_value=96),
    data=st.data(),
)
def test_round_trip_never_prints_an_id_the_target_cannot_capture(src, dst, L, data):
    (se, sf, sv), (de, df, dv) = src, dst
    if not (_usable(se, sf, sv) and _usable(de, df, dv)):
        return
    pool = list(range(0, L + 2))
    bs = sorted(data.draw(st.sets(st.sampled_from(pool), min_size=1, max_size=4)))
    ids = conv.from_boundary(bs, se, num_layers=L, model_family=sf, version=sv)
    src_ids = [i for i in ids if i is not None]
    if len(src_ids) != len(bs):
        return  # the source cannot capture one of them: nothing to translate
    there = conv.translate(src_ids, se, de, num_layers=L, src_family=sf, dst_family=df, src_version=sv, dst_version=dv)
    captured = conv.to_boundary(src_ids, se, num_layers=L, model_family=sf, version=sv)
    for b, i in zip(captured, there):
        if i is not None:
            assert conv.capturable(b, de, L, df, dv), (b, i)
        else:
            row = conv.applied(de, df, dv)  # a fixed row captures its own layers only: no id for any other
            assert not conv.capturable(b, de, L, df, dv) or row.reading == "deepseek" or row.fixed
    if None not in there:
        back = conv.to_boundary([i for i in there if i is not None], de, num_layers=L, model_family=df, version=dv)
        assert sorted(back) == sorted(captured)


@pytest.mark.parametrize("L", [30, 61])
def test_defaults_round_trip_between_every_engine_pair(L):
    for se, de in itertools.product(conv.ENGINES, repeat=2):
        ids = conv.default_ids(se, L)
        there = conv.translate(ids, se, de, num_layers=L)
        assert None not in there, (se, de)
        assert conv.translate(there, de, se, num_layers=L) == ids  # type: ignore[arg-type]


def test_every_version_known_for_every_engine():
    assert set(VERSIONS) == set(conv.ENGINES)
    assert json.dumps(VERSIONS)


# -- the commands ------------------------------------------------------------------------------------
def _cli(*args: str):
    from click.testing import CliRunner

    from hsdiff.cli import cli

    return CliRunner().invoke(cli, list(args))


def test_fix_config_never_writes_a_key_trtllm_does_not_read(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(NESTED_ONLY))
    before = cfg.read_bytes()
    r = _cli("fix-config", str(cfg), "--layer-ids", "2,30,58", "--engine", "trtllm")
    assert r.exit_code == 2 and "eagle3_layers_to_capture" in r.output and "speculative config" in r.output
    assert cfg.read_bytes() == before and list(tmp_path.iterdir()) == [cfg]


def test_fix_config_for_speculators_writes_the_top_level_key(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(NESTED_ONLY))
    r = _cli("fix-config", str(cfg), "--layer-ids", "3,31,59", "--engine", "speculators")
    assert r.exit_code == 0, r.output
    assert json.loads(cfg.read_text())["eagle_aux_hidden_state_layer_ids"] == [3, 31, 59]


def test_ids_takes_an_engine_version_and_names_the_rules():
    old = _cli(
        "ids",
        "2,30,58",
        "--from",
        "sglang",
        "--to",
        "vllm",
        "--model-family",
        "kimi_k25",
        "--engine-version",
        "sglang==0.5.12",
        "--explain",
    )
    assert old.exit_code == 0 and old.stdout == "3,31,59\n"
    assert "SGLang ≤ 0.5.12, DeepSeek family (+1 always)" in old.stderr
    new = _cli("ids", "2,30,58", "--from", "sglang", "--to", "vllm", "--model-family", "kimi_k25", "--explain")
    assert new.stdout == "2,30,58\n" and "SGLang ≥ 0.5.13, DeepSeek rule" in new.stderr
    assert _cli("ids", "2,30,58", "--from", "sglang", "--to", "vllm", "--engine-version", "trtllm==main").exit_code == 2


def test_ids_warns_when_the_source_could_not_have_captured_a_layer():
    # ModelOpt hooks decoder layers only: nothing it captures is the embeddings (id -1)
    r = _cli("ids", "-1,2,30", "--from", "modelopt", "--to", "vllm", "--num-layers", "61")
    assert "NVIDIA ModelOpt 0.47 could not have captured B0 (the embeddings)" in r.stderr


def test_check_config_reports_the_rule_and_version_it_applied():
    from hsdiff.gate import check_config

    from . import builders as B

    kimi = str(B.FIXTURES / "configs" / "targets" / "kimi-k25-61.json")
    cfg = str(B.FIXTURES / "configs" / "kimi-first-id.json")
    new = check_config(cfg, target_config=kimi)
    assert (
        new.ids is not None and new.ids.rule == "SGLang ≥ 0.5.13, DeepSeek rule" and new.ids.boundaries == (2, 30, 58)
    )
    old = check_config(cfg, target_config=kimi, engine_version="sglang==0.5.12")
    assert old.ids is not None and old.ids.boundaries == (3, 31, 59) and old.to_dict()["engine_version"] == "0.5.12"
    assert {c.name for c in old.checks if not c.ok} == set()  # no family rule then


def test_use_aux_hidden_state_false_captures_nothing():
    # sglang==0.5.23 llama_eagle3.py:238-247; vllm==0.33.0 v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:14-22
    cfg = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58], "use_aux_hidden_state": False}}
    for engine in ("sglang", "vllm"):
        src = read_ids(cfg, engine, num_layers=61)
        assert src.ids == () and "use_aux_hidden_state is false" in src.note


@pytest.mark.parametrize("command", ["check-config", "gate", "fix-config"])
def test_help_says_where_every_engine_reads_the_ids(command):
    text = _cli(command, "--help").output
    for engine in conv.ENGINES:
        assert f"  {engine}: " in text
    assert "eagle3_layers_to_capture" in text and "V2 runner never" in text


def test_a_row_that_reads_no_ids_gets_no_id_for_a_layer_it_does_not_capture():
    # vLLM TPU's JAX models capture B[2, L//2, L-3] whatever the config: the embeddings have no id there
    assert conv.translate([-1], "sglang", "vllm-tpu", num_layers=6, src_version="0.5.10", dst_version="0.32") == [None]
    assert None not in conv.from_boundary([2, 3], "vllm-tpu", num_layers=6, version="0.32")
