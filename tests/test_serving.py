"""hsdiff.rules.serving.serve: whether some id list makes an engine feed the draft its training slots, in order."""

from __future__ import annotations

from hsdiff.rules import conventions as conv
from hsdiff.rules.serving import as_written, serve


def test_a_servable_list_has_ids_and_no_obstacle():
    s = serve([3, 31, 59], "sglang", num_layers=61)
    assert s.ok and s.ids == (2, 30, 58) and s.notes == ()


def test_only_the_uncapturable_boundary_is_named():
    s = serve([2, 15, 30], "sglang", num_layers=30)
    assert not s.ok and s.ids == (1, 14, None)
    assert [o.boundaries for o in s.obstacles] == [(30,)]
    assert "B2 " not in s.sentences()[0] and "B15" not in s.sentences()[0]
    assert "vLLM (id 30)" in s.sentences()[0]
    assert serve([2, 15, 30], "vllm", num_layers=30).ok  # vLLM captures B = L before the final norm


def test_the_same_layer_twice_is_captured_once():
    s = serve([2, 15, 15], "vllm", num_layers=30)
    assert [o.kind for o in s.obstacles] == ["repeated"] and s.ids == (None, None, None)
    assert "captures each layer once" in s.sentences()[0] and "summing" in s.sentences()[0]


def test_tensorrt_llm_puts_the_final_state_first_on_its_one_model_path():
    final = conv.final_boundary(61)
    hf_order = [3, 31, final]  # a trainer that appended the post-norm state last
    s = serve(hf_order, "trtllm", num_layers=61)
    assert [o.kind for o in s.obstacles] == ["order"] and s.fc_order == (2, 0, 1)
    assert "B62" not in " ".join(s.sentences()) and "the final post-norm state" in s.sentences()[0]
    two = serve(hf_order, "trtllm", num_layers=61, version="two-model")  # moves -1 last: the order holds
    assert two.ok and two.ids == (2, 30, -1)


def test_deepseek_rule_writing_and_its_warning():
    s = serve([1, 24, 44], "sglang", num_layers=61, model_family="deepseek")
    assert s.ok and s.ids == (24, 1, 44)
    assert "B[2, 25, 45]" in s.notes[0]
    assert not serve([1], "sglang", num_layers=61, model_family="deepseek").ok
    assert serve([1], "sglang", num_layers=61, model_family="deepseek", version="0.5.12").ids == (0,)
    assert as_written([24, 1, 44], "sglang", num_layers=61, model_family="deepseek")
    assert not as_written([1, 24, 44, 1], "sglang", num_layers=61, model_family="deepseek")
    assert not as_written([24, 1, 44], "vllm", num_layers=61)


def test_the_final_state_is_named_in_words_in_a_report():
    from click.testing import CliRunner

    from hsdiff.cli import cli

    from . import builders as B

    r = CliRunner().invoke(
        cli,
        [
            "compare",
            str(B.SEED / "train"),
            str(B.SEED / "infer-wrong"),
            "--engine",
            "trtllm",
            "--layer-ids=-1,2,30",
            "--model-config",
            str(B.SEED / "model" / "config.json"),
        ],
    )
    assert r.exit_code == 1
    cause = r.output.split("cause:")[1].split("evidence:")[0]
    assert "B62" not in cause and "[the final post-norm state, B3, B31]" in cause
    assert "which it reads as [the final post-norm state, B3, B31]" in r.output
    assert "final (post-norm)" in r.output.splitlines()[2]  # the configured column of slot 0


def test_what_would_work_names_a_later_version_and_survives_rules_that_cannot_apply():
    s = serve([2, 15, 30], "sglang", num_layers=30, model_family="gpt-oss", version="0.5.16")
    assert "SGLang ≥ 0.5.17 (id 30)" in s.sentences()[0]  # sglang==0.5.17 gpt_oss.py:1328-1343 captures B = L
    s = serve([2, 15, 30], "sglang", num_layers=30, model_family="minimax_m3", version="0.5.18")
    assert "SGLang ≥ 0.5.23 (id 29)" in s.sentences()[0]  # ≤ 0.5.17 has no capture at all: skipped, not raised
    assert "the state after the final norm" in serve([2, 15, 30], "hf", num_layers=30).sentences()[0]
