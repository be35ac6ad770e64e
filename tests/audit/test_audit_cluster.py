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
from .conftest import comparable, kinds

DASK = str(Path(sys.executable).with_name("dask"))
HSDIFF = str(Path(sys.executable).with_name("hsdiff"))
TIMEOUT = 300  # generous: the machine may be loaded


def _start(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        args,
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


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
    procs = [
        _start(
            [
                DASK,
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(sched_file),
            ],
            d / "scheduler.log",
        )
    ]
    try:
        _wait(lambda: sched_file.exists() and "address" in sched_file.read_text(), "the scheduler")
        address = json.loads(sched_file.read_text())["address"]
        workers = [
            _start(
                [
                    DASK,
                    "worker",
                    address,
                    "--nthreads",
                    "1",
                    "--no-nanny",
                    "--no-dashboard",
                    "--host",
                    "127.0.0.1",
                    "--name",
                    f"w{i}",
                ],
                d / f"worker{i}.log",
            )
            for i in range(2)
        ]
        procs += workers

        from distributed import Client

        with Client(address, timeout="60s") as c:
            c.wait_for_workers(2, timeout=TIMEOUT)
        yield address, workers, d
    finally:
        for p in reversed(procs):
            _stop(p)


def test_cluster_gives_the_same_report(acceptance, local_report, cluster, tmp_path):
    root, _ = acceptance
    address, _, _ = cluster
    out = tmp_path / "cluster.json"
    p = subprocess.run(
        [HSDIFF, "audit", str(root), "--cluster", address, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert p.returncode == 1, p.stderr
    report = json.loads(out.read_text())
    assert report["execution"]["mode"] == "cluster" and report["execution"]["workers"] == 2
    assert comparable(report) == comparable(local_report)


def _release(gate: Path, timeout: float = TIMEOUT, required: bool = True) -> None:
    """Let the readers blocked on the named pipe ``gate`` go on: they read a few junk bytes (an unreadable file)."""
    end = time.monotonic() + timeout
    while True:
        try:
            fd = os.open(gate, os.O_WRONLY | os.O_NONBLOCK)  # fails (ENXIO) until a reader has it open
            break
        except OSError:
            if time.monotonic() > end:
                if not required:
                    return
                raise AssertionError("nobody read the gate file") from None
            time.sleep(0.05)
    os.write(fd, b"junk")
    os.close(fd)


def test_interrupted_audit_resumes_without_rereading_and_survives_a_killed_worker(cluster, tmp_path):
    """The acceptance files plus a named pipe named like a training file: a worker that opens it
    waits until the test writes to it, so the audit is certainly still running when it is
    interrupted and when a worker is killed (no race with the machine's speed).

    1. Ctrl-C the audit once results arrive; overwrite the files it finished with junk of the same size;
    2. resume it, kill a worker that is processing a task, then release the pipe.
    The resumed audit completes (the scheduler reruns the dead worker's tasks), reports none of the
    junk files (it did not read them: it read exactly the others) and finds exactly the planted problems.
    """
    from distributed import Client

    address, workers, _ = cluster
    root = tmp_path / "train"
    truth = D.build(root)
    gate = root / D.ROWS / "data_99.ckpt"
    os.mkfifo(gate)
    total = 19
    out = tmp_path / "audit.json"
    ck = tmp_path / "audit.json.checkpoint.jsonl"
    args = [HSDIFF, "audit", str(root), "--cluster", address, "--json", str(out)]

    def lines() -> int:
        return len(ck.read_text().splitlines()) - 1 if ck.exists() else 0

    first = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: lines() > 0 or first.poll() is not None, "first results")
        assert first.poll() is None
        first.send_signal(signal.SIGINT)
        _, stderr = first.communicate(timeout=TIMEOUT)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 130 and "interrupted" in stderr, stderr
    _release(gate, timeout=5, required=False)  # the interrupted audit's reader, if its task had started
    finished = [json.loads(line)["file"] for line in ck.read_text().splitlines()[1:]]
    assert 0 < len(finished) < total and not out.exists()
    for name in finished:
        p = root / name
        p.write_bytes(b"\0" * p.stat().st_size)

    second = subprocess.Popen(args + ["--resume"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with Client(address, timeout="60s") as c:
            busy: dict = {}

            def processing() -> bool:
                busy.update({w: k for w, k in c.processing().items() if k})
                return bool(busy) or second.poll() is not None

            _wait(processing, "tasks on the workers")
        assert second.poll() is None
        with Client(address, timeout="60s") as c:
            info = c.scheduler_info()["workers"]
        victim = next(int(info[a]["name"][1:]) for a in busy)  # workers are named w0, w1
        _stop(workers[victim])
        _release(gate)
        _, stderr = second.communicate(timeout=TIMEOUT)
    finally:
        if second.poll() is None:
            second.kill()
    assert second.returncode == 1, stderr
    report = json.loads(out.read_text())
    assert report["files_scanned"] == total and report["files_resumed"] == len(finished)
    assert report["execution"]["files_read"] == total - len(finished)
    got = kinds(report)
    assert got == {
        "unreadable": set(truth["truncated"]) | {f"{D.ROWS}/data_99.ckpt"},
        "non_finite": set(truth["nan"]),
        "layer_mapping_outlier": set(truth["shallow"]),
    }
