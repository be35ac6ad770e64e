"""A CPU forward of an EAGLE-3 draft: the teacher-forced prefix pass and multi-step drafting.

The computation follows SGLang 0.5.23 ``llama_eagle3.py`` (vLLM 0.33.0 is the same for a
single-layer draft):

- the aux states of the target, concatenated ``[T, k*H]``, go through ``fc`` (after ``input_norm`` or
  per-slot ``fc_norm`` when the draft has them; SGLang l.237-247, vLLM l.397-418);
- the decoder layer keeps the ``fc`` output as residual, feeds ``cat([input_layernorm(embed(token)),
  hidden_norm(hidden)])`` to q/k/v (SGLang l.97-102; vLLM's ``norm_before_residual`` keeps the
  normed hidden as residual, l.101-122), adds attention and MLP outputs with fused add+norm
  (l.114-117), and the final norm gives the logits over the draft vocabulary (l.263-269);
- the **pre-norm** sum is the hidden state handed to the next drafting step (``aux`` in SGLang
  l.268, ``hidden_prenorm`` in vLLM l.283-286), the post-norm one for an EAGLE-3.1 draft with
  ``norm_output`` (SGLang l.207, l.267-268; vLLM l.252, l.285-286): from the second step on, the draft
  reads its own hidden state instead of ``fc(target aux)`` — the shape test in SGLang l.238.

Drafting from a start position ``t``: step 1 is the prefix pass's output at ``t`` (the draft saw
``embed(x[t+1])`` and the target's aux at ``t``); step ``s`` runs at position ``t + s - 1`` on the
token drafted at step ``s - 1`` and attends to the prefix keys ``0..t`` plus its own ancestors'
keys. With ``topk > 1`` the tree grows as SGLang's ``select_top_k_tokens`` does (each of the ``topk``
live nodes proposes ``topk`` children; the best ``topk`` by cumulative probability live on) and the
``num_draft_tokens - 1`` best nodes overall are sent to verification (``organize_draft_results``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..extras import needs
from .checkpoint import Draft

with needs("draft", "--draft (the draft's forward, hsdiff.draft)"):
    import torch
    import torch.nn.functional as F

__all__ = ["Prefix", "DraftTree", "prefix_pass", "draft_tree", "draft_logits", "fed_back"]

#: Queries processed together in the prefix pass and in drafting (bounds memory to O(chunk * T)).
CHUNK = 256


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(w.dtype) * w


def _inv_freq(d: Draft) -> torch.Tensor:
    inv = 1.0 / (d.rope_theta ** (torch.arange(0, d.head_dim, 2, dtype=torch.float32) / d.head_dim))
    s = d.rope_scaling
    if s is None:
        return inv
    # llama3 scaling (transformers' _compute_llama3_parameters)
    factor, low, high = (
        float(s.get("factor", 8.0)),
        float(s.get("low_freq_factor", 1.0)),
        float(s.get("high_freq_factor", 4.0)),
    )
    old = float(s.get("original_max_position_embeddings", 8192))
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    mid = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old / high) & (wavelen <= old / low)
    return torch.where(medium, mid, scaled)


def _rope(x: torch.Tensor, pos: torch.Tensor, inv: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` [..., heads, hd] at positions ``pos`` [...] (rotate-half layout, as HF/SGLang Llama)."""
    ang = pos.float()[..., None] * inv
    cos = torch.cat([ang.cos(), ang.cos()], -1)[..., None, :].to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()], -1)[..., None, :].to(x.dtype)
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


def _lin(d: Draft, name: str, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, d.weights[f"{name}.weight"], d.weights.get(f"{name}.bias"))


def input_hidden(d: Draft, feats: torch.Tensor) -> torch.Tensor:
    """``fc`` of the concatenated target aux states ``[..., k*H]`` -> ``[..., H]``."""
    x = feats.to(d.weights["fc.weight"].dtype)
    if d.norm_before_fc:
        x = _rms(x, d.weights["input_norm.weight"], d.rms_norm_eps)
    if d.fc_norm:
        x = torch.cat(
            [_rms(c, d.weights[f"fc_norm.{i}.weight"], d.rms_norm_eps) for i, c in enumerate(x.chunk(d.num_aux, -1))],
            -1,
        )
    return _lin(d, "fc", x)


def _qkv(d: Draft, tokens: torch.Tensor, hidden: torch.Tensor, pos: torch.Tensor, inv: torch.Tensor):
    p, eps = "layers.0.", d.rms_norm_eps
    normed = _rms(hidden, d.weights[p + "hidden_norm.weight"], eps)
    residual = normed if d.norm_before_residual else hidden
    emb = _rms(d.weights["embed_tokens.weight"][tokens], d.weights[p + "input_layernorm.weight"], eps)
    x = torch.cat([emb, normed], -1)
    shape = x.shape[:-1]
    q = _lin(d, p + "self_attn.q_proj", x).view(*shape, d.num_heads, d.head_dim)
    k = _lin(d, p + "self_attn.k_proj", x).view(*shape, d.num_kv_heads, d.head_dim)
    v = _lin(d, p + "self_attn.v_proj", x).view(*shape, d.num_kv_heads, d.head_dim)
    return _rope(q, pos, inv), _rope(k, pos, inv), v, residual


def _finish(d: Draft, attn: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    p = "layers.0."
    h = _lin(d, p + "self_attn.o_proj", attn) + residual
    x = _rms(h, d.weights[p + "post_attention_layernorm.weight"], d.rms_norm_eps)
    return _lin(d, p + "mlp.down_proj", F.silu(_lin(d, p + "mlp.gate_proj", x)) * _lin(d, p + "mlp.up_proj", x)) + h


def draft_logits(d: Draft, h: torch.Tensor) -> torch.Tensor:
    """Logits over the draft vocabulary from a pre-norm hidden state."""
    return F.linear(_rms(h, d.weights["norm.weight"], d.rms_norm_eps), d.weights["lm_head.weight"])


def fed_back(d: Draft, h: torch.Tensor) -> torch.Tensor:
    """The hidden state a drafting step hands the next: the pre-norm one, or the post-norm one (``norm_output``)."""
    return _rms(h, d.weights["norm.weight"], d.rms_norm_eps) if d.norm_output else h


def _expand(d: Draft, x: torch.Tensor) -> torch.Tensor:
    """Repeat KV heads for grouped-query attention: [..., nkv, hd] -> [..., nh, hd]."""
    return x.repeat_interleave(d.num_heads // d.num_kv_heads, dim=-2)


@dataclass(frozen=True, eq=False)
class Prefix:
    """The teacher-forced pass over one sequence: keys/values per position and the output hidden."""

    keys: torch.Tensor  # [T, nh, hd]
    values: torch.Tensor  # [T, nh, hd]
    hidden: torch.Tensor  # [T, H] pre-norm output (what step 2 reads)


@torch.no_grad()
def prefix_pass(d: Draft, feats: torch.Tensor, next_tokens: torch.Tensor) -> Prefix:
    """Run the draft over a whole sequence as the engine's draft-extend does after verification.

    ``feats`` [T, k*H] are the target's aux states at positions 0..T-1; ``next_tokens`` [T] the
    token *after* each position (``x[1:]`` plus whatever follows the last one).
    """
    T = feats.shape[0]
    inv = _inv_freq(d)
    q, k, v, res = _qkv(d, next_tokens, input_hidden(d, feats), torch.arange(T), inv)
    k, v = _expand(d, k), _expand(d, v)
    scale = d.head_dim**-0.5
    out = []
    for a in range(0, T, CHUNK):
        b = min(T, a + CHUNK)
        s = torch.einsum("thd,shd->hts", q[a:b], k[:b]) * scale
        mask = torch.arange(b)[None, :] <= torch.arange(a, b)[:, None]
        s = s.masked_fill(~mask[None], float("-inf"))
        out.append(torch.einsum("hts,shd->thd", s.softmax(-1), v[:b]).reshape(b - a, -1))
    return Prefix(k, v, _finish(d, torch.cat(out), res))


@dataclass(frozen=True, eq=False)
class DraftTree:
    """Drafted nodes for each start: target token ids, parent node (-1 = root) and depth (1-based).

    ``selected`` marks the ``num_draft_tokens - 1`` nodes sent to verification. For ``topk == 1`` the
    nodes form a chain: node j is at depth j + 1.
    """

    tokens: torch.Tensor  # [N, M] target ids
    parents: torch.Tensor  # [N, M]
    depth: torch.Tensor  # [M]
    selected: torch.Tensor  # [N, M] bool


@torch.no_grad()
def draft_tree(
    d: Draft, prefix: Prefix, starts: torch.Tensor, num_steps: int, topk: int = 1, num_draft_tokens: int | None = None
) -> DraftTree:
    """Draft from each start position in ``starts`` [N] as the engine does (see the module docstring)."""
    parts = [
        _draft_chunk(d, prefix, starts[i : i + CHUNK], num_steps, topk, num_draft_tokens)
        for i in range(0, len(starts), CHUNK)
    ]
    return DraftTree(
        torch.cat([p.tokens for p in parts]),
        torch.cat([p.parents for p in parts]),
        parts[0].depth,
        torch.cat([p.selected for p in parts]),
    )


def _draft_chunk(
    d: Draft, prefix: Prefix, starts: torch.Tensor, num_steps: int, topk: int, num_draft_tokens: int | None
) -> DraftTree:
    N, K = len(starts), topk
    inv = _inv_freq(d)
    scale = d.head_dim**-0.5
    T = prefix.keys.shape[0]
    pmask = torch.arange(T)[None, :] <= starts[:, None]  # [N, T]
    lp = draft_logits(d, prefix.hidden[starts]).float().log_softmax(-1)  # [N, Vd]
    score, tok = lp.topk(K, -1)  # [N, K] draft ids
    tokens, parents, scores, depth = [tok], [torch.full((N, K), -1)], [score], [1] * K
    live_node = torch.arange(K).expand(N, K)  # node index of each live branch
    live_tok, live_score = tok, score
    hidden = fed_back(d, prefix.hidden[starts])[:, None, :].expand(N, K, -1)  # input hidden of each live branch
    anc_k = prefix.keys.new_zeros(N, K, 0, d.num_heads, d.head_dim)  # ancestors' keys/values
    anc_v = anc_k
    n_nodes = K
    for step in range(2, num_steps + 1):
        pos = (starts + step - 1)[:, None].expand(N, K)
        q, k, v, res = _qkv(d, d.to_target_ids(live_tok), hidden, pos, inv)
        k, v = _expand(d, k), _expand(d, v)  # [N, K, nh, hd]
        keys = torch.cat([anc_k, k[:, :, None]], 2)  # [N, K, a+1, nh, hd]
        vals = torch.cat([anc_v, v[:, :, None]], 2)
        s_pre = torch.einsum("nbhd,thd->nbht", q, prefix.keys) * scale
        s_pre = s_pre.masked_fill(~pmask[:, None, None, :], float("-inf"))
        s_own = torch.einsum("nbhd,nbahd->nbha", q, keys) * scale
        p = torch.cat([s_pre, s_own], -1).softmax(-1)
        attn = torch.einsum("nbht,thd->nbhd", p[..., :T], prefix.values) + torch.einsum(
            "nbha,nbahd->nbhd", p[..., T:], vals
        )
        h = _finish(d, attn.reshape(N, K, -1), res)  # [N, K, H]
        clp, ctok = draft_logits(d, h).float().log_softmax(-1).topk(K, -1)  # [N, K, K]
        cscore = (live_score[..., None] + clp).reshape(N, K * K)
        ctok = ctok.reshape(N, K * K)
        cparent = live_node[..., None].expand(N, K, K).reshape(N, K * K)
        tokens.append(ctok)
        parents.append(cparent)
        scores.append(cscore)
        depth += [step] * (K * K)
        best = cscore.topk(K, -1).indices  # [N, K] among the K*K children
        src = best // K  # the live branch each comes from
        live_node = n_nodes + best
        n_nodes += K * K
        live_tok = ctok.gather(1, best)
        live_score = cscore.gather(1, best)
        gather = src[:, :, None, None, None].expand(-1, -1, keys.shape[2], d.num_heads, d.head_dim)
        anc_k, anc_v = keys.gather(1, gather), vals.gather(1, gather)
        hidden = fed_back(d, h).gather(1, src[..., None].expand(-1, -1, h.shape[-1]))
    all_scores = torch.cat(scores, 1)
    M = all_scores.shape[1]
    keep = min(M, (num_draft_tokens - 1) if num_draft_tokens else M)
    selected = torch.zeros(N, M, dtype=torch.bool)
    selected.scatter_(1, all_scores.topk(keep, -1).indices, True)
    return DraftTree(d.to_target_ids(torch.cat(tokens, 1)), torch.cat(parents, 1), torch.tensor(depth), selected)
