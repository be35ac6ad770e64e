"""Where reports are written, and what the machine refuses: a symlink's target is written, a pipe or a
device is written through (never replaced by a file), a new file gets the umask's mode, and an output
that cannot be written is an input error (exit 2) on one line, not an internal one. A dump rewritten
while hsdiff reads it is refused."""

from __future__ import annotations

import os
import resource
import stat
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hsdiff.cli import cli
from hsdiff.errors import FormatError
from hsdiff.model import INFER
from hsdiff.readers import scan

pytestmark = pytest.mark.core

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "fixtures" / "seed"
ARGS = ["compare", str(SEED / "train"), str(SEED / "infer-fixed-neighbours"), "--layer-ids", "2,30,58", "-q"]


def test_a_symlink_target_is_written_and_the_link_kept(tmp_path):
    target = tmp_path / "target.json"
    target.write_text("old\n")
    target.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    r = CliRunner().invoke(cli, [*ARGS, "--json", str(link)])
    assert r.exit_code == 0, r.output
    assert link.is_symlink() and '"verdict": "ok"' in target.read_text()
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the file's own mode kept


def test_a_new_report_gets_the_umask_mode(tmp_path):
    old = os.umask(0o022)
    try:
        r = CliRunner().invoke(cli, [*ARGS, "--json", str(tmp_path / "r.json")])
    finally:
        os.umask(old)
    assert r.exit_code == 0
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o644


def test_a_pipe_is_written_through_not_replaced(tmp_path):
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    r = CliRunner().invoke(cli, [*ARGS, "--json", str(fifo)])
    reader.join(timeout=60)
    assert r.exit_code == 0, r.output
    assert stat.S_ISFIFO(fifo.stat().st_mode) and b'"verdict": "ok"' in got[0]


def test_an_output_that_cannot_be_written_is_an_input_error(tmp_path):
    (tmp_path / "file.txt").write_text("x")
    for flag, name in (("--json", "r.json"), ("--markdown", "r.md"), ("--html", "r.html")):
        r = CliRunner().invoke(cli, [*ARGS, flag, str(tmp_path / "file.txt" / name)])
        assert r.exit_code == 2, (flag, r.output)
        assert "internal error" not in r.output


def test_a_dump_rewritten_while_read_is_refused(tmp_path):
    from safetensors.numpy import save_file

    path = tmp_path / "a.safetensors"
    save_file({"hidden_states.layer_2": np.ones((40, 64), dtype=np.float32)}, str(path))
    cap = scan(path, INFER).captures[0]
    save_file({"hidden_states.layer_2": np.zeros((80, 64), dtype=np.float32)}, str(path))  # another file now
    with pytest.raises(FormatError, match="changed while hsdiff read it"):
        cap.read_rows(0, 8)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_files_held_open_for_a_walk_are_bounded_and_closed(tmp_path):
    """Within files_held a thread opens each file once for all its reads (a path lookup per read cost
    as much as the read), holds at most HOLD_AT_MOST files, and closes them all when it ends."""
    from safetensors.numpy import save_file

    from hsdiff.readers._container.filerows import HOLD_AT_MOST
    from hsdiff.rowio import files_held

    caps = []
    for i in range(HOLD_AT_MOST + 6):
        path = tmp_path / f"f{i}.safetensors"
        save_file({"hidden_states.layer_2": np.full((16, 8), i, dtype=np.float32)}, str(path))
        caps.append(scan(path, INFER).captures[0])
        caps[-1].read_rows(0, 1)  # its mapping is made (and holds a descriptor of its own)
    before = _open_fds()
    with files_held():
        for c in caps[:3]:
            for r in range(0, 16, 4):
                c.read_rows(r, r + 4)
        assert _open_fds() == before + 3
        for i, c in enumerate(caps):
            assert float(c.read_rows(5, 6)[0, 0]) == i
        assert _open_fds() == before + HOLD_AT_MOST
    assert _open_fds() == before
    caps[0].read_rows(0, 4)
    assert _open_fds() == before


def test_a_dump_rewritten_while_held_is_refused(tmp_path):
    """A file held open for a walk is checked at every read: rewritten in place (same size), its next
    read is refused; replaced by another file, a capture of the new file is refused the descriptor of
    the old one, and the old file's capture goes on reading what was scanned."""
    import time

    from safetensors.numpy import save_file

    from hsdiff.rowio import files_held

    path = tmp_path / "a.safetensors"
    save_file({"hidden_states.layer_2": np.ones((40, 64), dtype=np.float32)}, str(path))
    cap = scan(path, INFER).captures[0]
    with files_held():
        assert float(cap.read_rows(0, 8)[0, 0]) == 1.0
        time.sleep(0.05)  # past the file system's timestamp granularity (a jiffy: up to 10 ms)
        with open(path, "r+b") as f:  # the same size, other values
            f.seek(-4 * 64, os.SEEK_END)
            f.write(np.zeros(64, dtype=np.float32).tobytes())
        with pytest.raises(FormatError, match="changed while hsdiff read it"):
            cap.read_rows(8, 16)

    save_file({"hidden_states.layer_2": np.ones((40, 64), dtype=np.float32)}, str(path))
    old = scan(path, INFER).captures[0]
    with files_held():
        old.read_rows(0, 8)
        other = tmp_path / "b.safetensors"
        save_file({"hidden_states.layer_2": np.full((80, 64), 2.0, dtype=np.float32)}, str(other))
        os.replace(other, path)
        new = scan(path, INFER).captures[0]
        with pytest.raises(FormatError, match="changed while hsdiff read it"):
            new.read_rows(0, 8)
        assert float(old.read_rows(16, 24)[0, 0]) == 1.0


@pytest.mark.extra("torch")
def test_many_training_files_under_a_low_open_file_limit(tmp_path):
    """A training set of more files than the soft open-file limit: the command line raises the limit."""
    import torch

    train = tmp_path / "train"
    train.mkdir()
    rng = np.random.default_rng(0)
    ids = torch.arange(12).unsqueeze(0)
    for i in range(80):
        aux = torch.from_numpy(rng.standard_normal((1, 12, 3 * 16)).astype(np.float32)).to(torch.bfloat16)
        torch.save(
            {
                "input_ids": ids + 100 * i,
                "aux_hidden_state": aux,
                "hidden_state": aux[..., :16],
                "loss_mask": torch.ones(1, 12),
            },
            train / f"data_{i}.ckpt",
        )
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 256:
        pytest.skip("the hard open-file limit leaves no room")
    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (48, resource.getrlimit("
        "resource.RLIMIT_NOFILE)[1])); from hsdiff.cli import main; main(sys.argv[1:])"
    )
    r = subprocess.run([sys.executable, "-c", code, "inspect", str(train)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Too many open files" not in r.stderr
