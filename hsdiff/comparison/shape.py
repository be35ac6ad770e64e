"""Shape inference: the target's layer count L and hidden size H, from options, configs and tensors."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ..configs import is_draft_config, target_shape
from ..errors import AlignmentError
from ..model import Dump


def num_layers(given: int | None, model_cfg: dict | None, train: Dump, infer: Dump) -> int | None:
    """``num_hidden_layers``: the option, the model config, a target config beside a dump, or the
    depth of an HF all-layer stack; None when nothing says."""
    if given:
        return given
    if model_cfg is not None:
        n = target_shape(model_cfg).num_layers
        if n:
            return n
    for _, cfg in train.configs + infer.configs:
        if not is_draft_config(cfg) and cfg.get("num_hidden_layers"):
            return int(cfg["num_hidden_layers"])
    caps = train.captures + infer.captures
    stacks = [c.boundary for c in caps if c.origin.format == "hf" and c.boundary is not None]
    posts = [c for c in caps if c.origin.format == "hf" and c.post_norm]
    if stacks:
        return max(stacks) + (1 if posts else 0)
    return None


def hidden_size(given: int | None, model_cfg: dict | None, train: Dump, infer: Dump,
                layer_ids: Sequence[int] | None) -> int:
    """The target's hidden size: the option, the configs, then what the tensor widths imply."""
    if given:
        return int(given)
    if model_cfg is not None and model_cfg.get("hidden_size"):
        return int(model_cfg["hidden_size"])
    configs = train.configs + infer.configs
    for _, cfg in configs:
        if is_draft_config(cfg) and cfg.get("target_hidden_size"):
            return int(cfg["target_hidden_size"])
    for _, cfg in configs:
        if not is_draft_config(cfg) and cfg.get("hidden_size"):
            return int(cfg["hidden_size"])
    train_widths = {c.width for c in train.captures if c.width}
    plain_train = Counter(c.width for c in train.captures if not c.concat and c.width)
    if plain_train:
        return plain_train.most_common(1)[0][0]
    infer_widths = Counter(c.width for c in infer.captures if c.width)  # printed captures: their claimed shape
    for w, _ in infer_widths.most_common():
        if all(tw % w == 0 for tw in train_widths) and any(tw // w > 1 for tw in train_widths):
            return w
    if layer_ids and train_widths:
        k = len(set(layer_ids))
        w = max(train_widths)
        if w % k == 0:
            return w // k
    for _, cfg in configs:
        if cfg.get("hidden_size") and not cfg.get("target_hidden_size"):
            return int(cfg["hidden_size"])
    raise AlignmentError(
        f"cannot tell the hidden size: training width {sorted(train_widths)} and inference widths "
        f"{sorted(infer_widths)} do not show how many slots are concatenated",
        hint="pass --hidden-size H or --model-config path/to/target/config.json",
    )
