"""Generate the bad-input corpus: damaged, hostile and odd dumps, each with the answer a user should get.

Nothing here is checked in as a binary: every case is built from the real SmolLM2 hidden states
(``fixtures/smollm2/states``) by cutting, patching or re-encoding a good dump. The tests build the
corpus into a temporary directory (``tests/test_badinput.py``); to look at it by hand::

    python tests/badinput/make_corpus.py /tmp/corpus          # writes the cases and manifest.json
    python tests/badinput/make_corpus.py /tmp/corpus --list   # names and expected behaviour only

Each case says what the user gets:

* ``error``   exit 2, one line ``hsdiff: error: <file>: <cause> — <what to do>``, no traceback;
* ``refused`` the same, and the line says the file was refused (it would need arbitrary code);
* ``verdict`` exit 0 or 1 with a JSON report whose ``warnings`` mention the problem.

Cases whose input is huge (a 200 MB log line, a multi-GB file) are written sparse or streamed and
are removed by :func:`cleanup_large`.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import shutil
import struct
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import torch
from safetensors.torch import save as st_save

from tests import builders as B

#: Boundaries the good dumps hold, and the SGLang ids (O-index) that capture them.
BOUNDARIES = (3, 15, 27)
IDS = "2,14,26"
SAMPLE = 0


@dataclass(frozen=True)
class Expect:
    """What the user gets. ``mentions``: case-insensitive texts the error line (or one warning) must hold."""

    kind: str  # "error" | "refused" | "verdict"
    mentions: tuple[str, ...] = ()
    exits: tuple[int, ...] = (2,)


@dataclass(frozen=True)
class Case:
    name: str
    what: str
    expect: Expect
    build: Callable[[Kit, Path], list[str]] = field(repr=False)
    needs: str | None = None  # "debuglog": needs the text-log reader; "float128": a platform with np.float128
    large: bool = False  # writes a big file: built on demand, removed after use


@dataclass
class Built:
    """A case made on disk: the ``hsdiff`` arguments and where its files are."""

    case: Case
    argv: list[str]
    dir: Path


CASES: list[Case] = []


def case(
    name: str,
    what: str,
    kind: str,
    *mentions: str,
    exits: tuple[int, ...] | None = None,
    needs: str | None = None,
    large: bool = False,
):
    def register(fn: Callable[[Kit, Path], list[str]]):
        ex = exits if exits is not None else ((0, 1) if kind == "verdict" else (2,))
        CASES.append(Case(name, what, Expect(kind, tuple(mentions), ex), fn, needs, large))
        return fn

    return register


# --------------------------------------------------------------------------- good material


class Kit:
    """Good dumps to damage, made once per corpus and copied or referenced by the cases."""

    def __init__(self, root: Path):
        self.root = root
        self.good = root / "_good"
        self.train = self.good / "train"
        self.infer = self.good / "infer"
        if not self.train.exists():
            B.specforge(self.train, [SAMPLE], BOUNDARIES)
            B.draft_config(self.train / "config.json", [b - 1 for b in BOUNDARIES])
            B.sglang_dump(self.infer, SAMPLE, BOUNDARIES)

    @property
    def train_file(self) -> Path:
        return self.train / "rows_0-2000" / f"data_{SAMPLE}.ckpt"

    def compare(self, train: Path | str, infer: Path | str, *extra: str) -> list[str]:
        return ["compare", str(train), str(infer), "--layer-ids", IDS, "--json", "-", *extra]

    def against_infer(self, train: Path, *extra: str) -> list[str]:
        return self.compare(train, self.infer, *extra)

    def against_train(self, infer: Path, *extra: str) -> list[str]:
        return self.compare(self.train, infer, *extra)

    def ckpt_bytes(self) -> bytes:
        return self.train_file.read_bytes()

    def aux(self, run: str = "bf16") -> torch.Tensor:
        return B.concat(SAMPLE, BOUNDARIES, run).clone()


def torch_bytes(obj: object, *, legacy: bool = False) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=not legacy)
    return buf.getvalue()


def st_bytes(tensors: dict[str, torch.Tensor]) -> bytes:
    return st_save({k: v.contiguous() for k, v in tensors.items()})


def st_patch(data: bytes, edit: Callable[[dict], object], *, raw: bytes | None = None) -> bytes:
    """Re-encode the JSON header of a safetensors blob after ``edit`` (or replace it by ``raw``)."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    if raw is None:
        new = edit(header)
        raw = json.dumps(header if new is None else new).encode()
    return struct.pack("<Q", len(raw)) + raw + body


def sglang_files(
    root: Path, values: list[torch.Tensor], *, ids: torch.Tensor | None = None, extra_tags: str = ""
) -> Path:
    """An SGLang dumper run directory with one ``aux_hidden_states`` tensor per rank."""
    exp = root / "dump_20261130_000000_000001"
    exp.mkdir(parents=True, exist_ok=True)
    ids = B.states(SAMPLE)["input_ids"].clone() if ids is None else ids
    for r, v in enumerate(values):
        base = {"step": 0, "rank": r, "recompute_status": "disabled", "world_rank": r, "world_size": len(values)}
        torch.save(
            {"value": ids.clone(), "meta": {**base, "dump_index": 0, "name": "input_ids"}},
            exp / f"step=0___rank={r}___dump_index=0___name=input_ids___recompute_status=disabled.pt",
        )
        torch.save(
            {"value": v, "meta": {**base, "dump_index": 1, "name": "aux_hidden_states"}},
            exp
            / f"step=0___rank={r}___dump_index=1___name=aux_hidden_states___recompute_status=disabled{extra_tags}.pt",
        )
    return root


def specforge_file(path: Path, aux: torch.Tensor, *, ids: torch.Tensor | None = None) -> Path:
    s = B.states(SAMPLE)
    ids = s["input_ids"].clone() if ids is None else ids
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "input_ids": ids,
            "loss_mask": torch.ones_like(ids),
            "aux_hidden_state": aux.unsqueeze(0).clone(),
            "hidden_state": s["fp32"][B.L].unsqueeze(0).clone(),
        },
        path,
    )
    return path


class Evil:
    """A pickled object whose loading would call ``fn(*args)``."""

    def __init__(self, fn: Callable, *args: object):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


def evil_payloads(marker: Path) -> dict[str, Evil]:
    """Payloads that would create ``marker`` if anything ever unpickled them."""
    import subprocess

    m = str(marker)
    return {
        "os.system": Evil(os.system, f"touch '{m}'"),
        "builtins.eval": Evil(eval, f"open({m!r}, 'w').close()"),
        "builtins.exec": Evil(exec, f"open({m!r}, 'w').close()"),
        "subprocess.call": Evil(subprocess.call, ["touch", m]),
        "subprocess.Popen": Evil(subprocess.Popen, ["touch", m]),
    }


# --------------------------------------------------------------------------- safetensors


def _vllm_bytes() -> bytes:
    s = B.states(SAMPLE)
    hs = torch.stack([s["bf16"][b] for b in BOUNDARIES], dim=1)
    return st_bytes({"hidden_states": hs, "token_ids": s["input_ids"].clone()})


@case("st_short", "a .safetensors file of 5 bytes", "error", "req-0.safetensors", "truncated")
def _(kit: Kit, d: Path) -> list[str]:
    (d / "req-0.safetensors").write_bytes(_vllm_bytes()[:5])
    return kit.against_train(d / "req-0.safetensors")


@case(
    "st_short_in_dir", "a 5-byte .safetensors file inside a dump directory", "error", "req-0.safetensors", "truncated"
)
def _(kit: Kit, d: Path) -> list[str]:
    (d / "dump").mkdir()
    (d / "dump" / "req-0.safetensors").write_bytes(_vllm_bytes()[:5])
    return kit.against_train(d / "dump")


@case(
    "st_header_length_lies",
    "safetensors whose header length is larger than the file",
    "error",
    "req-0.safetensors",
    "header",
)
def _(kit: Kit, d: Path) -> list[str]:
    data = bytearray(_vllm_bytes())
    data[:8] = struct.pack("<Q", len(data) + 4096)
    (d / "req-0.safetensors").write_bytes(bytes(data))
    return kit.against_train(d / "req-0.safetensors")


@case("st_header_length_huge", "safetensors whose header length is 2**63", "error", "req-0.safetensors", "header")
def _(kit: Kit, d: Path) -> list[str]:
    data = bytearray(_vllm_bytes())
    data[:8] = struct.pack("<Q", 2**63)
    (d / "req-0.safetensors").write_bytes(bytes(data))
    return kit.against_train(d / "req-0.safetensors")


@case(
    "st_truncated", "safetensors cut in half (offsets point past the end)", "error", "req-0.safetensors", "past the end"
)
def _(kit: Kit, d: Path) -> list[str]:
    data = _vllm_bytes()
    (d / "req-0.safetensors").write_bytes(data[: len(data) // 2])
    return kit.against_train(d / "req-0.safetensors")


@case(
    "st_offsets_lie",
    "safetensors whose data offsets disagree with the tensor shape",
    "error",
    "req-0.safetensors",
    "hidden_states",
)
def _(kit: Kit, d: Path) -> list[str]:
    def edit(h: dict) -> None:
        h["hidden_states"]["data_offsets"] = [0, 8]

    (d / "req-0.safetensors").write_bytes(st_patch(_vllm_bytes(), edit))
    return kit.against_train(d / "req-0.safetensors")


@case("st_offsets_overlap", "safetensors whose two tensors share bytes", "error", "req-0.safetensors", "overlap")
def _(kit: Kit, d: Path) -> list[str]:
    def edit(h: dict) -> None:
        a = h["hidden_states"]["data_offsets"]
        n = h["token_ids"]["data_offsets"][1] - h["token_ids"]["data_offsets"][0]
        h["token_ids"]["data_offsets"] = [a[0], a[0] + n]

    (d / "req-0.safetensors").write_bytes(st_patch(_vllm_bytes(), edit))
    return kit.against_train(d / "req-0.safetensors")


@case("st_header_garbage", "safetensors whose header is not JSON", "error", "req-0.safetensors", "header")
def _(kit: Kit, d: Path) -> list[str]:
    (d / "req-0.safetensors").write_bytes(st_patch(_vllm_bytes(), None, raw=b"{not json at all" + b" " * 40))  # type: ignore[arg-type]
    return kit.against_train(d / "req-0.safetensors")


@case("st_header_not_utf8", "safetensors whose header is not UTF-8", "error", "req-0.safetensors", "header")
def _(kit: Kit, d: Path) -> list[str]:
    (d / "req-0.safetensors").write_bytes(st_patch(_vllm_bytes(), None, raw=b'{\xff\xfe\xfd"a": 1}'))  # type: ignore[arg-type]
    return kit.against_train(d / "req-0.safetensors")


@case(
    "st_header_deep_nesting", "safetensors whose header nests 100000 JSON lists", "error", "req-0.safetensors", "header"
)
def _(kit: Kit, d: Path) -> list[str]:
    (d / "req-0.safetensors").write_bytes(
        st_patch(_vllm_bytes(), None, raw=b'{"a":' + b"[" * 100000 + b"]" * 100000 + b"}")
    )  # type: ignore[arg-type]
    return kit.against_train(d / "req-0.safetensors")


@case("st_header_zero_filled", "safetensors whose 1 MB header is zero bytes", "error", "req-0.safetensors", "header")
def _(kit: Kit, d: Path) -> list[str]:
    (d / "req-0.safetensors").write_bytes(st_patch(_vllm_bytes(), None, raw=b"{" + b"\x00" * 2**20))  # type: ignore[arg-type]
    return kit.against_train(d / "req-0.safetensors")


@case("st_header_not_object", "safetensors whose header is a JSON list", "error", "req-0.safetensors", "header")
def _(kit: Kit, d: Path) -> list[str]:
    (d / "req-0.safetensors").write_bytes(st_patch(_vllm_bytes(), lambda h: [1, 2, 3]))
    return kit.against_train(d / "req-0.safetensors")


@case(
    "st_entry_not_object",
    "safetensors whose entry is a number, not an object",
    "error",
    "req-0.safetensors",
    "malformed",
)
def _(kit: Kit, d: Path) -> list[str]:
    def edit(h: dict) -> None:
        h["hidden_states"] = 7

    (d / "req-0.safetensors").write_bytes(st_patch(_vllm_bytes(), edit))
    return kit.against_train(d / "req-0.safetensors")


@case("st_unknown_dtype", "safetensors with dtype Q7", "error", "req-0.safetensors", "hidden_states")
def _(kit: Kit, d: Path) -> list[str]:
    def edit(h: dict) -> None:
        h["hidden_states"]["dtype"] = "Q7"

    (d / "req-0.safetensors").write_bytes(st_patch(_vllm_bytes(), edit))
    return kit.against_train(d / "req-0.safetensors")


@case("st_negative_shape", "safetensors with a negative dimension", "error", "req-0.safetensors", "hidden_states")
def _(kit: Kit, d: Path) -> list[str]:
    def edit(h: dict) -> None:
        h["hidden_states"]["shape"] = [-24, 3, 576]

    (d / "req-0.safetensors").write_bytes(st_patch(_vllm_bytes(), edit))
    return kit.against_train(d / "req-0.safetensors")


@case("st_metadata_not_object", "safetensors whose __metadata__ is a list", "error", "req-0.safetensors", "metadata")
def _(kit: Kit, d: Path) -> list[str]:
    def edit(h: dict) -> None:
        h["__metadata__"] = ["a", "b"]

    (d / "req-0.safetensors").write_bytes(st_patch(_vllm_bytes(), edit))
    return kit.against_train(d / "req-0.safetensors")


@case("st_no_tensors", "a valid safetensors file with no tensors", "error", "req-0.safetensors", "no hidden states")
def _(kit: Kit, d: Path) -> list[str]:
    (d / "req-0.safetensors").write_bytes(st_bytes({}))
    return kit.against_train(d / "req-0.safetensors")


# --------------------------------------------------------------------------- torch zip / legacy


def _in_train_dir(kit: Kit, d: Path, data: bytes, name: str = f"data_{SAMPLE}.ckpt") -> list[str]:
    (d / "rows_0-2000").mkdir()
    (d / "rows_0-2000" / name).write_bytes(data)
    return kit.against_infer(d)


@case("pt_truncated_half", "a SpecForge .ckpt (torch zip) cut in half", "error", "data_0.ckpt", "truncated")
def _(kit: Kit, d: Path) -> list[str]:
    data = kit.ckpt_bytes()
    return _in_train_dir(kit, d, data[: len(data) // 2])


@case(
    "pt_truncated_head",
    "a torch zip archive of which only the first 10 bytes were written",
    "error",
    "data_0.ckpt",
    "truncated",
)
def _(kit: Kit, d: Path) -> list[str]:
    return _in_train_dir(kit, d, kit.ckpt_bytes()[:10])


@case(
    "pt_truncated_tail",
    "a torch zip archive missing its last 30 bytes (end of central directory)",
    "error",
    "data_0.ckpt",
    "truncated",
)
def _(kit: Kit, d: Path) -> list[str]:
    return _in_train_dir(kit, d, kit.ckpt_bytes()[:-30])


@case("pt_data_pkl_zeroed", "a torch zip archive whose data.pkl member is zeroed", "error", "data_0.ckpt", "damaged")
def _(kit: Kit, d: Path) -> list[str]:
    src = zipfile.ZipFile(io.BytesIO(kit.ckpt_bytes()))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("data.pkl"):
                data = b"\x00" * len(data)
            z.writestr(info, data)
    return _in_train_dir(kit, d, buf.getvalue())


@case("pt_storage_missing", "a torch zip archive missing a tensor storage member", "error", "data_0.ckpt", "damaged")
def _(kit: Kit, d: Path) -> list[str]:
    src = zipfile.ZipFile(io.BytesIO(kit.ckpt_bytes()))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for info in src.infolist():
            if "/data/" in info.filename and info.filename.endswith("/2"):
                continue
            z.writestr(info, src.read(info))
    return _in_train_dir(kit, d, buf.getvalue())


@case("zip_not_torch", "a zip archive holding a text file, named .pt", "error", "data_0.ckpt", "zip")
def _(kit: Kit, d: Path) -> list[str]:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("readme.txt", "hello")
    return _in_train_dir(kit, d, buf.getvalue())


@case("pt_legacy_truncated", "a legacy (non-zip) torch file cut in half", "error", "data_0.ckpt", "truncated")
def _(kit: Kit, d: Path) -> list[str]:
    s = B.states(SAMPLE)
    data = torch_bytes({"input_ids": s["input_ids"], "aux_hidden_state": kit.aux("fp32").unsqueeze(0)}, legacy=True)
    return _in_train_dir(kit, d, data[: len(data) // 2])


@case(
    "pt_protocol4",
    "a torch file saved with pickle_protocol=4, which the safe loader cannot read",
    "error",
    "data_0.ckpt",
    "protocol 4",
)
def _(kit: Kit, d: Path) -> list[str]:
    buf = io.BytesIO()
    s = B.states(SAMPLE)
    torch.save({"input_ids": s["input_ids"], "aux_hidden_state": kit.aux("fp32").unsqueeze(0)}, buf, pickle_protocol=4)
    return _in_train_dir(kit, d, buf.getvalue())


@case("pt_not_a_dict", "a torch file holding a bare string", "error", "data_0.ckpt", "no hidden states")
def _(kit: Kit, d: Path) -> list[str]:
    return _in_train_dir(kit, d, torch_bytes("just a string"))


# --------------------------------------------------------------------------- gzip


@case("gz_not_gzip_random", "a .ckpt.gz holding random bytes, not gzip", "error", "data_0.ckpt.gz", "gzip")
def _(kit: Kit, d: Path) -> list[str]:
    rng = np.random.default_rng(5)
    return _in_train_dir(kit, d, rng.integers(0, 256, 4096, dtype=np.uint8).tobytes(), "data_0.ckpt.gz")


@case(
    "gz_not_gzip_html", "a .ckpt.gz that is an HTML error page (a failed download)", "error", "data_0.ckpt.gz", "gzip"
)
def _(kit: Kit, d: Path) -> list[str]:
    page = b"<html><head><title>404 Not Found</title></head><body>Not Found</body></html>\n"
    return _in_train_dir(kit, d, page, "data_0.ckpt.gz")


@case("gz_truncated", "a gzipped .ckpt cut in half", "error", "data_0.ckpt.gz", "truncated")
def _(kit: Kit, d: Path) -> list[str]:
    data = gzip.compress(kit.ckpt_bytes(), compresslevel=1)
    return _in_train_dir(kit, d, data[: len(data) // 2], "data_0.ckpt.gz")


@case("gz_corrupt_stream", "a gzipped .ckpt with corrupted deflate data", "error", "data_0.ckpt.gz", "gzip")
def _(kit: Kit, d: Path) -> list[str]:
    data = bytearray(gzip.compress(kit.ckpt_bytes(), compresslevel=1))
    for i in range(40, 240):
        data[i] ^= 0x5A
    return _in_train_dir(kit, d, bytes(data), "data_0.ckpt.gz")


@case("gz_bad_crc", "a gzipped .ckpt whose CRC trailer is wrong", "error", "data_0.ckpt.gz", "gzip")
def _(kit: Kit, d: Path) -> list[str]:
    data = bytearray(gzip.compress(kit.ckpt_bytes(), compresslevel=1))
    data[-8] ^= 0xFF
    return _in_train_dir(kit, d, bytes(data), "data_0.ckpt.gz")


@case("gz_holds_text", "a .ckpt.gz whose content is text", "error", "data_0.ckpt.gz", "gzip")
def _(kit: Kit, d: Path) -> list[str]:
    return _in_train_dir(kit, d, gzip.compress(b"hello world\n" * 100), "data_0.ckpt.gz")


@case("gz_empty_member", "a .ckpt.gz that decompresses to nothing", "error", "data_0.ckpt.gz", "gzip")
def _(kit: Kit, d: Path) -> list[str]:
    return _in_train_dir(kit, d, gzip.compress(b""), "data_0.ckpt.gz")


@case("gz_holds_truncated_zip", "a .ckpt.gz holding a truncated torch archive", "error", "data_0.ckpt.gz", "truncated")
def _(kit: Kit, d: Path) -> list[str]:
    data = kit.ckpt_bytes()
    return _in_train_dir(kit, d, gzip.compress(data[: len(data) // 2]), "data_0.ckpt.gz")


#: Size of the gzip bomb's expansion; with the expansion-ratio guard it is refused long before.
BOMB_BYTES = 2 * 2**30


@case("gz_bomb", "a 2 GiB run of zeros gzipped to ~2 MB (a gzip bomb)", "error", "data_0.ckpt.gz", "bomb")
def _(kit: Kit, d: Path) -> list[str]:
    (d / "rows_0-2000").mkdir()
    chunk = 1 << 24
    head = kit.ckpt_bytes()[:64]  # starts like a torch archive so nothing stops before the expansion
    zeros = gzip.compress(b"\x00" * chunk, compresslevel=9)  # a gzip file may hold many members
    with open(d / "rows_0-2000" / "data_0.ckpt.gz", "wb") as f:
        f.write(gzip.compress(head))
        for _ in range(BOMB_BYTES // chunk):
            f.write(zeros)
    return kit.against_infer(d)


# --------------------------------------------------------------------------- hostile pickles, object arrays


def _marker(d: Path) -> Path:
    return d / "PWNED"


for _kind in ("os.system", "builtins.eval", "subprocess.call"):
    _fn_name = _kind.split(".")[-1]

    @case(
        f"pickle_zip_{_kind.replace('.', '_')}",
        f"a torch zip .pt whose pickle calls {_kind}",
        "refused",
        "data_0.ckpt",
        "refused",
        _fn_name,
    )
    def _(kit: Kit, d: Path, _kind=_kind) -> list[str]:
        payload = evil_payloads(_marker(d))[_kind]
        return _in_train_dir(kit, d, torch_bytes({"aux_hidden_state": payload}))

    @case(
        f"pickle_legacy_{_kind.replace('.', '_')}",
        f"a legacy torch file whose pickle calls {_kind}",
        "refused",
        "data_0.ckpt",
        "refused",
        _fn_name,
    )
    def _(kit: Kit, d: Path, _kind=_kind) -> list[str]:
        payload = evil_payloads(_marker(d))[_kind]
        return _in_train_dir(kit, d, torch_bytes({"aux_hidden_state": payload}, legacy=True))


@case(
    "pickle_raw_protocol2",
    "a bare pickle (protocol 2) calling os.system, named .pt",
    "refused",
    "data_0.ckpt",
    "refused",
    "system",
)
def _(kit: Kit, d: Path) -> list[str]:
    return _in_train_dir(kit, d, pickle.dumps(evil_payloads(_marker(d))["os.system"], protocol=2))


@case(
    "pickle_gzipped", "a .ckpt.gz whose torch pickle calls os.system", "refused", "data_0.ckpt.gz", "refused", "system"
)
def _(kit: Kit, d: Path) -> list[str]:
    return _in_train_dir(kit, d, gzip.compress(torch_bytes(evil_payloads(_marker(d))["os.system"])), "data_0.ckpt.gz")


@case("npz_object_array", "an .npz holding an object array", "refused", "data_0.npz", "refused", "object")
def _(kit: Kit, d: Path) -> list[str]:
    arr = np.empty(2, dtype=object)
    arr[0], arr[1] = evil_payloads(_marker(d))["os.system"], "x"
    buf = io.BytesIO()
    np.savez(buf, hidden_states=kit.aux().float().numpy(), meta=arr)
    (d / "data_0.npz").write_bytes(buf.getvalue())
    return kit.against_train(d / "data_0.npz")


@case("npy_object_array", "an .npy holding an object array", "refused", "h3.npy", "refused", "object")
def _(kit: Kit, d: Path) -> list[str]:
    arr = np.empty(1, dtype=object)
    arr[0] = evil_payloads(_marker(d))["os.system"]
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=True)
    (d / "h3.npy").write_bytes(buf.getvalue())
    return kit.against_train(d / "h3.npy")


# --------------------------------------------------------------------------- numpy damage


@case("npz_truncated", "an .npz cut in half", "error", "data_0.npz", "truncated")
def _(kit: Kit, d: Path) -> list[str]:
    buf = io.BytesIO()
    np.savez(buf, hidden_states=kit.aux().float().numpy())
    data = buf.getvalue()
    (d / "data_0.npz").write_bytes(data[: len(data) // 2])
    return kit.against_train(d / "data_0.npz")


@case("npy_truncated", "an .npy whose data is cut short", "error", "h3.npy", "damaged")
def _(kit: Kit, d: Path) -> list[str]:
    buf = io.BytesIO()
    np.save(buf, B.states(SAMPLE)["bf16"][3].float().numpy())
    data = buf.getvalue()
    (d / "h3.npy").write_bytes(data[: len(data) // 2])
    return kit.against_train(d / "h3.npy")


@case("npy_bad_header", "an .npy whose header is garbage", "error", "h3.npy", "damaged")
def _(kit: Kit, d: Path) -> list[str]:
    (d / "h3.npy").write_bytes(b"\x93NUMPY\x01\x00\x20\x00{'descr': <bad>, 'shape': (((( }    \n" + b"\x00" * 64)
    return kit.against_train(d / "h3.npy")


@case(
    "npy_float128",
    "an .npy of float128, a type no engine writes",
    "error",
    "h3.npy",
    "not a number type hsdiff reads",
    needs="float128",
)
def _(kit: Kit, d: Path) -> list[str]:
    np.save(d / "h3.npy", B.states(SAMPLE)["bf16"][3].float().numpy().astype(np.longdouble))
    return kit.against_train(d / "h3.npy")


# --------------------------------------------------------------------------- files and directories


@case("empty_file", "an empty .pt given as INFER", "error", "empty.pt", "empty")
def _(kit: Kit, d: Path) -> list[str]:
    (d / "empty.pt").touch()
    return kit.against_train(d / "empty.pt")


@case("empty_file_in_dir", "an empty data_0.ckpt inside the training directory", "error", "data_0.ckpt", "empty")
def _(kit: Kit, d: Path) -> list[str]:
    return _in_train_dir(kit, d, b"")


@case("empty_dir", "an empty directory as INFER", "error", "empty", "no hidden states")
def _(kit: Kit, d: Path) -> list[str]:
    (d / "empty").mkdir()
    return kit.against_train(d / "empty")


@case("dir_without_dump", "a directory of README, scripts and pictures", "error", "docs", "no hidden states")
def _(kit: Kit, d: Path) -> list[str]:
    (d / "docs").mkdir()
    (d / "docs" / "README.md").write_text("# notes\n")
    (d / "docs" / "run.py").write_text("print('hi')\n")
    (d / "docs" / "plot.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    return kit.against_train(d / "docs")


@case("dir_only_hidden_files", "a directory whose only dump is a dot-file", "error", "hidden", "no hidden states")
def _(kit: Kit, d: Path) -> list[str]:
    (d / "hidden").mkdir()
    shutil.copy(kit.train_file, d / "hidden" / ".data_0.ckpt")
    return kit.against_infer(d / "hidden")


@case("missing_path", "INFER does not exist", "error", "nowhere", "no such file")
def _(kit: Kit, d: Path) -> list[str]:
    return kit.against_train(d / "nowhere")


@case("symlink_loop_path", "INFER is a symbolic link to itself", "error", "loop", "symbolic link")
def _(kit: Kit, d: Path) -> list[str]:
    os.symlink("loop", d / "loop")
    return kit.against_train(d / "loop")


@case(
    "symlink_loop_files",
    "a training directory holding two symbolic links that point at each other",
    "verdict",
    "symbolic link",
    exits=(0,),
)
def _(kit: Kit, d: Path) -> list[str]:
    shutil.copytree(kit.train, d / "train")
    os.symlink("b.ckpt", d / "train" / "rows_0-2000" / "a.ckpt")
    os.symlink("a.ckpt", d / "train" / "rows_0-2000" / "b.ckpt")
    return kit.against_infer(d / "train")


@case(
    "symlink_loop_dirs",
    "a training directory holding a symbolic link to itself and to its parent",
    "verdict",
    exits=(0,),
)
def _(kit: Kit, d: Path) -> list[str]:
    shutil.copytree(kit.train, d / "train")
    os.symlink(".", d / "train" / "rows_0-2000" / "again")
    os.symlink("..", d / "train" / "rows_0-2000" / "up")
    return kit.against_infer(d / "train")


@case("binary_junk", "a file of random bytes with an unknown suffix as INFER", "error", "capture.dat", "format")
def _(kit: Kit, d: Path) -> list[str]:
    rng = np.random.default_rng(7)
    (d / "capture.dat").write_bytes(b"\x00\x01" + rng.integers(0, 256, 4094, dtype=np.uint8).tobytes())
    return kit.against_train(d / "capture.dat")


@case("bad_config_json", "a training directory whose config.json is not JSON", "error", "config.json", "json")
def _(kit: Kit, d: Path) -> list[str]:
    shutil.copytree(kit.train, d / "train")
    (d / "train" / "config.json").write_text("{ this is not json")
    return kit.against_infer(d / "train")


@case("config_json_not_utf8", "a training directory whose config.json is latin-1", "error", "config.json", "json")
def _(kit: Kit, d: Path) -> list[str]:
    shutil.copytree(kit.train, d / "train")
    (d / "train" / "config.json").write_bytes(b'{"model_type": "caf\xe9"}')
    return kit.against_infer(d / "train")


@case("model_config_missing", "--model-config points nowhere", "error", "nope.json", "config")
def _(kit: Kit, d: Path) -> list[str]:
    return kit.against_infer(kit.train, "--model-config", str(d / "nope.json"))


# --------------------------------------------------------------------------- logs (need the text-log reader)


@case(
    "log_not_utf8",
    "a server log in latin-1 with no captures",
    "error",
    "server.log",
    "no printed tensor",
    needs="debuglog",
)
def _(kit: Kit, d: Path) -> list[str]:
    (d / "server.log").write_bytes(b"[2026-11-30] caf\xe9 started\n\xff\xfe garbage \xe9\xe8\n" * 200)
    return kit.against_train(d / "server.log")


@case("log_binary", "a .log holding binary data", "error", "server.log", needs="debuglog")
def _(kit: Kit, d: Path) -> list[str]:
    rng = np.random.default_rng(11)
    (d / "server.log").write_bytes(rng.integers(0, 256, 1 << 16, dtype=np.uint8).tobytes())
    return kit.against_train(d / "server.log")


#: One log line this long (bytes), streamed to disk.
LONG_LINE = 200 * 2**20


@case("log_one_huge_line", "a .log that is a single 200 MB line", "error", "server.log", needs="debuglog", large=True)
def _(kit: Kit, d: Path) -> list[str]:
    chunk = b"sample_value=tensor([[0.1, 0.2, " * 32768  # ~1 MiB
    with open(d / "server.log", "wb") as f:
        written = 0
        while written < LONG_LINE:
            f.write(chunk)
            written += len(chunk)
    return kit.against_train(d / "server.log")


# --------------------------------------------------------------------------- data quality


@case("nan_infer", "NaN and Inf in a few tokens of the inference capture", "verdict", "NaN/Inf")
def _(kit: Kit, d: Path) -> list[str]:
    v = kit.aux()
    v[5, :10] = float("nan")
    v[6, 100:110] = float("inf")
    return kit.against_train(sglang_files(d / "infer", [v]))


@case("nan_infer_all", "an inference capture that is entirely NaN", "verdict", "NaN/Inf")
def _(kit: Kit, d: Path) -> list[str]:
    return kit.against_train(sglang_files(d / "infer", [torch.full_like(kit.aux(), float("nan"))]))


@case("nan_train", "NaN in the training tensor", "verdict", "NaN/Inf")
def _(kit: Kit, d: Path) -> list[str]:
    aux = kit.aux("fp32")
    aux[4, :] = float("nan")
    specforge_file(d / "train" / "rows_0-2000" / "data_0.ckpt", aux)
    return kit.against_infer(d / "train")


@case("zero_infer", "an all-zero inference capture (nothing written)", "verdict", "all zeros")
def _(kit: Kit, d: Path) -> list[str]:
    return kit.against_train(sglang_files(d / "infer", [torch.zeros_like(kit.aux())]))


@case("zero_train", "an all-zero training tensor", "verdict", "all zeros")
def _(kit: Kit, d: Path) -> list[str]:
    specforge_file(d / "train" / "rows_0-2000" / "data_0.ckpt", torch.zeros_like(kit.aux("fp32")))
    return kit.against_infer(d / "train")


@case(
    "zero_token_rows", "an inference capture whose later tokens are zero (partly written)", "verdict", "12 of 24 tokens"
)
def _(kit: Kit, d: Path) -> list[str]:
    v = kit.aux()
    v[12:] = 0
    return kit.against_train(sglang_files(d / "infer", [v]))


@case(
    "hidden_size_not_dividing",
    "--hidden-size 500 does not divide the training width 1728",
    "error",
    "data_0.ckpt",
    "not a multiple",
    "hidden",
)
def _(kit: Kit, d: Path) -> list[str]:
    return kit.compare(kit.train, kit.infer, "--hidden-size", "500")


@case("infer_width_odd", "an inference capture of width 1727 (one column short)", "error", "infer", "1727")
def _(kit: Kit, d: Path) -> list[str]:
    return kit.against_train(sglang_files(d / "infer", [kit.aux()[:, :-1].clone()]))


@case("int_infer", "the inference capture stored as int32", "error", "aux_hidden_states", "integer")
def _(kit: Kit, d: Path) -> list[str]:
    return kit.against_train(sglang_files(d / "infer", [(kit.aux().float() * 100).to(torch.int32)]))


@case("int_train", "the training aux tensor stored as int16", "error", "data_0.ckpt", "int16")
def _(kit: Kit, d: Path) -> list[str]:
    specforge_file(d / "train" / "rows_0-2000" / "data_0.ckpt", (kit.aux("fp32") * 100).to(torch.int16))
    return kit.against_infer(d / "train")


for _fp8 in ("float8_e4m3fn", "float8_e5m2"):

    @case(f"fp8_infer_{_fp8}", f"the inference capture stored as {_fp8}", "verdict")
    def _(kit: Kit, d: Path, _fp8=_fp8) -> list[str]:
        return kit.against_train(sglang_files(d / "infer", [kit.aux().float().to(getattr(torch, _fp8))]))

    @case(f"fp8_train_{_fp8}", f"the training aux tensor stored as {_fp8}", "verdict")
    def _(kit: Kit, d: Path, _fp8=_fp8) -> list[str]:
        specforge_file(d / "train" / "rows_0-2000" / "data_0.ckpt", kit.aux("fp32").to(getattr(torch, _fp8)))
        return kit.against_infer(d / "train")

    @case(f"fp8_safetensors_{_fp8}", f"a vLLM safetensors capture in {_fp8}", "verdict")
    def _(kit: Kit, d: Path, _fp8=_fp8) -> list[str]:
        s = B.states(SAMPLE)
        hs = torch.stack([s["bf16"][b] for b in BOUNDARIES], dim=1).float().to(getattr(torch, _fp8))
        (d / "req-0.safetensors").write_bytes(st_bytes({"hidden_states": hs, "token_ids": s["input_ids"].clone()}))
        return kit.against_train(d / "req-0.safetensors")


@case("tp_ranks_disagree", "two tensor-parallel ranks whose captures differ", "verdict", "ranks disagree")
def _(kit: Kit, d: Path) -> list[str]:
    v = kit.aux()
    w = v.clone()
    w[:, :576] = w[:, :576].flip(0)
    return kit.against_train(sglang_files(d / "infer", [v, w]))


@case(
    "tp_ranks_shape_disagree",
    "two tensor-parallel ranks whose captures have different shapes",
    "verdict",
    "ranks disagree",
)
def _(kit: Kit, d: Path) -> list[str]:
    v = kit.aux()
    return kit.against_train(sglang_files(d / "infer", [v, v[:10].clone()]))


@case("tp_ranks_agree", "two tensor-parallel ranks holding the same capture (control)", "verdict", exits=(0,))
def _(kit: Kit, d: Path) -> list[str]:
    v = kit.aux()
    return kit.against_train(sglang_files(d / "infer", [v, v.clone()]))


@case(
    "same_sample_twice_train",
    "the training directory holds the same sample twice",
    "verdict",
    "same sample twice",
    exits=(0,),
)
def _(kit: Kit, d: Path) -> list[str]:
    shutil.copytree(kit.train, d / "train")
    shutil.copy(kit.train_file, d / "train" / "rows_0-2000" / "data_0_copy.ckpt")
    return kit.against_infer(d / "train")


@case("same_sample_twice_infer", "the inference side holds the same dump run twice", "verdict", exits=(0,))
def _(kit: Kit, d: Path) -> list[str]:
    shutil.copytree(kit.infer, d / "infer" / "a")
    shutil.copytree(kit.infer, d / "infer" / "b")
    return kit.against_train(d / "infer")


@case("shape_infer_no_tokens", "an inference capture with zero tokens [0, 1728]", "error", "infer", "[0, 1728]")
def _(kit: Kit, d: Path) -> list[str]:
    return kit.against_train(sglang_files(d / "infer", [kit.aux()[:0].clone()], ids=torch.zeros(0, dtype=torch.int64)))


@case("shape_infer_zero_width", "an inference capture of width 0 [24, 0]", "error", "infer")
def _(kit: Kit, d: Path) -> list[str]:
    return kit.against_train(sglang_files(d / "infer", [kit.aux()[:, :0].clone()]))


@case("shape_infer_one_token_1d", "an inference capture that is one 1-D token [1728]", "verdict")
def _(kit: Kit, d: Path) -> list[str]:
    return kit.against_train(
        sglang_files(d / "infer", [kit.aux()[5].clone()], ids=B.states(SAMPLE)["input_ids"][5:6].clone())
    )


@case(
    "shape_infer_batch_of_two", "an inference capture with a batch dimension of 2 [2, 24, 1728]", "verdict", "token ids"
)
def _(kit: Kit, d: Path) -> list[str]:
    v = kit.aux()
    return kit.against_train(sglang_files(d / "infer", [torch.stack([v, v])]))


@case("shape_infer_scalar", "an inference capture that is a 0-d scalar", "error", "infer")
def _(kit: Kit, d: Path) -> list[str]:
    return kit.against_train(sglang_files(d / "infer", [torch.tensor(1.5)]))


@case(
    "shape_train_no_tokens", "a training tensor with zero tokens [1, 0, 1728]", "error", "data_0.ckpt", "[1, 0, 1728]"
)
def _(kit: Kit, d: Path) -> list[str]:
    specforge_file(
        d / "train" / "rows_0-2000" / "data_0.ckpt", kit.aux("fp32")[:0].clone(), ids=torch.zeros(0, dtype=torch.int64)
    )
    return kit.against_infer(d / "train")


@case("shape_train_1d", "a training aux tensor that is 1-D [1728] (one token, 24 ids)", "verdict", "token ids")
def _(kit: Kit, d: Path) -> list[str]:
    specforge_file(d / "train" / "rows_0-2000" / "data_0.ckpt", kit.aux("fp32")[5].clone())
    return kit.against_infer(d / "train")


@case("tokens_disagree", "inference token ids that appear in no training sample", "verdict", "token ids")
def _(kit: Kit, d: Path) -> list[str]:
    return kit.against_train(sglang_files(d / "infer", [kit.aux()], ids=B.states(SAMPLE)["input_ids"].flip(0).clone()))


@case("good_control", "the good dumps themselves (control)", "verdict", exits=(0,))
def _(kit: Kit, d: Path) -> list[str]:
    return kit.compare(kit.train, kit.infer)


# --------------------------------------------------------------------------- building


def build(root: Path, names: list[str] | None = None) -> dict[str, Built]:
    """Make every case (or those named) under ``root``; returns them by name."""
    root.mkdir(parents=True, exist_ok=True)
    kit = Kit(root)
    out: dict[str, Built] = {}
    for c in CASES:
        if names is not None and c.name not in names:
            continue
        d = root / c.name
        if d.exists():
            shutil.rmtree(d)
        d.mkdir()
        out[c.name] = Built(c, c.build(kit, d), d)
    return out


def build_one(root: Path, name: str) -> Built:
    return build(root, [name])[name]


def cleanup_large(built: Built) -> None:
    """Remove the big files a case wrote (they are only needed while its test runs)."""
    for p in built.dir.rglob("*"):
        if p.is_file() and not p.is_symlink() and p.stat().st_size > 64 * 2**20:
            p.unlink()


def manifest(built: dict[str, Built]) -> list[dict]:
    return [
        {
            "name": b.case.name,
            "input": b.case.what,
            "expect": b.case.expect.kind,
            "exit": list(b.case.expect.exits),
            "mentions": list(b.case.expect.mentions),
            "argv": b.argv,
            "needs": b.case.needs,
            "large": b.case.large,
        }
        for b in built.values()
    ]


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="directory to write the corpus into (created)")
    ap.add_argument("--list", action="store_true", help="print the cases and their expected behaviour only")
    ap.add_argument("names", nargs="*", help="only these cases")
    a = ap.parse_args(argv)
    if a.list:
        for c in CASES:
            print(f"{c.name:32s} {c.expect.kind:8s} exit {'/'.join(map(str, c.expect.exits)):4s} {c.what}")
        return 0
    built = build(a.out, a.names or None)
    (a.out / "manifest.json").write_text(json.dumps(manifest(built), indent=2))
    print(f"{len(built)} cases written to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
