"""Prometheus pages as each engine writes them: its metric names, documentation strings, label names and
types, declared through prometheus-client (the library every one of them exposes with), each at the version
cited in :mod:`hsdiff.rules.metrics`. A test moves the counters; :func:`page` renders the text."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest


class VllmPage:
    """vllm==0.33.0 v1/spec_decode/metrics.py:228-264 with v1/metrics/loggers.py:499-505's labels."""

    def __init__(self, spec_tokens: int = 5, model: str = "target") -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        lv = (model, "0")

        def counter(name: str, doc: str):
            return Counter(name=name, documentation=doc, labelnames=labels, registry=self.registry).labels(*lv)

        self.drafts = counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.")
        self.draft_tokens = counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.")
        self.accepted = counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.")
        per_pos = Counter(
            name="vllm:spec_decode_num_accepted_tokens_per_pos",
            documentation="Accepted tokens per draft position.",
            labelnames=labels + ["position"],
            registry=self.registry,
        )
        self.per_pos = [per_pos.labels(*lv, str(p)) for p in range(spec_tokens)]
        Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", labels,
              registry=self.registry).labels(*lv).set(1)  # fmt: skip
        self.spec_tokens = spec_tokens

    def steps(self, drafts: int, accepted_at: tuple[int, ...]) -> None:
        """``drafts`` verification steps that accepted ``accepted_at[j]`` tokens at position j (observe())."""
        self.drafts.inc(drafts)
        self.draft_tokens.inc(drafts * self.spec_tokens)
        self.accepted.inc(sum(accepted_at))
        for c, n in zip(self.per_pos, accepted_at):
            c.inc(n)

    def text(self) -> str:
        return generate_latest(self.registry).decode()


def sglang_page(verify_calls: int, generation_tokens: int, accept_length: float, num_steps: int = 3) -> str:
    """sglang==0.5.23 observability/metrics_collector.py:511-516,535-540 (scheduler gauges),
    1860-1869 (tokenizer counters, labels + is_streaming), in its multiprocess registry (utils/common.py:2843-2853):
    no _created samples."""
    reg = CollectorRegistry()
    labels = {"model_name": "meta-llama/Llama-3.1-8B-Instruct"}
    Gauge("sglang:spec_accept_length", "Mean acceptance length of speculative decoding (accepted drafts + bonus "
          "token per forward).", list(labels), registry=reg).labels(**labels).set(accept_length)  # fmt: skip
    Gauge("sglang:spec_num_steps", "Currently active speculative_num_steps.", list(labels),
          registry=reg).labels(**labels).set(num_steps)  # fmt: skip
    gen = Counter("sglang:generation_tokens_total", "Number of generation tokens processed.",
                  [*labels, "is_streaming"], registry=reg)  # fmt: skip
    gen.labels(**labels, is_streaming="false").inc(generation_tokens * 3 // 4)
    gen.labels(**labels, is_streaming="true").inc(generation_tokens - generation_tokens * 3 // 4)
    Counter("sglang:spec_verify_calls_total", "Number of speculative decoding verification calls.", list(labels),
            registry=reg).labels(**labels).inc(verify_calls)  # fmt: skip
    return "\n".join(line for line in generate_latest(reg).decode().splitlines() if "_created" not in line) + "\n"


def trtllm_page(drafted_at: tuple[int, ...], accepted_at: tuple[int, ...], spec_tokens: int = 3) -> str:
    """TensorRT-LLM@050f80de metrics/collector.py MetricsCollector: the per-position counters
    (label token_position) of finished requests, the per-iteration counters and gauge, and the speculative
    config info gauge, in its multiprocess registry (no _created samples)."""
    reg = CollectorRegistry()
    labels = {"model_name": "nemotron-nano-3", "engine_type": "trtllm"}
    pos_labels = [*labels, "token_position"]
    drafted = Counter("trtllm_spec_decode_drafted_tokens_total", "Total drafted tokens per speculative decoding "
                      "position.", pos_labels, registry=reg)  # fmt: skip
    accepted = Counter("trtllm_spec_decode_accepted_tokens_total", "Total accepted tokens per speculative decoding "
                       "position.", pos_labels, registry=reg)  # fmt: skip
    for pos, (d, a) in enumerate(zip(drafted_at, accepted_at)):
        drafted.labels(**labels, token_position=pos).inc(d)
        if a:
            accepted.labels(**labels, token_position=pos).inc(a)
    Counter("trtllm_spec_decode_num_draft_tokens_total", "Total number of draft tokens in speculative decoding",
            list(labels), registry=reg).labels(**labels).inc(sum(drafted_at))  # fmt: skip
    Counter("trtllm_spec_decode_num_accepted_tokens_total", "Total number of accepted tokens in speculative "
            "decoding", list(labels), registry=reg).labels(**labels).inc(sum(accepted_at))  # fmt: skip
    Gauge("trtllm_spec_decode_acceptance_length", "Acceptance length in speculative decoding", list(labels),
          registry=reg).labels(**labels).set(1.5)  # fmt: skip
    info = {**labels, "spec_enabled": "true", "spec_method": "Eagle3", "spec_num_tokens": str(spec_tokens)}
    Gauge("trtllm_speculative_config_info", "Speculative decoding configuration info", list(info),
          registry=reg).labels(**info).set(1)  # fmt: skip
    return "\n".join(line for line in generate_latest(reg).decode().splitlines() if "_created" not in line) + "\n"
