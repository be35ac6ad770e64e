"""Shape inference: the target's layer count L and hidden size H, from options, configs and tensors,
and the layout of a 3-D ``hidden_states`` tensor that names no axis.

Every clue is used: the layer count from the configs, the slot count k from the configured ids, the
token count T from the training side's ``input_ids``. A shape the clues leave open is a question to
the user (naming the option that settles it), never a guess.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from ..configs import is_draft_config, target_shape
from ..errors import AlignmentError, InputError
from ..model import Capture, Dump

#: More aux slots than this in one EAGLE-3 capture is implausible: a 3-D ``hidden_states`` whose
#: middle axis is longer is an all-layer stack's token axis, not vLLM's slot axis.
MAX_AUX_SLOTS = 8


def num_layers(given: int | None, model_cfg: dict | None, train: Dump, infer: Dump) -> tuple[int | None, str]:
    """``num_hidden_layers`` and where it came from: the option, the model config, a target config beside
    a dump, or the depth of an HF all-layer stack; ``(None, "not known")`` when nothing says."""
    if given:
        return given, "--num-layers"
    if model_cfg is not None:
        n = target_shape(model_cfg).num_layers
        if n:
            return n, "the target config.json"
    for path, cfg in train.configs + infer.configs:
        if not is_draft_config(cfg) and cfg.get("num_hidden_layers"):
            return int(cfg["num_hidden_layers"]), f"{Path(path).name} beside the dump"
    caps = train.captures + infer.captures
    stacks = [c.boundary for c in caps if c.origin.format == "hf" and c.boundary is not None]
    posts = [c for c in caps if c.origin.format == "hf" and c.post_norm]
    if stacks:
        return max(stacks) + (1 if posts else 0), "the depth of an all-layer stack"
    return None, "not known"


def hidden_size(
    given: int | None, model_cfg: dict | None, train: Dump, infer: Dump, layer_ids: Sequence[int] | None
) -> tuple[int, str]:
    """The target's hidden size: the option (refused when it cannot fit the data), the configs, then
    what the tensor widths (a training file's final post-norm state is one hidden size wide) and the
    number of configured ids imply; with where it came from."""
    stated = _stated_hidden_size(model_cfg, train, infer)
    if given:
        _check_fits(int(given), stated, train, infer, layer_ids)
        return int(given), "--hidden-size"
    if stated is not None:
        return stated[0], stated[1] if stated[1].startswith(
            "the target config"
        ) else f"{Path(stated[1]).name} beside the dump"
    train_widths = {c.width for c in train.captures if c.width}
    plain_train = Counter(c.width for c in train.captures if not c.concat and c.width)
    if plain_train:
        return plain_train.most_common(1)[0][0], "the training tensors' width"
    final = Counter(c.final_width for c in train.captures if c.final_width)  # the training file's final state
    for w, _ in final.most_common():
        if train_widths and all(tw % w == 0 for tw in train_widths):
            return w, "the training file's final hidden state"
    infer_widths = Counter(c.width for c in infer.captures if c.width)  # printed captures: their claimed shape
    one_layer = Counter(
        c.width
        for c in infer.captures  # tagged with a layer or slot: one layer each
        if c.width and not c.is_partial and not c.concat and (c.layer is not None or c.slot is not None)
    )
    for w, _ in one_layer.most_common():
        if train_widths and all(tw % w == 0 for tw in train_widths):
            return w, "the width of one inference capture"
    k = len(set(layer_ids)) if layer_ids else 0
    untagged = Counter(c.width for c in infer.captures if c.width and c.layer is None and c.slot is None)
    for w, _ in untagged.most_common():  # an untagged capture of the k configured slots side by side
        if k and w % k == 0 and train_widths and all(tw % (w // k) == 0 for tw in train_widths):
            return w // k, "an inference capture's width over the number of --layer-ids"
    for w, _ in infer_widths.most_common():
        if all(tw % w == 0 for tw in train_widths) and any(tw // w > 1 for tw in train_widths):
            return w, "the inference widths"
    if k and train_widths:
        w = max(train_widths)
        if w % k == 0:
            return w // k, "the training width over the number of --layer-ids"
    for path, cfg in train.configs + infer.configs:
        if cfg.get("hidden_size") and not cfg.get("target_hidden_size"):
            return int(cfg["hidden_size"]), f"{Path(path).name} beside the dump"
    raise AlignmentError(
        f"cannot tell the hidden size: training width {sorted(train_widths)} and inference widths "
        f"{sorted(infer_widths)} do not show how many slots are concatenated",
        hint="pass `hidden_size=H` or `model_config=path/to/target/config.json`",
        options=("hidden_size", "model_config"),
    )


def _stated_hidden_size(model_cfg: dict | None, train: Dump, infer: Dump) -> tuple[int, str] | None:
    """The target's hidden size as a config states it, and which config."""
    if model_cfg is not None and model_cfg.get("hidden_size"):
        return int(model_cfg["hidden_size"]), "the target config.json"
    configs = train.configs + infer.configs
    for path, cfg in configs:
        if is_draft_config(cfg) and cfg.get("target_hidden_size"):
            return int(cfg["target_hidden_size"]), path
    for path, cfg in configs:
        if not is_draft_config(cfg) and cfg.get("hidden_size"):
            return int(cfg["hidden_size"]), path
    return None


def _check_fits(
    h: int, stated: tuple[int, str] | None, train: Dump, infer: Dump, layer_ids: Sequence[int] | None
) -> None:
    """Refuse ``--hidden-size h`` when the widths are no multiple of it, or when it cuts neither side
    into as many slots as ids are configured."""
    train_widths = sorted({c.width for c in train.captures if c.width and not c.is_partial})
    infer_widths = sorted({c.width for c in infer.captures if c.width and not c.is_partial})
    k = len(set(layer_ids)) if layer_ids else None
    why = ""
    path = None
    odd = next((c for c in train.captures if c.width and not c.is_partial and c.width % h), None)
    if odd is not None:
        why, path = f"the training tensor width {odd.width} is not a multiple of it", odd.origin.path
    elif infer_widths and all(w % h for w in infer_widths):
        why = f"no inference width {infer_widths} is a multiple of it"
    elif k is not None and h not in infer_widths and k not in {w // h for w in train_widths + infer_widths}:
        cuts = sorted({w // h for w in train_widths + infer_widths})
        why = f"it cuts the tensors into {cuts} slots, but {k} ids are configured"
    if not why:
        _check_ids_agree(h, train, infer, layer_ids)
        return
    says = f"; {stated[1]} says {stated[0]}" if stated is not None and stated[0] != h else ""
    raise InputError(
        f"`hidden_size={h}` cannot fit the data: {why}{says}",
        path=path,
        hint="drop `hidden_size` (hsdiff reads it from the configs and widths) or pass the target's hidden size",
        options=("hidden_size",),
    )


def _check_ids_agree(h: int, train: Dump, infer: Dump, layer_ids: Sequence[int] | None) -> None:
    """Refuse ``hidden_size`` ``h`` when the configured ids cut a concatenated training tensor into slots
    of another width that the inference side holds one layer each (slot- or layer-tagged captures): the
    two cannot both hold, and the data says which of them is wrong only by guessing."""
    k = len(set(layer_ids)) if layer_ids else 0
    one_layer = {
        c.width
        for c in infer.captures
        if c.width and not c.is_partial and not c.concat and (c.layer is not None or c.slot is not None)
    }
    for c in train.captures:
        w = c.width
        if not k or not c.concat or c.is_partial or not w or w % k or w // k == h or w // k not in one_layer:
            continue
        raise InputError(
            f"`hidden_size={h}` and `layer_ids={list(layer_ids or ())}` cannot both hold: {k} ids cut the {w}-wide "
            f"training tensor into {k} slots of {w // k}, as wide as each inference capture of one layer, "
            f"while `hidden_size={h}` cuts it into {w // h}",
            path=c.origin.path,
            options=("hidden_size", "layer_ids"),
            hint=f"drop `hidden_size` (the data says {w // k}) or pass the `layer_ids` the engine runs with",
        )


def layout(
    infer: Dump,
    train: Dump,
    given_layers: int | None,
    model_cfg: dict | None,
    layer_ids: Sequence[int] | None,
    forced: bool,
    reread: Callable[[str], Dump | None],
) -> Dump:
    """Settle each 3-D ``hidden_states`` [A, B, H] read as an all-layer stack [L+1, T, H] against
    vLLM's connector layout [T, k, H] (a file whose ``token_ids`` were left out). ``reread(path)``
    reads one file in the connector layout (None: it cannot be read again)."""
    if forced:
        return infer
    stacks: dict[str, list[Capture]] = defaultdict(list)
    for c in infer.captures:
        key = c.origin.key or ""
        if c.origin.format == "hf" and key.startswith("hidden_states[") and c.shape and len(c.shape) == 2:
            stacks[c.origin.path].append(c)
    if not stacks:
        return infer
    n_layers = num_layers(given_layers, model_cfg, train, Dump((), infer.configs))[0]  # not the stacks in question
    k = len(set(layer_ids)) if layer_ids else None
    train_tokens = {c.tokens for c in train.captures if c.tokens}
    captures = list(infer.captures)
    for path, caps in stacks.items():
        if not caps[-1].post_norm:  # written with ``index: boundary`` (hsdiff capture): a stack for sure
            continue
        if _connector_layout(path, (len(caps), *(caps[0].shape or ())), n_layers, k, train_tokens):
            again = reread(path)
            if again is None:
                continue
            captures = [c for c in captures if c.origin.path != path] + list(again.captures)
    return dataclasses.replace(infer, captures=tuple(captures))


def _connector_layout(path: str, shape: tuple[int, ...], n_layers: int | None, k: int | None, tokens: set[int]) -> bool:
    """Whether ``hidden_states`` [a, b, H] is vLLM's [T, k, H] rather than an all-layer stack [L+1, T, H]."""
    a, b = shape[0], shape[1]
    stack_fits = n_layers is None or a == n_layers + 1
    connector_fits = k is None or b == k
    for_connector = (k is not None and b == k) + (a in tokens and b not in tokens)
    for_stack = (n_layers is not None and a == n_layers + 1) + (b in tokens and a not in tokens)
    if stack_fits and connector_fits:
        if for_connector != for_stack:
            return for_connector > for_stack
        if b > MAX_AUX_SLOTS and not for_connector:
            return False
    elif stack_fits or connector_fits:
        return connector_fits
    what = [
        f"an all-layer stack [L+1, T, H] of a {a - 1}-layer model with {b} tokens",
        f"vLLM's connector layout [T, k, H] with {a} tokens and {b} aux slots",
    ]
    known = [f"a {n_layers}-layer model" if n_layers else "", f"{k} configured ids" if k else ""]
    raise InputError(
        f"hidden_states {list(shape)} without token_ids reads as {what[0]} or as {what[1]}"
        + (f", but neither fits {' and '.join(x for x in known if x)}" if not (stack_fits or connector_fits) else ""),
        path=path,
        hint="pass `infer_format=vllm` or `infer_format=hf` (or `num_layers` / `layer_ids` to settle it)",
        options=("infer_format", "num_layers", "layer_ids"),
    )
