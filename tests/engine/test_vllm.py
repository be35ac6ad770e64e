"""vLLM 0.32 (CPU) as the authority: what it captures for each draft config, its dumps fed to
``hsdiff compare`` and ``gate``, its log read as evidence, and its measured acceptance against
hsdiff's prediction. The runs are described in ``conftest.py``; each test reads their results.
"""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

import hsdiff
from hsdiff.cli import cli as hsdiff_cli
from hsdiff.configs import read_ids
from hsdiff.draft import Speculation, predict_acceptance
from hsdiff.engine_log import read_engine_log
from hsdiff.rules import conventions as conv

from .conftest import NUM_STEPS, RUNS, TARGET, EngineRun, L, draft_config

pytestmark = pytest.mark.engine

#: vLLM's CPU build runs the V1 model runner ("Model Runner V2 requires Triton"): it reads the
#: top-level key, then eagle_config's. The V2 runner's reading stays source-verified.
RUNNER = "v1"
TRAINED = [2, 15, 27]  # the boundaries both drafts were trained on


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """Median per-token relative error ||a - b|| / ||b||."""
    return float(((a - b).norm(dim=-1) / b.norm(dim=-1).clamp_min(1e-6)).median())


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_vllm_captures_the_boundaries_hsdiff_reads(run, engine, hf_states):
    """The layers vLLM set and the values its forward returned are the boundaries hsdiff's rule names."""
    got: EngineRun = engine[run.name]
    ids = read_ids(draft_config(run), "vllm", num_layers=L, vllm_runner=RUNNER)
    assert got.result["aux_layers"] == list(ids.boundaries), ids
    expected_key = (
        None
        if run.top is None and run.nested is None
        else "eagle_aux_hidden_state_layer_ids"
        if run.top is not None
        else "eagle_config.eagle_aux_hidden_state_layer_ids"
    )
    assert ids.key == expected_key and ids.fallback == (expected_key is None)
    if ids.fallback:
        assert list(ids.boundaries) == conv.default_boundaries(L, "vllm")
    log = read_engine_log(got.log)
    assert log.aux_layers == (None if ids.fallback else tuple(run.top or run.nested or ()))
    for f in sorted(got.dump.glob("*.safetensors")):
        d = load_file(str(f))
        hs, tokens = d["hidden_states"], d["token_ids"]
        assert hs.shape == (len(tokens), len(ids.boundaries), 576)
        layers, _ = hf_states(tokens.tolist())
        for slot, b in enumerate(ids.boundaries):
            errs = [rel_err(hs[:, slot].float(), layers[k]) for k in range(L + 1)]
            best = min(range(L + 1), key=errs.__getitem__)
            assert best == b and errs[b] < 1e-3, (f.name, slot, b, best, errs[b])


def _train_dump(root, engine_run: EngineRun, hf_states, prompts) -> None:
    """A SpecForge dump of the run's token sequences at the draft's training layers (the HF model),
    its loss mask on the reply as SpecForge writes it."""
    out = root / "rows_0-2000"
    out.mkdir(parents=True)
    for i, f in enumerate(sorted(engine_run.dump.glob("*.safetensors"), key=lambda p: int(p.stem.split("-")[1]))):
        tokens = load_file(str(f))["token_ids"].long()
        layers, final = hf_states(tokens.tolist())
        assert tokens[: len(prompts[i])].tolist() == prompts[i]
        torch.save(
            {
                "input_ids": tokens,
                "loss_mask": (torch.arange(len(tokens)) >= len(prompts[i])).long(),
                "aux_hidden_state": torch.cat([layers[b] for b in TRAINED], -1)[None].clone(),
                "hidden_state": final[None].clone(),
            },
            out / f"data_{i}.ckpt",
        )


@pytest.fixture(scope="module")
def train_dumps(engine, hf_states, prompts, tmp_path_factory):
    """Per acceptance run: a training dump of the same tokens that run's dump holds."""
    out = {}
    for r in RUNS:
        if r.acceptance:
            out[r.name] = tmp_path_factory.mktemp(f"train-{r.name}")
            _train_dump(out[r.name], engine[r.name], hf_states, prompts[r.prompt_set])
    return out


def cli(*args):
    return CliRunner().invoke(hsdiff_cli, [str(a) for a in args], catch_exceptions=False)


def test_compare_reads_vllm_dumps_and_log(engine, train_dumps):
    """The connector-format dumps as INFER, the ids from the engine's log line: the right ids pass,
    the incident's are found a slot late, the fixture's SGLang ids (one layer shallow on vLLM) match nothing."""
    cfg = TARGET / "config.json"
    right = cli(
        "compare",
        train_dumps["right"],
        engine["right"].dump,
        "--engine-log",
        engine["right"].log,
        "--model-config",
        cfg,
        "--json",
        "-",
    )
    assert right.exit_code == 0, right.output
    doc = json.loads(right.output)
    assert doc["configured"]["boundary_indices"] == TRAINED and doc["verdict"] == "ok"
    assert doc["engine_log"]["eagle_aux_hidden_state_layer_ids"] == [2, 15, 27]
    assert doc["measured_acceptance"]["acceptance_length"] > 1.0

    inc = hsdiff.compare(
        train_dumps["incident"], engine["incident"].dump, engine="vllm", layer_ids=[15, 0, 2], model_config=str(cfg)
    )
    assert inc.verdict == "mismatch" and list(inc.configured.boundary_indices) == [0, 2, 15]
    # slots 0 and 1 are found one slot late; B27 was never captured, so slot 2 stays open
    assert list(inc.recommended.boundary_indices) == [2, 15, None]
    assert [s.boundary_index for s in inc.slots][:2] == [2, 15]
    assert "slot" in inc.cause and "embeddings" in inc.cause

    nested = cli(
        "compare",
        train_dumps["nested"],
        engine["nested"].dump,
        "--engine-log",
        engine["nested"].log,
        "--model-config",
        cfg,
    )
    assert nested.exit_code == 1 and "MISMATCH" in nested.output  # B[1, 14, 26]: each slot one layer shallow
    assert "about one layer shallower" in nested.output and "measured by vllm" in nested.output
    doc = json.loads(
        cli(
            "compare",
            train_dumps["nested"],
            engine["nested"].dump,
            "--engine-log",
            engine["nested"].log,
            "--model-config",
            cfg,
            "--json",
            "-",
        ).output
    )
    # SGLang's ids on vLLM: the training layers, inferred from the way every capture misses (not observed)
    assert doc["diagnosis"]["miss"]["direction"] == "shallower" and "SGLang" in doc["diagnosis"]["miss"]["explained_by"]
    assert doc["recommended"]["eagle_aux_hidden_state_layer_ids"] == [2, 15, 27]
    assert {s["evidence"] for s in doc["slots"]} == {"inferred"}
    deeper = json.loads(
        cli(
            "compare",
            train_dumps["deeper"],
            engine["deeper"].dump,
            "--engine-log",
            engine["deeper"].log,
            "--model-config",
            cfg,
            "--json",
            "-",
        ).output
    )
    # [3, 16, 28] on vLLM: one layer deep, which no engine's reading of those ids explains; the errors
    # are what one layer moves the states by, so each id moves one layer shallower in vLLM's own
    # convention: the training layers, inferred (not observed), and the gate still fails
    miss = deeper["diagnosis"]["miss"]
    assert miss["direction"] == "deeper" and miss["layers"] == 1 and miss["explained_by"] == []
    assert deeper["verdict"] == "mismatch" and "about one layer deeper" in deeper["cause"]
    assert deeper["recommended"]["eagle_aux_hidden_state_layer_ids"] == [2, 15, 27]
    assert {s["evidence"] for s in deeper["slots"]} == {"inferred"}
    assert "dump the layers B2, B15 and B27" in deeper["cause"]

    clash = cli(
        "compare",
        train_dumps["right"],
        engine["right"].dump,
        "--engine-log",
        engine["right"].log,
        "--layer-ids",
        "1,14,26",
        "--model-config",
        cfg,
    )
    assert clash.exit_code == 2 and "differ from the ids the engine logged" in clash.output


def test_gate_uses_the_measured_acceptance(engine, train_dumps):
    """gate --engine-log: the logged ids must be the ones read from the config; --min-acceptance judges
    the engine's measured value."""
    r = engine["right"]
    m = read_engine_log(r.log).acceptance
    assert m is not None
    base = [
        "gate",
        train_dumps["right"],
        r.dump,
        "--draft-config",
        r.dir / "draft" / "config.json",
        "--engine",
        "vllm",
        "--vllm-runner",
        RUNNER,
        "--target-config",
        TARGET / "config.json",
        "--engine-log",
        r.log,
        "--json",
        "-",
    ]
    ok = cli(*base, "--min-acceptance", f"{m.acceptance_length - 0.05:.2f}")
    assert ok.exit_code == 0, ok.output
    checks = {c["name"]: c for c in json.loads(ok.output)["checks"]}
    assert checks["engine-log-ids"]["ok"] and checks["measured-acceptance"]["ok"]
    low = cli(*base, "--min-acceptance", f"{m.acceptance_length + 0.05:.2f}")
    assert low.exit_code == 1
    assert not {c["name"]: c for c in json.loads(low.output)["checks"]}["measured-acceptance"]["ok"]
    # the log of another run: the ids the engine logged are not the config's
    other = cli(*base[:-4], "--engine-log", engine["deeper"].log, "--json", "-")
    assert other.exit_code == 1
    assert not {c["name"]: c for c in json.loads(other.output)["checks"]}["engine-log-ids"]["ok"]


def test_log_acceptance_equals_the_engine_counters(engine):
    """The SpecDecoding lines, summed over intervals, give what vLLM's own counters give."""
    for r in RUNS:
        if not r.acceptance:
            continue
        got = engine[r.name]
        m = read_engine_log(got.log).acceptance
        met = got.result["metrics"]
        drafts = met["vllm:spec_decode_num_drafts"]
        assert m is not None and m.drafts == drafts and m.accepted_tokens == met["vllm:spec_decode_num_accepted_tokens"]
        assert m.acceptance_length == pytest.approx(1 + met["vllm:spec_decode_num_accepted_tokens"] / drafts, rel=1e-9)
        per_pos = met["vllm:spec_decode_num_accepted_tokens_per_pos"]
        assert len(m.per_position) == NUM_STEPS
        assert m.per_position == pytest.approx([a / drafts for a in per_pos], abs=2e-3)  # printed to 3 decimals


@pytest.fixture(scope="module")
def predictions(engine, train_dumps):
    """hsdiff's prediction from each acceptance run's own vLLM dump, beside vLLM's measured acceptance."""
    out = {}
    for r in RUNS:
        if not r.acceptance:
            continue
        got = engine[r.name]
        ids = list(r.top or r.nested or [])
        report = hsdiff.compare(
            train_dumps[r.name], got.dump, engine="vllm", layer_ids=ids, model_config=str(TARGET / "config.json")
        )
        pa = predict_acceptance(  # the draft folder vLLM loaded: the run's config.json beside the weights
            train_dumps[r.name], got.dump, report, got.dir / "draft", target=TARGET, tree=Speculation(NUM_STEPS)
        )
        measured = read_engine_log(got.log).acceptance
        assert measured is not None and pa.configured is not None
        out[r.name] = (pa, measured)
    lines = [
        f"{n}: vLLM {m.acceptance_length:.3f} ({m.drafts} steps; per position "
        f"{', '.join(f'{p:.3f}' for p in m.per_position or ())}), hsdiff {p.configured.acceptance_length:.3f} "
        f"(per position {', '.join(f'{x:.3f}' for x in p.configured.per_position)}), "
        f"error {p.configured.acceptance_length / m.acceptance_length - 1:+.1%}"
        for n, (p, m) in out.items()
    ]
    print("\n" + "\n".join(lines))
    return out


def test_prediction_within_ten_percent_of_vllm(predictions):
    for name, (pa, measured) in predictions.items():
        assert pa.reference.startswith("target greedy"), name
        assert pa.configured.acceptance_length == pytest.approx(measured.acceptance_length, rel=0.10), name
        # per drafted position, as vLLM counts it (accepted at position j / verification steps)
        assert pa.configured.per_position == pytest.approx(measured.per_position, abs=0.03), name


def test_prediction_ranks_the_ids_as_vllm_does(predictions):
    """The right ids, every slot one deeper, the embeddings in slot 0: ordered as vLLM orders them.
    Two settings vLLM measures within 2% of each other (a token or two apart on this small draft,
    as the right ids and one layer deeper are) are a tie, which float noise may break either way."""
    three = ("right", "deeper", "incident")
    for a in three:
        for b in three:
            ma, mb = predictions[a][1].acceptance_length, predictions[b][1].acceptance_length
            if ma > mb * 1.02:
                assert (
                    predictions[a][0].configured.acceptance_length > predictions[b][0].configured.acceptance_length
                ), (a, b)
    assert predictions["incident"][1].acceptance_length * 1.02 < predictions["right"][1].acceptance_length


def test_independent_draft_ranks_the_ids_as_vllm_does(predictions):
    """A draft and prompts that are not the project's (``train_eagle3.py``): vLLM puts the right ids,
    every slot one deeper and the embeddings in slot 0 clearly apart, and the prediction orders them alike."""
    three = [predictions[f"indep-{n}"] for n in ("right", "deeper", "incident")]
    measured = [m.acceptance_length for _, m in three]
    predicted = [p.configured.acceptance_length for p, _ in three]
    assert measured[0] > measured[1] * 1.03 and measured[1] > measured[2] * 1.03, measured
    assert predicted[0] > predicted[1] > predicted[2], (predicted, measured)
