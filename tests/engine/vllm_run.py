"""Run vLLM (CPU) with an EAGLE-3 draft and record what it does; executed by the engine venv's python.

    python tests/engine/vllm_run.py PLAN.json OUT/

PLAN: ``{"target": DIR, "draft": DIR, "dtype": "float32", "runs": [RUN, ...]}`` with each RUN
``{"name": str, "config": {...draft config.json...}, "prompts": [[token ids], ...], "max_tokens": n,
"num_speculative_tokens": k}`` and optionally ``"draft": DIR``, another draft's weights than the
plan's. For each run, one engine (in this process, one after the other):

- ``OUT/NAME/engine.log``: what vLLM printed during the run (the aux-layer line, the SpecDecoding
  metrics lines), as a server's log;
- ``OUT/NAME/result.json``: the generated token ids, vLLM's spec-decode counters (``get_metrics``),
  and ``aux_layers``: the layers the target model was set to capture (``aux_hidden_state_layers``);
- ``OUT/NAME/dump/req-I.safetensors``: what the target's forward returned as aux hidden states over
  prompt + generated tokens (one full prefill, recorded by a forward hook on vLLM's own model),
  written as vLLM's hidden-states connector writes a request with ``include_output_tokens``
  (vllm==0.32.0 distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py:540-542,
  :415-418: ``hidden_states`` [T, k, H], ``token_ids`` [T] = all tokens but the last). The
  connector itself copies through CUDA streams and events, so it does not run on the CPU.

Only vLLM, torch and safetensors are imported: this runs in the engine's own environment.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process: one load of vLLM
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_LOG_STATS_INTERVAL", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")  # no usage report, no hub look-up: everything is local
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _inner_model(model):
    """vLLM's LlamaModel inside LlamaForCausalLM: the module whose forward returns (hidden, aux)."""
    return model.model


def run_one(plan: dict, run: dict, out: Path) -> dict:
    import torch
    from safetensors.torch import save_file
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    rdir = out / run["name"]
    (rdir / "dump").mkdir(parents=True, exist_ok=True)
    draft = rdir / "draft"
    draft.mkdir(exist_ok=True)
    (draft / "config.json").write_text(json.dumps(run["config"], indent=2))
    weights = draft / "model.safetensors"
    if not weights.exists():
        os.symlink(Path(run.get("draft", plan["draft"])).resolve() / "model.safetensors", weights)

    t0 = time.time()
    llm = LLM(
        model=plan["target"],
        dtype=plan.get("dtype", "float32"),
        enforce_eager=True,
        seed=0,
        max_model_len=plan.get("max_model_len", 512),
        max_num_batched_tokens=plan.get("max_model_len", 512),
        enable_prefix_caching=False,
        disable_log_stats=False,
        speculative_config={
            "method": "eagle3",
            "model": str(draft),
            "num_speculative_tokens": run["num_speculative_tokens"],
        },
    )
    load_s = time.time() - t0
    records: list[tuple[int, list]] = []

    def install(model):
        inner = _inner_model(model)
        forward = inner.forward  # vLLM's compile decorator calls self.forward directly: module hooks never run

        def recorded(*args, **kwargs):
            output = forward(*args, **kwargs)
            if isinstance(output, tuple) and len(output) == 2 and isinstance(output[1], list):
                ids = kwargs.get("input_ids", args[0] if args else None)
                n = int(ids.shape[0]) if ids is not None else int(output[0].shape[0])
                records.append((n, [a[:n].detach().to("cpu", copy=True) for a in output[1]]))
            return output

        inner.forward = recorded
        return list(inner.aux_hidden_state_layers)

    aux_layers = llm.apply_model(install)[0]
    greedy = SamplingParams(temperature=0.0, max_tokens=run["max_tokens"], ignore_eos=run.get("ignore_eos", False))
    t1 = time.time()
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in run["prompts"]], greedy, use_tqdm=False)
    gen_s = time.time() - t1
    llm.llm_engine.do_log_stats()  # the last interval's SpecDecoding metrics line
    generated = [list(o.outputs[0].token_ids) for o in outs]
    metrics = {}
    for m in llm.get_metrics():
        if m.name.startswith("vllm:spec_decode"):
            metrics[m.name] = getattr(m, "values", None) or getattr(m, "value", None)

    one = SamplingParams(temperature=0.0, max_tokens=1)
    for i, (p, g) in enumerate(zip(run["prompts"], generated)):
        tokens = list(p) + list(g)[:-1]  # the connector's include_output_tokens: the last token never ran
        records.clear()
        llm.generate([TokensPrompt(prompt_token_ids=tokens)], one, use_tqdm=False)
        n, aux = records[0]
        if n != len(tokens):
            raise SystemExit(f"{run['name']}: the first forward ran {n} tokens, not the {len(tokens)} of the prompt")
        save_file(
            {"hidden_states": torch.stack(aux, dim=1).contiguous(), "token_ids": torch.tensor(tokens)},
            str(rdir / "dump" / f"req-{i}.safetensors"),
        )
    result = {
        "name": run["name"],
        "aux_layers": aux_layers,
        "generated": generated,
        "metrics": metrics,
        "load_seconds": round(load_s, 1),
        "generate_seconds": round(gen_s, 1),
    }
    (rdir / "result.json").write_text(json.dumps(result))
    del llm
    gc.collect()
    from vllm.distributed import cleanup_dist_env_and_memory

    cleanup_dist_env_and_memory()
    return result


def main() -> None:
    plan = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    only = set(sys.argv[3:])
    for run in plan["runs"]:
        if only and run["name"] not in only:
            continue
        (out / run["name"]).mkdir(exist_ok=True)
        sys.stdout.flush()
        saved = os.dup(1)
        log = os.open(out / run["name"] / "engine.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)  # the run's log is what vLLM prints (its handler writes to stdout), as a server's log
        try:
            r = run_one(plan, run, out)
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(log)
            os.close(saved)
        print(
            f"[engine] {r['name']}: aux layers {r['aux_layers']}, load {r['load_seconds']} s, "
            f"generate {r['generate_seconds']} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
