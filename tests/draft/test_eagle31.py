"""EAGLE-3.1 drafts: the norms around the fc and the fed-back hidden state, switched on by the config as each
engine reads it, and run as the engines run them (SGLang and vLLM ``llama_eagle3.py``)."""

from __future__ import annotations

import pytest
import torch

from hsdiff.draft.checkpoint import load_draft
from hsdiff.draft.run import draft_tree, input_hidden, prefix_pass
from hsdiff.errors import FormatError

from . import tiny


@pytest.fixture
def target(tmp_path):
    return tiny.write_target(tmp_path / "target")


def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x / x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt() * w


def _norm_weights(seed: int = 5) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    w = tiny.weights()
    w["input_norm.weight"] = 1 + 0.2 * torch.randn(tiny.K * tiny.H, generator=g)
    for i in range(tiny.K):
        w[f"fc_norm.{i}.weight"] = 1 + 0.2 * torch.randn(tiny.H, generator=g)
    return w


def test_norm_output_feeds_back_the_post_norm_state(tmp_path, target):
    """From the second step on the draft reads its own post-norm hidden state (``norm_output``): every chain
    equals the reference draft run with ``norm(h)`` handed to the next step."""
    d = load_draft(tiny.write_draft(tmp_path / "draft", cfg=tiny.config(norm_output=True)), target=target)
    assert d.norm_output and not d.fc_norm and not d.norm_before_fc
    ref = tiny.reference_draft(tiny.weights(), tiny.config(), d.weights["embed_tokens.weight"])
    torch.manual_seed(3)
    T, steps = 10, 4
    feats, toks = torch.randn(T, 3 * tiny.H), torch.randint(0, tiny.V, (T + 1,))
    tree = draft_tree(d, prefix_pass(d, feats, toks[1:]), torch.arange(T), steps)
    plain = load_draft(tiny.write_draft(tmp_path / "plain"), target=target)
    before = draft_tree(plain, prefix_pass(plain, feats, toks[1:]), torch.arange(T), steps)
    assert not torch.equal(tree.tokens, before.tokens)  # the fed-back state changes what is drafted
    with torch.no_grad():
        cache = [torch.empty(0), torch.empty(0)]
        h_all = ref.extend(toks[1:], ref.fc(feats), 0, cache)
        for t in range(T):
            c = [cache[0][: t + 1], cache[1][: t + 1]]
            h, chain = h_all[t : t + 1], []
            for k in range(steps):
                dtok = ref.to_target(ref.logits(h).argmax(-1))
                chain.append(int(dtok))
                h = ref.extend(dtok, ref.norm(h), t + k + 1, c)
            assert tree.tokens[t].tolist() == chain, t


@pytest.mark.parametrize(
    "flags, expect",
    [
        ({"fc_norm": True}, "chunks"),
        ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3], "norm_before_fc": True}}, "concat"),
        ({"norm_before_fc": True, "fc_norm": True}, "both"),
    ],
)
def test_the_norms_before_the_fc(tmp_path, target, flags, expect):
    """One RMSNorm over the concatenation, one per aux chunk, or both in that order (SGLang l.238-247)."""
    w = _norm_weights()
    d = load_draft(tiny.write_draft(tmp_path / "draft", w, tiny.config(**flags)), target=target)
    x = torch.randn(7, tiny.K * tiny.H) * 4
    want = x
    if expect in ("concat", "both"):
        want = _rms(want, w["input_norm.weight"])
    if expect in ("chunks", "both"):
        want = torch.cat([_rms(c, w[f"fc_norm.{i}.weight"]) for i, c in enumerate(want.chunk(tiny.K, -1))], -1)
    assert torch.allclose(input_hidden(d, x), want @ w["fc.weight"].T, atol=1e-4)
    assert torch.allclose(input_hidden(d, x * torch.rand(7, 1) * 9), input_hidden(d, x), atol=1e-4)  # scale-free


def test_each_engine_reads_the_flags_its_own_way(tmp_path, target):
    """SGLang takes the legacy ``use_aux_norm`` for fc_norm, vLLM does not: there the per-chunk norms are off
    and their weights are not loaded."""
    folder = tiny.write_draft(tmp_path / "draft", _norm_weights(), tiny.config(use_aux_norm=True))
    sg, vl = load_draft(folder, target=target, engine="sglang"), load_draft(folder, target=target, engine="vllm")
    assert sg.fc_norm and not vl.fc_norm
    assert "fc_norm.0.weight" in sg.weights and "fc_norm.0.weight" not in vl.weights
    assert any("fc_norm.0.weight" in x and "do not load" in x for x in vl.warnings)
    # norm weights in the checkpoint but no flag: not applied (vLLM drops input_norm, SGLang never builds it)
    d = load_draft(folder, target=target, engine="vllm")
    assert not d.norm_before_fc and any("input_norm.weight" in x for x in d.warnings)


def test_eagle_config_s_norm_before_fc_decides_over_the_top_level_one(tmp_path, target):
    cfg = tiny.config(norm_before_fc=True)
    cfg["eagle_config"]["norm_before_fc"] = False
    d = load_draft(tiny.write_draft(tmp_path / "draft", _norm_weights(), cfg), target=target)
    assert not d.norm_before_fc


def test_a_norm_switched_on_without_its_weights_is_refused(tmp_path, target):
    with pytest.raises(FormatError, match="switches fc_norm on but the weights lack fc_norm.0.weight.*vLLM refuses"):
        load_draft(tiny.write_draft(tmp_path / "draft", cfg=tiny.config(fc_norm=True)), target=target)
