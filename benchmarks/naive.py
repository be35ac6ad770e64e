"""The baseline a user would write without hsdiff: load both sides whole, compare every training
slot with every inference layer at full precision, and take the layer with the smallest median
per-token relative error ``||x_t - y_t|| / ||x_t||``. Tokens are assumed aligned (same prompt).

    python benchmarks/naive.py TRAIN_DIR_OR_CKPT INFER.safetensors [--slots 3]

Prints one JSON object: per slot the best boundary, its error and the runner-up's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("train", type=Path)
    ap.add_argument("infer", type=Path)
    ap.add_argument("--slots", type=int, default=3)
    a = ap.parse_args()
    ckpt = a.train if a.train.is_file() else sorted(a.train.rglob("data_*.ckpt"))[0]
    aux = torch.load(ckpt, weights_only=True)["aux_hidden_state"][0]
    stack = load_file(str(a.infer))["hidden_states"]
    slots = [s.float() for s in aux.chunk(a.slots, dim=-1)]
    norms = [s.norm(dim=-1) for s in slots]
    errors = torch.empty(a.slots, stack.shape[0])
    for b in range(stack.shape[0]):
        y = stack[b].float()
        for s, x in enumerate(slots):
            errors[s, b] = ((x - y).norm(dim=-1) / norms[s]).median()
    out = []
    for s in range(a.slots):
        order = errors[s].argsort()
        out.append(
            {
                "slot": s,
                "boundary": int(order[0]),
                "error": float(errors[s, order[0]]),
                "runner_up": int(order[1]),
                "runner_up_error": float(errors[s, order[1]]),
            }
        )
    json.dump({"slots": out}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
