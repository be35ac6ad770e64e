"""Train a second EAGLE-3 draft for SmolLM2-135M, independently of the fixture's (``fixtures/train_draft.py``).

    python tests/engine/train_eagle3.py TARGET_DIR OUT_DIR

Nothing is shared with the fixture draft or with ``fixtures/eagle3_ref.py``: another data set
(the target's greedy replies to how-to questions under another system prompt, generated here with
``transformers``' ``generate``), other training layers (vLLM's default for 30 layers, B[2, 15, 27]
written as vLLM's top-level ``eagle_aux_hidden_state_layer_ids``), another architecture (the
target's 9 query / 3 KV heads, a 1,536-token draft vocabulary), another recipe (the head started
from the target's own output rows, three test-time-training steps with equal weights, loss on the
replies only, warm-up and cosine schedule, gradient clipping, seed 1234) and another implementation
of the layer: ``transformers``' own Llama pieces (``LlamaRMSNorm``, ``LlamaMLP``,
``LlamaRotaryEmbedding``, ``apply_rotary_pos_emb``) and ``scaled_dot_product_attention`` over the
steps' keys laid side by side under a block mask.

Output: ``config.json`` and ``model.safetensors`` (``fc``, ``midlayer.*``, ``norm``, ``lm_head``,
``d2t``, ``t2d``; no ``embed_tokens``: the engine takes the target's), the names vLLM's
``llama_eagle3.py`` loads; ``train.json``: what was trained on and how it went.
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding, apply_rotary_pos_emb

SEED = 1234
LAYERS = [2, 15, 27]  # vLLM ids = boundaries: vLLM's default for a 30-layer target
DRAFT_VOCAB = 1536
INTERMEDIATE = 768
TTT_STEPS = 3
EPOCHS = 5
MAX_NEW = 80
SYSTEM = "You are a patient assistant who gives practical advice."
TEMPLATES = [
    "How do I {}?",
    "What should I know before I {}?",
    "Give me some tips to {}.",
    "What are common mistakes when people {}?",
]
TRAIN_TASKS = [
    "bake bread",
    "plant tomatoes",
    "learn to swim",
    "paint a room",
    "change a tire",
    "start running",
    "save money",
    "write a resume",
    "train a puppy",
    "make pancakes",
    "clean a kitchen",
    "study for an exam",
]
#: Held out from training: the engine tests measure acceptance on replies to these.
EVAL_PROMPTS = [
    "How do I grow basil?",
    "What should I know before I adopt a cat?",
    "Give me some tips to sleep better.",
    "What are common mistakes when people cook rice?",
]


def chat(tok, user: str) -> list[int]:
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    return list(tok(text, add_special_tokens=False)["input_ids"])


class Layer(nn.Module):
    """The EAGLE-3 decoder layer: q/k/v read [input_layernorm(embedding), hidden_norm(hidden)] (2H wide),
    the residual is the incoming hidden state."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        H, nh, nkv, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.nh, self.nkv, self.hd = nh, nkv, hd
        self.input_layernorm = LlamaRMSNorm(H, cfg.rms_norm_eps)
        self.hidden_norm = LlamaRMSNorm(H, cfg.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(H, cfg.rms_norm_eps)
        self.q_proj = nn.Linear(2 * H, nh * hd, bias=False)
        self.k_proj = nn.Linear(2 * H, nkv * hd, bias=False)
        self.v_proj = nn.Linear(2 * H, nkv * hd, bias=False)
        self.o_proj = nn.Linear(nh * hd, H, bias=False)
        self.mlp = LlamaMLP(cfg)

    def qkv(self, emb, hidden, cos, sin):
        x = torch.cat([self.input_layernorm(emb), self.hidden_norm(hidden)], -1)
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        return q, k, v

    def out(self, attn, residual):
        h = self.o_proj(attn.transpose(1, 2).flatten(2)) + residual
        return self.mlp(self.post_attention_layernorm(h)) + h


class Draft(nn.Module):
    def __init__(self, cfg: LlamaConfig, embed: torch.Tensor):
        super().__init__()
        H = cfg.hidden_size
        self.fc = nn.Linear(len(LAYERS) * H, H, bias=False)
        self.midlayer = Layer(cfg)
        self.norm = LlamaRMSNorm(H, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(H, DRAFT_VOCAB, bias=False)
        self.rotary = LlamaRotaryEmbedding(cfg)
        self.register_buffer("embed", embed, persistent=False)

    def forward(self, aux, tokens, valid):
        """Logits of each TTT step: step k at position i reads token ``tokens[:, i + k + 1]`` and (k > 0)
        its own step-(k-1) output at i; it attends to step 0's keys at positions <= i and to its own
        earlier steps' keys at i, as the engine's drafting step k does."""
        B, T, _ = aux.shape
        pos = torch.arange(T)[None].expand(B, T)
        causal = torch.ones(T, T, dtype=torch.bool).tril()[None] & valid[:, None, :]  # [B, T, T]
        diag = torch.eye(T, dtype=torch.bool)[None].expand(B, T, T)
        h = self.fc(aux)
        keys, vals, logits = [], [], []
        for k in range(TTT_STEPS):
            cos, sin = self.rotary(h, pos + k)
            q, kk, vv = self.midlayer.qkv(self.embed[tokens[:, k + 1 : k + 1 + T]], h, cos, sin)
            keys.append(kk)
            vals.append(vv)
            mask = torch.cat([causal] + [diag] * k, -1)[:, None]  # [B, 1, T, (k+1)T]
            attn = F.scaled_dot_product_attention(
                q, torch.cat(keys, 2), torch.cat(vals, 2), attn_mask=mask, enable_gqa=True
            )
            h = self.midlayer.out(attn, h)
            logits.append(self.lm_head(self.norm(h)))
        return logits


@torch.no_grad()
def replies(tok, model, prompts: list[str], batch: int = 24) -> list[tuple[list[int], list[int]]]:
    out = []
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    for i in range(0, len(prompts), batch):
        ids = [chat(tok, p) for p in prompts[i : i + batch]]
        n = max(map(len, ids))
        inp = torch.tensor([[pad] * (n - len(x)) + x for x in ids])
        mask = torch.tensor([[0] * (n - len(x)) + [1] * len(x) for x in ids])
        gen = model.generate(
            input_ids=inp, attention_mask=mask, max_new_tokens=MAX_NEW, do_sample=False, pad_token_id=pad
        )
        for x, g in zip(ids, gen[:, n:].tolist()):
            if tok.eos_token_id in g:
                g = g[: g.index(tok.eos_token_id) + 1]
            out.append((x, g))
        print(f"generated {len(out)}/{len(prompts)} replies", flush=True)
    return out


def main() -> None:
    target, out = Path(sys.argv[1]), Path(sys.argv[2])
    torch.manual_seed(SEED)
    random.seed(SEED)
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(str(target))
    model = LlamaForCausalLM.from_pretrained(str(target), dtype=torch.float32).eval()
    prompts = [t.format(x) for x in TRAIN_TASKS for t in TEMPLATES]
    assert not set(prompts) & set(EVAL_PROMPTS)
    data = []
    for prompt, reply in replies(tok, model, prompts):
        s = torch.tensor(prompt + reply)
        with torch.no_grad():
            o = model(input_ids=s[None], output_hidden_states=True, use_cache=False)
        data.append((s, torch.cat([o.hidden_states[b][0] for b in LAYERS], -1), o.logits[0].argmax(-1), len(prompt)))
    gen_s = time.time() - t0
    V, tcfg = model.config.vocab_size, model.config
    counts = torch.zeros(V, dtype=torch.long)
    for _, _, g, p in data:
        counts += torch.bincount(g[p - 1 :], minlength=V)
    hot = counts.argsort(descending=True)[:DRAFT_VOCAB].sort().values
    to_draft = torch.full((V,), -100, dtype=torch.long)
    to_draft[hot] = torch.arange(DRAFT_VOCAB)
    theta = (tcfg.rope_parameters or {}).get("rope_theta", 10000.0)
    cfg = LlamaConfig(
        hidden_size=tcfg.hidden_size,
        intermediate_size=INTERMEDIATE,
        num_attention_heads=9,
        num_key_value_heads=3,
        head_dim=64,
        rms_norm_eps=tcfg.rms_norm_eps,
        vocab_size=V,
        max_position_embeddings=tcfg.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": theta},
    )
    draft = Draft(cfg, model.get_input_embeddings().weight.detach().clone())
    with torch.no_grad():  # the head starts as the target's own (tied) output rows of the draft vocabulary
        draft.lm_head.weight.copy_(model.get_output_embeddings().weight[hot])
        draft.norm.weight.copy_(model.model.norm.weight)
    del model
    opt = torch.optim.AdamW(
        [p for p in draft.parameters() if p.requires_grad], lr=1.5e-3, weight_decay=0.01, betas=(0.9, 0.95)
    )
    bs = 4
    total = EPOCHS * math.ceil(len(data) / bs)
    warm = max(1, total // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / (total - warm)))
    )
    log = []
    for epoch in range(EPOCHS):
        random.shuffle(data)
        tot, hits, n = 0.0, 0, 0
        for i in range(0, len(data), bs):
            batch = data[i : i + bs]
            T = max(len(s) for s, *_ in batch)
            aux = torch.zeros(len(batch), T, batch[0][1].shape[-1])
            toks = torch.zeros(len(batch), T + TTT_STEPS + 1, dtype=torch.long)
            tgt = torch.full((len(batch), T + TTT_STEPS + 1), -100, dtype=torch.long)
            valid = torch.zeros(len(batch), T, dtype=torch.bool)
            for j, (s, a, g, p) in enumerate(batch):
                aux[j, : len(s)], toks[j, : len(s)], valid[j, : len(s)] = a, s, True
                tgt[j, p - 1 : len(s)] = to_draft[g[p - 1 :]]  # the reply's tokens only (the greedy after p-1 on)
            loss = torch.zeros(())
            for k, lg in enumerate(draft(aux, toks, valid)):
                y = tgt[:, k + 1 : k + 1 + T]
                loss = loss + F.cross_entropy(lg.flatten(0, 1), y.flatten(), ignore_index=-100) / TTT_STEPS
                if k == 0:
                    m = y != -100
                    hits, n = hits + int((lg.argmax(-1)[m] == y[m]).sum()), n + int(m.sum())
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
            opt.step()
            sched.step()
            tot += float(loss) * len(batch)
        log.append(
            {
                "epoch": epoch + 1,
                "loss": round(tot / len(data), 4),
                "step1_top1": round(hits / max(n, 1), 4),
                "seconds": round(time.time() - t0),
            }
        )
        print(f"epoch {epoch + 1}: {log[-1]}", flush=True)

    out.mkdir(parents=True, exist_ok=True)
    sd = {k: v for k, v in draft.state_dict().items() if not k.startswith("rotary")}
    attn = ("q_proj", "k_proj", "v_proj", "o_proj")
    sd = {
        (k.replace("midlayer.", "midlayer.self_attn.") if k.split(".")[1] in attn else k): v.detach().contiguous()
        for k, v in sd.items()
    }
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[hot] = True
    sd["d2t"], sd["t2d"] = (hot - torch.arange(DRAFT_VOCAB)).contiguous(), t2d
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    dcfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": cfg.hidden_size,
        "target_hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": 1,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "head_dim": 64,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": theta,
        "max_position_embeddings": cfg.max_position_embeddings,
        "vocab_size": V,
        "draft_vocab_size": DRAFT_VOCAB,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "eagle_aux_hidden_state_layer_ids": LAYERS,
    }
    (out / "config.json").write_text(json.dumps(dcfg, indent=2) + "\n")
    (out / "train.json").write_text(
        json.dumps(
            {
                "prompts": len(prompts),
                "tokens": sum(len(s) for s, *_ in data),
                "generate_seconds": round(gen_s),
                "epochs": log,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out} in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
