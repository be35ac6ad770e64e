"""hsdiff audit --cluster against a real ``dask scheduler`` and ``dask worker`` processes on 127.0.0.1.

The scheduler picks a free port (``--port 0``) and writes its address to a scheduler file; workers
run without a nanny so that killing one really removes it. Everything is stopped at the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from . import dataset as D
from .test_audit import acceptance, comparable, kinds, local_report  # noqa: F401 - fixtures

DASK = str(Path(sys.executable).with_name("dask"))
HSDIFF = str(Path(sys.executable).with_name("hsdiff"))
TIMEOUT = 300  # generous: the machine may be loaded


def _start(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(args, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
    p.wait(timeout=60)


def _wait(cond, what: str, timeout: float = TIMEOUT) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("cluster")
    sched_file = d / "scheduler.json"
    procs = [_start([DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                     "--scheduler-file", str(sched_file)], d / "scheduler.log")]
    try:
        _wait(lambda: sched_file.exists() and "address" in sched_file.read_text(), "the scheduler")
        address = json.loads(sched_file.read_text())["address"]
        workers = [_start([DASK, "worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard",
                           "--host", "127.0.0.1", "--name", f"w{i}"], d / f"worker{i}.log") for i in range(2)]
        procs += workers

        from distributed import Client

        with Client(address, timeout="60s") as c:
            c.wait_for_workers(2, timeout=TIMEOUT)
        yield address, workers, d
    finally:
        for p in reversed(procs):
            _stop(p)


def test_cluster_gives_the_same_report(acceptance, local_report, cluster, tmp_path):  # noqa: F811
    root, _ = acceptance
    address, _, _ = cluster
    out = tmp_path / "cluster.json"
    p = subprocess.run([HSDIFF, "audit", str(root), "--cluster", address, "--json", str(out)],
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 1, p.stderr
    report = json.loads(out.read_text())
    assert report["execution"]["mode"] == "cluster" and report["execution"]["workers"] == 2
    assert comparable(report) == comparable({k: v for k, v in local_report.items() if k != "_stdout"})


def test_interrupted_cluster_audit_resumes_without_rereading(cluster, tmp_path):
    """Ctrl-C an audit once results arrive, overwrite the files it finished with junk of the same
    size, resume: the resumed audit reports none of them (it did not read them) and reads the rest."""
    address, _, _ = cluster
    root = tmp_path / "train"
    truth = D.build(root, extra_copies=300)
    out = tmp_path / "audit.json"
    ck = tmp_path / "audit.json.checkpoint.jsonl"
    args = [HSDIFF, "audit", str(root), "--cluster", address, "--json", str(out)]
    audit = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: ck.exists() and len(ck.read_text().splitlines()) > 1 or audit.poll() is not None, "first results")
        audit.send_signal(signal.SIGINT)
        _, stderr = audit.communicate(timeout=TIMEOUT)
    finally:
        if audit.poll() is None:
            audit.kill()
    assert audit.returncode == 130 and "interrupted" in stderr, stderr
    finished = [json.loads(line)["file"] for line in ck.read_text().splitlines()[1:]]
    assert 0 < len(finished) < 318 and not out.exists()
    for name in finished:
        p = root / name
        p.write_bytes(b"\0" * p.stat().st_size)
    p = subprocess.run(args + ["--resume"], capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 1, p.stderr
    report = json.loads(out.read_text())
    assert report["files_resumed"] == len(finished) and report["execution"]["files_read"] == 318 - len(finished)
    got = kinds(report)
    assert got["unreadable"] == set(truth["truncated"]) and got["non_finite"] == set(truth["nan"])
    assert got["layer_mapping_outlier"] == set(truth["shallow"]) and got["duplicate"] == set(truth["copies"])


def test_killing_a_worker_mid_audit_still_completes(cluster, tmp_path):
    """A larger set (the acceptance files and 300 byte copies of good ones): one worker is killed as
    soon as the first results arrive; the scheduler moves its tasks to the other worker."""
    address, workers, _ = cluster
    root = tmp_path / "train"
    truth = D.build(root, extra_copies=300)
    out = tmp_path / "audit.json"
    ck = tmp_path / "audit.json.checkpoint.jsonl"
    audit = subprocess.Popen([HSDIFF, "audit", str(root), "--cluster", address, "--json", str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: ck.exists() and len(ck.read_text().splitlines()) > 1 or audit.poll() is not None, "first results")
        finished_at_kill = len(ck.read_text().splitlines()) - 1
        still_running = audit.poll() is None
        _stop(workers[0])
        stdout, stderr = audit.communicate(timeout=TIMEOUT)
    finally:
        if audit.poll() is None:
            audit.kill()
    assert still_running and finished_at_kill < 318, "the audit ended before a worker could be killed"
    assert audit.returncode == 1, stderr
    report = json.loads(out.read_text())
    assert report["files_scanned"] == 318
    got = kinds(report)
    assert got["duplicate"] == set(truth["copies"])
    assert got["layer_mapping_outlier"] == set(truth["shallow"])
    assert got["non_finite"] == set(truth["nan"]) and got["unreadable"] == set(truth["truncated"])
