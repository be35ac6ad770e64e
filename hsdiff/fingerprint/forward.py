"""A fingerprint of a Hugging Face model run here (the ``capture`` extra: torch and transformers): from a
model folder (``hsdiff fingerprint --model``) or a model in memory (:func:`record`, inside a data-generation
loop)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..model import Dump
from ..progress import Progress, track
from . import file as fpfile
from .probes import PROBE_TOKENS, Pass, Probes, builtin_probes, embedding_ids, probes_from_dump
from .recording import build, draft_info, identify_training
from .sketch import DIM, SEED
from .sources import file_digest, source_name, train_dump

__all__ = ["record", "from_model", "model_states"]


def model_states(model: Any, input_ids: Sequence[int]) -> np.ndarray:
    """Every boundary of ``model`` (a Hugging Face causal LM) on ``input_ids``: ``[L + 2, T, H]`` float32,
    B0..B(L-1) from HF's ``output_hidden_states``, B=L from a forward hook on the last decoder layer (its
    output before the final norm; the last call's, should the module run more than once), and the final
    post-norm state last (HF's ``hidden_states[L]``)."""
    from ..arrays import from_torch
    from ..capture import decoder_layers
    from ..extras import require

    torch = require("torch", "capture", "recording a fingerprint")
    device = next(model.parameters()).device
    ids = torch.tensor([int(i) for i in input_ids], dtype=torch.long, device=device)[None]
    layers = decoder_layers(model)
    got: list[Any] = []

    def last(module: Any, args: Any, output: Any) -> None:
        got.append(output[0] if isinstance(output, (tuple, list)) else output)

    handle = layers[-1].register_forward_hook(last)
    try:
        with torch.inference_mode():
            out = model(input_ids=ids, output_hidden_states=True, use_cache=False)
    finally:
        handle.remove()
    hs = out.hidden_states
    L = len(layers)
    if hs is None or len(hs) != L + 1 or not got:
        raise InputError(
            f"the model returned {0 if hs is None else len(hs)} hidden states for {L} decoder layers",
            hint="record from a Hugging Face causal LM that supports output_hidden_states",
        )
    stack = [h[0].to("cpu").float() for h in hs[:L]] + [got[-1][0].to("cpu").float(), hs[L][0].to("cpu").float()]
    return np.ascontiguousarray(from_torch(torch.stack(stack)))


def _embedding_rows(model: Any, ids: Sequence[int]) -> np.ndarray | None:
    try:
        w = model.get_input_embeddings().weight
    except AttributeError:
        return None
    from ..arrays import from_torch

    return np.asarray(from_torch(w[list(ids)].detach().float().cpu()), dtype=np.float32)


def record(
    model: Any,
    input_ids: Sequence[int] | Sequence[Sequence[int]],
    *,
    train: str | os.PathLike | Dump | None = None,
    draft_config: str | os.PathLike | None = None,
    noise_model: Any = None,
    names: Sequence[str] | None = None,
    train_engine: str = "specforge",
    dim: int = DIM,
    seed: int = SEED,
) -> fpfile.Fingerprint:
    """A fingerprint of ``model`` (a Hugging Face causal LM, in the dtype it serves in) on ``input_ids`` (one
    sequence, or a list of them: the probes), e.g. inside a data-generation loop on its first samples.

    ``train``: the training dump written so far, whose slots are identified against the model's boundaries
    (it must hold the probes' samples); ``noise_model``: the same target in other numerics (an fp32 copy of a
    bf16 model) for the noise floor; ``draft_config``: the draft's ``config.json`` (kind and ids).

    >>> fp = hsdiff.fingerprint.record(model, first_sample_ids)               # doctest: +SKIP
    >>> hsdiff.fingerprint.write(fp, "draft/hsdiff-fingerprint.safetensors")  # doctest: +SKIP
    """
    seqs = _as_sequences(input_ids)
    probes = Probes(tuple(names or (f"probe-{i}" for i in range(len(seqs)))), tuple(seqs), "given")
    ref = Pass(tuple(model_states(model, s) for s in seqs), _torch_dtype(model), "Hugging Face forward")
    noise = (
        None
        if noise_model is None
        else Pass(tuple(model_states(noise_model, s) for s in seqs), _torch_dtype(noise_model), "Hugging Face forward")
    )
    return _finish(model, probes, ref, noise, train, draft_config, train_engine, "python", dim, seed)


def _finish(
    model: Any,
    probes: Probes,
    ref: Pass,
    noise: Pass | None,
    train: str | os.PathLike | Dump | None,
    draft_config: str | os.PathLike | None,
    train_engine: str,
    source: str,
    dim: int,
    seed: int,
    tokenizer_digest: str | None = None,
    name: str | None = None,
) -> fpfile.Fingerprint:
    config = model.config.to_dict() if hasattr(model, "config") else None
    hidden = ref.states[0].shape[-1]
    L = ref.states[0].shape[0] - 2
    tdump = train_dump(train)
    passes = [ref] + ([noise] if noise is not None else [])
    training = (
        identify_training(tdump, probes, passes, hidden, L, train_engine=train_engine, source=source_name(train))
        if tdump is not None
        else None
    )
    return build(
        probes,
        ref,
        config=config,
        num_layers=L,
        noise=noise,
        training=training,
        draft=draft_info(draft_config),
        embedding=_embedding_rows(model, embedding_ids(probes)),
        tokenizer_digest=tokenizer_digest,
        name=name,
        source=source,
        dim=dim,
        seed=seed,
    )


def _as_sequences(input_ids: Any) -> list[tuple[int, ...]]:
    """One sequence (a list, array or tensor of ids), a batch ``[N, T]``, or a list of sequences of any
    lengths (lists, arrays or tensors): the probes as tuples of ints."""

    def as_list(x: Any) -> Any:
        return x.tolist() if hasattr(x, "tolist") else x

    seqs = as_list(input_ids)
    seqs = list(seqs) if isinstance(seqs, (list, tuple)) else [seqs]
    if seqs and not hasattr(seqs[0], "__len__") and not hasattr(seqs[0], "tolist"):
        seqs = [seqs]
    try:
        out = [tuple(int(t) for t in as_list(s)) for s in seqs]
    except (TypeError, ValueError):
        raise InputError(
            "input_ids is neither one sequence of token ids nor a list of them", options=("input_ids",)
        ) from None
    if not out or not all(len(s) >= 2 for s in out):
        raise InputError("give at least one probe of two tokens or more", options=("input_ids",))
    return out


def _torch_dtype(model: Any) -> str:
    try:
        return str(next(model.parameters()).dtype).replace("torch.", "")
    except (StopIteration, AttributeError):
        return "unknown"


_DTYPES = {
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
    "fp32": "float32",
    "float32": "float32",
}


def from_model(
    model_dir: str | os.PathLike,
    *,
    train: str | os.PathLike | Dump | None = None,
    draft_config: str | os.PathLike | None = None,
    dtype: str = "bf16",
    noise_dtype: str | None = "fp32",
    probes: str = "train",
    device_map: str | None = None,
    train_engine: str = "specforge",
    budget: int = PROBE_TOKENS,
    dim: int = DIM,
    seed: int = SEED,
    progress: Progress | None = None,
) -> fpfile.Fingerprint:
    """A fingerprint of the Hugging Face target in ``model_dir``, run here (CPU, or ``device_map="auto"``).

    ``dtype``: the reference pass's dtype (the one the engine serves in); ``noise_dtype``: the second pass
    for the noise floor (None: none). ``probes``: ``train`` (the training dump's first samples; the default
    when ``train`` is given) or ``builtin`` (:data:`BUILTIN_TEXTS`, tokenised by the model's tokenizer).
    ``progress``: called per probe of each forward pass (:mod:`hsdiff.progress`)."""
    from ..extras import require

    torch = require("torch", "capture", "hsdiff fingerprint --model")
    tf = require("transformers", "capture", "hsdiff fingerprint --model")
    d = Path(model_dir)
    if not (d / "config.json").is_file():
        raise InputError(
            "not a Hugging Face model directory (no config.json)",
            path=d,
            hint="give the folder written by save_pretrained (config.json + weights)",
        )
    for name in (dtype, noise_dtype):
        if name is not None and name not in _DTYPES:
            raise InputError(f"unknown dtype {name!r}", hint=f"choose one of: {', '.join(_DTYPES)}", options=("dtype",))
    tdump = train_dump(train)
    if probes == "train" and tdump is not None:
        chosen = probes_from_dump(tdump, budget)
    elif probes in ("train", "builtin"):
        try:
            tok = tf.AutoTokenizer.from_pretrained(str(d))
        except (OSError, ValueError) as e:
            raise InputError(
                f"no tokenizer for the built-in probes ({e})",
                path=d,
                hint="give the training dump (`train`): its samples are the probes",
                options=("train",),
            ) from None
        chosen = builtin_probes(lambda text: tok(text, add_special_tokens=True)["input_ids"], budget)
    else:
        raise InputError(f"unknown probes {probes!r}", hint="choose train or builtin", options=("probes",))
    kwargs: dict[str, Any] = {"device_map": device_map} if device_map else {}
    model = _load(tf, d, getattr(torch, _DTYPES[noise_dtype or dtype]), kwargs)
    passes: dict[str, Pass] = {}
    order = [noise_dtype, dtype] if noise_dtype and noise_dtype != dtype else [dtype]
    for i, name in enumerate(order):
        if i:
            model.to(getattr(torch, _DTYPES[name]))  # down-cast in place: one copy of the weights at a time
        seqs = track(chosen.ids, progress, f"fingerprint {name} pass over the probes")
        passes[name] = Pass(tuple(model_states(model, s) for s in seqs), _DTYPES[name], "Hugging Face forward")
    ref = passes[dtype]
    noise = passes.get(noise_dtype) if noise_dtype and noise_dtype != dtype else None
    return _finish(
        model,
        chosen,
        ref,
        noise,
        tdump,
        draft_config,
        train_engine,
        "model",
        dim,
        seed,
        tokenizer_digest=file_digest(d / "tokenizer.json"),
        name=d.name,
    )


def _load(tf: Any, d: Path, dtype: Any, kwargs: dict[str, Any]) -> Any:
    try:
        model = tf.AutoModelForCausalLM.from_pretrained(str(d), dtype=dtype, **kwargs)
    except TypeError:  # transformers < 4.56 names it torch_dtype
        model = tf.AutoModelForCausalLM.from_pretrained(str(d), torch_dtype=dtype, **kwargs)
    except (OSError, ValueError) as e:
        raise InputError(
            f"transformers cannot load this model ({e})", path=d, hint="check the folder holds config.json and weights"
        ) from None
    return model.eval()
