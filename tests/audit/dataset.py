"""A SpecForge training set built from real SmolLM2 hidden states, with known problems.

``fixtures/smollm2/states/sample-{0,1,2}.safetensors`` hold every boundary of three real chat
samples (24 tokens each, sharing an 11-token system prompt). The model is causal, so the states of
the first ``n`` tokens of a sample *are* the states of the ``n``-token sample: cutting each sample
at 19..24 tokens gives 18 distinct real samples. Good files carry the SpecForge default for a
30-layer target (ids [1, 14, 26] -> boundaries 2, 15, 27); every fourth one is captured one layer
shallower (boundaries 1, 14, 26), as if the capture configuration had changed between runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from .. import builders as B

GOOD = (2, 15, 27)  # SpecForge default ids [1, L//2-1, L-4] for L = 30, as boundaries
SHALLOW = (1, 14, 26)
ROWS = "rows_0-2000"
REPLY_START = 19  # first token of the assistant's reply (after "<|im_start|>assistant\n")


def _final(i: int) -> torch.Tensor:
    return load_file(str(B.SMOLLM2 / "states" / f"sample-{i}.safetensors"))["fp32.final"]


def sample(i: int, n: int, boundaries: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """The SpecForge record of sample ``i`` cut to its first ``n`` tokens, slots at ``boundaries``."""
    s = B.states(i)
    ids = s["input_ids"][:n].clone()
    mask = torch.zeros_like(ids)
    mask[REPLY_START:] = 1
    return {
        "input_ids": ids,
        "loss_mask": mask,
        "aux_hidden_state": torch.cat([s["fp32"][b][:n] for b in boundaries], dim=-1).unsqueeze(0).contiguous(),
        "hidden_state": _final(i)[:n].unsqueeze(0).contiguous(),
    }


def build(root: Path, *, good: int = 12, shallow_every: int = 4, extra_copies: int = 0) -> dict[str, list[str]]:
    """Write the set under ``root``; returns the file names (relative to root) by what they are.

    ``good + good // (shallow_every - 1)`` ordinary files (a quarter of them shallower when
    ``shallow_every`` is 4), one file with NaN values, one truncated file, and ``extra_copies``
    byte copies of good files under ``rows_2000-4000`` (duplicates, to make a larger workload).
    """
    rows = root / ROWS
    rows.mkdir(parents=True, exist_ok=True)
    pieces = [(i, n) for n in range(24, 18, -1) for i in range(3)]  # 18 distinct real samples
    truth: dict[str, list[str]] = {"good": [], "shallow": [], "nan": [], "truncated": [], "copies": []}
    total = good + good // (shallow_every - 1)
    for idx, (i, n) in enumerate(pieces[:total]):
        shallow = idx % shallow_every == shallow_every - 1
        name = f"{ROWS}/data_{idx}.ckpt"
        torch.save(sample(i, n, SHALLOW if shallow else GOOD), root / name)
        truth["shallow" if shallow else "good"].append(name)
    i, n = pieces[total]
    bad = sample(i, n, GOOD)
    bad["aux_hidden_state"][0, 5:9, 576 + 10] = float("nan")  # slot 1, tokens 5..8
    name = f"{ROWS}/data_{total}.ckpt"
    torch.save(bad, root / name)
    truth["nan"].append(name)
    i, n = pieces[total + 1]
    name = f"{ROWS}/data_{total + 1}.ckpt"
    torch.save(sample(i, n, GOOD), root / name)
    data = (root / name).read_bytes()
    (root / name).write_bytes(data[: len(data) // 2])  # an interrupted copy
    truth["truncated"].append(name)
    if extra_copies:
        more = root / "rows_2000-4000"
        more.mkdir()
        for k in range(extra_copies):
            src = truth["good"][k % len(truth["good"])]
            name = f"rows_2000-4000/data_{2000 + k}.ckpt"
            (root / name).write_bytes((root / src).read_bytes())
            truth["copies"].append(name)
    return truth


def draft_config(root: Path) -> None:
    """The draft config SpecForge trains with (nested eagle_config ids [1, 14, 26])."""
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": B.H,
        "num_hidden_layers": 1,
        "target_hidden_size": B.H,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 14, 26]},
    }
    (root / "config.json").write_text(json.dumps(cfg, indent=2))
