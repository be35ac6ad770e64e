"""hsdiff audit on files captured as an engine captures: SmolLM2 run in padded batches, in bf16, with
SDPA or eager attention by batch.

Shared prefixes then differ from file to file by rounding (more at deeper layers), as in a real
capture run, on every CPU; the tests check that the grouping tolerance measured from that spread keeps a clean set
clean, still separates other layers and another model of the same width, and that files sharing no
prefix are placed by their norm profile or left unplaced (``noisy.py`` says how the files are made).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from hsdiff.audit import AuditOptions, audit
from hsdiff.sinks import SINK_FACTOR

from .. import builders as B
from . import dataset as D
from . import noisy as N

pytestmark = pytest.mark.slow

GOOD, SHALLOW = D.GOOD, D.SHALLOW
NOISY = 18  # the first 18 conversations hold the majority; the last 6 are the outliers of each case


@pytest.fixture(scope="module")
def run() -> list[N.Captured]:
    """One capture run of the 24 conversations: batches of 4, 1, 3, 2, 5, ... right- and left-padded, SDPA or
    eager attention."""
    return N.capture(N.bf16_model(), [N.chat_ids(u) for u in N.USERS])


def _audit(root: Path, tmp: Path, **kw):
    return audit(root, AuditOptions(workers=0, checkpoint=str(tmp / f"{root.name}.jsonl"), **kw))


def _kinds(report) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for p in report.problems:
        out.setdefault(p.kind, set()).add(p.file)
    return out


def _shared_prefix_errors(run: list[N.Captured], boundary: int) -> list[float]:
    """Median relative error of every pair of the run on their shared prefix (full vectors, sinks left out)."""
    out = []
    for i, a in enumerate(run):
        for b in run[i + 1 :]:
            n = int((a.ids[: len(b.ids)] == b.ids[: len(a.ids)]).long().cumprod(0).sum())
            x, y = a.boundaries[boundary, :n].float(), b.boundaries[boundary, :n].float()
            ny = y.norm(dim=-1)
            keep = ny <= SINK_FACTOR * ny.median()
            out.append(float(((x - y).norm(dim=-1)[keep] / ny[keep]).median()))
    return out


def test_clean_noisy_set_is_one_group_and_the_tolerance_comes_from_its_spread(run, tmp_path):
    """Nothing flagged; each slot's tolerance covers the run's own rounding on shared prefixes (measured
    here on the full vectors) and stays below what separates the slot's boundary from its neighbours."""
    root = tmp_path / "clean"
    N.write(root, [(c, GOOD) for c in run])
    report = _audit(root, tmp_path)
    assert not report.problems and report.exit_code == 0, report.problems
    assert [(g.files, g.majority, g.evidence) for g in report.groups] == [(24, True, "prefix values")]
    assert report.tolerance_source.startswith("measured")
    spread = [max(_shared_prefix_errors(run, b)) for b in GOOD]
    # eager and SDPA attention round apart on any CPU: were this 0, noisy.capture would have stopped
    # switching them (and the test below would check nothing)
    assert all(s > 0 for s in spread), ("the run's two attention kernels gave bit-identical prefixes", spread)
    for b, noise, tol in zip(GOOD, spread, report.tolerance):
        neighbours = [
            float(
                (
                    (run[0].boundaries[b + d, 1:] - run[0].boundaries[b, 1:]).float().norm(dim=-1)
                    / run[0].boundaries[b, 1:].float().norm(dim=-1)
                ).median()
            )
            for d in (-1, 1)
        ]
        assert noise < tol < min(neighbours) / 2, (b, noise, tol, neighbours)


def test_shallower_files_of_the_same_run_are_the_only_outliers(run, tmp_path):
    root = tmp_path / "shallow"
    names = N.write(root, [(c, GOOD) for c in run[:NOISY]] + [(c, SHALLOW) for c in run[NOISY:]])
    report = _audit(root, tmp_path)
    assert _kinds(report) == {"layer_mapping_outlier": set(names[NOISY:])}
    assert [(g.files, g.majority) for g in report.groups] == [(NOISY, True), (6, False)]
    assert report.groups[1].relation.startswith("shallower layers than the majority at every slot")


def test_another_model_of_the_same_width_is_told_apart(run, tmp_path):
    """Six conversations captured from another model (same width, same boundaries): two groups, and the
    outlier is named another model, not shallower layers, though its norms are lower at every slot."""
    other = N.capture(N.other_model(), [N.chat_ids(u) for u in N.USERS[NOISY:]], batches=(4, 2))
    root = tmp_path / "two-models"
    names = N.write(root, [(c, GOOD) for c in run[:NOISY]] + [(c, GOOD) for c in other])
    report = _audit(root, tmp_path)
    assert _kinds(report) == {"layer_mapping_outlier": set(names[NOISY:])}
    assert [(g.files, g.majority) for g in report.groups] == [(NOISY, True), (6, False)]
    b = report.groups[1]
    assert b.relation.startswith("another model") and "shallower" not in b.relation
    assert all(o < m for o, m in zip(b.median_norms, report.groups[0].median_norms))


def _user_only(user: str) -> list[int]:
    """A conversation with no system prompt: its first tokens differ from every templated file's."""
    tok = N._tokenizer()
    return tok(f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]


@pytest.fixture(scope="module")
def strangers(run) -> list[N.Captured]:
    """Three conversations that share no prefix with the run's files, captured in the same way."""
    return N.capture(
        N.bf16_model(), [_user_only(u) for u in ("Say hello.", "Name a colour.", "Is ice cold?")], batches=(2,)
    )


def test_files_sharing_no_prefix_are_placed_by_norm_profile(run, strangers, tmp_path):
    root = tmp_path / "placed"
    N.write(root, [(c, GOOD) for c in run] + [(c, GOOD) for c in strangers])
    report = _audit(root, tmp_path)
    assert not report.problems and not report.warnings
    assert [(g.files, g.evidence) for g in report.groups] == [(27, "prefix values + norm profile")]


def test_files_whose_norm_profile_fits_no_group_are_unplaced_not_flagged(run, strangers, tmp_path):
    root = tmp_path / "unplaced"
    names = N.write(root, [(c, GOOD) for c in run] + [(c, SHALLOW) for c in strangers])
    report = _audit(root, tmp_path)
    assert not report.problems and report.exit_code == 0
    assert [(g.id, g.files) for g in report.groups] == [("A", 24), ("unplaced", 3)]
    assert set(report.groups[1].members) == set(names[24:])
    assert len(report.warnings) == 1 and "3 file(s) share no token prefix" in report.warnings[0]
    doc = json.loads(report.to_json())
    assert doc["groups"][1]["evidence"] == "none" and doc["problems"] == []


_PEAK = """
import json, sys
from hsdiff.audit.fingerprint import Job, summarise, summarise_batch
def peak():  # VmHWM: this process's own high-water mark (ru_maxrss would carry the forking parent's)
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
small, big, big2 = sys.argv[1:4]
summarise(Job(small, "small"))  # imports and first-use allocations
before = peak()
out = summarise_batch([Job(big, "big"), Job(big2, "big2")])
print(json.dumps({"before": before, "after": peak(), "records": [len(json.dumps(s.to_record())) for s in out],
                  "errors": [s.error for s in out]}))
"""


def test_a_worker_holds_one_file_at_a_time(tmp_path):
    """Two ~140 MB files (real SmolLM2 rows tiled to 15,360 tokens) summarised in one task: the
    process's peak memory grows by about one file, not two (files are memory-mapped and walked in
    chunks, and a file's mapping goes when its summary is done), and each summary is a few kB."""
    rows = D.sample(0, 24, GOOD)
    tile = 640
    paths = []
    for k in range(2):
        obj = {
            key: (v.repeat(*([1] * (v.dim() - 2)), tile, 1) if v.dim() >= 2 else v.repeat(tile))
            for key, v in rows.items()
        }
        obj["aux_hidden_state"] = obj["aux_hidden_state"] * (1 + k)  # two different files
        torch.save(obj, tmp_path / f"big{k}.ckpt")
        paths.append(tmp_path / f"big{k}.ckpt")
    small = tmp_path / "small.ckpt"
    torch.save(rows, small)
    size = paths[0].stat().st_size
    assert size > 100e6
    p = subprocess.run(
        [sys.executable, "-c", _PEAK, str(small), *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=B.ROOT,
    )
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["errors"] == [None, None]
    assert got["after"] - got["before"] < 1.25 * size, (got, size)  # two files held at once: ~1.8x
    assert max(got["records"]) < 20_000 < size / 1000


def test_norm_profiles_of_the_run_are_tight(run):
    """What norm-profile placement relies on: within one run, each slot's median norm varies by a few
    percent from file to file, while a layer off (B 1, 14, 26 against B 2, 15, 27) moves slot 0 by a third."""

    def medians(c: N.Captured, bs) -> np.ndarray:
        out = []
        for b in bs:
            n = c.boundaries[b].float().norm(dim=-1)
            out.append(float(n[n <= SINK_FACTOR * n.median()].median()))
        return np.array(out)

    good = np.log(np.array([medians(c, GOOD) for c in run]))
    shallow = np.log(medians(run[0], SHALLOW))
    centre = np.median(good, axis=0)
    spread = np.abs(good - centre).max(axis=0)
    assert np.all(spread < 0.15) and abs(shallow[0] - centre[0]) > 2 * spread[0]
