"""A tiny random EAGLE-3 draft and target folder in the engines' on-disk layout (for the fast tests)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[2]
H, NH, NKV, HD, FF, V, VD, K = 32, 4, 2, 8, 48, 50, 20, 3


def config(**changes) -> dict:
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": H,
        "intermediate_size": FF,
        "num_hidden_layers": 1,
        "num_attention_heads": NH,
        "num_key_value_heads": NKV,
        "head_dim": HD,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "vocab_size": V,
        "draft_vocab_size": VD,
        "tie_word_embeddings": False,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]},
    }
    cfg.update(changes)
    return cfg


def weights(seed: int = 0, prefix: str = "midlayer.") -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)

    def r(*shape: int, scale: float = 0.3) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * scale

    w = {"fc.weight": r(H, K * H), "norm.weight": 1 + r(H, scale=0.1), "lm_head.weight": r(VD, H)}
    for n in ("hidden_norm", "input_layernorm", "post_attention_layernorm"):
        w[f"{prefix}{n}.weight"] = 1 + r(H, scale=0.1)
    w[f"{prefix}self_attn.q_proj.weight"] = r(NH * HD, 2 * H)
    w[f"{prefix}self_attn.k_proj.weight"] = r(NKV * HD, 2 * H)
    w[f"{prefix}self_attn.v_proj.weight"] = r(NKV * HD, 2 * H)
    w[f"{prefix}self_attn.o_proj.weight"] = r(H, NH * HD)
    w[f"{prefix}mlp.gate_proj.weight"] = r(FF, H)
    w[f"{prefix}mlp.up_proj.weight"] = r(FF, H)
    w[f"{prefix}mlp.down_proj.weight"] = r(H, FF)
    hot = torch.arange(VD) * 2 + 1  # draft id d -> target id 2d + 1
    w["d2t"] = hot - torch.arange(VD)
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[hot] = True
    w["t2d"] = t2d
    return w


def write_draft(
    folder: Path, w: dict[str, torch.Tensor] | None = None, cfg: dict | None = None, fmt: str = "safetensors"
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    w = weights() if w is None else w
    (folder / "config.json").write_text(json.dumps(config() if cfg is None else cfg))
    if fmt == "safetensors":
        save_file({k: v.contiguous() for k, v in w.items()}, str(folder / "model.safetensors"))
    else:
        torch.save(w, folder / "pytorch_model.bin")
    return folder


def write_target(folder: Path, seed: int = 1) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    save_file(
        {"model.embed_tokens.weight": torch.randn(V, H, generator=g), "model.norm.weight": torch.ones(H)},
        str(folder / "model.safetensors"),
    )
    (folder / "config.json").write_text(
        json.dumps({"hidden_size": H, "vocab_size": V, "rms_norm_eps": 1e-6, "tie_word_embeddings": True})
    )
    return folder


def reference_module():
    """``fixtures/eagle3_ref.py``: the independent draft implementation and the real loop."""
    if "eagle3_ref" in sys.modules:
        return sys.modules["eagle3_ref"]
    spec = importlib.util.spec_from_file_location("eagle3_ref", ROOT / "fixtures" / "eagle3_ref.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["eagle3_ref"] = mod
    spec.loader.exec_module(mod)
    return mod


def reference_draft(w: dict[str, torch.Tensor], cfg: dict, embed: torch.Tensor):
    """The same weights in the reference implementation (canonical engine names -> its attributes)."""
    ref = reference_module()
    draft = ref.Eagle3Draft(cfg, embed, w["d2t"])
    state = {}
    for name, t in w.items():
        if name in ("d2t", "t2d"):
            continue
        key = name if name.count(".") == 1 else name.split(".")[-2] + ".weight"
        state[key] = t.float()
    draft.load_state_dict(state)
    return draft.eval()
