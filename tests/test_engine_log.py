"""``--engine-log``: an engine's own log as evidence — the ids it logged and the acceptance it measured.

``fixtures/engine-logs/vllm-0.32-cpu.log`` is a real vLLM 0.32 (CPU) log, its lines as printed
(the run's counters, from ``LLM.get_metrics()``: 26 drafts, 5 accepted tokens, 4 and 1 at positions
1 and 2); ``sglang-decode.log`` follows SGLang 0.5.23's format string (metrics_reporter.py:963-1005).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hsdiff.cli import cli
from hsdiff.engine_log import read_engine_log
from hsdiff.errors import InputError

pytestmark = pytest.mark.core

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "fixtures" / "engine-logs"
SEED = ROOT / "fixtures" / "seed"
TARGET = SEED / "model" / "config.json"


#: gate on the seed's fixed draft, whose ids sit where vLLM's V2 runner never reads them (vLLM #50170)
_GATE_FIXED = [
    "gate",
    SEED / "train",
    SEED / "infer-fixed-neighbours",
    "--draft-config",
    SEED / "draft-fixed" / "config.json",
    "--target-config",
    TARGET,
    "--engine",
    "vllm",
    "--json",
    "-",
]


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_vllm_log_sums_the_intervals_back_to_the_engine_counters():
    log = read_engine_log(LOGS / "vllm-0.32-cpu.log")
    assert log.engine == "vllm" and log.aux_layers == (2, 15, 27) and log.aux_line == 4
    m = log.acceptance
    assert m is not None and (m.drafts, m.accepted_tokens, m.drafted_tokens, m.lines) == (26, 5, 130, 20)
    assert m.acceptance_length == pytest.approx(1 + 5 / 26)
    assert m.per_position == pytest.approx((4 / 26, 1 / 26, 0, 0, 0))


def test_sglang_accept_len_lines(tmp_path):
    log = read_engine_log(LOGS / "sglang-decode.log")
    assert log.engine == "sglang" and log.aux_layers is None
    m = log.acceptance
    assert m is not None and m.lines == 3 and m.per_position is None and m.drafts is None
    assert m.acceptance_length == pytest.approx((2.40 + 2.10 + 2.30) / 3)  # not the 'block accept len'


@pytest.mark.parametrize(
    "text, words",
    [
        ("INFO starting server\nINFO ready\n", "no engine line found"),
        ((LOGS / "vllm-0.32-cpu.log").read_text() + (LOGS / "sglang-decode.log").read_text(), "several engines"),
    ],
)
def test_a_log_without_evidence_is_a_user_error(tmp_path, text, words):
    p = tmp_path / "server.log"
    p.write_text(text)
    with pytest.raises(InputError, match=words):
        read_engine_log(p)
    r = run("compare", SEED / "train", SEED / "infer-wrong", "--engine-log", p)
    assert r.exit_code == 2 and words in r.output and "Traceback" not in r.output


def test_compare_takes_the_ids_from_the_vllm_line(tmp_path):
    """The seed story on vLLM: the log says (0, 3, 31) — B[0, 3, 31], the embeddings in slot 0."""
    p = tmp_path / "vllm.log"
    p.write_text(
        "(EngineCore pid=7) INFO 12-02 07:46:35 [gpu_model_runner.py:5243] "
        "Using auxiliary layers from speculative config: (0, 3, 31)\n"
    )
    r = run("compare", SEED / "train", SEED / "infer-wrong", "--engine-log", p, "--model-config", TARGET, "--json", "-")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.output)
    assert doc["configured"]["engine"] == "vllm" and doc["configured"]["boundary_indices"] == [0, 3, 31]
    assert doc["recommended"]["eagle_aux_hidden_state_layer_ids"] == [3, 31, 59]
    assert doc["engine_log"]["line"] == 1 and doc["measured_acceptance"] is None
    same = run(
        "compare",
        SEED / "train",
        SEED / "infer-wrong",
        "--engine-log",
        p,
        "--layer-ids",
        "0,3,31",
        "--model-config",
        TARGET,
        "-q",
    )
    assert same.exit_code == 1
    other = run(
        "compare",
        SEED / "train",
        SEED / "infer-wrong",
        "--engine-log",
        p,
        "--layer-ids",
        "3,31,59",
        "--model-config",
        TARGET,
    )
    assert other.exit_code == 2 and "differ from the ids the engine logged" in other.output
    sglang = run("compare", SEED / "train", SEED / "infer-wrong", "--engine-log", p, "--engine", "sglang")
    assert sglang.exit_code == 2 and "--engine vllm" in sglang.output


def test_gate_min_acceptance_judges_the_measured_value():
    base = [*_GATE_FIXED[:7], "--engine-log", LOGS / "sglang-decode.log", "--json", "-"]
    ok = run(*base, "--min-acceptance", "2.2")
    assert ok.exit_code == 0, ok.output
    doc = json.loads(ok.output)
    check = {c["name"]: c for c in doc["checks"]}["measured-acceptance"]
    assert check["ok"] and "2.27" in check["message"]
    assert doc["measured_acceptance"]["acceptance_length"] == pytest.approx(2.2667, abs=1e-4)
    low = run(*base, "--min-acceptance", "2.5")
    assert low.exit_code == 1
    assert not {c["name"]: c for c in json.loads(low.output)["checks"]}["measured-acceptance"]["ok"]
    no_evidence = run(*base[:-4], "--min-acceptance", "2.5")
    assert no_evidence.exit_code == 2 and "--min-acceptance needs" in no_evidence.output


def test_gate_sees_vllm_falling_back_to_its_default(tmp_path):
    """vLLM #50170 from the log's side: the config's ids sit where the V2 runner never reads, and a log
    with acceptance lines but no aux-layer line shows the engine took its default; a log that names
    other ids than the config gives is of another config."""
    base = _GATE_FIXED
    spec = "\n".join(line for line in (LOGS / "vllm-0.32-cpu.log").read_text().splitlines() if "auxiliary" not in line)
    default = tmp_path / "default.log"
    default.write_text(spec)
    r = run(*base, "--engine-log", default)
    check = {c["name"]: c for c in json.loads(r.output)["checks"]}["engine-log-ids"]
    assert check["ok"] and "default" in check["message"]  # the gate read the default too: consistent
    v1 = run(*base, "--vllm-runner", "v1", "--engine-log", default)
    check = {c["name"]: c for c in json.loads(v1.output)["checks"]}["engine-log-ids"]
    assert v1.exit_code == 1 and not check["ok"] and "50170" in check["message"]
    named = run(*base, "--vllm-runner", "v1", "--engine-log", LOGS / "vllm-0.32-cpu.log")
    check = {c["name"]: c for c in json.loads(named.output)["checks"]}["engine-log-ids"]
    assert named.exit_code == 1 and not check["ok"] and "[2, 15, 27]" in check["message"]


@pytest.mark.extra("test")
def test_the_json_follows_the_schemas(tmp_path):
    from hsdiff.schemas import validate

    base = [SEED / "train", SEED / "infer-fixed-neighbours", "--engine-log", LOGS / "sglang-decode.log", "--json", "-"]
    validate(json.loads(run("compare", *base, "--layer-ids", "2,30,58").output), "report")
    validate(
        json.loads(
            run("gate", *base, "--draft-config", SEED / "draft-fixed" / "config.json", "--target-config", TARGET).output
        ),
        "gate",
    )


def _v2_log(tmp_path: Path, which: str, ids: str) -> Path:
    """The real 0.32 log with its V1 aux-layer line replaced by the V2 runner's, as vLLM 0.33 formats it
    (v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:34-39): the V2 runner needs Triton and runs on no CPU here."""
    lines = [
        f"INFO 12-02 10:00:00 [eagle3_utils.py:{36 if which == 'config' else 39}] Using Eagle3 auxiliary layers "
        f"from {which}: {ids}"
        if "auxiliary" in line
        else line
        for line in (LOGS / "vllm-0.32-cpu.log").read_text().splitlines()
    ]
    path = tmp_path / f"v2-{which}.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_v2_runner_s_lines_say_which_layers_it_chose(tmp_path):
    """'from model': the V2 runner found no ids and took its default — the fallback of vLLM #50170, now said by the
    engine itself, and a default that is not this target's (B[2, L//2, L-3] of 61 layers) is another model's log;
    'from config': the layers it captured for the config's ids (its DFlash keys' + 1 applied)."""
    default = read_engine_log(_v2_log(tmp_path, "model", "(2, 30, 58)"))
    assert default.aux_layers is None and default.default_layers == (2, 30, 58) and default.acceptance is not None
    base = _GATE_FIXED
    r = run(*base, "--engine-log", default.path)
    check = {c["name"]: c for c in json.loads(r.output)["checks"]}["engine-log-ids"]
    assert check["ok"] and "logged its default layers [2, 30, 58]" in check["message"]
    v1 = run(*base, "--vllm-runner", "v1", "--engine-log", default.path)
    check = {c["name"]: c for c in json.loads(v1.output)["checks"]}["engine-log-ids"]
    assert v1.exit_code == 1 and not check["ok"] and "50170" in check["message"]
    other = run(*base, "--engine-log", _v2_log(tmp_path, "model", "(2, 15, 27)"))
    check = {c["name"]: c for c in json.loads(other.output)["checks"]}["engine-log-ids"]
    assert other.exit_code == 1 and "another model" in check["message"]
    chosen = read_engine_log(_v2_log(tmp_path, "config", "[2, 15, 27]"))
    assert chosen.aux_layers == (2, 15, 27) and chosen.default_layers is None and chosen.aux_boundaries
