"""``hsdiff watch`` through the command line: ``--once`` exits 0 healthy, 1 collapsed, 2 when the metrics
cannot be read (through click's runner, and once as a real process); a cron job's state file pools the runs
into windows; the alarm goes to stderr, to the events file and to the --on-alarm command, never through a
shell. The page is served by a real HTTP server on 127.0.0.1, written as vLLM writes it (:mod:`.exposition`)."""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from hsdiff.cli import cli

from .exposition import VllmPage

HSDIFF = shutil.which("hsdiff", path=str(Path(sys.executable).parent)) or "hsdiff"

RIGHT = (0.182, 0.006, 0.006, 0.0, 0.0)  # per-position acceptance: vLLM, fixture draft, right ids (README)
WRONG = (0.029, 0.005, 0.0, 0.0, 0.0)  # the same with [15, 0, 2]


def steps(page: VllmPage, drafts: int, rates: tuple[float, ...]) -> None:
    page.steps(drafts, tuple(round(r * drafts) for r in rates))


class Served:
    """A vLLM-like page at http://127.0.0.1:PORT/metrics; ``hits`` counts the paths asked for."""

    def __init__(self, page: VllmPage) -> None:
        self.page = page
        self.hits: list[str] = []
        served = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                served.hits.append(self.path)
                if self.path == "/moved":
                    self.send_response(302)
                    self.send_header("Location", "http://127.0.0.1:9/elsewhere")
                    self.end_headers()
                    return
                body = served.page.text().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def served() -> Iterator[Served]:
    s = Served(VllmPage(spec_tokens=5))
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(*args: str):
    return CliRunner().invoke(cli, ["watch", *args], catch_exceptions=False)


def test_once_healthy_collapsed_unreadable(served):
    steps(served.page, 3000, RIGHT)
    ok = run("--once", "--metrics", served.url, "--baseline", "1.194")
    assert ok.exit_code == 0, ok.output
    assert "healthy: 1 windows judged" in ok.output
    steps(served.page, 30000, WRONG)  # the lifetime counts now read as the wrong ids' (1.06)
    bad = run("--once", "--metrics", served.url, "--baseline", "1.194", "--json")
    assert bad.exit_code == 1
    alarm = [json.loads(x) for x in bad.stdout.splitlines() if x.startswith("{") and '"alarm"' in x][0]
    assert alarm["measured"]["acceptance_length"] < 1.1 and alarm["baseline"]["acceptance_length"] == 1.194
    assert "acceptance collapsed: measured acceptance length 1.0" in bad.stderr
    assert "hsdiff request TRAIN_DUMP --engine vllm" in bad.stderr  # the capture recipe
    down = run("--once", "--metrics", f"http://127.0.0.1:{closed_port()}/metrics", "--retries", "2")
    assert down.exit_code == 2
    assert "cannot read the metrics" in down.stderr and "after 2 tries" in down.stderr
    assert "Traceback" not in down.output


def test_once_with_a_state_file_pools_runs_into_windows(served, tmp_path):
    state = str(tmp_path / "watch.json")
    args = ("--once", "--metrics", served.url, "--baseline", "1.194", "--window-drafts", "500", "--state", state)
    steps(served.page, 40000, RIGHT)  # before the first run: not judged, only recorded
    first = run(*args)
    assert first.exit_code == 0 and "no verdict yet" in first.stderr
    codes = []
    for _ in range(4):
        steps(served.page, 500, WRONG)
        codes.append(run(*args).exit_code)
    assert codes == [0, 0, 1, 1]  # the third collapsed window in a row alarms; the state stays collapsed
    for expected in (1, 1, 0):  # recovered after as many healthy windows in a row
        steps(served.page, 500, RIGHT)
        assert run(*args).exit_code == expected
    doc = json.loads(Path(state).read_text())
    assert doc["watcher"]["index"] == 7 and doc["source"] == served.url


def test_on_alarm_runs_an_argv_with_the_event_on_stdin(served, tmp_path):
    out = tmp_path / "got.json"
    write = "import sys; open(sys.argv[1], 'w').write(sys.stdin.read())"
    hook = f'{sys.executable} -c "{write}" {out} ; touch {tmp_path}/pwned'
    steps(served.page, 30000, WRONG)
    events = tmp_path / "events.jsonl"
    r = run("--once", "--metrics", served.url, "--baseline", "1.194", "--on-alarm", hook, "--events", str(events))
    assert r.exit_code == 1
    got = json.loads(out.read_text())
    assert got["event"] == "alarm" and got["engine"] == "vllm" and got["source"] == served.url
    assert not (tmp_path / "pwned").exists()  # ';' and 'touch' were arguments, not a second command
    kinds = [json.loads(x)["event"] for x in events.read_text().splitlines()]
    assert kinds == ["window", "alarm"]
    assert json.loads(events.read_text().splitlines()[1])["on_alarm"]["returncode"] == 0


def test_only_the_url_given_is_read(served):
    steps(served.page, 3000, RIGHT)
    r = run("--once", "--metrics", served.url.replace("/metrics", "/moved"), "--retries", "1")
    assert r.exit_code == 2 and "redirect to http://127.0.0.1:9/elsewhere refused" in r.stderr
    assert served.hits == ["/moved"]
    bad = run("--once", "--metrics", "file:///etc/passwd")
    assert bad.exit_code == 2 and "--metrics file:///etc/passwd is not an http(s) URL" in bad.stderr


def test_usage_errors():
    assert run().exit_code == 2
    r = run("--metrics", "http://x/metrics", "--state", "s.json")
    assert r.exit_code == 2 and "--state keeps a --once check's memory" in r.output
    r = run("--once", "--metrics", "http://127.0.0.1:1/metrics", "--baseline", "0.9")
    assert r.exit_code == 2 and "--baseline 0.9 is not an acceptance length above 1" in r.stderr


def test_once_as_a_real_process(served):
    steps(served.page, 30000, WRONG)
    proc = subprocess.run(
        [HSDIFF, "watch", "--once", "--metrics", served.url, "--baseline", "1.194"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert "measured acceptance length 1.0" in proc.stderr and "baseline 1.194" in proc.stderr


def test_follow_a_log_until_the_windows_asked_for(tmp_path):
    from .test_sources import vllm_line

    log = tmp_path / "server.log"
    log.write_text("\n".join(vllm_line(100, (3, 1, 0, 0, 0)) for _ in range(3)) + "\n")
    r = run("--log", str(log), "--baseline", "1.194", "--window-drafts", "100", "--interval", "0", "--max-windows", "3")
    assert r.exit_code == 1
    assert r.stderr.count("hsdiff: window") == 3 and "acceptance collapsed" in r.stderr
    assert "measured acceptance length 1.040 (position 1 0.030) over window 1-3 (300 drafts)" in r.stderr
