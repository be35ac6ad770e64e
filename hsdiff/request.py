"""Request bodies that replay a training sample's exact token ids against a running server, so the
inference-side capture lines up with a known sample (no chat template, no tokenizer in between).

* SGLang's native ``POST /generate`` takes ``input_ids`` (a list of token ids) and
  ``sampling_params`` (``max_new_tokens``, ``temperature``) — ``io_struct.py::GenerateReqInput``.
* vLLM's OpenAI-compatible ``POST /v1/completions`` takes the token ids as ``prompt`` (a list of
  ints), with ``max_tokens`` and ``temperature``.

One new token is enough: the prefill computes the hidden states of every prompt token.

SGLang's capture-only mode (``--enable-return-aux-hidden-states``, sglang==0.5.23
``arg_groups/validation_hook.py:700-745``) hands ``--return-aux-hidden-state-layer-ids`` to the model as its
EAGLE-3 ids (``model_executor/model_runner_components/spec_aux_hidden_state.py:98-106``), so the family's
setter reads them; the range check admits ``0 <= id < L x num_loops`` (``:113-130``), id L-1 included, which
the llama rule's + 1 never captures.

>>> request_body([1, 2, 3], "sglang")
{'input_ids': [1, 2, 3], 'sampling_params': {'max_new_tokens': 1, 'temperature': 0}}
>>> request_body([1, 2, 3], "vllm", model="target")
{'model': 'target', 'prompt': [1, 2, 3], 'max_tokens': 1, 'temperature': 0}
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence

from .errors import InputError
from .rules.profile import ENGINE_INFO, REQUEST_GENERATE, EngineInfo

__all__ = ["ENDPOINTS", "request_body", "curl_command", "advice"]

#: The HTTP path of each engine's prefill request (:attr:`~hsdiff.rules.profile.EngineInfo.endpoint`).
ENDPOINTS = {k: e.endpoint for k, e in ENGINE_INFO.items() if e.request}


def _profile(engine: str) -> EngineInfo:
    info = ENGINE_INFO.get(engine)
    if info is None or not info.request:
        raise InputError(f"no request format for engine {engine!r}", hint=f"choose one of: {', '.join(ENDPOINTS)}")
    return info


def request_body(
    token_ids: Sequence[int],
    engine: str = "sglang",
    *,
    model: str | None = None,
    max_new_tokens: int = 1,
    hidden_states: bool = False,
) -> dict:
    """The JSON body that makes ``engine`` run a prefill over exactly ``token_ids``; ``hidden_states``
    (SGLang): ask for them in the response's ``meta_info`` (``return_hidden_states``, io_struct.py
    ``GenerateReqInput``), read back by :mod:`hsdiff.readers.sglang_http`.

    >>> request_body([1, 2], "sglang", hidden_states=True)["return_hidden_states"]
    True
    """
    ids = [int(i) for i in token_ids]
    info = _profile(engine)
    if info.request == REQUEST_GENERATE:
        native: dict = {"input_ids": ids, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}}
        return {**native, "return_hidden_states": True} if hidden_states else native
    if hidden_states:  # only the native generate request returns them (SGLang's meta_info)
        raise InputError(
            f"only SGLang returns hidden states in its response, not {info.title}",
            hint="drop `hidden_states`, or use `engine=sglang`",
            options=("hidden_states", "engine"),
        )
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


def advice(engine: str, hidden_states: bool = False) -> str:
    """What to switch off so the replayed tokens are all recomputed (and so all captured)."""
    info = _profile(engine)
    if hidden_states and info.request == REQUEST_GENERATE:
        return (
            f"POST it to http://HOST:PORT{info.endpoint} and save the response as a .json file for hsdiff compare; "
            f"start the server with {info.cache_flag} --enable-return-aux-hidden-states --speculative-algorithm "
            "EAGLE3 (and --return-aux-hidden-state-layer-ids IDS to choose the layers: read as the model's EAGLE-3 "
            "ids, so in SGLang's convention for its family, `hsdiff ids --to sglang`; its range check admits ids up "
            "to L x num_loops - 1, but the llama rule never captures id L-1), so every prompt token is recomputed "
            "and its aux hidden states returned"
        )
    return (
        f"POST it to http://HOST:PORT{info.endpoint}; start the server with {info.cache_flag}, or a cached "
        "prefix is not recomputed and not captured"
    )
