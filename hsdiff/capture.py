"""Ground-truth captures: every boundary of a PyTorch decoder stack, B0..BL.

* :func:`capture_boundaries` — a context manager for any decoder stack (a Hugging Face model, or a
  plain ``nn.ModuleList`` of layers): forward pre-hooks on each layer record the residual stream
  entering it (B=k is the input of layer k, B=0 the embeddings) and a forward hook on the last layer
  records its output before the final norm (B=L). These are exactly the tensors SGLang and vLLM
  capture, so a capture here is a reference the engine's dump must equal.
* :func:`capture_hf` — load a Hugging Face model directory (needs ``pip install hsdiff[capture]``),
  run it on a sample's token ids, return the stack; :func:`write_capture` saves it as a safetensors
  file that :mod:`hsdiff.readers.hf` reads: ``hidden_states`` [L+1, T, H] and ``input_ids`` [T],
  metadata ``{"index": "boundary", ...}`` (so the reader knows the last entry is *before* the norm,
  unlike HF's own ``output_hidden_states[L]``).

Example::

    >>> with capture_boundaries(model) as cap:          # doctest: +SKIP
    ...     model(input_ids)
    >>> cap.stack().shape                                # [L+1, T, H]
    torch.Size([31, 25, 576])
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError
from .extras import needs, require
from .progress import Progress, step

with needs("capture", "hsdiff capture"):
    import torch
    from torch import nn

__all__ = [
    "BoundaryCapture",
    "capture_boundaries",
    "decoder_layers",
    "capture_hf",
    "write_capture",
    "check_out_dir",
    "DTYPES",
]

log = logging.getLogger("hsdiff.capture")

DTYPES = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "fp32": torch.float32,
    "float32": torch.float32,
}

_LAYER_PATHS = (
    "model.layers",
    "model.model.layers",
    "model.language_model.layers",
    "language_model.model.layers",
    "model.language_model.model.layers",
    "transformer.h",
    "transformer.layers",
    "gpt_neox.layers",
    "model.decoder.layers",
    "decoder.layers",
    "layers",
    "h",
    "blocks",
)


def decoder_layers(model_or_layers: nn.Module | Sequence[nn.Module]) -> list[nn.Module]:
    """The decoder layers of a model, in execution order (``model.model.layers`` for HF Llama & co)."""
    if isinstance(model_or_layers, nn.ModuleList) or not isinstance(model_or_layers, nn.Module):
        layers = list(model_or_layers)
        if not layers:
            raise InputError("the layer list is empty", hint="pass the model or its non-empty list of decoder layers")
        return layers
    for path in _LAYER_PATHS:
        node: Any = model_or_layers
        for part in path.split("."):
            node = getattr(node, part, None)
            if node is None:
                break
        if isinstance(node, nn.ModuleList) and len(node) > 0:
            return list(node)
    best: nn.ModuleList | None = None
    for _, m in model_or_layers.named_modules():
        if isinstance(m, nn.ModuleList) and len(m) > 1 and len({type(c) for c in m}) == 1:
            if best is None or len(m) > len(best):
                best = m
    if best is None:
        raise InputError(
            f"cannot find the decoder layers of {type(model_or_layers).__name__}",
            hint="pass the list of decoder layers itself, e.g. capture_boundaries(model.model.layers)",
        )
    return list(best)


def _hidden_of(args: tuple, kwargs: dict) -> torch.Tensor:
    if args and isinstance(args[0], torch.Tensor):
        return args[0]
    for key in ("hidden_states", "hidden_state", "x", "input"):
        if isinstance(kwargs.get(key), torch.Tensor):
            return kwargs[key]
    raise InputError(
        "a decoder layer was called without a hidden-state tensor as first argument",
        hint="pass the list of layers whose first input is the residual stream",
    )


def _output_of(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    for name in ("hidden_states", "last_hidden_state"):
        hs = getattr(output, name, None)
        if isinstance(hs, torch.Tensor):
            return hs
    raise InputError(
        f"cannot read the last decoder layer's output ({type(output).__name__})",
        hint="the last layer must return a tensor or a tuple whose first entry is the hidden state",
    )


@dataclass(eq=False)
class BoundaryCapture:
    """What :func:`capture_boundaries` recorded: one dict ``{B: tensor}`` per forward pass."""

    num_layers: int
    device: str | None = "cpu"
    passes: list[dict[int, torch.Tensor]] = field(default_factory=list)

    def _store(self, b: int, t: torch.Tensor) -> None:
        if b == 0 or not self.passes:
            self.passes.append({})
        t = t.detach()
        self.passes[-1][b] = t.to(self.device, copy=True) if self.device else t.clone()

    def stack(self, pass_index: int = -1, batch: int | None = 0) -> torch.Tensor:
        """``[L+1, T, H]`` for one sequence of one forward pass (``batch=None`` keeps the batch axis)."""
        if not self.passes:
            raise InputError(
                "nothing was captured", hint="run the model inside the `with capture_boundaries(...)` block"
            )
        got = self.passes[pass_index]
        missing = [b for b in range(self.num_layers + 1) if b not in got]
        if missing:
            raise InputError(
                f"boundaries {missing} were not captured in this forward pass",
                hint="a layer was skipped (early exit?) or the pass was interrupted",
            )
        ts = [got[b] for b in range(self.num_layers + 1)]
        if batch is not None and ts[0].dim() == 3:
            ts = [t[batch] for t in ts]
        return torch.stack(ts)

    def __getitem__(self, b: int) -> torch.Tensor:
        return self.passes[-1][b]

    def __len__(self) -> int:
        return len(self.passes)

    def __repr__(self) -> str:
        return f"<BoundaryCapture B0..B{self.num_layers}, {len(self.passes)} forward pass(es)>"


@contextmanager
def capture_boundaries(
    model_or_layers: nn.Module | Sequence[nn.Module], *, device: str | None = "cpu"
) -> Iterator[BoundaryCapture]:
    """Record B0..BL of every forward pass run inside the block; hooks are removed on exit.

    ``model_or_layers`` is a model (its decoder layers are found by name) or the layer list itself.
    ``device`` is where copies are kept (``None``: where they were computed).
    """
    layers = decoder_layers(model_or_layers)
    cap = BoundaryCapture(len(layers), device)
    handles = []

    def pre(k: int) -> Callable[[nn.Module, tuple, dict], None]:
        def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            cap._store(k, _hidden_of(args, kwargs))

        return hook

    def post(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        cap._store(len(layers), _output_of(output))

    try:
        for k, layer in enumerate(layers):
            handles.append(layer.register_forward_pre_hook(pre(k), with_kwargs=True))
        handles.append(layers[-1].register_forward_hook(post, with_kwargs=True))
        yield cap
    finally:
        for h in handles:
            h.remove()


def _transformers() -> Any:
    return require("transformers", "capture", "hsdiff capture")


def capture_hf(
    model_dir: str | os.PathLike,
    input_ids: Sequence[int],
    dtype: str = "bf16",
    *,
    device: str = "cpu",
    verify: bool = True,
    progress: Progress | None = None,
) -> dict:
    """Run a Hugging Face causal LM on ``input_ids`` and return every boundary.

    Returns ``{"hidden_states": [L+1, T, H], "input_ids": [T], "metadata": {...}}``; ``hidden_states``
    keeps the model's dtype. With ``verify``, B0..B(L-1) are checked against HF's own
    ``output_hidden_states`` and B=L against the final norm, so a model whose layers are not the
    residual stream is reported instead of silently written. ``progress`` (:mod:`hsdiff.progress`) is told
    when the loading and the forward pass start and end.
    """
    tf = _transformers()
    if dtype not in DTYPES:
        raise InputError(f"unknown dtype {dtype!r}", hint=f"choose one of: {', '.join(DTYPES)}")
    d = Path(model_dir)
    if not (d / "config.json").is_file():
        raise InputError(
            "not a Hugging Face model directory (no config.json)",
            path=d,
            hint="give the folder written by save_pretrained (config.json + weights)",
        )
    ids = torch.tensor([int(i) for i in input_ids], dtype=torch.long)
    if ids.numel() == 0:
        raise InputError("the sample has no token ids")
    torch_dtype = DTYPES[dtype]
    with step(progress, "loading the model"):
        model = _load(tf, d, torch_dtype, device)
    warnings: list[str] = []
    with step(progress, f"running the model on {ids.numel()} tokens"):
        with torch.inference_mode(), capture_boundaries(model) as cap:
            out = model(input_ids=ids[None].to(device), output_hidden_states=verify, use_cache=False)
    stack = cap.stack()
    L = cap.num_layers
    if verify:
        warnings = _verify(model, out, stack, L)
    cfg = getattr(model, "config", None)
    meta = {
        "index": "boundary",
        "format": "hsdiff-capture",
        "num_hidden_layers": str(L),
        "hidden_size": str(stack.shape[-1]),
        "dtype": str(torch_dtype).replace("torch.", ""),
        "model": str(d),
        "model_type": str(getattr(cfg, "model_type", "")),
        "last": "output of the last decoder layer before the final norm",
    }
    if warnings:
        meta["warnings"] = json.dumps(warnings)
    return {"hidden_states": stack.contiguous(), "input_ids": ids, "metadata": meta, "warnings": warnings}


def _load(tf: Any, d: Path, torch_dtype: torch.dtype, device: str) -> nn.Module:
    try:
        model = tf.AutoModelForCausalLM.from_pretrained(str(d), dtype=torch_dtype)
    except TypeError:  # transformers < 4.56 names it torch_dtype
        model = tf.AutoModelForCausalLM.from_pretrained(str(d), torch_dtype=torch_dtype)
    except (OSError, ValueError) as e:
        raise InputError(
            f"transformers cannot load this model ({e})",
            path=d,
            hint="check the folder holds config.json and its weights",
        ) from None
    return model.to(device).eval()


def _verify(model: nn.Module, out: Any, stack: torch.Tensor, L: int) -> list[str]:
    hs = getattr(out, "hidden_states", None)
    if not hs or len(hs) != L + 1:
        return [f"HF returned {0 if not hs else len(hs)} hidden states for {L} layers; captures not cross-checked"]
    bad = [k for k in range(L) if not torch.equal(hs[k][0].to(stack.device), stack[k])]
    warnings = []
    if bad:
        warnings.append(
            f"boundaries {bad} differ from HF's output_hidden_states: the hooked layers may not carry "
            "the residual stream"
        )
    norm = getattr(getattr(model, "model", model), "norm", None)
    if norm is not None and not torch.allclose(
        hs[L][0].float(), norm(stack[L].to(hs[L].device)).float(), atol=1e-3, rtol=1e-3
    ):
        warnings.append("HF's last hidden state is not norm(B=L): check which tensor the last boundary holds")
    for w in warnings:
        log.warning(w)
    return warnings


def write_capture(result: dict, path: str | os.PathLike) -> Path:
    """Write a :func:`capture_hf` result as safetensors, atomically (temporary file, then rename)."""
    from safetensors.torch import save_file

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".safetensors", dir=p.parent)
    os.close(fd)
    try:
        save_file(
            {"hidden_states": result["hidden_states"].contiguous(), "input_ids": result["input_ids"].contiguous()},
            tmp,
            metadata={k: str(v) for k, v in result["metadata"].items()},
        )
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def check_out_dir(out: str | os.PathLike, sample: str | os.PathLike) -> None:
    """Refuse an output folder inside the dump the sample comes from (captures never go into a dump)."""
    src = Path(sample).resolve()
    dump = src if src.is_dir() else src.parent
    if dump.name.startswith("rows_"):  # SpecForge: train/rows_0-2000/data_1.ckpt
        dump = dump.parent
    o = Path(out).resolve()
    if o == dump or dump in o.parents:
        raise InputError(
            "`out` is inside the dump the sample comes from",
            path=out,
            hint="write captures to a folder of their own, never into a dump directory",
            options=("out",),
        )
