"""Every case of the bad-input corpus (``tests/badinput/make_corpus.py``) gets the answer it promises.

* input errors: exit 2, stderr is one line ``hsdiff: error: ...`` naming the file and the cause, no
  traceback and nothing on stdout (so a CI gate cannot read a verdict);
* refused files (pickled globals, object arrays): the same, the line says "refused", and the payload
  never ran;
* data-quality problems: a verdict (exit 0/1) whose JSON ``warnings`` name the problem.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from hsdiff.cli import cli

from .badinput import make_corpus as M
from .test_readonly import diff, snapshot

CASES = {c.name: c for c in M.CASES}
HSDIFF = shutil.which("hsdiff", path=str(Path(sys.executable).parent)) or "hsdiff"


def has_debuglog() -> bool:
    return importlib.util.find_spec("hsdiff.readers.debuglog") is not None


class Corpus:
    """The corpus built once per session; large cases are built on demand and removed after use."""

    def __init__(self, root: Path):
        self.root = root
        small = [c.name for c in M.CASES if not c.large]
        self.built = M.build(root, small)

    def get(self, name: str) -> M.Built:
        if name not in self.built:
            self.built[name] = M.build_one(self.root, name)
        return self.built[name]


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Corpus:
    return Corpus(tmp_path_factory.mktemp("badinput"))


def run(argv: list[str]):
    return CliRunner().invoke(cli, argv)


def check(case: M.Case, built: M.Built, code: int, stdout: str, stderr: str) -> None:
    where = f"{case.name}: exit {code}\nstdout: {stdout[:2000]}\nstderr: {stderr[:2000]}"
    assert "Traceback" not in stderr + stdout, where
    assert "internal error" not in stderr, where
    assert code in case.expect.exits, where
    if case.expect.kind in ("error", "refused"):
        lines = stderr.strip().splitlines()
        assert len(lines) == 1, where
        line = lines[0]
        assert line.startswith("hsdiff: error:"), where
        assert stdout.strip() == "", where  # no report: nothing a gate could take for a verdict
        for m in case.expect.mentions:
            assert m.lower() in line.lower(), f"{m!r} missing\n{where}"
        assert " — " in line, f"no advice on what to do\n{where}"
        if case.expect.kind == "refused":
            assert "refused" in line.lower(), where
    else:
        doc = json.loads(stdout)
        assert doc["verdict"] in ("ok", "mismatch", "inconclusive"), where
        assert code == (0 if doc["verdict"] == "ok" else 1), where
        warnings = doc["warnings"]
        for m in case.expect.mentions:
            assert any(m.lower() in w.lower() for w in warnings), f"no warning mentions {m!r}: {warnings}\n{where}"
    assert not (built.dir / "PWNED").exists(), "a pickled payload ran"


@pytest.mark.parametrize("name", list(CASES))
def test_corpus_case(corpus: Corpus, name: str) -> None:
    case = CASES[name]
    if case.needs == "debuglog" and not has_debuglog():
        pytest.skip("hsdiff.readers.debuglog is not there yet")
    if case.needs == "float128" and np.dtype(np.longdouble).itemsize <= 8:
        pytest.skip("numpy has no float128 on this platform")
    built = corpus.get(name)
    try:
        before = {d: snapshot(d) for d in (built.dir, corpus.root / "_good")}
        r = run(built.argv)
        check(case, built, r.exit_code, r.stdout, r.stderr)
        for d, snap in before.items():  # bad inputs are read-only inputs too
            assert not diff(snap, snapshot(d)), diff(snap, snapshot(d))
    finally:
        if case.large:
            M.cleanup_large(built)


@pytest.mark.parametrize("name", ["pickle_zip_os_system", "npy_truncated"])
def test_real_process_prints_one_line(corpus: Corpus, name: str) -> None:
    """Through a real process: no stray warnings or log records on stderr, the exit status as promised."""
    built = corpus.get(name)
    p = subprocess.run([HSDIFF, *built.argv], capture_output=True, text=True, timeout=120)
    check(CASES[name], built, p.returncode, p.stdout, p.stderr)


def test_gz_bomb_refused_before_expanding_far(corpus: Corpus, tmp_path: Path, monkeypatch) -> None:
    """The bomb expands to 2 GiB; it is refused after a bounded expansion and leaves no temporary file
    (in a temporary folder of its own: tests running beside it make their own)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    built = corpus.get("gz_bomb")
    r = run(built.argv)
    check(CASES["gz_bomb"], built, r.exit_code, r.stdout, r.stderr)
    assert "bomb" in r.stderr
    assert not list(tmp_path.glob("hsdiff-*"))


def test_gzip_limit_is_enforced(corpus: Corpus, monkeypatch) -> None:
    """HSDIFF_GZIP_LIMIT caps the expansion even when the ratio looks like real data."""
    from hsdiff.readers import _container

    monkeypatch.setattr(_container.limits, "GZIP_LIMIT", 1 << 20)
    d = corpus.root / "gz_limit"
    d.mkdir(exist_ok=True)
    (d / "rows_0-2000").mkdir(exist_ok=True)
    import gzip

    (d / "rows_0-2000" / "data_0.ckpt.gz").write_bytes(gzip.compress(os.urandom(3 << 20), compresslevel=1))
    r = run(["compare", str(d), str(corpus.root / "_good" / "infer"), "--layer-ids", M.IDS])
    assert r.exit_code == 2, r.output
    assert "gzip bomb" in r.stderr and "HSDIFF_GZIP_LIMIT" in r.stderr


def test_gzipped_safetensors_is_read(tmp_path: Path) -> None:
    """Regression: a gzipped safetensors file was opened lazily from a temporary file already removed."""
    import gzip

    from tests import builders as B

    B.vllm_file(tmp_path / "plain", M.SAMPLE, M.BOUNDARIES)
    (tmp_path / "gz").mkdir()
    data = (tmp_path / "plain" / f"req-{M.SAMPLE}.safetensors").read_bytes()
    (tmp_path / "gz" / f"req-{M.SAMPLE}.safetensors.gz").write_bytes(gzip.compress(data))
    train = B.specforge(tmp_path / "train", [M.SAMPLE], M.BOUNDARIES)
    r = run(["compare", str(train), str(tmp_path / "gz"), "--layer-ids", M.IDS, "--engine", "sglang", "--json", "-"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["verdict"] == "ok"


def test_big_endian_npy_is_read(tmp_path: Path) -> None:
    """Regression: a big-endian float32 .npy reached torch.from_numpy and crashed (exit 3)."""
    import numpy as np

    from tests import builders as B

    s = B.states(M.SAMPLE)
    d = tmp_path / "layers"
    d.mkdir()
    for b in M.BOUNDARIES:
        np.save(d / f"h{b}.npy", s["bf16"][b].float().numpy().astype(">f4"))
    train = B.specforge(tmp_path / "train", [M.SAMPLE], M.BOUNDARIES)
    r = run(["compare", str(train), str(d), "--json", "-"])
    assert r.exit_code in (0, 1), r.output
    assert "Traceback" not in r.output


# --------------------------------------------------------------------------- unreadable inputs


def _as_unprivileged(fn):
    """Run ``fn()`` where file permissions apply: directly for a normal user, in a forked child as nobody for root."""
    if os.geteuid() != 0:
        return fn()
    r_fd, w_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(r_fd)
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            out = fn()
        except BaseException as e:  # noqa: BLE001
            out = ("child-failed", repr(e))
        with os.fdopen(w_fd, "w") as w:
            json.dump(out, w)
        os._exit(0)
    os.close(w_fd)
    with os.fdopen(r_fd) as r:
        data = r.read()
    os.waitpid(pid, 0)
    out = json.loads(data)
    if isinstance(out, list) and out and out[0] == "child-failed":
        pytest.skip(f"cannot drop privileges here: {out[1]}")
    return out


@pytest.fixture
def open_dir():
    """A directory every user can enter (pytest's tmp dirs belong to the caller only)."""
    d = Path(tempfile.mkdtemp(prefix="hsdiff-perm-"))
    d.chmod(0o755)
    yield d
    for p in [d, *d.rglob("*")]:
        try:
            p.chmod(0o755 if p.is_dir() else 0o644)
        except OSError:
            pass
    shutil.rmtree(d, ignore_errors=True)


def _unreadable_setup(d: Path) -> tuple[Path, Path]:
    from tests import builders as B

    train = B.specforge(d / "train", [M.SAMPLE], M.BOUNDARIES)
    infer = B.sglang_dump(d / "infer", M.SAMPLE, M.BOUNDARIES)
    for p in [d, *d.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    run(["compare", str(train), str(infer), "--layer-ids", M.IDS])  # warm up imports before dropping privileges
    return train, infer


def _invoke(argv: list[str]) -> list:
    r = run(argv)
    return [r.exit_code, r.stdout, r.stderr]


@pytest.mark.parametrize("what", ["file", "file_in_dir", "dir", "parent"])
def test_unreadable_inputs(open_dir: Path, what: str) -> None:
    train, infer = _unreadable_setup(open_dir)
    ckpt = train / "rows_0-2000" / f"data_{M.SAMPLE}.ckpt"
    if what == "file":
        ckpt.chmod(0)
        target, name = ckpt, ckpt.name
    elif what == "file_in_dir":
        ckpt.chmod(0)
        target, name = train, ckpt.name
    elif what == "dir":
        (train / "rows_0-2000").chmod(0)
        target, name = train, "rows_0-2000"
    else:
        train.chmod(0o700)  # nobody cannot enter it: the path itself cannot be looked at
        target, name = ckpt, ckpt.name
    code, stdout, stderr = _as_unprivileged(lambda: _invoke(["compare", str(target), str(infer), "--layer-ids", M.IDS]))
    where = f"exit {code}\nstdout: {stdout}\nstderr: {stderr}"
    assert code == 2, where
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hsdiff: error:"), where
    assert name in lines[0] and ("permission denied" in lines[0].lower() or "not readable" in lines[0]), where


def test_corpus_script_lists_and_writes(tmp_path: Path) -> None:
    """The generator also runs by hand and writes a manifest."""
    out = tmp_path / "corpus"
    assert M.main([str(out), "st_short", "empty_dir"]) == 0
    doc = json.loads((out / "manifest.json").read_text())
    assert {d["name"] for d in doc} == {"st_short", "empty_dir"}
    assert all(d["expect"] == "error" and d["exit"] == [2] for d in doc)
