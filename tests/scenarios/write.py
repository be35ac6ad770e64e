"""Write a :class:`~tests.scenarios.generate.Scenario` to disk in the formats trainers and engines write."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from .. import builders as B
from .generate import Scenario
from .noise import apply


def write(sc: Scenario, root: Path) -> tuple[Path, Path]:
    """Write both sides under ``root``; returns (training path, inference path)."""
    train = _train(sc, root / "train")
    gen = torch.Generator().manual_seed(sc.seed)
    infer = root / "infer"
    if sc.infer_format == "vllm":
        _vllm(sc, infer, gen)
    elif sc.infer_format == "log":
        infer = _log(sc, root / "server.log", gen)
    else:
        _dumper(sc, infer, gen)
    return train, infer


def _train(sc: Scenario, d: Path) -> Path:
    if sc.train_format == "specforge":
        B.specforge(d, sc.train_samples, sc.train_b)
    else:
        for i in sc.train_samples:
            B.modelopt_file(d, i, sc.train_b)
    if sc.train_label != "none":
        shift = 1 if sc.train_label == "shifted" else 0
        B.draft_config(d / "config.json", [b - 1 + shift for b in sc.train_b])
    return d


def _window(sc: Scenario, x: torch.Tensor) -> torch.Tensor:
    return x[sc.tokens[0] : sc.tokens[1]].contiguous()


def _values(sc: Scenario, b: int, gen: torch.Generator, sample: int | None = None) -> torch.Tensor:
    x = apply(sc.infer_sample if sample is None else sample, b, sc.noise, sc.level, gen)
    out = _window(sc, x)
    return out.to(torch.bfloat16) if sc.noise == "bf16" else out


def _ids(sc: Scenario, sample: int | None = None) -> torch.Tensor:
    return _window(sc, B.states(sc.infer_sample if sample is None else sample)["input_ids"]).clone()


def _corrupt(x: torch.Tensor, sample: int, start: int, gen: torch.Generator) -> torch.Tensor:
    """A rank whose ordinary tokens went wrong (a broken all-reduce): 40% noise off the sinks; ``x`` is
    the capture's token window, which begins at token ``start`` of the sample."""
    from .noise import gaussian, sink_tokens

    y = gaussian(x.float(), 0.4, gen)
    for t in sink_tokens(sample):
        if 0 <= t - start < x.shape[0]:
            y[t - start] = x[t - start].float()
    return y.to(x.dtype)


def _dumper(sc: Scenario, root: Path, gen: torch.Generator) -> None:
    runs = [(sc.infer_sample, sc.capture_b, 0)]
    if sc.runs > 1:  # a second request, after a restart with every id one deeper
        other = (sc.infer_sample + 1) % 3
        runs.append((other, [min(b + 1, B.L - 1) for b in sc.capture_b], 1))
    for sample, cap_b, step in runs:
        exp = root / f"dump_20261201_0000{step:02d}_00000{step}"
        for r in range(sc.ranks):
            records: list[tuple[str, torch.Tensor, dict]] = []
            if sc.with_ids:
                records.append(("input_ids", _ids(sc, sample), {}))
            g = torch.Generator().manual_seed(sc.seed * 7 + step)  # replicas hold the same values
            vals = {b: _values(sc, b, g, sample) for b in sorted(set(cap_b) | set(sc.extra_b))}
            if r == 1 and sc.corrupt_rank:
                vals = {b: _corrupt(v, sample, sc.tokens[0], gen) for b, v in vals.items()}
            if sc.infer_format == "dumper-concat":
                records.append(("aux_hidden_states", torch.cat([vals[b] for b in cap_b], dim=-1), {}))
            else:
                tagged = sc.infer_format == "dumper-layers"
                records += [
                    ("eagle3_aux", vals[b], {"layer_id": b} if tagged else {"slot": j}) for j, b in enumerate(cap_b)
                ]
                records += [("layer_input", vals[b], {"layer_id": b}) for b in sc.extra_b]
            dumper_records(exp, records, rank=r, ranks=sc.ranks, step=step)


def dumper_records(
    exp: Path, records: list[tuple[str, torch.Tensor, dict]], *, rank: int = 0, ranks: int = 1, step: int = 0
) -> Path:
    """SGLang dumper files (current format) in ``exp``: one ``(name, value, extra tags)`` per record."""
    exp.mkdir(parents=True, exist_ok=True)
    base = {"step": step, "rank": rank, "recompute_status": "disabled", "world_rank": rank, "world_size": ranks}
    for index, (name, value, tags) in enumerate(records):
        tail = "".join(f"___{k}={v}" for k, v in tags.items())
        torch.save(
            {"value": value.clone(), "meta": {**base, "dump_index": index, "name": name, **tags}},
            exp / f"step={step}___rank={rank}___dump_index={index}___name={name}___recompute_status=disabled{tail}.pt",
        )
    return exp


def _vllm(sc: Scenario, root: Path, gen: torch.Generator) -> None:
    root.mkdir(parents=True, exist_ok=True)
    hs = torch.stack([_values(sc, b, gen) for b in sc.capture_b], dim=1).contiguous()
    save_file({"hidden_states": hs, "token_ids": _ids(sc)}, str(root / f"req-{sc.seed}.safetensors"))


def _flist(vals: torch.Tensor) -> str:
    return "[" + ", ".join(f"{float(v):.4g}" for v in vals) + "]"


def _log(sc: Scenario, path: Path, gen: torch.Generator) -> Path:
    """A server log printing ``log_tokens`` x ``log_cols`` values of each capture, decode-style one
    token per line, or as a nested list for several tokens."""
    lines = [
        f"[2026-12-01 00:00:0{i} TP0] server_args=ServerArgs(model_path='SmolLM2-135M-Instruct', "
        f"speculative_algorithm='EAGLE3')"
        for i in range(2)
    ]
    caps = [(j, b, _values(sc, b, gen).float()) for j, b in enumerate(sc.capture_b)]
    n, c = sc.log_tokens, sc.log_cols
    start = sc.log_start
    for j, b, x in caps:
        label = {"slot": f"aux_hidden_states[{j}]", "layer": f"aux_hidden_states[{j}] layer={b}", "none": "aux"}[
            sc.log_labels
        ]
        rows = x[start : start + n, :c]
        if n == 1:
            lines.append(f"[2026-12-01 00:00:05 TP0] {label} shape=torch.Size([1, {B.H}]) h[:, :{c}]={_flist(rows[0])}")
        else:
            body = json.dumps([[round(float(v), 4) for v in r] for r in rows])
            lines.append(f"[2026-12-01 00:00:05 TP0] {label} h[{start}:{start + n}, :{c}]={body}")
    lines.append("[2026-12-01 00:00:06 TP0] Decode batch. #running-req: 1, accept len: 1.00")
    path.write_text("\n".join(lines) + "\n")
    return path
