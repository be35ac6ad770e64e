"""Hostile files are refused by name and never executed.

Every payload here would create a marker file if anything unpickled it (the control test proves
that it does under a plain ``pickle.loads``). hsdiff must answer exit 2 with one line saying the
file was refused and what it asked for, and the marker must not exist afterwards.
"""

from __future__ import annotations

import gzip
import io
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from hsdiff.cli import cli
from hsdiff.errors import UnsafeFileError
from hsdiff.readers import ReadContext, read_file, scan

from . import builders as B
from .badinput.make_corpus import BOUNDARIES, IDS, SAMPLE, Evil, evil_payloads, torch_bytes

PAYLOADS = ["os.system", "builtins.eval", "builtins.exec", "subprocess.call", "subprocess.Popen"]
#: What the refusal names for each payload (protocol-2 pickles spell modules the Python 2 way).
NAMED = {
    "os.system": "system",
    "builtins.eval": "eval",
    "builtins.exec": "exec",
    "subprocess.call": "call",
    "subprocess.Popen": "popen",
}


@pytest.fixture(scope="module")
def infer(tmp_path_factory) -> Path:
    return B.sglang_dump(tmp_path_factory.mktemp("infer"), SAMPLE, BOUNDARIES)


def _container_bytes(kind: str, payload: Evil) -> bytes:
    if kind == "torch-zip":
        return torch_bytes({"aux_hidden_state": payload, "input_ids": torch.arange(4)})
    if kind == "torch-legacy":
        return torch_bytes({"aux_hidden_state": payload}, legacy=True)
    if kind == "torch-zip-gz":
        return gzip.compress(torch_bytes({"aux_hidden_state": payload}))
    if kind.startswith("pickle-p"):
        return pickle.dumps(payload, protocol=int(kind[-1]))
    raise AssertionError(kind)


KINDS = ["torch-zip", "torch-legacy", "torch-zip-gz", "pickle-p0", "pickle-p1", "pickle-p2", "pickle-p4", "pickle-p5"]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_control_payload_is_live(tmp_path: Path, payload: str) -> None:
    """The payloads really create the marker when unpickled unsafely: the other tests prove something."""
    marker = tmp_path / "PWNED"
    p = pickle.loads(pickle.dumps(evil_payloads(marker)[payload]))
    if hasattr(p, "wait"):
        p.wait()
    assert marker.exists()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("payload", PAYLOADS)
def test_hostile_pickle_refused_not_run(tmp_path: Path, infer: Path, kind: str, payload: str) -> None:
    marker = tmp_path / "PWNED"
    d = tmp_path / "train" / "rows_0-2000"
    d.mkdir(parents=True)
    name = "data_0.ckpt.gz" if kind.endswith("-gz") else "data_0.ckpt"
    (d / name).write_bytes(_container_bytes(kind, evil_payloads(marker)[payload]))
    r = CliRunner().invoke(cli, ["compare", str(tmp_path / "train"), str(infer), "--layer-ids", IDS, "--json", "-"])
    assert not marker.exists(), "the payload ran"
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2, r.output
    assert len(lines) == 1 and lines[0].startswith("hsdiff: error:") and name in lines[0], r.stderr
    assert "Traceback" not in r.output and r.stdout == ""
    assert "refused" in lines[0], lines[0]
    assert NAMED[payload] in lines[0].lower(), lines[0]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_hostile_pickle_refused_by_the_library(tmp_path: Path, payload: str) -> None:
    """Library users get :class:`UnsafeFileError` from read_file and scan, and nothing runs."""
    marker = tmp_path / "PWNED"
    f = tmp_path / "evil.pt"
    f.write_bytes(torch_bytes({"x": evil_payloads(marker)[payload]}))
    with pytest.raises(UnsafeFileError, match="refused"):
        read_file(f, ReadContext(side="train"))
    with pytest.raises(UnsafeFileError, match="refused"):
        scan(tmp_path, "train")
    assert not marker.exists()


def test_payload_nested_in_a_protocol0_dict_is_not_run(tmp_path: Path, infer: Path) -> None:
    """A text (protocol 0) pickle that does not open with a global is not a torch file: exit 2, nothing runs."""
    marker = tmp_path / "PWNED"
    f = tmp_path / "evil.pt"
    f.write_bytes(pickle.dumps({"aux_hidden_state": evil_payloads(marker)["os.system"]}, protocol=0))
    r = CliRunner().invoke(cli, ["compare", str(f), str(infer), "--layer-ids", IDS])
    assert r.exit_code == 2 and r.stderr.startswith("hsdiff: error:") and "evil.pt" in r.stderr, r.output
    assert not marker.exists()


@pytest.mark.parametrize("where", ["npz", "npy"])
def test_object_arrays_refused_not_run(tmp_path: Path, infer: Path, where: str) -> None:
    marker = tmp_path / "PWNED"
    arr = np.empty(1, dtype=object)
    arr[0] = evil_payloads(marker)["os.system"]
    buf = io.BytesIO()
    if where == "npz":
        np.savez(buf, hidden_states=np.ones((4, 576), np.float32), meta=arr)
    else:
        np.save(buf, arr, allow_pickle=True)
    f = tmp_path / f"h3.{where}"
    f.write_bytes(buf.getvalue())
    r = CliRunner().invoke(cli, ["compare", str(f), str(infer), "--layer-ids", IDS])
    assert not marker.exists()
    assert r.exit_code == 2, r.output
    line = r.stderr.strip()
    assert "\n" not in line and "refused" in line and "Python objects" in line and f.name in line
    if where == "npz":
        assert "'meta'" in line  # the refused array is named


def test_nothing_is_written_beside_a_refused_file(tmp_path: Path, infer: Path) -> None:
    """Refusing leaves the directory as it was (no temporary files, no partial output)."""
    marker = tmp_path / "train" / "PWNED"
    d = tmp_path / "train"
    d.mkdir()
    (d / "data_0.ckpt.gz").write_bytes(gzip.compress(torch_bytes(evil_payloads(marker)["os.system"])))
    before = sorted(p.name for p in d.iterdir())
    r = CliRunner().invoke(cli, ["compare", str(d), str(infer), "--layer-ids", IDS])
    assert r.exit_code == 2
    assert sorted(p.name for p in d.iterdir()) == before
