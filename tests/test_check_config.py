"""`hsdiff check-config`: each known trap flagged on a fixture built for it (fixtures/configs/)."""

from __future__ import annotations

import json
import struct
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner

from hsdiff.cli import cli
from hsdiff.gate import check_config

from . import builders as B

CONFIGS = B.FIXTURES / "configs"
LLAMA61 = str(CONFIGS / "targets" / "llama-61.json")
LLAMA30 = str(CONFIGS / "targets" / "llama-30.json")
DRAFT_SMOLLM2 = B.FIXTURES / "draft-smollm2"


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def checks(name: str, *args: str, target: str = LLAMA61) -> tuple[int, dict[str, dict]]:
    r = run("check-config", str(CONFIGS / name), "--target-config", target, "--json", "-", *args)
    assert r.exit_code in (0, 1), r.output
    doc = json.loads(r.output)
    assert doc["command"] == "check-config" and doc["report"] is None
    return r.exit_code, {c["name"]: c for c in doc["checks"]}


def only_failures(found: dict[str, dict]) -> set[str]:
    return {n for n, c in found.items() if c["status"] in ("FAIL", "warn")}


@pytest.mark.parametrize("name,engine", [("good.json", "sglang"), ("good-vllm.json", "vllm")])
def test_good_configs_pass_every_check(name, engine):
    code, found = checks(name, "--engine", engine)
    assert code == 0
    assert only_failures(found) == set()
    assert "captures B[3, 31, 59]" in found["ids-source"]["message"]


def test_unsorted():
    code, found = checks("unsorted.json")
    assert code == 1 and only_failures(found) == {"ids-sorted"}
    assert found["ids-sorted"]["severity"] == "error"
    assert "[30, 2, 58] is not ascending" in found["ids-sorted"]["message"]
    assert "B[3, 31, 59]" in found["ids-sorted"]["message"] and "B[31, 3, 59]" in found["ids-sorted"]["message"]


def test_duplicated():
    code, found = checks("duplicated.json")
    assert code == 1
    assert found["ids-unique"]["status"] == "FAIL" and "repeats [30]" in found["ids-unique"]["message"]
    assert found["fc-width"]["status"] == "FAIL"  # 2 slots reach an fc built for 3


def test_out_of_range():
    code, found = checks("out-of-range.json")
    assert code == 1 and only_failures(found) == {"ids-in-range"}
    assert "id 61 → B62" in found["ids-in-range"]["message"]


def test_last_layer_cannot_be_captured_on_sglang_llama():
    code, found = checks("last-layer.json")
    assert code == 1 and only_failures(found) == {"ids-capturable"}
    assert "id 60 → B61" in found["ids-capturable"]["message"]
    assert "vLLM (id 61)" in found["ids-capturable"]["message"]  # what would work
    # the summary of what the engine captures leaves out what ids-capturable rejects
    assert "captures B[3, 31] only: it cannot capture B61" in found["ids-source"]["message"]
    assert "B[3, 31, 61]" not in json.dumps(found)
    # vLLM captures B = L (the last layer, pre-norm): the same boundary is fine there
    cfg = json.loads((CONFIGS / "last-layer.json").read_text())
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 30, 60]


def test_vllm_may_capture_the_last_layer(tmp_path):
    cfg = json.loads((CONFIGS / "good-vllm.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = [3, 31, 61]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = run("check-config", str(tmp_path), "--engine", "vllm", "--target-config", LLAMA61)
    assert r.exit_code == 0, r.output


def test_fc_width_from_the_engine_built_fc():
    # engines size fc by num_aux_hidden_states, else the number of nested ids, else 3: sglang==0.5.12
    # llama_eagle3.py:154-161, vllm==0.33.0 llama_eagle3.py:209-220; a correct 4-id draft passes
    code, found = checks("fc-width.json")
    assert code == 0 and only_failures(found) == set()
    assert "4 ids in eagle_config" in found["fc-width"]["message"]
    # SGLang 0.5.10-0.5.11 hard-coded 3 slots (sglang==0.5.10 llama_eagle3.py:138-142)
    code, found = checks("fc-width.json", "--engine-version", "sglang==0.5.11")
    assert code == 1 and only_failures(found) == {"fc-width"}
    msg = found["fc-width"]["message"]
    assert "1728" in msg and "4 slots × 576 = 2304" in msg
    # num_aux_hidden_states wins over the number of ids
    code, found = checks("fc-width-num-aux.json")
    assert code == 1 and only_failures(found) == {"fc-width"}
    assert "num_aux_hidden_states 3" in found["fc-width"]["message"]


def _tiny_safetensors(path, shapes: dict[str, list[int]]) -> None:
    header, offset = {}, 0
    for name, shape in shapes.items():
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": "F16", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + bytes(offset))


def test_fc_width_from_the_draft_weights(tmp_path):
    cfg = json.loads((CONFIGS / "good.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    _tiny_safetensors(tmp_path / "model.safetensors", {"fc.weight": [8, 2 * 576]})  # trained on 2 slots
    r = run("check-config", str(tmp_path / "config.json"), "--target-config", LLAMA61, "--json", "-")
    assert r.exit_code == 1
    fc = next(c for c in json.loads(r.output)["checks"] if c["name"] == "fc-width")
    assert fc["status"] == "FAIL" and "model.safetensors [fc.weight] has shape [8, 1152]" in fc["message"]
    _tiny_safetensors(tmp_path / "model.safetensors", {"midlayer.x": [2], "fc.weight": [8, 3 * 576]})
    assert run("check-config", str(tmp_path), "--target-config", LLAMA61).exit_code == 0


def _real_draft(tmp_path, name: str, ids: list[int], **extra) -> str:
    """The SmolLM2 draft of fixtures/draft-smollm2 (its fc.weight trained on 3 slots × 576) under a config
    holding ``ids`` and ``extra`` keys."""
    d = tmp_path / name
    d.mkdir()
    cfg = json.loads((DRAFT_SMOLLM2 / "config.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids
    cfg.update(extra)
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "model.safetensors").symlink_to(DRAFT_SMOLLM2 / "model.safetensors")
    return str(d / "config.json")


def _fc_check(config: str) -> tuple[int, dict]:
    r = run("check-config", config, "--engine", "sglang", "--target-config", LLAMA30, "--json", "-")
    assert r.exit_code in (0, 1), r.output
    return r.exit_code, next(c for c in json.loads(r.output)["checks"] if c["name"] == "fc-width")


def test_more_ids_than_the_fc_has_slots_are_told_to_go(tmp_path):
    """Five ids on a draft whose fc.weight takes 3 slots: the fix is three ids, not num_aux_hidden_states
    (which would let the weights load and the matmul fail on 5 slots); followed, the advice passes."""
    code, fc = _fc_check(_real_draft(tmp_path, "five", [1, 8, 14, 20, 26]))
    assert code == 1 and fc["status"] == "FAIL"
    msg = fc["message"]
    assert "model.safetensors [fc.weight] has shape [576, 1728]" in msg and "loading the weights fails" in msg
    assert "Configure 3 ids, as many as the fc has slots" in msg and "drop the other 2" in msg
    assert "num_aux_hidden_states" not in msg
    assert _fc_check(_real_draft(tmp_path, "three", [1, 14, 26]))[1]["status"] == "ok"
    # a num_aux_hidden_states that says 5 too must go to 3 with the ids
    code, fc = _fc_check(_real_draft(tmp_path, "five-5", [1, 8, 14, 20, 26], num_aux_hidden_states=5))
    assert code == 1 and "Configure 3 ids" in fc["message"] and "set num_aux_hidden_states to 3" in fc["message"]
    # fewer distinct ids than slots: configure the missing ones, the duplicate does not count
    code, fc = _fc_check(_real_draft(tmp_path, "two", [1, 14, 14]))
    assert code == 1 and "Configure 3 distinct ids" in fc["message"] and "drop" not in fc["message"]


def test_ids_that_fit_the_weights_under_a_wrong_num_aux_are_told_to_fix_num_aux(tmp_path):
    """The other way round: three ids fit the 3-slot fc.weight, num_aux_hidden_states 5 makes the engine
    build a 5-slot fc the weights do not load into; the fix is num_aux_hidden_states, not the ids."""
    code, fc = _fc_check(_real_draft(tmp_path, "aux5", [1, 14, 26], num_aux_hidden_states=5))
    assert code == 1 and fc["status"] == "FAIL"
    msg = fc["message"]
    assert "num_aux_hidden_states 5" in msg and "loading the weights fails" in msg
    assert "The 3 ids fit the weights: set num_aux_hidden_states to 3." in msg and "Configure" not in msg
    assert _fc_check(_real_draft(tmp_path, "aux3", [1, 14, 26], num_aux_hidden_states=3))[1]["status"] == "ok"
    # SGLang before 0.5.12 builds 3 slots whatever the config says: a 4-slot draft needs a newer version
    cfg = _real_draft(tmp_path, "four", [1, 8, 14, 26])
    (tmp_path / "four" / "model.safetensors").unlink()
    _tiny_safetensors(tmp_path / "four" / "model.safetensors", {"fc.weight": [8, 4 * 576]})
    r = run("check-config", cfg, "--engine-version", "sglang==0.5.11", "--target-config", LLAMA30, "--json", "-")
    fc = next(c for c in json.loads(r.output)["checks"] if c["name"] == "fc-width")
    assert r.exit_code == 1 and "The 4 ids fit the weights: serve it with SGLang ≥ 0.5.12" in fc["message"]


def test_an_fc_sized_by_the_config_alone_names_both_fixes():
    """No weights: num_aux_hidden_states 3 against 4 ids could be either mistake; the message names both
    and how to tell (the draft's fc.weight)."""
    code, found = checks("fc-width-num-aux.json")
    msg = found["fc-width"]["message"]
    assert code == 1 and "Configure 3 ids, as many as the fc has slots" in msg and "drop the other 1" in msg
    assert "if the draft was trained on 4 slots, set num_aux_hidden_states to 4" in msg and "fc.weight" in msg
    code, found = checks("fc-width.json", "--engine-version", "sglang==0.5.11")
    msg = found["fc-width"]["message"]
    assert "if the draft was trained on 4 slots, serve it with SGLang ≥ 0.5.12" in msg


def test_ids_in_the_key_sglang_ignores():
    code, found = checks("ignored-key.json")
    assert code == 1
    assert found["ignored-key"]["status"] == "FAIL"
    assert "never reads" in found["ignored-key"]["message"]
    assert found["ids-source"]["status"] == "warn" and "silently falls back" in found["ids-source"]["message"]


def test_ids_in_the_key_the_vllm_v2_runner_ignores():
    code, found = checks("nested-only.json", "--engine", "vllm", "--vllm-runner", "v2")
    assert code == 1 and found["ignored-key"]["status"] == "FAIL"
    assert "V2 model runner (the default) ignores" in found["ignored-key"]["message"]
    assert checks("nested-only.json", "--engine", "vllm")[1]["ignored-key"]["status"] == "FAIL"  # V2 by default
    code, found = checks("nested-only.json", "--engine", "vllm", "--vllm-runner", "v1")
    assert code == 0 and found["ignored-key"]["status"] == "warn"  # read by V1, ignored by V2
    assert found["ids-source"]["message"].startswith(
        "vLLM 0.33 reads eagle_config.eagle_aux_hidden_state_layer_ids = [2, 30, 58]"
    )


def test_deepseek_family_rule_does_not_shift_unless_the_first_id_is_1(tmp_path):
    target = str(CONFIGS / "targets" / "kimi-k25-61.json")
    code, found = checks("kimi-first-id.json", target=target)
    assert only_failures(found) == {"family-rule"} and found["family-rule"]["severity"] == "warning"
    assert "B[2, 30, 58]" in found["family-rule"]["message"] and "B[3, 31, 59]" in found["family-rule"]["message"]
    assert "captures B[2, 30, 58]" in found["ids-source"]["message"]
    cfg = json.loads((CONFIGS / "kimi-first-id.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 29, 57]  # the first id is 1: +1 as for llama
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = run("check-config", str(tmp_path), "--target-config", target, "--json", "-")
    fam = next(c for c in json.loads(r.output)["checks"] if c["name"] == "family-rule")
    assert fam["ok"] and r.exit_code == 0


def test_gpt_oss_rule_uses_ids_as_they_are_when_the_max_is_L():
    code, found = checks("gpt-oss-max-layer.json", target=str(CONFIGS / "targets" / "gpt-oss-36.json"))
    assert only_failures(found) == {"family-rule"}
    assert "B[24, 30, 36]" in found["family-rule"]["message"]
    assert found["ids-capturable"]["ok"]  # gpt-oss captures B = L before the final norm


def test_without_a_target_config_range_checks_are_skipped_and_junit_says_so(tmp_path):
    junit = tmp_path / "c.xml"
    r = run("check-config", str(CONFIGS / "good.json"), "--junit", str(junit))
    assert r.exit_code == 0, r.output
    cases = {c.get("name"): c for c in ET.fromstring(junit.read_text()).iter("testcase")}
    assert cases["ids-in-range"].find("skipped") is not None
    assert set(cases) >= {"ids-sorted", "ids-unique", "fc-width", "ignored-key", "family-rule"}


def test_fallback_without_the_layer_count_is_bad_input():
    r = run("check-config", str(CONFIGS / "ignored-key.json"))
    assert r.exit_code == 2
    assert "ignored-key.json" in r.output and "--target-config" in r.output


def test_junit_failure_carries_the_explanation(tmp_path):
    junit = tmp_path / "c.xml"
    r = run("check-config", str(CONFIGS / "unsorted.json"), "--target-config", LLAMA61, "--junit", str(junit))
    assert r.exit_code == 1
    case = next(c for c in ET.fromstring(junit.read_text()).iter("testcase") if c.get("name") == "ids-sorted")
    assert "not ascending" in case.find("failure").get("message")


def test_library_api_names():
    result = check_config(CONFIGS / "duplicated.json", target_config=LLAMA61)
    assert result.verdict == "fail"
    assert [c.name for c in result.failed_checks] == ["ids-unique", "fc-width"]
    assert result.ids.boundaries == (3, 31)


def test_specforge_takes_exactly_three_ids(tmp_path):
    # SpecForge@a6b6b02 specforge/algorithms/model_providers.py:205-210: anything but three ids raises
    four = tmp_path / "config.json"
    four.write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLMEagle3"],
                "hidden_size": 576,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 8, 15, 26]},
            }
        )
    )
    r = CliRunner().invoke(
        cli, ["check-config", str(four), "--engine", "specforge", "--num-layers", "30", "--json", "-"]
    )
    assert r.exit_code == 1
    found = {c["name"]: c for c in json.loads(r.output)["checks"]}
    assert found["ids-count"]["status"] == "FAIL" and "exactly three" in found["ids-count"]["message"]
    r = CliRunner().invoke(cli, ["check-config", str(four), "--engine", "sglang", "--num-layers", "30", "--json", "-"])
    assert {c["name"]: c for c in json.loads(r.output)["checks"]}["ids-count"]["ok"]


def test_deepseek_rule_writing_with_b1_after_another_id(tmp_path):
    # SGLang's DeepSeek rule adds 1 to every id only when ids[0] == 1 (sglang==0.5.23 deepseek_v2.py:3470-3473) and
    # captures in layer order (:3176-3194): [30, 1, 58] is how B[1, 30, 58] must be written, not a sorting mistake
    cfg = json.loads((CONFIGS / "kimi-first-id.json").read_text())
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [30, 1, 58]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    kimi = str(CONFIGS / "targets" / "kimi-k25-61.json")
    r = run("check-config", str(tmp_path / "config.json"), "--target-config", kimi, "--json", "-")
    found = {c["name"]: c for c in json.loads(r.output)["checks"]}
    assert found["ids-sorted"]["status"] == "ok" and "B[1, 30, 58]" in found["ids-sorted"]["message"]
    assert "captures B[1, 30, 58]" in found["ids-source"]["message"]
    # the same list on a llama target is re-sorted by the engine: still an error
    r = run("check-config", str(tmp_path / "config.json"), "--target-config", LLAMA61, "--json", "-")
    found = {c["name"]: c for c in json.loads(r.output)["checks"]}
    assert found["ids-sorted"]["status"] == "FAIL"


def test_several_configs_one_line_each_and_a_targets_config_passed_over(tmp_path):
    seed = "fixtures/seed"
    wrong, fixed, target = (
        f"{seed}/draft-wrong/config.json",
        f"{seed}/draft-fixed/config.json",
        f"{seed}/model/config.json",
    )
    r = run("check-config", "--strict", "--drafts-only", wrong, fixed, target)
    assert r.exit_code == 1
    assert r.output.splitlines() == [
        f"{wrong}: FAIL — " + r.output.splitlines()[0].split(" — ", 1)[1],
        f"{fixed}: PASS",
    ]
    assert "ids-embeddings: id -1" in r.output
    assert run("check-config", wrong, "--one-line").output.startswith(f"{wrong}: PASS")  # a warning without --strict
    assert run("check-config", "--strict", "--one-line", fixed).exit_code == 0
    usage = run("check-config", wrong, fixed, "--json", str(tmp_path / "x.json"))
    assert usage.exit_code == 2 and "one DRAFT_CONFIG" in usage.output and not (tmp_path / "x.json").exists()
