"""Each engine's metrics page and log lines, written as its source writes them (the pages through
prometheus-client with the engine's names and labels, :mod:`.exposition`; the log lines with the engine's own
format strings), read into increments: vLLM counts steps, SGLang counts completion tokens and verify calls,
TensorRT-LLM per position; missing series are named with the version that exports them."""

from __future__ import annotations

import json

import pytest

from hsdiff.engine_log import logged_acceptance, read_engine_log
from hsdiff.watch import CounterTracker, Increment, LogFollower, MissingMetricsError, Restart, parse_metrics
from hsdiff.watch.counters import increment
from hsdiff.watch.scrape import MetricsError

from .exposition import VllmPage, sglang_page, trtllm_page

#: vllm==0.33.0 vllm/v1/spec_decode/metrics.py:120-136, after the logger's prefix (vllm/logger.py)
VLLM_FMT = (
    "SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, Drafted throughput: "
    "%.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens, Per-position acceptance rate: %s, Avg Draft "
    "acceptance rate: %.1f%%"
)


def vllm_line(drafts: int, accepted_at: tuple[int, ...]) -> str:
    k = len(accepted_at)
    acc = sum(accepted_at)
    rates = ", ".join(f"{a / drafts:.3f}" for a in accepted_at)
    msg = VLLM_FMT % (1 + acc / drafts, acc / 2.0, drafts * k / 2.0, acc, drafts * k, rates, acc / (drafts * k) * 100)
    return f"(APIServer pid=4242) INFO 12-07 21:10:02 [metrics.py:136] {msg}"


def sglang_line(running: int, accept_len: float, accept_rate: float) -> str:
    """sglang==0.5.23 metrics_reporter.py:963 (head), pool_stats_observer.py:146-148 (usage), :1005 (accept),
    :1041-1045 (tail), under configure_logger's format (utils/common.py:2630)."""
    msg = f"Decode batch, #running-req: {running}, #token: 4096, token usage: 0.05, "
    msg += f"accept len: {accept_len:.2f}, accept rate: {accept_rate:.2f}, "
    msg += "cuda graph: True, gen throughput (token/s): 312.44, #queue-req: 0"
    return f"[2026-12-07 21:10:02 TP0] {msg}"


def trtllm_line(iterations: list[tuple[int, int, int]]) -> str:
    """What trtllm-serve's /metrics returns (a JSON list of iteration reports), one report per iteration as
    TensorRT-LLM@b1179014 tensorrt_llm/executor/iteration_stats.py _iteration_report writes it."""
    out = []
    for i, (drafted, accepted, requests) in enumerate(iterations):
        out.append(
            {
                "timestamp": "12-07-2026 21:10:02.000001",
                "iter": i,
                "iterLatencyMS": 21.5,
                "numActiveRequests": requests,
                "inflightBatchingStats": {"numContextRequests": 0, "numGenRequests": requests},
                "specDecodingStats": {
                    "numDraftTokens": drafted,
                    "numAcceptedTokens": accepted,
                    "numRequestsWithDraftTokens": requests,
                    "acceptanceLength": (accepted + requests) / requests,
                    "iterLatencyMS": 3.1,
                    "draftOverhead": 0.14,
                },
            }
        )
    return json.dumps(out)


def test_vllm_page_counts_steps_and_positions():
    page = VllmPage(spec_tokens=5)
    page.steps(1000, (910, 30, 20, 0, 0))
    t = CounterTracker()
    assert t.step(parse_metrics(page.text())) is None
    page.steps(200, (36, 1, 3, 0, 0))
    inc = t.step(parse_metrics(page.text()))
    assert isinstance(inc, Increment) and inc.method == "counted" and inc.spec_tokens == 5
    assert (inc.drafts, inc.accepted, inc.accepted_at) == (200, 40, (36, 1, 3, 0, 0))


def test_vllm_restart_is_told_by_created_time_even_when_counters_grew():
    old = VllmPage()
    old.steps(100, (20, 0, 0, 0, 0))
    t = CounterTracker()
    t.step(parse_metrics(old.text()))
    new = VllmPage()  # a new process: counters made anew, already past the old values
    new.steps(500, (10, 0, 0, 0, 0))
    got = t.step(parse_metrics(new.text()))
    assert isinstance(got, Restart) and got.increment is not None and got.increment.drafts == 500


def test_sglang_page_reads_completion_tokens_over_verify_calls():
    t = CounterTracker()
    t.step(parse_metrics(sglang_page(1000, 2600, 2.5)))
    inc = t.step(parse_metrics(sglang_page(1400, 3620, 2.6)))
    assert isinstance(inc, Increment) and inc.method == "emitted" and inc.spec_tokens == 3
    assert inc.drafts == 400 and 1 + inc.accepted / inc.drafts == pytest.approx(1020 / 400)
    assert inc.accepted_at is None


def test_trtllm_page_reads_per_position_counters():
    s = parse_metrics(trtllm_page((1000, 1000, 1000), (600, 300, 100)))
    inc = increment(s, None)
    assert inc is not None and inc.method == "positions" and inc.spec_tokens == 3
    assert (inc.drafts, inc.accepted, inc.accepted_at) == (1000, 1000, (600, 300, 100))


def test_trtllm_without_per_position_counters_divides_drafted_tokens():
    text = "\n".join(line for line in trtllm_page((100,) * 3, (60, 30, 10)).splitlines() if "tokens_total{" not in line
                     or "_num_" in line)  # fmt: skip
    inc = increment(parse_metrics(text), None)
    assert inc is not None and inc.method == "drafted" and inc.estimated and inc.drafts == 100 and inc.accepted == 100


def test_missing_series_say_which_and_who_exports_them():
    page = '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0",model_name="m"} 0.0\n'
    with pytest.raises(MissingMetricsError) as e:
        parse_metrics(page)
    msg = str(e.value)
    assert "the page is vllm's but holds none of its speculative-decoding series" in msg
    assert "vllm:spec_decode_num_drafts_total" in msg and "vllm 0.33.0" in msg and "speculative config" in msg
    with pytest.raises(MissingMetricsError, match="sglang:spec_verify_calls_total.*--enable-metrics"):
        parse_metrics("# TYPE up gauge\nup 1.0\n", "sglang")
    with pytest.raises(MetricsError, match="not Prometheus text"):
        parse_metrics('[{"iter": 1, "specDecodingStats": {}}]\n{"x": ')


def test_log_lines_as_each_engine_writes_them(tmp_path):
    v = logged_acceptance(vllm_line(100, (18, 1, 1, 0, 0)))
    assert v is not None and v.engine == "vllm" and (v.drafts, v.accepted) == (100, 20)
    assert v.per_position == (0.18, 0.01, 0.01, 0.0, 0.0) and v.mean == pytest.approx(1.2)
    s = logged_acceptance(sglang_line(8, 1.04, 0.01))
    assert s is not None and s.engine == "sglang" and s.estimated and s.drafts == 8 * 40
    assert s.accepted == pytest.approx(0.04 * 320)
    t = logged_acceptance(trtllm_line([(30, 12, 10), (30, 6, 10)]))
    assert t is not None and t.engine == "trtllm" and (t.drafts, t.accepted, t.drafted) == (20, 18, 60)
    assert t.mean == pytest.approx(1.9)
    # read_engine_log sums TensorRT-LLM's counted iterations like vLLM's intervals
    log = tmp_path / "trtllm.log"
    log.write_text(trtllm_line([(30, 12, 10)]) + "\n" + trtllm_line([(30, 6, 10)]) + "\n")
    m = read_engine_log(log).acceptance
    assert m is not None and m.engine == "trtllm" and m.drafts == 20 and m.acceptance_length == pytest.approx(1.9)


def test_follow_a_log_through_rotation(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("(APIServer pid=4242) INFO startup\n" + vllm_line(100, (18, 1, 1, 0, 0)) + "\n")
    f = LogFollower(log)
    got = f.poll()
    assert len(got) == 1 and isinstance(got[0], Increment) and got[0].drafts == 100 and got[0].spec_tokens == 5
    with open(log, "a") as fh:
        fh.write(vllm_line(50, (2, 0, 0, 0, 0)) + "\n" + vllm_line(50, (1, 0, 0, 0, 0))[:40])  # a line half written
    got = f.poll()
    assert [g.drafts for g in got if isinstance(g, Increment)] == [50]
    log.write_text(vllm_line(80, (2, 0, 0, 0, 0)) + "\n")  # truncated and written anew: a restart
    got = f.poll()
    assert isinstance(got[0], Restart) and isinstance(got[1], Increment) and got[1].drafts == 80
