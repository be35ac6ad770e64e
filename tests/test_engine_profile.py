"""The engine profile (:class:`hsdiff.rules.profile.EngineInfo`): every field that carries a decision
cites a source, and each decision the modules used to make by comparing engine names is asked of it."""

from __future__ import annotations

import dataclasses
import json

import pytest

from hsdiff.configs import built_fc_width, read_config_ids, read_ids
from hsdiff.engine_log import EngineLog, ids_check
from hsdiff.errors import InputError
from hsdiff.fix_config import fix_config
from hsdiff.gate.checks import static_checks
from hsdiff.report._doc import nested_in
from hsdiff.request import ENDPOINTS, advice, request_body
from hsdiff.rules import conventions as conv
from hsdiff.rules.profile import (
    CONFIG_KEYS,
    ENGINE_INFO,
    FAMILY_CAPTURE,
    FAMILY_READING,
    FC_AUX,
    FINAL_L,
    FINAL_MINUS_ONE,
    KEYS_NESTED,
    KEYS_TOP,
    REQUEST_COMPLETIONS,
    REQUEST_GENERATE,
    EngineInfo,
)
from hsdiff.rules.serving import serve
from hsdiff.rules.traces import LOG_LINES

pytestmark = pytest.mark.core

_FIELDS = {f.name: f for f in dataclasses.fields(EngineInfo)}
_DESCRIBED = {"key", "title", "kind", "index", "sorts", "reads", "sources"}
_WORDS = {"order_words", "order_source", "left_key_note", "fallback_note", "endpoint", "package_names"}


@pytest.mark.parametrize("info", ENGINE_INFO.values(), ids=list(ENGINE_INFO))
def test_every_decision_in_a_profile_cites_its_source(info: EngineInfo) -> None:
    cited = dict(info.sources)
    assert set(cited) <= set(_FIELDS) - _DESCRIBED, "a source for a field that does not exist"
    assert all(cited.values())
    for name, field in _FIELDS.items():
        if name in _DESCRIBED | _WORDS or getattr(info, name) == field.default:
            continue
        if name in ("left_key", "cache_flag", "final_last_in", "runners"):  # cited with the field they go with
            continue
        assert info.source(name), f"{info.key}.{name} carries a decision but cites no source"


def test_closed_sets_hold_only_their_values() -> None:
    for info in ENGINE_INFO.values():
        assert info.family_rule in ("", FAMILY_READING, FAMILY_CAPTURE)
        assert info.final_id in ("", FINAL_MINUS_ONE, FINAL_L)
        assert info.key_check in ("", KEYS_NESTED, KEYS_TOP)
        assert info.fc_rule in ("", FC_AUX)
        assert info.request in ("", REQUEST_GENERATE, REQUEST_COMPLETIONS)
        assert not info.captures_through or info.captures_through in ENGINE_INFO
        assert bool(info.request) == bool(info.endpoint) == bool(info.cache_flag)
        assert info.fc_three_before == "" or info.fc_rule == FC_AUX
        assert not info.final_last_in or info.final_first
        assert bool(info.left_key) == bool(info.left_key_note) and "{value}" in (info.left_key_note or "{value}")


# -- the model family --------------------------------------------------------------------------------
def test_family_for_says_where_the_family_changes_the_reading() -> None:
    sg, vl, trt, sf = (ENGINE_INFO[k] for k in ("sglang", "vllm", "trtllm", "specforge"))
    assert sg.family_for("gpt-oss") == sg.family_for("gpt-oss", own_row=True) == "gpt-oss"
    assert sf.family_for("deepseek", shifts=True) == "deepseek"
    assert vl.family_for("gpt-oss") == "gpt-oss"
    assert vl.family_for("gpt-oss", own_row=True) is None  # vLLM has no gpt-oss row
    assert vl.family_for("deepseek-legacy", own_row=True) == "deepseek-legacy"
    assert vl.family_for("deepseek", shifts=True) is None  # its DeepSeek row changes what it captures, not the shift
    assert trt.family_for("deepseek") is None
    # only the family-reading engines make the gpt-oss rule depend on num_hidden_layers
    assert conv.needs_num_layers("sglang", "gpt-oss") and conv.needs_num_layers("specforge", "gpt-oss", "0.5.17")
    assert not conv.needs_num_layers("vllm", "gpt-oss")


def test_captures_through_applies_the_other_engines_rows() -> None:
    r = conv.applied("specforge", "kimi_k25", "0.5.14")
    assert r.engine == "specforge" and r.label.startswith("SpecForge through SGLang 0.5.14: ")
    assert r.reading == conv.applied("sglang", "kimi_k25", "0.5.14").reading
    assert conv.parse_version("specforge", "sglang==0.5.14") == "0.5.14"  # its package names include SGLang's


def test_package_names_are_accepted_in_engine_versions() -> None:
    assert conv.version_for("trtllm", ["tensorrt-llm==main"]) == "main"
    assert conv.version_for("modelopt", ["nvidia_modelopt==0.46"]) == "0.46"


# -- the final post-norm state ------------------------------------------------------------------------
def test_final_id_and_where_it_is_delivered() -> None:
    assert conv.from_boundary([62], "trtllm", num_layers=61) == [-1]
    assert conv.from_boundary([62], "hf", num_layers=61) == [61]
    assert conv.slot_order([3, 62], "trtllm", 61) == [62, 3]  # final_first
    assert conv.slot_order([3, 62], "trtllm", 61, "two-model") == [3, 62]  # final_last_in
    order = [o for o in serve([3, 62], "trtllm", num_layers=61).obstacles if o.kind == "order"]
    assert "sorts its eagle3_layers_to_capture set, the final post-norm state (-1) first" in order[0].reason
    assert ENGINE_INFO["trtllm"].order_source in order[0].reason


def test_order_source_falls_back_to_the_rule_source() -> None:
    o = [o for o in serve([31, 3], "sglang", num_layers=61).obstacles if o.kind == "order"][0]
    assert "captures in layer order" in o.reason and ENGINE_INFO["sglang"].order_source in o.reason
    o = [o for o in serve([31, 3], "speculators", num_layers=61).obstacles if o.kind == "order"][0]
    assert conv.applied("speculators").source in o.reason


# -- the draft config's keys -------------------------------------------------------------------------
def test_runners_choose_the_keys_read() -> None:
    assert conv.config_keys("vllm", vllm_runner="v1") == CONFIG_KEYS["vllm-v1"]
    assert conv.config_keys("vllm") == CONFIG_KEYS["vllm-v2"]
    with pytest.raises(InputError, match="unknown vLLM runner 'v3'"):
        conv.config_keys("vllm", vllm_runner="v3")
    assert conv.config_keys("sglang", vllm_runner="v3") == CONFIG_KEYS["sglang"]  # no runners: the argument is moot
    assert read_ids({}, "vllm", num_layers=61).vllm_runner == "v2"
    assert read_ids({}, "sglang", num_layers=61).vllm_runner is None


def test_skips_empty_falls_through_to_the_next_key() -> None:
    cfg = {"eagle_aux_hidden_state_layer_ids": [], "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 14]}}
    assert read_config_ids(cfg, "vllm", vllm_runner="v1") == ([1, 14], conv.NESTED_KEY)
    assert read_config_ids({"eagle_config": {"eagle_aux_hidden_state_layer_ids": []}}, "sglang") == (
        [],
        conv.NESTED_KEY,
    )  # SGLang takes the empty list: it captures nothing


@pytest.mark.parametrize("engine", [k for k, e in ENGINE_INFO.items() if e.writes])
def test_the_key_written_is_one_the_engine_reads(engine: str) -> None:
    info = ENGINE_INFO[engine]
    read = {k for r in (info.runners or ("",)) for k in conv.config_keys(engine, vllm_runner=r or "v2")}
    assert conv.write_key(engine) == info.writes and info.writes in read
    assert info.left_key != info.writes
    assert nested_in({"engine": engine}) == (info.writes[0] if len(info.writes) > 1 else "")


def test_engines_that_read_no_draft_config_get_no_key() -> None:
    for engine in ("trtllm", "eagle", "hf"):
        assert nested_in({"engine": engine}) == ""
        with pytest.raises(InputError, match="reads no layer ids from a draft config.json"):
            conv.write_key(engine)
    assert nested_in({"engine": "not-an-engine"}) == ""  # an old or foreign report renders


def test_fix_config_names_the_key_it_left(tmp_path) -> None:
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"eagle_aux_hidden_state_layer_ids": [3, 31, 59]}))
    res = fix_config(p, [2, 30, 58], engine="sglang", dry_run=True)
    assert res.warnings == (ENGINE_INFO["sglang"].left_key_note.format(value=[3, 31, 59]),)
    assert fix_config(p, [2, 30, 58], engine="specforge", dry_run=True).warnings == ()


def test_use_aux_flag_and_fallback_note() -> None:
    off = {"eagle_config": {"use_aux_hidden_state": False, "eagle_aux_hidden_state_layer_ids": [2, 30, 58]}}
    for engine, info in ENGINE_INFO.items():
        if not conv.config_keys(engine):
            continue
        src = read_ids(off, engine, num_layers=61)
        assert (src.key == "eagle_config.use_aux_hidden_state") == info.use_aux_flag, engine
    assert read_ids({}, "vllm", num_layers=61).note.endswith(ENGINE_INFO["vllm"].fallback_note)
    assert "#50170" not in read_ids({}, "sglang", num_layers=61).note


def test_key_check_variants() -> None:
    top_only = {"eagle_aux_hidden_state_layer_ids": [3, 31, 59]}
    for engine, kind in (("sglang", KEYS_NESTED), ("vllm", KEYS_TOP), ("speculators", "")):
        assert ENGINE_INFO[engine].key_check == kind
    sg = read_ids(top_only, "sglang", num_layers=61)
    ignored = {c.name: c for c in static_checks(top_only, sg, num_layers=61)}["ignored-key"]
    assert not ignored.ok and "which SGLang never reads" in ignored.message
    mo = read_ids({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}}, "modelopt", num_layers=61)
    generic = {c.name: c for c in static_checks(top_only, mo, num_layers=61)}["ignored-key"]
    assert (
        not generic.ok and "which NVIDIA ModelOpt never reads (it reads eagle_architecture_config." in generic.message
    )


# -- fc width, id count -------------------------------------------------------------------------------
def test_fc_rule_and_the_older_sglang_width() -> None:
    cfg = {"target_hidden_size": 8, "num_aux_hidden_states": 2}
    assert built_fc_width(cfg, "sglang", "0.5.11")[0] == 24  # fc_three_before 0.5.12
    assert built_fc_width(cfg, "sglang", "0.5.12")[0] == 16
    assert built_fc_width(cfg, "vllm")[0] == 16
    assert built_fc_width(cfg, "modelopt") == (None, "")


def test_id_count_is_checked_for_specforge_only() -> None:
    cfg = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 15, 30, 45]}}
    for engine in ("specforge", "sglang"):
        ids = read_ids(cfg, engine, num_layers=61)
        count = {c.name: c for c in static_checks(cfg, ids, num_layers=61)}["ids-count"]
        assert count.ok == (engine != "specforge")
        if not count.ok:
            assert "SpecForge takes exactly three" in count.message


# -- requests and logs ---------------------------------------------------------------------------------
def test_requests_come_from_the_profile() -> None:
    assert ENDPOINTS == {"sglang": "/generate", "vllm": "/v1/completions"}
    assert "input_ids" in request_body([1], "sglang") and "prompt" in request_body([1], "vllm")
    assert "--disable-radix-cache" in advice("sglang") and "--no-enable-prefix-caching" in advice("vllm")
    for engine in ("trtllm", "SGLang"):
        with pytest.raises(InputError, match="no request format"):
            request_body([1], engine)


def test_only_an_engine_that_logs_its_ids_gets_the_log_check() -> None:
    logs_ids = {r.engine for r in LOG_LINES if r.kind == "aux_layers"}
    assert logs_ids == {"vllm"}
    ids = read_ids({"eagle_aux_hidden_state_layer_ids": [1, 14, 26]}, "vllm", num_layers=30)
    log = EngineLog("x.log", "vllm", (1, 14, 26), 3, None)
    assert getattr(ids_check(log, ids), "ok", None) is True
    sg_ids = read_ids({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 14, 26]}}, "sglang", num_layers=30)
    assert ids_check(dataclasses.replace(log, engine="sglang"), sg_ids) is None
    assert ids_check(log, sg_ids) is None
