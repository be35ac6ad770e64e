"""vLLM in the loop: the engine runs once per session, in its own venv (``make engine``), and the tests
read what it did. Without that venv (no network when it was built) every test here is skipped, and
under CI=true fails (tests/conftest.py: a real part that cannot start fails CI).

The runs: SmolLM2-135M (30 layers, hidden 576) as the target and the fixture EAGLE-3 draft
(``fixtures/draft-smollm2``, trained on boundaries B[2, 15, 27]) with a different draft
``config.json`` per run — each run one engine load, so every run checks a reading rule (where the
ids are read, sorting, de-duplication, the ends, the default) and several also measure acceptance.
Three more runs measure acceptance with a draft that is not the project's: trained by
``train_eagle3.py`` (another data set, recipe and implementation) on first use and kept in
``HSDIFF_ENGINE_CACHE`` (default ``~/.cache/hsdiff-engine``), on prompts of its own held-out set.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
DRAFT = ROOT / "fixtures" / "draft-smollm2"
ENGINE_VENV = Path(os.environ.get("HSDIFF_ENGINE_VENV", ROOT / ".venv-engine"))
TARGET = ENGINE_VENV / "smollm2"
L = 30
NUM_STEPS = 5
#: Prompts in no file of the project: the draft's chat templates (fixtures/train_draft.py) on topics it
#: never saw — on other templates this small draft gains almost nothing (vLLM measured 1.08 for the
#: right ids), too little to rank id sets by.
PROMPTS = [
    "Explain glaciers in simple terms.",
    "Why is sleep important?",
    "Describe thunderstorms to a child.",
    "Give three facts about owls.",
]
SYSTEM = "You are a helpful assistant."
TRAINER = Path(__file__).with_name("train_eagle3.py")
CACHE = Path(os.environ.get("HSDIFF_ENGINE_CACHE", Path.home() / ".cache" / "hsdiff-engine"))


@dataclass(frozen=True)
class Run:
    """One engine load: the draft config it was given and, for acceptance runs, a real generation."""

    name: str
    top: list[int] | None  # top-level eagle_aux_hidden_state_layer_ids
    nested: list[int] | None  # eagle_config.eagle_aux_hidden_state_layer_ids
    acceptance: bool  # generate the prompts' replies and measure acceptance
    draft: str = field(default="fixture")  # "fixture", "independent" (train_eagle3.py's) or "fc-norm" (below)
    flags: tuple[tuple[str, bool], ...] = ()  # EAGLE-3.1 flags set in the draft config

    @property
    def prompt_set(self) -> str:
        return "independent" if self.draft == "independent" else "fixture"


#: Ids are vLLM's (boundary indices). Both drafts were trained on B[2, 15, 27].
RUNS = [
    Run("right", [2, 15, 27], None, True),  # top-level key: the training layers
    Run("deeper", [3, 16, 28], [1, 14, 26], True),  # both keys (the top-level wins): every slot one deeper
    Run("incident", [15, 0, 2], None, True),  # unsorted, id 0: embeddings in slot 0
    Run("nested", None, [1, 14, 26], True),  # the fixture as shipped (SGLang's ids), nested only
    Run("ends", [0, L - 1, L - 1, L], None, False),  # id 0, L-1 twice, L (pre-norm last layer)
    Run("default", None, None, False),  # no ids at all
    Run("indep-right", [2, 15, 27], None, True, "independent"),  # the independent draft's training layers
    Run("indep-deeper", [3, 16, 28], None, True, "independent"),  # every slot one deeper
    Run("indep-incident", [15, 0, 2], None, True, "independent"),  # embeddings in slot 0
    # EAGLE-3.1: the fixture draft with per-chunk norms before its fc, and feeding back its post-norm state
    Run("fc-norm", [2, 15, 27], None, True, "fc-norm", (("fc_norm", True),)),
    Run("norm-output", [2, 15, 27], None, True, "fixture", (("norm_output", True),)),
]
MAX_TOKENS = {"fixture": 64, "independent": 96}


@dataclass(frozen=True)
class EngineRun:
    run: Run
    dir: Path
    result: dict

    @property
    def log(self) -> Path:
        return self.dir / "engine.log"

    @property
    def dump(self) -> Path:
        return self.dir / "dump"


def engine_python() -> Path:
    return ENGINE_VENV / "bin" / "python"


def _skip_reason() -> str | None:
    if not (ENGINE_VENV / ".installed").exists():
        return (
            f"no engine venv ({ENGINE_VENV.name}/.installed missing): `make engine` builds it (needs the package index)"
        )
    if not (TARGET / "config.json").exists():
        return f"no SmolLM2 Hugging Face folder in {ENGINE_VENV.name}: `make engine` writes it"
    return None


def chat_ids(tok, user: str) -> list[int]:
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    return list(tok(text, add_special_tokens=False)["input_ids"])


def draft_dir(run: Run) -> Path:
    """The run's draft weights: the fixture's, or the independent draft (trained on first use, then cached)."""
    if run.draft == "independent":
        return independent_draft()
    return fc_norm_draft() if run.draft == "fc-norm" else DRAFT


def fc_norm_draft() -> Path:
    """The fixture draft as EAGLE-3.1 with an RMSNorm per aux chunk before its fc, each weighted with the
    median token RMS of its training layer on the bundled SmolLM2 states: the draft still drafts, and every
    token's scale is now its slot's typical one (the sink tokens' massive activations are not)."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    src = DRAFT / "model.safetensors"
    key = hashlib.sha256(src.read_bytes() + Path(__file__).read_bytes()).hexdigest()[:12]
    out = CACHE / f"draft-fc-norm-{key}"
    if (out / "model.safetensors").exists():
        return out
    rms = {b: [] for b in (2, 15, 27)}
    for f in sorted((ROOT / "fixtures" / "smollm2" / "states").glob("*.safetensors")):
        with safe_open(str(f), "pt") as t:
            states = t.get_tensor("fp32.boundaries")
        for b in rms:
            rms[b].append(states[b].pow(2).mean(-1).sqrt())
    w = load_file(str(src))
    for i, b in enumerate(sorted(rms)):
        w[f"fc_norm.{i}.weight"] = torch.full((w["fc.weight"].shape[1] // 3,), float(torch.cat(rms[b]).median()))
    part = CACHE / f"draft-fc-norm-{key}.partial"
    part.mkdir(parents=True, exist_ok=True)
    save_file(w, str(part / "model.safetensors"))
    (part / "config.json").write_text(json.dumps({**json.loads((DRAFT / "config.json").read_text()), "fc_norm": True}))
    shutil.rmtree(out, ignore_errors=True)
    part.rename(out)
    return out


def independent_draft() -> Path:
    """``train_eagle3.py``'s draft for the target, under a name that changes with the trainer and the target."""
    key = hashlib.sha256(TRAINER.read_bytes() + (TARGET / "config.json").read_bytes()).hexdigest()[:12]
    out = CACHE / f"draft-{key}"
    if (out / "config.json").exists():
        return out
    part = CACHE / f"draft-{key}.partial"
    shutil.rmtree(part, ignore_errors=True)
    t0 = time.time()
    proc = subprocess.run(
        [sys.executable, str(TRAINER), str(TARGET), str(part)],
        capture_output=True,
        text=True,
        timeout=1500,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )
    if proc.returncode != 0:
        pytest.fail(
            f"training the independent draft failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n"
            f"{proc.stderr[-3000:]}"
        )
    part.rename(out)
    sys.stderr.write(f"\n[engine] trained the independent draft in {time.time() - t0:.0f} s: {out}\n")
    return out


def draft_config(run: Run) -> dict:
    cfg = json.loads((draft_dir(run) / "config.json").read_text())
    cfg.pop("eagle_config", None)
    cfg.update(dict(run.flags))
    if run.top is not None:
        cfg["eagle_aux_hidden_state_layer_ids"] = run.top
    if run.nested is not None:
        cfg["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": run.nested, "use_aux_hidden_state": True}
    return cfg


@pytest.fixture(scope="session")
def target_tokenizer():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    tf = pytest.importorskip("transformers")
    return tf.AutoTokenizer.from_pretrained(str(TARGET))


@pytest.fixture(scope="session")
def prompts(target_tokenizer) -> dict[str, list[list[int]]]:
    """Per draft, the prompts acceptance is measured on: the fixture's (above) and the independent
    draft's held-out set, each in its draft's chat template."""
    from .train_eagle3 import EVAL_PROMPTS, chat

    return {
        "fixture": [chat_ids(target_tokenizer, p) for p in PROMPTS],
        "independent": [chat(target_tokenizer, p) for p in EVAL_PROMPTS],
    }


@pytest.fixture(scope="session")
def engine(prompts, tmp_path_factory) -> dict[str, EngineRun]:
    """Every run of :data:`RUNS`, in one engine process (one vLLM import, an engine load per run)."""
    kept = os.environ.get("HSDIFF_ENGINE_OUT")  # a folder to run into, reused while its plan is the same
    out = Path(kept) if kept else tmp_path_factory.mktemp("vllm")
    out.mkdir(parents=True, exist_ok=True)
    plan = {
        "target": str(TARGET),
        "draft": str(DRAFT),
        "dtype": "float32",
        "max_model_len": 512,
        "runs": [
            {
                "name": r.name,
                "config": draft_config(r),
                "draft": str(draft_dir(r)),
                "num_speculative_tokens": NUM_STEPS,
                "prompts": prompts[r.prompt_set] if r.acceptance else prompts[r.prompt_set][:1],
                "max_tokens": MAX_TOKENS[r.prompt_set] if r.acceptance else 8,
            }
            for r in RUNS
        ],
    }
    done = [out / r.name / "result.json" for r in RUNS]
    if (
        (out / "plan.json").exists()
        and json.loads((out / "plan.json").read_text()) == plan
        and all(map(Path.exists, done))
    ):
        return {r.name: EngineRun(r, out / r.name, json.loads(f.read_text())) for r, f in zip(RUNS, done)}
    (out / "plan.json").write_text(json.dumps(plan))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "PYTEST", "OMP_"))}
    iomp = ENGINE_VENV / "lib" / "libiomp5.so"
    if (
        iomp.exists()
    ):  # as vLLM's CPU worker asks (vllm==0.32.0 v1/worker/cpu_worker.py:128-137): 14x faster drafting here
        env["LD_PRELOAD"] = " ".join(x for x in (str(iomp), env.get("LD_PRELOAD", "")) if x)
    t0 = time.time()
    proc = subprocess.run(
        [str(engine_python()), str(Path(__file__).with_name("vllm_run.py")), str(out / "plan.json"), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    (out / "engine.stderr").write_text(proc.stderr)
    if proc.returncode != 0:
        pytest.fail(f"the engine run failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    done = "".join(line + "\n" for line in proc.stdout.splitlines() if line.startswith("[engine]"))
    sys.stderr.write(f"\n[engine] {len(RUNS)} vLLM runs in {time.time() - t0:.0f} s\n{done}")
    return {r.name: EngineRun(r, out / r.name, json.loads((out / r.name / "result.json").read_text())) for r in RUNS}


@pytest.fixture(scope="session")
def hf_states():
    """``states(token_ids)`` -> the fp32 Hugging Face model's residual stream B0..B(L) over those tokens
    ([L + 1, T, H], B=L before the final norm) and its final post-norm state [T, H]."""
    tf = pytest.importorskip("transformers")
    model = tf.LlamaForCausalLM.from_pretrained(str(TARGET), dtype=torch.float32).eval()
    cache: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {}

    def states(tokens) -> tuple[torch.Tensor, torch.Tensor]:
        key = tuple(int(t) for t in tokens)
        if key not in cache:
            last: list[torch.Tensor] = []
            h = model.model.layers[-1].register_forward_hook(
                lambda m, a, o: last.append(o[0] if isinstance(o, tuple) else o)
            )
            with torch.no_grad():
                out = model(input_ids=torch.tensor([key]), output_hidden_states=True, use_cache=False)
            h.remove()
            hs = list(out.hidden_states[:L]) + [last[0]]
            cache[key] = (torch.cat(hs), out.hidden_states[L][0])
        return cache[key]

    return states
