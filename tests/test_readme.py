"""Every command in the README's ``sh`` blocks runs as written.

A line is one shell command (``\\`` continuations and quotes spanning lines joined). What it does
decides how it is checked:

* ``pip install``: every extra it names is one ``setup.cfg`` declares (``make wheel-check`` installs the
  wheel for real);
* ``make TARGET``: the Makefile has the target (``make -n``); CI runs ``make demo``, ``make test``,
  ``make draft-demo`` ... themselves;
* a line that starts a server (``sglang.launch_server``, ``vllm serve``) or talks to one (a
  ``localhost`` URL): the server is not run here; the hsdiff command before the ``| sh`` is (it prints
  the request), so a renamed option still fails;
* ``hsdiff capture``: runs where the SmolLM2 model package is installed (``make test`` installs it),
  else its output is built from the same states;
* every other line runs in a folder laid out as the README says (``train/`` a SpecForge dump,
  ``draft/``, ``target/``, each engine's dump, ``fixtures/`` the repository's), exiting with the status
  its ``# exit N`` comment says (0 without one).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hsdiff.extras import EXTRAS

pytestmark = pytest.mark.core

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SERVER = re.compile(r"sglang\.launch_server|^vllm serve|https?://localhost")


def commands(text: str) -> list[str]:
    """The commands of every ``sh`` block, one string each (continuations joined)."""
    out = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        pending, joiner = "", ""
        for line in block.splitlines():
            pending = f"{pending}{joiner}{line.strip() if joiner == ' ' else line}" if pending else line
            if pending.endswith("\\"):  # a continuation: one line for the shell
                pending, joiner = pending[:-1].rstrip(), " "
                continue
            joiner = "\n"  # a quote open across lines keeps its newline
            try:
                shlex.split(pending, comments=True)
            except ValueError:  # a quote open across lines
                continue
            if pending.strip():
                out.append(pending.strip())
            pending, joiner = "", ""
        assert not pending, f"an unfinished command in a README block: {pending}"
    return out


COMMANDS = commands(README.read_text())


def kind(cmd: str) -> str:
    if cmd.startswith("pip install"):
        return "pip"
    if cmd.startswith("make "):
        return "make"
    if SERVER.search(cmd):
        return "server"
    if cmd.startswith("hsdiff capture"):
        return "model"
    return "run"


def expected_exit(cmd: str) -> int:
    m = re.search(r"#.*\bexit (\d)", cmd)
    return int(m.group(1)) if m else 0


def run(cmd: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_first_screen_is_install_and_the_quickstart():
    head = "\n".join(README.read_text().splitlines()[:60])
    assert "## Install" in head and "pip install hsdiff" in head and "## Your dumps" in head
    gates = [c for c in COMMANDS if c.startswith("hsdiff gate train/")]
    assert len(gates) == 4 and all(g.split(" --")[0] in head for g in gates)


def test_every_line_is_one_of_the_kinds_checked_below():
    assert {kind(c) for c in COMMANDS} == {"pip", "make", "server", "model", "run"}


def test_the_install_lines_name_real_extras():
    for cmd in (c for c in COMMANDS if kind(c) == "pip"):
        for spec in shlex.split(cmd, comments=True)[2:]:
            name, _, extras = spec.partition("[")
            assert name == "hsdiff", cmd
            assert set(filter(None, extras.rstrip("]").split(","))) <= set(EXTRAS) | {"all"}, cmd


def test_the_make_lines_name_real_targets():
    for cmd in (c for c in COMMANDS if kind(c) == "make"):
        target = shlex.split(cmd, comments=True)[1]
        r = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True)
        assert r.returncode == 0, (cmd, r.stderr)


@pytest.fixture(scope="module")
def story(tmp_path_factory) -> Path:
    """A folder where the seed story's commands run in order: the repository's ``fixtures/``, and room for
    what they write (the fingerprint), so nothing lands in the repository."""
    d = tmp_path_factory.mktemp("story")
    (d / "fixtures").symlink_to(ROOT / "fixtures")
    return d


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if kind(c) == "run" and "fixtures/" in c])
def test_the_seed_story_runs_as_written(cmd, story):
    r = run(cmd, story)
    assert r.returncode == expected_exit(cmd), (cmd, r.stdout[-2000:], r.stderr[-2000:])
    if "exit 1: MISMATCH" in cmd:
        assert "verdict: MISMATCH" in r.stdout
    if "PASS" in cmd:
        assert "gate: PASS" in r.stdout


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A folder as the README's routes leave it: the same real SmolLM2 states in each engine's format."""
    from safetensors.torch import save_file

    from . import builders as B

    ws = tmp_path_factory.mktemp("readme")
    boundaries = [2, 15, 27]  # the fixture draft's ids [1, 14, 26] in SGLang's convention
    B.specforge(ws / "train", [0, 1], boundaries)
    cfg = json.loads((ROOT / "fixtures/draft-smollm2/config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = boundaries  # vLLM's key (boundary indices) beside SGLang's nested one
    (ws / "draft").mkdir()
    (ws / "draft/config.json").write_text(json.dumps(cfg, indent=2))
    (ws / "target").mkdir()
    shutil.copy(B.SMOLLM2 / "config.json", ws / "target/config.json")
    B.sglang_dump(ws / "dumps", 0, boundaries)
    B.sglang_response(ws / "response.json", 0, boundaries)
    B.vllm_file(ws / "vllm-dump", 0, boundaries)
    (ws / "fixtures").symlink_to(ROOT / "fixtures")
    if B.smollm2_package_dir() is not None:
        B.smollm2_model().save_pretrained(ws / "target")
    else:  # what `hsdiff capture` writes, from the same model's states
        s = B.states(0)
        (ws / "ref").mkdir()
        save_file(
            {"hidden_states": s["bf16"].contiguous(), "input_ids": s["input_ids"].clone()},
            str(ws / "ref/data_0.safetensors"),
            metadata={"index": "boundary"},
        )
    return ws


@pytest.mark.extra("torch")
@pytest.mark.parametrize("cmd", [c for c in COMMANDS if kind(c) in ("run", "model", "server") and "fixtures/" not in c])
def test_the_routes_run_on_dumps_of_each_kind(workspace, cmd):
    if kind(cmd) == "model" and not (workspace / "target/model.safetensors").exists():
        pytest.skip("needs the target model: the SmolLM2 package (make test installs it)")
    if kind(cmd) == "server":
        hsdiff_part = [p for p in cmd.split("|")[0:1] if p.startswith("hsdiff ")]
        if not hsdiff_part:
            pytest.skip("starts an engine server, which this machine cannot run")
        cmd = hsdiff_part[0]
    r = run(cmd, workspace)
    assert r.returncode == expected_exit(cmd), (cmd, r.stdout[-3000:], r.stderr[-3000:])
    if cmd.startswith("hsdiff gate"):
        assert "gate: PASS" in r.stdout
