"""hsdiff audit in this process and on local Dask processes, on real SmolLM2 hidden states."""

from __future__ import annotations

import json

import pytest
import torch

from hsdiff.audit import AuditOptions, audit

from . import dataset as D
from .conftest import comparable, kinds, run


def test_acceptance_flags_exactly_the_bad_files(acceptance, local_report):
    _, truth = acceptance
    r = local_report
    assert r["execution"]["mode"] == "local" and r["execution"]["workers"] >= 1
    assert r["files_scanned"] == 18 and r["bytes_read"] > 3_000_000
    assert kinds(r) == {
        "layer_mapping_outlier": set(truth["shallow"]),
        "non_finite": set(truth["nan"]),
        "unreadable": set(truth["truncated"]),
    }
    flagged = {p["file"] for p in r["problems"]}
    assert not flagged & set(truth["good"])
    major = [g for g in r["groups"] if g["majority"]]
    assert r["majority_group"] == "A" and len(major) == 1 and major[0]["files"] == 12
    assert major[0]["evidence"] == "prefix values" and "[1, 14, 26]" in major[0]["claimed"]
    outlier = [g for g in r["groups"] if not g["majority"]]
    assert [g["files"] for g in outlier] == [4] and outlier[0]["relation"].startswith("shallower layers")
    by_file = {p["file"]: p["detail"] for p in r["problems"]}
    assert "NaN in slot 1, tokens 5-8" in by_file[truth["nan"][0]]
    assert "truncated" in by_file[truth["truncated"][0]]
    assert "majority group A (12 files)" in by_file[truth["shallow"][0]]
    text = r["_stdout"]
    assert "majority (config.json claims" in text and "worst files" in text
    assert text.index("unreadable") < text.index("non_finite: ") < text.index("layer_mapping_outlier: ")


def test_clean_set_exits_0(tmp_path):
    root = tmp_path / "clean"
    rows = root / D.ROWS
    rows.mkdir(parents=True)
    for k, (i, n) in enumerate([(0, 24), (1, 24), (2, 24), (0, 22)]):
        torch.save(D.sample(i, n, D.GOOD), rows / f"data_{k}.ckpt")
    code, out, _ = run("audit", str(root), "--workers", "0", "--checkpoint", str(tmp_path / "ck.jsonl"))
    assert code == 0, out
    assert "problems: none" in out


def test_shape_mismatch_duplicate_and_slot_shift(tmp_path):
    root = tmp_path / "mixed"
    rows = root / D.ROWS
    rows.mkdir(parents=True)
    for k, (i, n) in enumerate([(0, 24), (1, 24), (2, 24), (0, 23), (1, 23), (2, 23)]):
        torch.save(D.sample(i, n, D.GOOD), rows / f"data_{k}.ckpt")
    (rows / "data_6.ckpt").write_bytes((rows / "data_1.ckpt").read_bytes())  # the same sample twice
    bf16 = D.sample(0, 21, D.GOOD)
    bf16["aux_hidden_state"] = bf16["aux_hidden_state"].bfloat16()
    torch.save(bf16, rows / "data_7.ckpt")
    short_mask = D.sample(1, 21, D.GOOD)
    short_mask["loss_mask"] = short_mask["loss_mask"][:-3]
    torch.save(short_mask, rows / "data_8.ckpt")
    for k, (i, n) in enumerate([(0, 20), (1, 20)]):  # SGLang ids [-1, 1, 14]: the embeddings, then B 2 and B 15
        torch.save(D.sample(i, n, (0, 2, 15)), rows / f"data_{9 + k}.ckpt")
    report = audit(root, AuditOptions(workers=0, checkpoint=str(tmp_path / "ck.jsonl")))
    got = {(p.file.split("/")[-1], p.kind): p.detail for p in report.problems}
    assert set(got) == {
        ("data_6.ckpt", "duplicate"),
        ("data_7.ckpt", "shape_mismatch"),
        ("data_8.ckpt", "shape_mismatch"),
        ("data_9.ckpt", "layer_mapping_outlier"),
        ("data_10.ckpt", "layer_mapping_outlier"),
    }
    assert "same input_ids as rows_0-2000/data_1.ckpt (identical values)" in got[("data_6.ckpt", "duplicate")]
    assert "dtype bfloat16 (others: float32)" in got[("data_7.ckpt", "shape_mismatch")]
    assert "loss_mask has 18" in got[("data_8.ckpt", "shape_mismatch")]
    shift = got[("data_9.ckpt", "layer_mapping_outlier")]
    assert "shifted by 1 slot(s): slot s holds the majority's slot s-1, slot(s) 0 the embeddings" in shift
    assert report.exit_code == 1


def test_resume_reads_no_finished_file(acceptance, local_report, tmp_path):
    """Interrupt an audit after 6 files, overwrite those 6 with junk of the same size, resume.

    A resumed audit that re-read any of them would report it unreadable; the report equals the
    uninterrupted one instead, and only the 12 unfinished files were read.
    """
    import shutil

    src, truth = acceptance
    root = tmp_path / "train"
    shutil.copytree(src, root)
    ck = tmp_path / "ck.jsonl"
    seen: list[int] = []

    def interrupt(what: str, done: int, total: int) -> None:
        seen.append(done)
        if done >= 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        audit(root, AuditOptions(workers=0, checkpoint=str(ck), progress=interrupt))
    finished = [json.loads(line)["file"] for line in ck.read_text().splitlines()[1:]]
    assert len(finished) == 6
    for name in finished:
        p = root / name
        p.write_bytes(b"\0" * p.stat().st_size)
    code, out, _ = run(
        "audit",
        str(root),
        "--workers",
        "0",
        "--resume",
        "--checkpoint",
        str(ck),
        "--json",
        str(tmp_path / "resumed.json"),
    )
    assert code == 1, out
    resumed = json.loads((tmp_path / "resumed.json").read_text())
    assert resumed["files_resumed"] == 6 and resumed["execution"]["files_read"] == 12
    assert comparable(resumed) == comparable(local_report)
    code, out, _ = run("audit", str(root), "--workers", "0", "--checkpoint", str(ck))  # without --resume: read anew
    assert "unreadable 7" in out


def test_fsspec_memory_filesystem_and_sample(acceptance, local_report, tmp_path):
    import fsspec

    src, truth = acceptance
    mem = fsspec.filesystem("memory")
    for p in src.rglob("*"):
        if p.is_file():
            mem.pipe(f"/audit-test/{p.relative_to(src).as_posix()}", p.read_bytes())
    try:
        report = audit("memory://audit-test", AuditOptions(workers=0, checkpoint=str(tmp_path / "ck.jsonl")))
    finally:
        mem.rm("/audit-test", recursive=True)
    assert comparable(json.loads(report.to_json())) == comparable(local_report)
    sampled = audit(f"file://{src}", AuditOptions(workers=0, sample=8, checkpoint=str(tmp_path / "ck2.jsonl")))
    assert sampled.files_listed == 18 and sampled.files_scanned == 8
    assert {p.file for p in sampled.problems} <= {p["file"] for p in local_report["problems"]}


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--workers", "2", "--cluster", "tcp://127.0.0.1:1"], "--workers applies to local processes"),
        (["--json", "{root}/report.json"], "inside the dataset"),
        (["--checkpoint", "{root}/rows_0-2000/ck.jsonl"], "inside the dataset"),
    ],
)
def test_bad_usage_exits_2(acceptance, args, needle):
    root, _ = acceptance
    before = sorted(p.name for p in root.rglob("*"))
    code, _, err = run("audit", str(root), *[a.format(root=root) for a in args])
    assert code == 2 and needle in err and "Traceback" not in err
    assert sorted(p.name for p in root.rglob("*")) == before


def test_legacy_and_gzipped_files_give_their_hidden_size(tmp_path):
    """Four-slot files saved the legacy (non-zip) way or gzipped: the final hidden_state gives the
    hidden size, as for zip files (no "three slots assumed"), and a mixed set is one group."""
    import gzip

    root = tmp_path / "four"
    rows = root / D.ROWS
    rows.mkdir(parents=True)
    four = (2, 9, 15, 27)
    torch.save(D.sample(0, 24, four), rows / "data_0.ckpt")
    torch.save(D.sample(1, 24, four), rows / "data_1.ckpt", _use_new_zipfile_serialization=False)
    torch.save(D.sample(2, 24, four), tmp_path / "plain.ckpt")
    (rows / "data_2.ckpt.gz").write_bytes(gzip.compress((tmp_path / "plain.ckpt").read_bytes()))
    report = audit(root, AuditOptions(workers=0, checkpoint=str(tmp_path / "ck.jsonl")))
    assert [(g.files, g.slots, g.hidden_size) for g in report.groups] == [(3, 4, 576)], report.groups
    assert not report.problems and report.exit_code == 0


def test_progress_on_a_terminal_and_no_dask_chatter_when_piped(acceptance, tmp_path):
    """On a terminal the audit draws a bar with the rate and the time left; piped, on local Dask worker
    processes, it prints its report and nothing else (a local cluster logged 34 INFO lines before)."""
    from .. import ptyrun as P

    root, _ = acceptance
    rc, shown = P.on_tty(["audit", str(root), "--workers", "0", "--json", str(tmp_path / "a.json")])
    assert rc == 1 and "problems:" in shown
    assert "auditing files" in P.bars(shown) and P.RATE_ETA.search(shown), shown[:2000]
    r = P.piped(["audit", str(root), "--workers", "1", "--json", str(tmp_path / "b.json")])
    assert r.returncode == 1 and "problems:" in r.stdout
    assert "\r" not in r.stdout + r.stderr and "auditing files" not in r.stderr
    assert not [line for line in r.stderr.splitlines() if "warning" not in line.lower()], r.stderr
