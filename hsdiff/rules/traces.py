"""What engines and tools leave behind that is evidence: the lines an engine logs (the layers it chose, the
acceptance it measured) and the marks a tool writes into a draft config (and what it is known to leave out).
Each cites the source line it encodes; :mod:`hsdiff.engine_log` and :mod:`hsdiff.configs` read them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LogLine", "LOG_LINES", "WriterMark", "WRITER_MARKS"]


@dataclass(frozen=True)
class LogLine:
    """A line an engine logs that is evidence: the layers it chose, or the acceptance it measured."""

    engine: str
    #: "aux_layers" (the ids it took from the config), "default_layers" (it found none: its default) or
    #: "acceptance" (measured, tokens per verification step)
    kind: str
    pattern: str  # a regex with named groups, searched in each line
    source: str  # file:line and version of the logging call
    boundaries: bool = False  # the ids it prints are the boundaries captured, not the ids as configured
    #: "json": the line holds JSON objects to read (the pattern only finds them); "" a regex's groups
    form: str = ""
    #: steps one line covers per running request, where the line has no count of its own (0: it has one)
    steps_per_request: int = 0


LOG_LINES: tuple[LogLine, ...] = (
    LogLine(
        "vllm",
        "aux_layers",
        r"Using auxiliary layers from speculative config: [\(\[](?P<ids>[-\d,\s]*)[\)\]]",
        "vllm==0.32.0 vllm/v1/worker/gpu_model_runner.py:5241-5245 (the ids as configured, before sorting; "
        "absent when the default is used, :5247)",
    ),
    LogLine(
        "vllm",
        "aux_layers",
        r"Using Eagle3 auxiliary layers from config: [\(\[](?P<ids>[-\d,\s]*)[\)\]]",
        "vllm==0.33.0 vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:34-36 (the V2 runner: the layers it "
        "took from the draft config, the DFlash keys' + 1 applied, eagle3_utils.py:113-150)",
        boundaries=True,
    ),
    LogLine(
        "vllm",
        "default_layers",
        r"Using Eagle3 auxiliary layers from model: [\(\[](?P<ids>[-\d,\s]*)[\)\]]",
        "vllm==0.33.0 vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:37-39 (the V2 runner found no ids: "
        "the model's default layers)",
        boundaries=True,
    ),
    LogLine(
        "vllm",
        "acceptance",
        r"SpecDecoding metrics: Mean acceptance length: (?P<mean>[\d.]+|nan), .*?Accepted: (?P<accepted>\d+) tokens, "
        r"Drafted: (?P<drafted>\d+) tokens, Per-position acceptance rate: (?P<per_pos>[\d.,\s]*?), Avg Draft",
        "vllm==0.32.0 vllm/v1/spec_decode/metrics.py:112-136 (mean = 1 + accepted / drafts over the interval "
        "since the last line; per-position rate = accepted at that position / drafts)",
    ),
    LogLine(
        "sglang",
        "acceptance",
        r"Decode batch\b(?:[^#\n]*#running-req: (?P<running>\d+))?.*?\baccept len: (?P<mean>[\d.]+)",
        "sglang==0.5.23 sglang/srt/managers/scheduler_components/metrics_reporter.py:963,973,1005 (accept len "
        "= accepted tokens / verification steps over the interval since the last line; no counts on the line: "
        "the steps are about #running-req x decode_log_interval, 40 by default, "
        "arg_groups/fields/observability.py:136-139)",
        steps_per_request=40,
    ),
    LogLine(
        "trtllm",
        "acceptance",
        r'"specDecodingStats"\s*:\s*\{',
        "NVIDIA/TensorRT-LLM@b1179014 tensorrt_llm/executor/iteration_stats.py _iteration_report (an iteration's "
        "JSON as trtllm-serve's /metrics returns it: specDecodingStats numDraftTokens, numAcceptedTokens, "
        "numRequestsWithDraftTokens, acceptanceLength = (accepted + requests) / requests); the counts as "
        "_torch/pyexecutor/py_executor.py _update_iter_stats makes them",
        form="json",
    ),
)


@dataclass(frozen=True)
class WriterMark:
    """A key that says which tool wrote a draft config, and what that tool is known to leave out of it."""

    key: str
    note: str
    source: str


WRITER_MARKS: tuple[WriterMark, ...] = (
    WriterMark(
        "speculators_model_type",
        "a checkpoint converted by `speculators convert` holds ids only when --algorithm-kwargs named them: its "
        "EAGLE-3 converter drops the source checkpoint's ids (and its legacy use_aux_norm), so take them from the "
        "checkpoint it was converted from",
        "speculators==0.9.0 speculators/convert/eagle/eagle3_converter.py:45,52,137-147",
    ),
)
