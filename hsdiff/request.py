"""Request bodies that replay a training sample's exact token ids against a running server, so the
inference-side capture lines up with a known sample (no chat template, no tokenizer in between).

* SGLang's native ``POST /generate`` takes ``input_ids`` (a list of token ids) and
  ``sampling_params`` (``max_new_tokens``, ``temperature``) — ``io_struct.py::GenerateReqInput``.
* vLLM's OpenAI-compatible ``POST /v1/completions`` takes the token ids as ``prompt`` (a list of
  ints), with ``max_tokens`` and ``temperature``.

One new token is enough: the prefill computes the hidden states of every prompt token.

>>> request_body([1, 2, 3], "sglang")
{'input_ids': [1, 2, 3], 'sampling_params': {'max_new_tokens': 1, 'temperature': 0}}
>>> request_body([1, 2, 3], "vllm", model="target")
{'model': 'target', 'prompt': [1, 2, 3], 'max_tokens': 1, 'temperature': 0}
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence

from .convention_rules import ENGINE_INFO, REQUEST_GENERATE, EngineInfo
from .errors import InputError

__all__ = ["ENDPOINTS", "request_body", "curl_command", "advice"]

#: The HTTP path of each engine's prefill request (:attr:`~hsdiff.convention_rules.EngineInfo.endpoint`).
ENDPOINTS = {k: e.endpoint for k, e in ENGINE_INFO.items() if e.request}


def _profile(engine: str) -> EngineInfo:
    info = ENGINE_INFO.get(engine)
    if info is None or not info.request:
        raise InputError(f"no request format for engine {engine!r}", hint=f"choose one of: {', '.join(ENDPOINTS)}")
    return info


def request_body(token_ids: Sequence[int], engine: str = "sglang", *, model: str | None = None,
                 max_new_tokens: int = 1) -> dict:
    """The JSON body that makes ``engine`` run a prefill over exactly ``token_ids``."""
    ids = [int(i) for i in token_ids]
    if _profile(engine).request == REQUEST_GENERATE:
        return {"input_ids": ids, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}}
    body: dict = {"model": model} if model else {}
    body.update({"prompt": ids, "max_tokens": max_new_tokens, "temperature": 0})
    return body


def curl_command(body: dict, url: str, engine: str = "sglang") -> str:
    """A ``curl`` line posting ``body`` to ``url`` (the endpoint path is added when ``url`` has none)."""
    base = url.rstrip("/")
    if not base.endswith(ENDPOINTS[engine]):
        base += ENDPOINTS[engine]
    data = json.dumps(body, separators=(",", ":"))
    return f"curl -sS {shlex.quote(base)} -H 'Content-Type: application/json' -d {shlex.quote(data)}"


def advice(engine: str) -> str:
    """What to switch off so the replayed tokens are all recomputed (and so all captured)."""
    info = _profile(engine)
    return (f"POST it to http://HOST:PORT{info.endpoint}; start the server with {info.cache_flag}, or a cached "
            "prefix is not recomputed and not captured")
