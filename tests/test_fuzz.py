"""Fuzzing: property-based tests of the parsers, and a randomised mutation fuzz of the readers.

* hypothesis: :func:`hsdiff.readers.sglang_dumper.parse_tags`, :func:`hsdiff.readers._common.layer_from_name`
  and the debug-log reader (:func:`hsdiff.readers.debuglog.parse_values` and ``read`` on arbitrary text);
* mutation fuzz: real files (torch zip and legacy, safetensors, npy/npz, gzip, SGLang dumper and
  ModelOpt dumps, a real dumper log) are mutated — bit flips, truncations, insertions, deletions,
  interesting integers, and structure-aware edits of the zip members, the safetensors header and the
  npy header — and read. Every outcome must be captures (all of which load) or an
  :class:`~hsdiff.errors.HsdiffError`; any other exception is a crash, a hang over 10 s is a hang.

Bounded in time: ``HSDIFF_FUZZ_SECONDS`` (default 20) split between the readers and the full
``compare`` pipeline; ``HSDIFF_FUZZ_SEED`` picks the random stream (default 0: CI is repeatable).
Crashing inputs are kept in ``HSDIFF_FUZZ_CRASH_DIR`` (default: the test's tmp dir), and the counts
are printed and written to ``HSDIFF_FUZZ_STATS`` (a JSON file) when set.
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import json
import os
import random
import re
import shutil
import signal
import struct
import time
import traceback
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from safetensors.torch import save as st_save

from hsdiff.errors import HsdiffError
from hsdiff.readers import ReadContext, read_file
from hsdiff.readers._common import layer_from_name
from hsdiff.readers.sglang_dumper import parse_tags

from . import builders as B

FUZZ_SECONDS = float(os.environ.get("HSDIFF_FUZZ_SECONDS", "20"))
FUZZ_SEED = int(os.environ.get("HSDIFF_FUZZ_SEED", "0"))
HAS_DEBUGLOG = importlib.util.find_spec("hsdiff.readers.debuglog") is not None
PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# =========================================================================== properties: file-name tags

_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_WORD = st.text(alphabet=_ALNUM, min_size=1, max_size=8)
# a key is an identifier; a value never holds the separator "___" and does not end in "_" (that would
# make "____" ambiguous): words joined by single underscores, with the characters values carry
_KEY = st.tuples(st.sampled_from("abcdefghijklmnopqrstuvwxyzXYZ"), st.lists(_WORD, max_size=2)).map(
    lambda t: "_".join([t[0] + "x", *t[1]])
)
_VALUE = st.lists(st.text(alphabet=_ALNUM + ".=-", min_size=1, max_size=8), max_size=4).map("_".join)


def _filename(tags: dict[str, str]) -> str:
    return "___".join(f"{k}={v}" for k, v in tags.items()) + ".pt"


@PROPS
@given(st.text(max_size=300))
@example("step=0___rank=1___name=x.pt")
@example("___.pt")
@example("=___=.pt")
@example("name=.pt")
def test_parse_tags_never_raises(name: str) -> None:
    tags = parse_tags(name)
    assert tags is None or (
        isinstance(tags, dict) and "name" in tags and all(isinstance(v, str) for v in tags.values())
    )


@PROPS
@given(st.dictionaries(_KEY, _VALUE, min_size=1, max_size=6).filter(lambda d: "name" not in d), _VALUE)
def test_parse_tags_round_trips(tags: dict[str, str], name: str) -> None:
    """Every dumper name (several tags, one of them ``name``) reads back as written."""
    tags = {**tags, "name": name}
    assert parse_tags(_filename(tags)) == tags


@PROPS
@given(st.dictionaries(_KEY, _VALUE, min_size=1, max_size=5).filter(lambda d: "name" not in d))
def test_parse_tags_needs_a_name(tags: dict[str, str]) -> None:
    assert parse_tags(_filename(tags)) is None


@PROPS
@given(st.dictionaries(_KEY, _VALUE, min_size=1, max_size=4), st.sampled_from([".pth", ".pt.gz", ".safetensors", ""]))
def test_parse_tags_only_reads_pt_files(tags: dict[str, str], suffix: str) -> None:
    assert parse_tags(_filename({**tags, "name": "x"})[:-3] + suffix) is None


# =========================================================================== properties: layer numbers

_LAYER_FORMS = [
    "hidden_states.layer_{n}",
    "model.layers.{n}",
    "layers.{n}.output",
    "h{n}",
    "layer_id={n}",
    "blk.{n}",
    "aux_{n}",
    "hidden_states[{n}]",
    "layer-{n}",
    "block{n}",
    "layer_idx:{n}",
]


@PROPS
@given(st.text(max_size=200))
@example("h" + "9" * 5000)
@example("layers." + "1" * 4400)
def test_layer_from_name_never_raises(name: str) -> None:
    n = layer_from_name(name)
    assert n is None or isinstance(n, int)


@PROPS
@given(
    st.sampled_from(_LAYER_FORMS),
    st.integers(0, 10**6),
    st.sampled_from(["", "x.", "model.", "dump/"]),
    st.sampled_from(["", ".pt", ".npy", ".weight"]),
)
def test_layer_from_name_reads_the_usual_forms(form: str, n: int, prefix: str, suffix: str) -> None:
    assert layer_from_name(prefix + form.format(n=n) + suffix) == n


@PROPS
@given(st.from_regex(r"[a-z_]{0,12}", fullmatch=True).filter(lambda s: not re.search(r"\d", s)))
def test_layer_from_name_without_digits_is_none(name: str) -> None:
    assert layer_from_name(name) is None


def test_layer_from_name_refuses_absurd_numbers() -> None:
    """Regression: a key holding thousands of digits made int() raise (exit 3); no layer has such a number."""
    assert layer_from_name("hidden_states.layer_" + "7" * 5000) is None
    assert layer_from_name("h" + "9" * 40) is None


# =========================================================================== properties: debug logs

needs_debuglog = pytest.mark.skipif(not HAS_DEBUGLOG, reason="hsdiff.readers.debuglog is not there yet")

_LOG_ALPHABET = st.sampled_from(
    list("0123456789.-+eE[](), \n\t")
    + [
        "...",
        "nan",
        "inf",
        "tensor(",
        "array(",
        "dtype=torch.bfloat16",
        "layer_id=3",
        "slot 1",
        "shape=torch.Size([4, 576])",
        "[Dumper.Value] ",
        "step=0___rank=0___name=x___layer_id=2.pt ",
        "sample_value=",
        "\x1b[31m",
        "\r",
        "\x00",
        "é",
        "\ufffd",
        "h[5, :8]",
        "first5=",
        "Prefill batch",
    ]
)


@needs_debuglog
@PROPS
@given(st.text(max_size=400) | st.lists(_LOG_ALPHABET, max_size=120).map("".join))
@example("[[1.5, 2.0, ..., 3.0], [4.0, 5.0, ..., 6.0]]")
@example("[" * 5000 + "]" * 5000)
@example("[1e99999, -1e99999, nan]")
@example("[" + "1" * 5000 + ".0]")
def test_parse_values_never_raises(text: str) -> None:
    from hsdiff.readers.debuglog import parse_values

    out = parse_values(text)
    if out is not None:
        vals, rows, cols = out
        assert isinstance(vals, np.ndarray) and vals.ndim == 2
        assert vals.shape[1] == len(cols)


@needs_debuglog
@PROPS
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, width=32), min_size=1, max_size=12), st.integers(1, 4))
def test_parse_values_reads_back_printed_rows(values: list[float], rows: int) -> None:
    from hsdiff.readers.debuglog import parse_values

    text = "[" + ", ".join("[" + ", ".join(repr(float(v)) for v in values) + "]" for _ in range(rows)) + "]"
    out = parse_values(text)
    assert out is not None
    vals, _, cols = out
    assert vals.shape == (rows, len(values)) and len(cols) == len(values)
    assert np.allclose(vals[0], np.asarray(values, dtype=np.float64), rtol=1e-6, atol=0)


@needs_debuglog
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    st.binary(max_size=2000)
    | st.lists(_LOG_ALPHABET, max_size=200).map(lambda x: "".join(x).encode("utf-8", "replace"))
)
def test_log_reader_on_arbitrary_bytes(tmp_path: Path, data: bytes) -> None:
    from hsdiff.readers import debuglog

    p = tmp_path / "server.log"
    p.write_bytes(data)
    try:
        caps = debuglog.read(p, ReadContext(side="infer", root=tmp_path))
    except HsdiffError:
        return
    for c in caps:
        assert c.observation is not None or c.loader is not None


# =========================================================================== mutation fuzz

INTERESTING_8 = [0, 1, 0x7F, 0x80, 0xFF, ord("{"), ord("["), ord("."), ord("\n")]
INTERESTING_INT = [0, 1, 2**31 - 1, 2**31, 2**32 - 1, 2**63 - 1, 2**63, 2**64 - 1, 100 * 2**20, 4096]


@dataclass
class Seed:
    name: str  # the file name the mutant is written under (suffix and tags matter to detection)
    data: bytes
    kind: str  # "zip", "legacy", "safetensors", "npy", "npz", "gzip", "log"


@dataclass
class Stats:
    tried: int = 0
    ok: int = 0
    errors: int = 0
    crashes: list[str] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    memory: list[str] = field(default_factory=list)
    by_kind: dict[str, int] = field(default_factory=dict)
    signatures: set[str] = field(default_factory=set)


def _small_specforge(tokens: int = 8) -> dict:
    s = B.states(0)
    return {
        "input_ids": s["input_ids"][:tokens].clone(),
        "loss_mask": torch.ones(tokens, dtype=torch.int64),
        "aux_hidden_state": B.concat(0, (3, 15, 27))[:tokens].unsqueeze(0).clone(),
        "hidden_state": s["fp32"][B.L][:tokens].unsqueeze(0).clone(),
    }


def _seeds() -> list[Seed]:
    buf = io.BytesIO()
    torch.save(_small_specforge(), buf)
    ckpt = buf.getvalue()
    buf = io.BytesIO()
    torch.save(_small_specforge(), buf, _use_new_zipfile_serialization=False)
    legacy = buf.getvalue()
    s = B.states(0)
    hs = torch.stack([s["bf16"][b][:8] for b in (3, 15, 27)], dim=1).contiguous()
    vllm = st_save({"hidden_states": hs, "token_ids": s["input_ids"][:8].clone()})
    arr = s["bf16"][3][:8].float().numpy()
    npy = io.BytesIO()
    np.save(npy, arr)
    npz = io.BytesIO()
    np.savez(npz, hidden_states=np.stack([arr, arr]), input_ids=s["input_ids"][:8].numpy())
    npz_c = io.BytesIO()
    np.savez_compressed(npz_c, hidden_states=arr)
    dumper = sorted((B.REAL / "sglang-dumper").rglob("*layer_id=3.pt"))[0]
    log = (B.REAL / "sglang-dumper.log").read_bytes()[:6000]
    seeds = [
        Seed("data_0.ckpt", ckpt, "zip"),
        Seed("data_0.ckpt", legacy, "legacy"),
        Seed("data_0.ckpt.gz", gzip.compress(ckpt, compresslevel=1), "gzip"),
        Seed("req-0.safetensors", vllm, "safetensors"),
        Seed("h3.npy", npy.getvalue(), "npy"),
        Seed("sample.npz", npz.getvalue(), "npz"),
        Seed("sample.npz", npz_c.getvalue(), "npz"),
        Seed(dumper.name, dumper.read_bytes(), "zip"),
        Seed("example-0.pt", (B.REAL / "modelopt" / "example-0.pt").read_bytes(), "zip"),
    ]
    if HAS_DEBUGLOG:
        seeds.append(Seed("server.log", log, "log"))
    return seeds


def _pos(rng: random.Random, n: int) -> int:
    """A position, biased towards the head and the tail where headers and zip directories live."""
    if n <= 1:
        return 0
    r = rng.random()
    if r < 0.35:
        return rng.randrange(min(n, 1024))
    if r < 0.6:
        return n - 1 - rng.randrange(min(n, 1024))
    return rng.randrange(n)


def _bytes_mutation(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice([1, 1, 1, 2, 3, 6])):
        n = len(b)
        op = rng.randrange(9)
        if n == 0:
            b.extend(rng.randbytes(rng.randint(1, 16)))
            continue
        i = _pos(rng, n)
        if op == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            b[i] = rng.choice(INTERESTING_8)
        elif op == 2:
            del b[rng.randrange(n) :]
        elif op == 3:
            b[i:i] = rng.randbytes(rng.randint(1, 64))
        elif op == 4:
            del b[i : i + rng.randint(1, 256)]
        elif op == 5:
            j = _pos(rng, n)
            b[i:i] = b[j : j + rng.randint(1, 512)]
        elif op == 6:
            v = rng.choice(INTERESTING_INT)
            fmt = rng.choice(["<I", "<Q", ">I", "<i"])
            try:
                b[i : i + struct.calcsize(fmt)] = struct.pack(
                    fmt, v % (2 ** (8 * struct.calcsize(fmt))) if fmt != "<i" else -1
                )
            except struct.error:
                pass
        elif op == 7:
            b[i : i + rng.randint(1, 64)] = b"\x00" * rng.randint(1, 64)
        else:
            b[i] = (b[i] + rng.choice([-1, 1])) % 256
    return bytes(b)


def _zip_mutation(data: bytes, rng: random.Random) -> bytes:
    """Mutate one member of a zip (torch archive, npz) and re-pack it: reaches the parsers inside."""
    try:
        src = zipfile.ZipFile(io.BytesIO(data))
        infos = src.infolist()
    except zipfile.BadZipFile:
        return _bytes_mutation(data, rng)
    pkl = [i for i in infos if i.filename.endswith((".pkl", ".npy"))]
    target = rng.choice(pkl if pkl and rng.random() < 0.7 else infos)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for info in infos:
            body = src.read(info)
            if info is target:
                body = _bytes_mutation(body, rng) if rng.random() < 0.8 else b""
                if rng.random() < 0.05:
                    continue  # drop the member
            z.writestr(info.filename, body)
    return out.getvalue()


def _st_mutation(data: bytes, rng: random.Random) -> bytes:
    """Edit the JSON header of a safetensors file: shapes, dtypes, offsets, metadata."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    name = rng.choice([k for k in header if k != "__metadata__"])
    entry = header[name]
    field_ = rng.choice(["shape", "dtype", "data_offsets", "entry", "metadata", "name"])
    weird = [-1, 0, 1, 2**31, 2**63, 10**30, 576, "x", None, 1.5, [], {}]
    if field_ == "shape":
        entry["shape"] = [rng.choice(weird + [8, 3, 576]) for _ in range(rng.randint(0, 4))]
    elif field_ == "dtype":
        entry["dtype"] = rng.choice(["F32", "BF16", "F8_E4M3", "F8_E5M2", "I64", "BOOL", "U64", "C64", "", 7, None])
    elif field_ == "data_offsets":
        entry["data_offsets"] = [rng.choice(weird + [0, len(body)]) for _ in range(rng.choice([2, 2, 2, 1, 3]))]
    elif field_ == "entry":
        header[name] = rng.choice(weird)
    elif field_ == "metadata":
        header["__metadata__"] = rng.choice([{"a": 1}, ["x"], "s", None, {"index": "boundary"}, 5])
    else:
        header[rng.choice(["", "h" + "9" * 50, "hidden_states.layer_3", "\u0000"])] = entry
    raw = json.dumps(header).encode()
    if rng.random() < 0.3:
        raw = _bytes_mutation(raw, rng)
    return struct.pack("<Q", len(raw)) + raw + body


def _npy_mutation(data: bytes, rng: random.Random) -> bytes:
    """Rewrite the dict literal of an npy header (descr, shape, fortran_order)."""
    hlen = struct.unpack("<H", data[8:10])[0]
    header = data[10 : 10 + hlen].decode("latin1")
    repl = rng.choice(
        [
            (
                "'descr': '<f4'",
                "'descr': " + rng.choice(["'>f4'", "'<f8'", "'|O'", "'<U3'", "'<c8'", "'V8'", "'<f16'", "'x'", "1"]),
            ),
            ("'fortran_order': False", "'fortran_order': " + rng.choice(["True", "1", "'x'"])),
            (
                "'shape': (8, 576)",
                "'shape': "
                + rng.choice(
                    [
                        "(8, 577)",
                        "(-1, 576)",
                        "(10**12,)",
                        "(2**62, 2**62)",
                        "()",
                        "(0, 576)",
                        "(8,)",
                        "(1, 8, 576)",
                        "'x'",
                        "((8,),)",
                    ]
                ),
            ),
        ]
    )
    header = header.replace(*repl)
    raw = header.encode("latin1")
    out = data[:8] + struct.pack("<H", len(raw)) + raw + data[10 + hlen :]
    return _bytes_mutation(out, rng) if rng.random() < 0.2 else out


def _log_mutation(data: bytes, rng: random.Random) -> bytes:
    text = data.decode("utf-8", "replace")
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(text) + 1)
        piece = rng.choice(
            [
                "[",
                "]",
                "...",
                "nan",
                "inf",
                "-",
                "e+99999",
                ",",
                "\n",
                "tensor(",
                "\x1b[0m",
                "\r",
                "layer_id=",
                "slot 2",
                "[Dumper.Value] x.pt",
                "1" * rng.randint(1, 400),
                " " * 100,
                "shape=torch.Size([",
                "dtype=torch.float8_e4m3fn",
                "\x00",
                "\ud800".encode("utf-8", "surrogatepass").decode("utf-8", "replace"),
            ]
        )
        if rng.random() < 0.3:
            text = text[:i] + text[i + rng.randint(1, 50) :]
        else:
            text = text[:i] + piece + text[i:]
    out = text.encode("utf-8", "replace")
    return _bytes_mutation(out, rng) if rng.random() < 0.2 else out


def mutate(seed: Seed, rng: random.Random) -> bytes:
    r = rng.random()
    if seed.kind in ("zip", "npz") and r < 0.45:
        return _zip_mutation(seed.data, rng)
    if seed.kind == "safetensors" and r < 0.45:
        return _st_mutation(seed.data, rng)
    if seed.kind == "npy" and r < 0.4:
        return _npy_mutation(seed.data, rng)
    if seed.kind == "log":
        return _log_mutation(seed.data, rng)
    if seed.kind == "gzip" and r < 0.4:
        inner = gzip.decompress(seed.data)
        return gzip.compress(
            _zip_mutation(inner, rng) if rng.random() < 0.5 else _bytes_mutation(inner, rng), compresslevel=1
        )
    return _bytes_mutation(seed.data, rng)


class _Hang(Exception):
    pass


def _on_alarm(signum, frame):  # pragma: no cover - only on a hang
    raise _Hang


def _read_and_load(path: Path) -> None:
    caps = read_file(path, ReadContext(side="infer", root=path.parent))
    for c in caps:
        if c.loader is not None:
            c.load()


def _signature(e: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(e.__traceback__) if "/hsdiff/" in f.filename]
    where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"
    return f"{type(e).__name__} at {where}: {str(e)[:160]}"


def run_fuzz(
    seeds: list[Seed],
    work: Path,
    crash_dir: Path,
    seconds: float,
    rng: random.Random,
    target: Callable[[Path], object],
    stats: Stats,
) -> None:
    deadline = time.monotonic() + seconds
    old = signal.signal(signal.SIGALRM, _on_alarm)
    try:
        i = 0
        while time.monotonic() < deadline:
            seed = seeds[i % len(seeds)]
            i += 1
            data = mutate(seed, rng)
            d = work / f"m{i % 4}"
            if d.exists():
                shutil.rmtree(d)
            d.mkdir()
            path = d / seed.name
            path.write_bytes(data)
            stats.tried += 1
            stats.by_kind[seed.kind] = stats.by_kind.get(seed.kind, 0) + 1
            signal.alarm(10)
            try:
                target(path)
                stats.ok += 1
            except HsdiffError:
                stats.errors += 1
            except _Hang:
                stats.hangs.append(_keep(crash_dir, seed, data, "hang"))
            except MemoryError:
                stats.memory.append(_keep(crash_dir, seed, data, "memory"))
            except Exception as e:  # noqa: BLE001 - the finding
                sig = _signature(e)
                if sig not in stats.signatures:
                    stats.signatures.add(sig)
                    stats.crashes.append(f"{sig} [{_keep(crash_dir, seed, data, 'crash')}]")
            finally:
                signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, old)


def _keep(crash_dir: Path, seed: Seed, data: bytes, what: str) -> str:
    crash_dir.mkdir(parents=True, exist_ok=True)
    n = len(list(crash_dir.glob(f"{what}-*")))
    d = crash_dir / f"{what}-{n:03d}"
    d.mkdir()
    (d / seed.name).write_bytes(data)
    return str(d / seed.name)


def _report(stats: Stats, what: str, seconds: float, capsys) -> None:
    line = (
        f"fuzz {what}: {stats.tried} inputs in {seconds:.0f} s ({stats.ok} read, {stats.errors} HsdiffError, "
        f"{len(stats.crashes)} crash signatures, {len(stats.hangs)} hangs, {len(stats.memory)} MemoryError); "
        f"by kind {dict(sorted(stats.by_kind.items()))}"
    )
    with capsys.disabled():
        print("\n" + line)
    out = os.environ.get("HSDIFF_FUZZ_STATS")
    if out:
        doc = json.loads(Path(out).read_text()) if Path(out).exists() else {}
        doc[what] = {
            "inputs": stats.tried,
            "read": stats.ok,
            "hsdiff_errors": stats.errors,
            "crashes": stats.crashes,
            "hangs": stats.hangs,
            "memory_errors": stats.memory,
            "by_kind": stats.by_kind,
            "seconds": seconds,
            "seed": FUZZ_SEED,
        }
        Path(out).write_text(json.dumps(doc, indent=2))


def _crash_dir(tmp_path: Path) -> Path:
    return Path(os.environ.get("HSDIFF_FUZZ_CRASH_DIR", str(tmp_path / "crashes")))


@pytest.mark.skipif(FUZZ_SECONDS <= 0, reason="HSDIFF_FUZZ_SECONDS=0")
def test_mutation_fuzz_readers(tmp_path: Path, capsys) -> None:
    """Mutated real files: captures that load, or an HsdiffError; nothing else."""
    seconds = FUZZ_SECONDS * 0.75
    stats = Stats()
    run_fuzz(_seeds(), tmp_path, _crash_dir(tmp_path), seconds, random.Random(FUZZ_SEED), _read_and_load, stats)
    _report(stats, "readers", seconds, capsys)
    assert stats.tried > 0
    assert not stats.crashes and not stats.hangs and not stats.memory, "\n".join(
        stats.crashes + stats.hangs + stats.memory
    )


@pytest.mark.skipif(FUZZ_SECONDS <= 0, reason="HSDIFF_FUZZ_SECONDS=0")
def test_mutation_fuzz_compare(tmp_path: Path, capsys) -> None:
    """Mutated inference dumps through the whole compare: a report or an HsdiffError; nothing else."""
    from hsdiff.comparison import compare
    from hsdiff.readers import scan

    train = scan(
        B.specforge(tmp_path / "train", [0], (3, 15, 27)), "train"
    )  # read once: the mutants are the other side
    # the seeds made from sample 0 (same tokens as the training side); logs and the real peer dumps align by
    # value, about a second per compare, and are fuzzed through the readers above
    seeds = [s for s in _seeds() if s.kind != "log" and not s.name.startswith(("step=", "example-"))]

    def target(path: Path) -> None:
        compare(train, str(path), layer_ids=[2, 14, 26])

    seconds = FUZZ_SECONDS * 0.25
    stats = Stats()
    work = tmp_path / "work"
    work.mkdir()
    run_fuzz(seeds, work, _crash_dir(tmp_path), seconds, random.Random(FUZZ_SEED + 1), target, stats)
    _report(stats, "compare", seconds, capsys)
    assert stats.tried > 0
    assert not stats.crashes and not stats.hangs and not stats.memory, "\n".join(
        stats.crashes + stats.hangs + stats.memory
    )


def test_mutators_change_their_input() -> None:
    """The fuzzer fuzzes: each mutator produces inputs that differ from the seed."""
    rng = random.Random(1)
    for seed in _seeds():
        outs = {mutate(seed, rng) for _ in range(20)}
        assert len(outs - {seed.data}) >= 10, seed.kind


# =========================================================================== regressions: what the fuzzer found


def _zip_with_pickle(pkl: bytes) -> bytes:
    """A torch zip archive whose data.pkl is replaced by ``pkl`` (the other members kept)."""
    buf = io.BytesIO()
    torch.save({"aux_hidden_state": torch.ones(2, 4)}, buf)
    src = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for info in src.infolist():
            z.writestr(info.filename, pkl if info.filename.endswith("data.pkl") else src.read(info))
    return out.getvalue()


def _legacy_with_unknown_storage_key() -> bytes:
    buf = io.BytesIO()
    torch.save({"aux_hidden_state": torch.ones(2, 4)}, buf, _use_new_zipfile_serialization=False)
    data = buf.getvalue()
    key = re.search(rb"\d{10,}", data).group()
    return data.replace(key, b"9" * len(key), 1)


def _zip_version_255() -> bytes:
    buf = io.BytesIO()
    torch.save({"aux_hidden_state": torch.ones(2, 4)}, buf)
    z = bytearray(buf.getvalue())
    i = z.find(b"PK\x01\x02")
    z[i + 6] = 255  # "version needed to extract" in the central directory
    return bytes(z)


def _zip_local_name_not_utf8() -> bytes:
    """A torch zip whose data.pkl torch cannot read and whose local header name is flagged UTF-8 but is not."""
    import pickle

    data = bytearray(_zip_with_pickle(pickle.dumps({"a": 1}, protocol=4)))
    i = 0
    while True:
        i = data.find(b"PK\x03\x04", i)
        n = struct.unpack("<H", data[i + 26 : i + 28])[0]
        if bytes(data[i + 30 : i + 30 + n]).endswith(b"data.pkl"):
            break
        i += 4
    data[i + 6 : i + 8] = struct.pack("<H", struct.unpack("<H", data[i + 6 : i + 8])[0] | 0x800)
    data[i + 30] = 0xFF
    return bytes(data)


def _npz_member_not_npy() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("hidden_states.npy", b"not an npy array at all")
    return out.getvalue()


def _npz_flagged_encrypted() -> bytes:
    buf = io.BytesIO()
    np.savez(buf, hidden_states=np.ones((4, 576), np.float32))
    z = bytearray(buf.getvalue())
    i = z.find(b"PK\x01\x02")
    z[i + 8] |= 1  # general-purpose flag bit 0: "encrypted"
    return bytes(z)


FOUND = {
    # torch.load raised TypeError: _rebuild_tensor_v2() takes from 6 to 7 positional arguments but 10 were given
    "rebuild_tensor_wrong_arity": (
        "data_0.ckpt",
        lambda: _zip_with_pickle(
            b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(K\x01K\x02K\x03K\x04K\x05K\x06K\x07K\x08K\tK\ntR."
        ),
    ),
    # TypeError: unhashable type: 'collections.OrderedDict' (a dict key built from an allowed global)
    "unhashable_dict_key": ("data_0.ckpt", lambda: _zip_with_pickle(b"\x80\x02}ccollections\nOrderedDict\n)RK\x01s.")),
    # TypeError: expected at most 1 argument, got 6
    "ordereddict_six_args": (
        "data_0.ckpt",
        lambda: _zip_with_pickle(b"\x80\x02ccollections\nOrderedDict\n(K\x01K\x02K\x03K\x04K\x05K\x06tR."),
    ),
    # AssertionError: storage key '...' not found in deserialized_objects (legacy format)
    "legacy_unknown_storage_key": ("data_0.ckpt", _legacy_with_unknown_storage_key),
    # NotImplementedError: zip file version 25.5 (from zipfile while sniffing)
    "zip_version_255": ("data_0.ckpt", _zip_version_255),
    # UnicodeDecodeError from zipfile while naming what a refused pickle asked for (seed 1, 61 633 inputs)
    "zip_local_name_not_utf8": ("data_0.ckpt", _zip_local_name_not_utf8),
    # RuntimeError: File 'hidden_states.npy' is encrypted, password required for extraction (seed 4)
    "npz_flagged_encrypted": ("sample.npz", _npz_flagged_encrypted),
    # AttributeError: 'bytes' object has no attribute 'shape' (npz member that is not an npy array)
    "npz_member_not_npy": ("sample.npz", _npz_member_not_npy),
}


@pytest.mark.parametrize("case", sorted(FOUND))
def test_fuzz_regressions_are_format_errors(tmp_path: Path, case: str) -> None:
    """Inputs the mutation fuzz found crashing (exit 3): each is now a FormatError naming the file (exit 2)."""
    from click.testing import CliRunner

    from hsdiff.cli import cli
    from hsdiff.errors import FormatError

    name, make = FOUND[case]
    p = tmp_path / name
    p.write_bytes(make())
    with pytest.raises(FormatError) as e:
        _read_and_load(p)
    assert name in str(e.value)
    train = B.specforge(tmp_path / "train", [0], (3, 15, 27))
    r = CliRunner().invoke(cli, ["compare", str(train), str(p), "--layer-ids", "2,14,26"])
    assert r.exit_code == 2 and r.stderr.startswith("hsdiff: error:") and len(r.stderr.strip().splitlines()) == 1, (
        r.output
    )


def test_fuzz_regression_huge_layer_number_in_a_key(tmp_path: Path) -> None:
    """A safetensors key with thousands of digits made layer_from_name raise ValueError (exit 3)."""
    from click.testing import CliRunner

    from hsdiff.cli import cli

    s = B.states(0)
    (tmp_path / "infer").mkdir()
    tensors = {f"hidden_states.layer_{'7' * 5000}": s["bf16"][3].clone(), "input_ids": s["input_ids"].clone()}
    (tmp_path / "infer" / "caps.safetensors").write_bytes(st_save(tensors))
    train = B.specforge(tmp_path / "train", [0], (3, 15, 27))
    r = CliRunner().invoke(
        cli, ["compare", str(train), str(tmp_path / "infer"), "--layer-ids", "2,14,26", "--json", "-"]
    )
    assert r.exit_code in (0, 1), r.output


# =========================================================================== properties: file ordering and sample names


@PROPS
@given(st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=20))
@example(["data_1²", "data_10", "data_2", "²", "¹²³"])
def test_natural_order_never_raises_and_is_total(names: list[str]) -> None:
    """Directory walks sort file names naturally (data_2 before data_10); any name must sort, none may crash."""
    from hsdiff.readers import _natural

    ordered = sorted(names, key=_natural)
    assert sorted(ordered, key=_natural) == ordered


@PROPS
@given(st.integers(0, 10**6), st.integers(0, 10**6))
def test_natural_order_is_numeric(a: int, b: int) -> None:
    from hsdiff.readers import _natural

    assert (_natural(f"data_{a}.ckpt") < _natural(f"data_{b}.ckpt")) == (a < b)


def test_walk_sorts_a_directory_with_superscript_digits(tmp_path: Path) -> None:
    """Regression (hypothesis): a file named data_1² made the directory walk raise ValueError (exit 3)."""
    from click.testing import CliRunner

    from hsdiff.cli import cli

    train = B.specforge(tmp_path / "train", [0], (3, 15, 27))
    infer = B.sglang_dump(tmp_path / "infer", 0, (3, 15, 27))
    (infer / "notes_1²").write_text("a note\n")
    r = CliRunner().invoke(cli, ["compare", str(train), str(infer), "--layer-ids", "2,14,26", "--json", "-"])
    assert r.exit_code == 0, r.output


@PROPS
@given(st.text(max_size=60), st.sampled_from(["", ".gz", ".ckpt", ".ckpt.gz", ".pt", ".safetensors", ".npz"]))
def test_sample_name_never_raises(stem: str, suffix: str) -> None:
    from hsdiff.readers._common import sample_name

    assert isinstance(sample_name(Path("d") / ((stem or "x") + suffix)), str)


def test_fuzz_regression_damaged_npy_header_prints_no_warning(tmp_path: Path) -> None:
    """A header with a backslash made Python warn "invalid escape sequence" on stderr (a SyntaxWarning from
    3.12): the one-line error must stay one line."""
    import warnings

    from hsdiff.errors import FormatError

    buf = io.BytesIO()
    np.save(buf, np.ones((2, 3), np.float32))
    data = buf.getvalue()
    hlen = struct.unpack("<H", data[8:10])[0]
    header = data[10 : 10 + hlen].decode("latin1").replace("'descr': '<f4'", "'descr': '\\e<f4'").encode("latin1")
    p = tmp_path / "h3.npy"
    p.write_bytes(data[:8] + struct.pack("<H", len(header)) + header + data[10 + hlen :])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(FormatError):
            _read_and_load(p)
    assert not seen, [str(w.message) for w in seen]
