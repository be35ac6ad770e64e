"""``inspect``: what a dump holds, without comparing it with anything.

For every file hsdiff reads under a path: the format it detected and why, keys and tags, shapes,
dtypes, samples and token counts, per-token norm statistics (median, attention-sink tokens),
NaN/Inf counts, tensor-parallel ranks and whether they agree, runs and steps — and a few sentences
saying what hsdiff makes of it ("SpecForge: 2 samples, 3 slots × 576, labelled B[3, 31, 59] by
config.json").

Fast on dumps of many GB: files are opened through the readers (torch archives memory-mapped,
safetensors and numpy headers), and only a sample of rows of each tensor is read
(:data:`SAMPLE_ROWS`: the first tokens, where attention sinks sit, then evenly spaced ones).
"""

from __future__ import annotations

import logging
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .arrays import as_f32, is_float, lower_median, row_norms
from .configs import stated_hidden_size, stated_ids, target_shape
from .errors import InputError
from .jsonout import dumps
from .model import Capture, Dump
from .readers import replica_difference, replica_groups, scan
from .readers.sglang_dumper import run_of
from .rules import conventions as conv
from .sinks import sink_mask

__all__ = ["inspect", "Inspection", "SAMPLE_ROWS", "SCHEMA_VERSION"]

log = logging.getLogger("hsdiff")

SCHEMA_VERSION = 1
#: Rows (tokens) of each tensor read for the norm statistics: the first 4, then evenly spaced.
SAMPLE_ROWS = 256

#: Why each format was detected: the rule its reader applies (hsdiff/readers/<format>.py).
WHY = {
    "specforge": "files hold 'aux_hidden_state' [1, T, k·H] (SpecForge offline data_*.ckpt)",
    "modelopt": "files hold 'aux_hidden_states' [T, k·H] (or TensorRT-LLM's 'hidden_state_features') beside the "
    "final 'hidden_states' (ModelOpt {conversation_id}.pt)",
    "eagle": "files hold 'hidden_state' with 'input_ids' and 'loss_mask' (EAGLE-1/2 ge_data)",
    "sglang_dumper": "file names carry the dumper's tags step=…___rank=…___name=…",
    "vllm": "safetensors with 'hidden_states' [T, k, H] and 'token_ids' (vLLM connector)",
    "speculators": "the vLLM connector's 'hidden_states' [T, k, H] and 'token_ids', named hs_{idx}.safetensors "
    "or beside a vllm_command.txt (speculators data_generation_offline.py)",
    "trtllm": "a list of records with 'id', 'input_ids', 'hidden_state' and 'aux_hidden_states' (or "
    "'hidden_state_features') (TensorRT-LLM SaveHiddenStates {prefix}_{iter}.pt)",
    "specforge_dflash": "files hold 'hidden_states' [1, T, k·H] with 'input_ids' and 'loss_mask' (SpecForge "
    "DFlash/Domino/DSpark data_*.ckpt)",
    "sglang_hook": "torch files holding 'model.forward_batch_info.input_ids' beside module outputs (SGLang "
    "--debug-tensor-dump-output-folder Pass*.pt)",
    "trtllm_debug": "file names {n}.{Class}-…-{input|output}.{name}.pt under rank{R}/ (TensorRT-LLM debug_mode "
    "dump): decoder-layer output pairs summed",
    "deepspec": "samples.idx beside a manifest.json of version 2 (DeepSpec target cache)",
    "verl_speco": "torch shards of {'samples': [...], 'metadata': {'format': 'torch_shard'}} (verl-SpeCo feature "
    "store)",
    "sglang_http": "a .json response whose meta_info holds hidden_states (SGLang /generate with return_hidden_states)",
    "hf": "a stack of L+1 hidden states in Hugging Face output_hidden_states order",
    "tensors": "per-layer tensors, the layer taken from the key or file name",
    "debuglog": "text with printed tensor values (a server or debug log)",
}


@dataclass(frozen=True)
class Inspection:
    """What :func:`inspect` found; ``summary`` holds the sentences, :meth:`to_dict` everything."""

    path: str
    formats: tuple[dict, ...]
    files: tuple[dict, ...]
    captures: tuple[dict, ...]
    ranks: dict
    runs: dict
    configs: tuple[dict, ...]
    summary: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    hidden_size: int | None = None
    num_layers: int | None = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "path": self.path,
            "summary": list(self.summary),
            "formats": list(self.formats),
            "files": list(self.files),
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_layers,
            "ranks": self.ranks,
            "runs": self.runs,
            "configs": list(self.configs),
            "captures": list(self.captures),
            "warnings": list(self.warnings),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return dumps(self.to_dict(), indent)

    def __repr__(self) -> str:
        return f"<Inspection {self.path}: {self.summary[0] if self.summary else 'nothing'}>"


def inspect(path: str | os.PathLike, *, fmt: str | None = None, sample_rows: int = SAMPLE_ROWS) -> Inspection:
    """Describe the dump at ``path`` (a file or a directory, scanned recursively).

    >>> info = inspect("fixtures/seed/infer-wrong")      # doctest: +SKIP
    >>> info.summary[0]
    'SGLang dumper: 1 run, 1 step; 2 ranks, replicated; names aux_hidden_states, input_ids'
    """
    dump = scan(path, "infer", fmt=fmt, keep_ranks=True)
    root = Path(path)
    base = root if root.is_dir() else root.parent
    configs = [_config_info(p, cfg) for p, cfg in dump.configs]
    hidden, layers = _shape_from_configs(dump)
    caps = [_capture_info(c, hidden, sample_rows) for c in dump.captures]
    files = _files(dump, base)
    formats = [
        {"format": f, "captures": n, "why": _why(f, dump)}
        for f, n in Counter(c.origin.format for c in dump.captures).most_common()
    ]
    ranks = _ranks(dump.captures, sample_rows)
    runs = _runs(dump.captures)
    summary = _summary(dump, formats, caps, ranks, runs, hidden, layers)
    return Inspection(
        str(path),
        tuple(formats),
        tuple(files),
        tuple(caps),
        ranks,
        runs,
        tuple(configs),
        tuple(summary),
        tuple(dump.warnings),
        hidden,
        layers,
    )


# ----------------------------------------------------------------------------- pieces
def _why(fmt: str, dump: Dump) -> str:
    """Why files were read as ``fmt``, and which variants of it they are (as their reader told them)."""
    variants = list(dict.fromkeys(c.variant for c in dump.captures if c.origin.format == fmt and c.variant))
    more = f" (+{len(variants) - 3} more)" if len(variants) > 3 else ""
    return WHY.get(fmt, "") + "".join(f"; {v}" for v in variants[:3]) + more


def _config_info(path: str, cfg: dict) -> dict:
    ids = _draft_ids(cfg)
    return {
        "path": path,
        "draft": ids is not None,
        "eagle_aux_hidden_state_layer_ids": ids,
        "hidden_size": stated_hidden_size(cfg),
        "num_hidden_layers": cfg.get("num_hidden_layers"),
    }


def _draft_ids(cfg: dict) -> list[int] | None:
    got = stated_ids(cfg, ints_only=True)
    return None if got is None else got[1]


def _shape_from_configs(dump: Dump) -> tuple[int | None, int | None]:
    hidden = layers = None
    for _, cfg in dump.configs:
        if _draft_ids(cfg) is not None:
            hidden = hidden or stated_hidden_size(cfg, ("target_hidden_size",))
        else:
            shape = target_shape(cfg)
            hidden, layers = hidden or shape.hidden_size, layers or shape.num_layers
    if hidden is None:  # the most common plain width, when no config says; else a training file's final state
        plain = Counter(c.width for c in dump.captures if c.width and not c.concat and c.observation is None)
        final = Counter(c.final_width for c in dump.captures if c.final_width)
        hidden = plain.most_common(1)[0][0] if plain else final.most_common(1)[0][0] if final else None
    return (int(hidden) if hidden else None), (int(layers) if layers else None)


def _files(dump: Dump, base: Path) -> list[dict]:
    out: dict[str, dict] = {}
    for c in dump.captures:
        f = out.setdefault(
            c.origin.path, {"path": c.origin.path, "format": c.origin.format, "captures": 0, "bytes": None}
        )
        f["captures"] += 1
    for f in out.values():
        p = Path(f["path"]) if Path(f["path"]).is_absolute() else base / f["path"]
        try:
            f["bytes"] = p.stat().st_size
        except OSError:
            pass
    return list(out.values())


def _rows(n: int, k: int) -> list[int]:
    """Which of ``n`` rows to read: the first 4, then evenly spaced, ``k`` at most."""
    if n <= k:
        return list(range(n))
    head = list(range(min(4, n)))
    step = (n - 1) / max(1, k - len(head) - 1)
    return sorted(set(head) | {min(n - 1, round(4 + i * step)) for i in range(k - len(head))})


def _sample(c: Capture, sample_rows: int) -> tuple[Any, list[int]] | None:
    """The sampled rows of a capture as float32 ``[rows, width]`` and their positions."""
    try:
        x = c.array()
    except (ValueError, RuntimeError) as e:
        log.debug("%s: cannot load (%s)", c.origin, e)
        return None
    if not is_float(x) or x.size == 0:
        return None
    rows = _rows(int(x.shape[0]), sample_rows)
    return as_f32(x[np.asarray(rows, dtype=np.int64)]), rows


def _norm_stats(x: Any, rows: list[int]) -> dict:
    with np.errstate(all="ignore"):
        norms = row_norms(x)
        finite = norms[np.isfinite(norms)]
        med = lower_median(finite) if finite.size else None
        big = np.isfinite(norms) & sink_mask(norms)  # an Inf row is damage, not a sink
    sinks = [rows[i] for i in np.flatnonzero(big).tolist()]
    return {
        "median": _r(med),
        "min": _r(float(finite.min())) if finite.size else None,
        "max": _r(float(finite.max())) if finite.size else None,
        "sink_tokens": sinks[:32],
    }


def _r(v: float | None) -> float | None:
    return None if v is None or v != v or v in (float("inf"), float("-inf")) else float(f"{v:.4g}")


def _capture_info(c: Capture, hidden: int | None, sample_rows: int) -> dict:
    info: dict[str, Any] = {
        "file": c.origin.path,
        "key": c.origin.key,
        "format": c.origin.format,
        "line": c.origin.line,
        "shape": None if c.shape is None else list(c.shape),
        "dtype": c.dtype,
        "tokens": c.tokens,
        "group": c.group,
        "slot": c.slot,
        "rank": c.rank,
        "layer": None if c.layer is None else str(c.layer),
        "boundary_index": c.boundary,
        "label_source": None if c.layer is None else c.layer.source,
        "token_ids": None if c.token_ids is None else len(c.token_ids),
        "concatenated_slots": None,
        "post_norm": c.post_norm,
        "printed": c.is_partial,
        "sampled_rows": 0,
        "nonfinite": None,
        "norm": None,
        "slot_norms": None,
    }
    if c.concat and hidden and c.width and c.width % hidden == 0:
        info["concatenated_slots"] = c.width // hidden
    if c.is_partial:
        obs = c.observation
        assert obs is not None
        info["printed_values"] = obs.size
        return info
    got = _sample(c, sample_rows)
    if got is None:
        return info
    x, rows = got
    info["sampled_rows"] = len(rows)
    info["nonfinite"] = int((~np.isfinite(x)).sum())
    info["norm"] = _norm_stats(x, rows)
    k = info["concatenated_slots"]
    if k and k > 1 and hidden:
        info["slot_norms"] = [_norm_stats(x[:, s * hidden : (s + 1) * hidden], rows) for s in range(k)]
    return info


def _ranks(captures: tuple[Capture, ...], sample_rows: int) -> dict:
    """TP ranks found and whether the replicas of each tensor agree (on sampled rows)."""
    groups = replica_groups(c for c in captures if c.rank is not None)
    ranks = sorted({c.rank for c in captures if c.rank is not None})
    if len(ranks) < 2:
        return {"ranks": ranks, "state": "single" if ranks else "none", "tensors": len(groups), "detail": []}
    detail: list[dict] = []
    states: set[str] = set()
    for group in groups:
        base = group[0]
        ref = _sample(base, sample_rows)
        for other in group[1:]:
            got = _sample(other, sample_rows)
            if ref is None or got is None:
                state, why = "unreadable", "not a float tensor"
            elif got[0].shape == ref[0].shape:
                diff = replica_difference(ref[0], got[0])  # per ordinary token, as compare does
                state = "replicated" if diff is None else "differ"
                why = f"{diff or 'agrees with'} rank {base.rank}, on {len(ref[1])} sampled rows"
            elif base.width and other.width and base.width == other.width * len(group):
                state, why = "sharded", f"each rank holds {other.width} of the columns"
            else:
                state, why = "differ", f"shape {other.shape} vs {base.shape}"
            states.add(state)
            if state != "replicated" or len(detail) < 8:
                detail.append(
                    {
                        "tensor": str(base.origin.key or base.origin.path),
                        "group": base.group,
                        "rank": other.rank,
                        "against": base.rank,
                        "state": state,
                        "why": why,
                    }
                )
    state = states.pop() if len(states) == 1 else ("mixed" if states else "single")
    missing = [g for g in groups if len(g) < len(ranks)]
    return {
        "ranks": ranks,
        "state": state,
        "tensors": len(groups),
        "missing_on_some_ranks": len(missing),
        "detail": detail,
    }


def _runs(captures: tuple[Capture, ...]) -> dict:
    groups = list(dict.fromkeys(c.group for c in captures if c.group is not None))
    runs: dict[str, set[str]] = defaultdict(set)
    for g in groups:
        run = run_of(g)  # the dumper run as compare counts it: its experiment directory
        if run is not None:
            runs[run].add(g.rpartition(":step=")[2])
    out: dict[str, Any] = {"groups": len(groups), "names": groups[:20]}
    if runs:
        out["runs"] = len(runs)
        out["steps"] = sorted({s for steps in runs.values() for s in steps}, key=lambda s: (len(s), s))
    return out


# ----------------------------------------------------------------------------- sentences
def _summary(
    dump: Dump, formats: list[dict], caps: list[dict], ranks: dict, runs: dict, hidden: int | None, layers: int | None
) -> list[str]:
    out = []
    for f in formats:
        fmt = f["format"]
        mine = [c for c in caps if c["format"] == fmt]
        out.append(_format_sentence(fmt, mine, dump, ranks, runs, hidden, layers))
    bad = sum(c["nonfinite"] or 0 for c in caps)
    if bad:
        out.append(f"{bad} NaN/Inf values in the sampled rows")
    sinks = sorted({t for c in caps for t in ((c.get("norm") or {}).get("sink_tokens") or [])})
    if sinks:
        out.append(
            "attention-sink tokens (norm > 8× the median) at positions "
            + ", ".join(map(str, sinks[:8]))
            + (" …" if len(sinks) > 8 else "")
        )
    if hidden and any(cfg.get("hidden_size") or cfg.get("target_hidden_size") for _, cfg in dump.configs):
        out.append(f"hidden size {hidden}" + (f", {layers} layers" if layers else "") + " (from config.json)")
    elif hidden and any(c.final_width == hidden for c in dump.captures):
        out.append(f"hidden size {hidden} (the width of the training files' final hidden_state; no config.json)")
    else:
        widths = sorted({c["shape"][-1] for c in caps if c["shape"]})
        out.append(f"tensor width(s) {widths}; no config.json gives the hidden size (a width may be k slots × H)")
    return out


def _n(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _blist(bs: list[int]) -> str:
    """``[0, 1, 2, 3, 7]`` -> ``B0..B3, B7``."""
    parts, start = [], None
    for i, b in enumerate(bs):
        if start is None:
            start = b
        if i + 1 == len(bs) or bs[i + 1] != b + 1:
            parts.append(f"B{start}" if start == b else f"B{start}..B{b}")
            start = None
    return ", ".join(parts)


#: Formats of concatenated training files, and how the summary names them.
_TITLES = {
    "specforge": "SpecForge",
    "modelopt": "ModelOpt",
    "speculators": "speculators",
    "trtllm": "TensorRT-LLM SaveHiddenStates",
    "specforge_dflash": "SpecForge DFlash family",
    "deepspec": "DeepSpec target cache",
    "verl_speco": "verl-SpeCo feature store",
}


def _format_sentence(
    fmt: str, caps: list[dict], dump: Dump, ranks: dict, runs: dict, hidden: int | None, layers: int | None
) -> str:
    samples = len({c["group"] for c in caps})
    tokens = sorted({c["tokens"] for c in caps if c["tokens"]})
    tok = "" if not tokens else f", {tokens[0]}" + (f"–{tokens[-1]}" if len(tokens) > 1 else "") + " tokens"
    if fmt in _TITLES:
        k = next((c["concatenated_slots"] for c in caps if c["concatenated_slots"]), None)
        text = f"{_TITLES[fmt]}: {_n(samples, 'sample')}{tok}"
        if k is None:
            return (
                text + f"; aux width {caps[0]['shape'][-1] if caps and caps[0]['shape'] else '?'} "
                "(hidden size unknown: slots not counted)"
            )
        text += f"; {k} slots × {hidden}"
        claimed = next((c.slot_layers for c in dump.captures if c.origin.format == fmt and c.slot_layers), None)
        if claimed:
            return text + f", labelled B{[x.boundary if x else None for x in claimed]} by the dump's provenance"
        for path, cfg in dump.configs:
            ids = _draft_ids(cfg)
            if ids is not None and len(ids) == k:
                try:
                    b = conv.to_boundary(ids, "specforge", num_layers=layers, keep_order=True)
                except InputError:
                    continue
                return text + f", labelled B{b} by {Path(path).name} (ids {ids}, SpecForge convention)"
        return text + ", unlabelled (no draft config.json beside the dump)"
    if fmt == "hf":
        bs = sorted({c["boundary_index"] for c in caps if c["boundary_index"] is not None})
        post = any(c["post_norm"] for c in caps)
        return (
            f"all-layer stack {_blist(bs)}"
            + (" + the final norm's output" if post else "")
            + f"; {_n(samples, 'stack')}{tok}"
        )
    if fmt == "sglang_dumper":
        names = sorted({(c["key"] or "").split(" ")[0].removeprefix("name=") for c in caps})
        nr = runs.get("runs", 1)
        steps = len(runs.get("steps", [])) or 1
        text = f"SGLang dumper: {_n(nr, 'run')}, {_n(steps, 'step')}"
        if len(ranks["ranks"]) > 1:
            text += f"; {len(ranks['ranks'])} ranks, {ranks['state']}"
        bs = sorted({c["boundary_index"] for c in caps if c["boundary_index"] is not None})
        text += "; names " + ", ".join(names) + (f"; layer tags {_blist(bs)}" if bs else "; no layer tags")
        return text + tok
    if fmt in ("sglang_hook", "trtllm_debug"):
        bs = sorted({c["boundary_index"] for c in caps if c["boundary_index"] is not None})
        passes = f"{samples} forward pass" + ("" if samples == 1 else "es")
        title = "SGLang forward-hook dump" if fmt == "sglang_hook" else "TensorRT-LLM debug_mode dump"
        return f"{title}: {passes}, residual stream at {_blist(bs)}{tok}"
    if fmt == "tensors":
        bs = sorted({c["boundary_index"] for c in caps if c["boundary_index"] is not None})
        return f"per-layer tensors: {len(caps)}" + (f", labelled {_blist(bs)}" if bs else ", unlabelled") + tok
    if fmt == "debuglog":
        values = sum(c.get("printed_values") or 0 for c in caps)
        return f"debug log: {_n(len(caps), 'printed capture')}, {values} values"
    return f"{fmt}: {_n(len(caps), 'capture')} in {_n(samples, 'sample')}{tok}"
