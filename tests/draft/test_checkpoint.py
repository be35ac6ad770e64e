"""The draft loader (engine names and shapes, safe loading, one-line errors) and the draft's CPU forward."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

from hsdiff.cli._group import flag
from hsdiff.draft import load_draft
from hsdiff.draft.predict import acceptance_from_tree
from hsdiff.draft.run import draft_tree, prefix_pass
from hsdiff.errors import ConfigError, FormatError, InputError, UnsafeFileError

from . import tiny


@pytest.fixture
def target(tmp_path):
    return tiny.write_target(tmp_path / "target")


def test_reads_the_engine_layout_with_the_target_embeddings(tmp_path, target):
    d = load_draft(tiny.write_draft(tmp_path / "draft"), target=target)
    assert (d.num_aux, d.hidden_size, d.draft_vocab_size, d.vocab_size, d.layer_ids) == (3, 32, 20, 50, (1, 2, 3))
    assert d.embeddings_from == str(target)
    assert "layers.0.self_attn.q_proj.weight" in d.weights  # midlayer. read as layers.0., like both engines
    assert d.to_target_ids(torch.tensor([0, 3])).tolist() == [1, 7]  # d2t holds target - draft
    assert not d.warnings


@pytest.mark.parametrize("prefix", ["model.layers.0.", "layers.0."])
def test_names_with_model_prefix_or_layers_0(tmp_path, target, prefix):
    w = {("model." + k if k.startswith(("fc", "norm")) else k): v for k, v in tiny.weights(prefix=prefix).items()}
    d = load_draft(tiny.write_draft(tmp_path / "draft", w), target=target)
    assert torch.equal(d.weights["fc.weight"], tiny.weights()["fc.weight"])


def test_bin_weights_load_through_the_safe_loader(tmp_path, target):
    d = load_draft(tiny.write_draft(tmp_path / "draft", fmt="bin"), target=target)
    assert torch.equal(d.weights["lm_head.weight"], tiny.weights()["lm_head.weight"])


class _Evil:
    def __reduce__(self):
        import os

        return (os.system, ("touch PWNED",))


def test_a_pickle_with_code_is_refused_and_never_run(tmp_path, target, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "draft"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(tiny.config()))
    with open(folder / "pytorch_model.bin", "wb") as f:
        pickle.dump({"fc.weight": _Evil()}, f, protocol=2)
    with pytest.raises(UnsafeFileError, match="os.system|posix.system"):
        load_draft(folder, target=target)
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize(
    "change, error, words",
    [
        (
            lambda w, c: w.pop("midlayer.self_attn.k_proj.weight"),
            FormatError,
            "lack midlayer|lack layers.0.self_attn.k_proj",
        ),
        (lambda w, c: w.update({"fc.weight": torch.zeros(32, 64)}), FormatError, "fc.weight has shape \\[32, 64\\]"),
        (lambda w, c: c["eagle_config"].update(eagle_aux_hidden_state_layer_ids=[1, 2]), FormatError, "fc.weight"),
        (lambda w, c: w.pop("d2t"), FormatError, "no d2t"),
        (lambda w, c: w.update({"d2t": torch.full((20,), 40)}), FormatError, "outside the target vocabulary"),
        (lambda w, c: c.update(architectures=["LlamaForCausalLM"]), ConfigError, "not an EAGLE-3 draft"),
        (lambda w, c: c.update(num_hidden_layers=2), ConfigError, "single-layer"),
    ],
)
def test_malformed_drafts_get_one_line_errors(tmp_path, target, change, error, words):
    w, c = tiny.weights(), tiny.config()
    change(w, c)
    with pytest.raises(error, match=words) as e:
        load_draft(tiny.write_draft(tmp_path / "draft", w, c), target=target)
    assert "\n" not in str(e.value) and str(tmp_path) in str(e.value)


def test_embeddings_are_needed_from_somewhere(tmp_path):
    with pytest.raises(InputError, match="`target=DIR`") as e:  # the parameter; the command line says its flag
        load_draft(tiny.write_draft(tmp_path / "draft"))
    assert "(--target-model DIR)" in e.value.in_terms(flag)


def test_damaged_weights(tmp_path, target):
    folder = tiny.write_draft(tmp_path / "draft")
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(FormatError, match="model.safetensors"):
        load_draft(folder, target=target)


def test_forward_and_chain_match_the_reference_draft_with_a_kv_cache(tmp_path, target):
    """Every start's drafted chain equals the reference implementation run incrementally."""
    d = load_draft(tiny.write_draft(tmp_path / "draft"), target=target)
    ref = tiny.reference_draft(tiny.weights(), tiny.config(), d.weights["embed_tokens.weight"])
    torch.manual_seed(3)
    T, steps = 12, 4
    feats, toks = torch.randn(T, 3 * tiny.H), torch.randint(0, tiny.V, (T + 1,))
    pre = prefix_pass(d, feats, toks[1:])
    tree = draft_tree(d, pre, torch.arange(T), steps)
    assert tree.tokens.shape == (T, steps) and tree.selected.all()
    with torch.no_grad():
        cache = [torch.empty(0), torch.empty(0)]
        h_all = ref.extend(toks[1:], ref.fc(feats), 0, cache)
        assert torch.allclose(h_all, pre.hidden, atol=1e-4)
        for t in range(T):
            c = [cache[0][: t + 1], cache[1][: t + 1]]
            h = h_all[t : t + 1]
            chain = []
            for k in range(steps):
                dtok = ref.to_target(ref.logits(h).argmax(-1))
                chain.append(int(dtok))
                h = ref.extend(dtok, h, t + k + 1, c)
            assert tree.tokens[t].tolist() == chain, t


def test_tree_with_topk_keeps_the_best_paths(tmp_path, target):
    d = load_draft(tiny.write_draft(tmp_path / "draft"), target=target)
    torch.manual_seed(4)
    T = 8
    pre = prefix_pass(d, torch.randn(T, 3 * tiny.H), torch.randint(0, tiny.V, (T,)))
    chain = draft_tree(d, pre, torch.arange(T), 3)
    tree = draft_tree(d, pre, torch.arange(T), 3, topk=2, num_draft_tokens=6)
    assert tree.tokens.shape == (T, 2 + 2 * 4) and tree.selected.sum(1).tolist() == [5] * T
    assert torch.equal(tree.tokens[:, 0], chain.tokens[:, 0])  # the top-1 first token is always drafted
    assert (tree.depth[:2] == 1).all() and (tree.parents[:, :2] == -1).all()
    assert tree.selected[:, :2].all()  # both depth-1 nodes outscore their own children


def test_greedy_verification_walks_the_selected_tree():
    # nodes: 0,1 at depth 1 (tokens 5, 6); 2,3 children of 1 (tokens 7, 8); 4 child of 3 (token 9)
    tokens = torch.tensor([[5, 6, 7, 8, 9]])
    parents = torch.tensor([[-1, -1, 1, 1, 3]])
    depth = torch.tensor([1, 1, 2, 2, 3])
    sel = torch.ones(1, 5, dtype=torch.bool)
    ok = torch.ones(1, 3, dtype=torch.bool)
    walk = lambda refs, s=sel, k=ok: int(acceptance_from_tree(tokens, parents, depth, s, torch.tensor([refs]), k))  # noqa: E731
    assert walk([6, 8, 9]) == 3
    assert walk([5, 8, 9]) == 1  # 8 is a child of node 1, not of node 0
    assert walk([6, 7, 9]) == 2
    assert walk([4, 8, 9]) == 0
    assert walk([6, 8, 9], sel & torch.tensor([[1, 1, 1, 1, 0]], dtype=torch.bool)) == 2  # node 4 not sent
    assert walk([6, 8, 9], sel, torch.tensor([[True, True, False]])) == 2  # reference unknown
