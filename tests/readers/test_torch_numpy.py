"""torch.save zip archives read without torch (:mod:`hsdiff.readers._container.torchzip`) give what
``torch.load(weights_only=True)`` gives, bit for bit; hostile and damaged archives are refused."""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hsdiff.arrays import as_f32, dtype_name, from_torch
from hsdiff.errors import FormatError, UnsafeFileError
from hsdiff.readers._container import open_table, sniff_container, torchzip

ROOT = Path(__file__).resolve().parents[2]
DUMP_ROOTS = [ROOT / "fixtures"]  # fixtures/real-dumps holds the files the real tools wrote


def reference(obj: Any, prefix: str = "", depth: int = 0, out: dict | None = None) -> dict[str, Any]:
    """torch.load's result flattened by the rule the reader documents: dotted keys, lists of tensors indexed."""
    out = {} if out is None else out
    if isinstance(obj, torch.Tensor):
        out[prefix] = obj
    elif isinstance(obj, dict) and depth < 4:
        for k, v in obj.items():
            reference(v, f"{prefix}.{k}" if prefix else str(k), depth + 1, out)
    elif isinstance(obj, (list, tuple)) and depth < 4 and obj and all(isinstance(v, torch.Tensor) for v in obj):
        for i, v in enumerate(obj):
            reference(v, f"{prefix}.{i}" if prefix else str(i), depth + 1, out)
    else:
        out[prefix] = obj
    return out


def bits(a: np.ndarray) -> bytes:
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).tobytes() if a.size else b""


def assert_same_as_torch(path: Path) -> int:
    """The table of ``path`` holds torch.load's keys, shapes, dtypes and bytes; returns the tensor count."""
    table = open_table(path, sniff_container(path))
    ref = reference(torch.load(path, map_location="cpu", weights_only=True))
    tensors = {k: v for k, v in ref.items() if isinstance(v, torch.Tensor)}
    assert set(table.entries) == set(tensors), path
    assert set(table.extras) == set(ref) - set(tensors), path
    for key, t in tensors.items():
        entry = table.entries[key]
        a = entry.loader()
        want = from_torch(t)
        assert entry.shape == tuple(t.shape) == a.shape, key
        assert entry.dtype == str(t.dtype).removeprefix("torch.") == dtype_name(a) == dtype_name(want), key
        assert a.dtype == want.dtype, key
        assert bits(a) == bits(want), key
        if entry.rows is not None:
            w = t.shape[-1]
            flat = as_f32(want.reshape(-1, w))
            n = flat.shape[0]
            got = entry.rows(n // 3, n, 1, w - 1 if w > 2 else None)
            assert got.dtype == np.float32 and not np.may_share_memory(got, a)
            assert bits(got) == bits(flat[n // 3 :, 1 : w - 1 if w > 2 else None]), key
    for key in table.extras:
        assert same_value(table.extras[key], ref[key]), key
    return len(tensors)


def same_value(ours: Any, theirs: Any) -> bool:
    """A non-tensor value as read without torch equals torch's: tensors as arrays, Size as tuple, device as str."""
    if isinstance(theirs, torch.Tensor):
        return (
            isinstance(ours, np.ndarray)
            and bits(ours) == bits(from_torch(theirs))
            and ours.shape == tuple(theirs.shape)
        )
    if isinstance(theirs, torch.Size):
        return type(ours) is tuple and ours == tuple(theirs)
    if isinstance(theirs, torch.device):
        return ours == str(theirs)
    if isinstance(theirs, (list, tuple)):
        return type(ours) is type(theirs) and len(ours) == len(theirs) and all(map(same_value, ours, theirs))
    if isinstance(theirs, dict):
        return (
            type(ours) is type(theirs)
            and list(ours) == list(theirs)
            and all(same_value(ours[k], v) for k, v in theirs.items())
        )
    return type(ours) is type(theirs) and ours == theirs


def _objects() -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    big = torch.randn(6, 10, generator=g)
    shared = torch.randn(4, 8, generator=g)
    noted, tagged = torch.randn(2, 3, generator=g).bfloat16(), torch.nn.Parameter(torch.randn(3, generator=g))
    noted.note, tagged.tag = "hello", 1  # Python attributes: torch saves them with the tensor, hsdiff leaves them out
    return {
        "dtypes": {
            "bf16": torch.randn(3, 16, generator=g).bfloat16(),
            "fp16": torch.randn(2, 5, 7, generator=g).half(),
            "fp32": torch.randn(5, 3, generator=g) * 1e4,
            "fp64": torch.randn(3, generator=g).double(),
            "int64": torch.randint(-(2**40), 2**40, (9,), generator=g),
            "int32": torch.randint(-1000, 1000, (2, 3), generator=g, dtype=torch.int32),
            "int8": torch.randint(-100, 100, (4,), generator=g, dtype=torch.int8),
            "uint8": torch.randint(0, 255, (4,), generator=g, dtype=torch.uint8),
            "bool": torch.rand(7, generator=g) > 0.5,
            "fp8": torch.randn(3, 4, generator=g).to(torch.float8_e4m3fn),
            "fp8e5": torch.randn(3, 4, generator=g).to(torch.float8_e5m2),
            "nan": torch.tensor([float("nan"), float("inf"), -0.0, 1e-45]),
        },
        "nested": {
            "a": {"b": {"c": torch.arange(6).reshape(2, 3)}, "n": 3},
            "label": "x",
            "deep": {"1": {"2": {"3": {"4": torch.ones(1)}}}},
        },
        "lists": {
            "hs": [torch.randn(2, 4, generator=g).bfloat16() for _ in range(3)],
            "mixed": [torch.ones(2), 3],
            "empty": [],
        },
        "ordered": OrderedDict([("z", torch.ones(2, 2)), ("a", torch.zeros(3))]),
        "views": {
            "transposed": big.t(),
            "rows": big[2:5],
            "columns": big[:, 3:7],
            "strided": big[::2, ::3],
            "expanded": torch.randn(1, 5, generator=g).expand(4, 5),
            "first": shared[:2],
            "second": shared[1:],
            "whole": shared,
        },
        "shapes": {
            "scalar": torch.tensor(2.5),
            "scalar_int": torch.tensor(7),
            "empty": torch.zeros(0, 8),
            "empty3": torch.zeros(2, 0, 3).bfloat16(),
            "one": torch.ones(1, 1, 1),
        },
        "bare": torch.randn(3, 4, generator=g).bfloat16(),
        "values": {
            "x": torch.randn(2, generator=g),
            "n": 12,
            "f": 0.5,
            "s": "text",
            "b": b"\x00\xffbytes",
            "none": None,
            "tup": (1, "a"),
            "size": torch.Size([2, 3]),
            "set": {1, 2},
            "device": torch.device("cpu"),
        },
        "parameter": {"w": torch.nn.Parameter(torch.randn(3, 3, generator=g))},
        "attributes": {"tensor": noted, "parameter": tagged},
        "module_state": torch.nn.Linear(4, 3).state_dict(),
    }


@pytest.mark.parametrize("protocol", [None, 2])
@pytest.mark.parametrize("name", sorted(_objects()))
def test_torch_save_files_read_as_torch_reads_them(tmp_path: Path, name: str, protocol: int | None) -> None:
    obj = _objects()[name]
    path = tmp_path / "x.pt"
    if protocol is None:
        torch.save(obj, path)
    else:
        torch.save(obj, path, pickle_protocol=protocol, _use_new_zipfile_serialization=True)
    assert sniff_container(path) == "torch"
    assert assert_same_as_torch(path) >= 1


def test_views_keep_memory_mapped_and_share_their_storage(tmp_path: Path) -> None:
    shared = torch.arange(32, dtype=torch.float32).reshape(4, 8)
    torch.save({"first": shared[:2], "second": shared[1:], "t": shared.t()}, tmp_path / "x.pt")
    obj = torchzip.load_archive(tmp_path / "x.pt")
    first, second, t = obj["first"], obj["second"], obj["t"]
    assert isinstance(first.base, np.memmap) or isinstance(first, np.memmap)
    assert not first.flags.writeable and not t.flags.writeable
    assert np.shares_memory(first, second) and np.shares_memory(first, t)
    assert t.strides == (4, 32) and t[3, 1] == 11.0


def test_legacy_files_are_converted_to_numpy(tmp_path: Path) -> None:
    path = tmp_path / "legacy.pt"
    dtypes = {k: v for k, v in _objects()["dtypes"].items() if not k.startswith("fp8")}  # torch cannot load these
    torch.save(dtypes | {"v": _objects()["views"]}, path, _use_new_zipfile_serialization=False)
    assert sniff_container(path) == "torch-legacy"
    assert assert_same_as_torch(path) > 10
    table = open_table(path, "torch-legacy")
    assert all(isinstance(e.loader(), np.ndarray) for e in table.entries.values())


def _dump_files() -> list[Path]:
    found = []
    for root in DUMP_ROOTS:
        for p in sorted(root.rglob("*")) if root.is_dir() else []:
            if not p.is_file() or p.stat().st_size < 4:
                continue
            with open(p, "rb") as f:
                zipped = f.read(4) == b"PK\x03\x04"
            if (
                zipped and zipfile.is_zipfile(p) and any(n.endswith("data.pkl") for n in zipfile.ZipFile(p).namelist())
            ) or (not zipped and p.suffix in (".pt", ".pth", ".ckpt", ".bin") and sniff_container(p) == "torch-legacy"):
                found.append(p)
    return found


def test_every_torch_file_of_the_fixtures_and_real_dumps_reads_as_torch_reads_it() -> None:
    files = _dump_files()
    assert len(files) >= 20, "the fixtures hold torch dumps"
    assert sum(assert_same_as_torch(p) for p in files) >= len(files)


# --------------------------------------------------------------------------- hand-made archives


class _Tensor:
    """Pickles as torch's ``_rebuild_tensor_v2(storage, offset, size, stride, ...)`` with any arguments."""

    def __init__(self, storage: _Store, offset: int, size: tuple, stride: tuple):
        self.args = (storage, offset, size, stride, False, OrderedDict())

    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2, self.args)


class _Store:
    def __init__(self, key: str, kind: Any, numel: int):
        self.pid = ("storage", kind, key, "cpu", numel)


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj: Any) -> Any:
        return obj.pid if isinstance(obj, _Store) else None


def archive(
    path: Path,
    obj: Any,
    storages: dict[str, bytes],
    *,
    protocol: int = 2,
    byteorder: str = "little",
    compress: int = zipfile.ZIP_STORED,
) -> Path:
    buf = io.BytesIO()
    _Pickler(buf, protocol=protocol).dump(obj)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        z.writestr("archive/byteorder", byteorder)
        for key, data in storages.items():
            z.writestr(zipfile.ZipInfo(f"archive/data/{key}"), data, compress_type=compress)
        z.writestr("archive/version", "3\n")
    return path


FLOATS = np.arange(12, dtype=np.float32).tobytes()


def test_a_hand_made_archive_in_bounds_reads_as_torch_reads_it(tmp_path: Path) -> None:
    s = _Store("0", torch.FloatStorage, 12)
    path = archive(tmp_path / "ok.pt", {"a": _Tensor(s, 2, (2, 3), (1, 4)), "b": _Tensor(s, 11, (), ())}, {"0": FLOATS})
    assert assert_same_as_torch(path) == 2
    assert open_table(path, "torch").entries["a"].loader().tolist() == [[2, 6, 10], [3, 7, 11]]


@pytest.mark.parametrize(
    "offset, size, stride",
    [
        (0, (13,), (1,)),  # one element more than the storage holds
        (12, (1,), (1,)),  # starts at the end
        (2, (2, 3), (1, 5)),  # the last row's stride runs past the end
        (0, (3, 5), (5, 1)),
        (0, (2**40,), (0,)),  # a broadcast claiming 2**40 elements from one
    ],
)
def test_a_tensor_reading_past_its_storage_is_refused(tmp_path: Path, offset: int, size: tuple, stride: tuple) -> None:
    s = _Store("0", torch.FloatStorage, 12)
    path = archive(tmp_path / "oob.pt", {"a": _Tensor(s, offset, size, stride)}, {"0": FLOATS})
    with pytest.raises(FormatError, match="damaged") as e:
        open_table(path, "torch")
    assert "oob.pt" in str(e.value)


@pytest.mark.parametrize(
    "numel, data, words",
    [
        (12, FLOATS[:40], "40 bytes"),  # a member cut short
        (10**12, FLOATS, "truncated"),  # a storage claiming more than its member
    ],
)
def test_a_storage_shorter_than_its_claim_is_refused(tmp_path: Path, numel: int, data: bytes, words: str) -> None:
    path = archive(
        tmp_path / "short.pt", {"a": _Tensor(_Store("0", torch.FloatStorage, numel), 0, (3,), (1,))}, {"0": data}
    )
    with pytest.raises(FormatError, match=words):
        open_table(path, "torch")


def test_a_damaged_archive_is_a_format_error(tmp_path: Path) -> None:
    s = _Store("0", torch.FloatStorage, 12)
    path = archive(
        tmp_path / "deflated.pt", {"a": _Tensor(s, 0, (12,), (1,))}, {"0": FLOATS}, compress=zipfile.ZIP_DEFLATED
    )
    with pytest.raises(FormatError, match="compressed"):
        open_table(path, "torch")
    path = archive(
        tmp_path / "missing.pt", {"a": _Tensor(_Store("7", torch.FloatStorage, 12), 0, (12,), (1,))}, {"0": FLOATS}
    )
    with pytest.raises(FormatError, match="damaged.*missing"):
        open_table(path, "torch")
    path = archive(tmp_path / "big.pt", {"a": _Tensor(s, 0, (12,), (1,))}, {"0": FLOATS}, byteorder="big")
    with pytest.raises(FormatError, match="big-endian"):
        open_table(path, "torch")
    good = tmp_path / "good.pt"
    torch.save({"a": torch.ones(1000)}, good)
    cut = tmp_path / "cut.pt"
    cut.write_bytes(good.read_bytes()[:-200])
    with pytest.raises(FormatError, match="damaged or truncated"):
        open_table(cut, "torch")


def test_a_torchscript_archive_is_not_read_as_tensors(tmp_path: Path) -> None:
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), tmp_path / "m.pt")
    with pytest.raises(FormatError, match="TorchScript"):
        open_table(tmp_path / "m.pt", sniff_container(tmp_path / "m.pt"))


def test_a_pickle_naming_no_storage_or_setting_a_tensor_state_is_damaged(tmp_path: Path) -> None:
    class Pid(_Pickler):
        def persistent_id(self, obj: Any) -> Any:
            return ("module", "x") if isinstance(obj, _Store) else None

    buf = io.BytesIO()
    Pid(buf, protocol=2).dump({"a": _Tensor(_Store("0", torch.FloatStorage, 12), 0, (12,), (1,))})
    with zipfile.ZipFile(tmp_path / "pid.pt", "w") as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        z.writestr("archive/data/0", FLOATS)
    with pytest.raises(FormatError, match="damaged") as e:
        open_table(tmp_path / "pid.pt", "torch")
    assert not isinstance(e.value, UnsafeFileError)
    good = io.BytesIO()
    _Pickler(good, protocol=2).dump([_Tensor(_Store("0", torch.FloatStorage, 12), 0, (12,), (1,))])
    raw = good.getvalue()
    pos = raw.rindex(pickle.REDUCE) + 1  # right after the tensor is rebuilt: BUILD it with an empty state
    with zipfile.ZipFile(tmp_path / "build.pt", "w") as z:
        z.writestr("archive/data.pkl", raw[:pos] + pickle.EMPTY_DICT + pickle.BUILD + raw[pos:])
        z.writestr("archive/data/0", FLOATS)
    with pytest.raises(FormatError, match="damaged.*__setstate__"):
        open_table(tmp_path / "build.pt", "torch")


def test_a_pickle_memo_index_of_a_billion_costs_no_memory(tmp_path: Path) -> None:
    """``LONG_BINPUT 1479026690`` (found by the mutation fuzz): the C unpickler's memo array grows to ~24 GB."""
    path = tmp_path / "memo.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02}r" + (1479026690).to_bytes(4, "little") + b".")
    code = (
        "import resource\nfrom pathlib import Path\n"
        "resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))\n"
        "from hsdiff.readers._container import open_table\n"
        f"t = open_table(Path({str(path)!r}), 'torch')\nprint(t.entries, t.extras)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "{} {}", out.stderr[-500:]


def test_a_data_pkl_above_the_limit_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.save({f"t{i}": torch.ones(1) for i in range(200)}, tmp_path / "x.pt")
    monkeypatch.setattr(torchzip, "MAX_DATA_PKL", 1000)
    with pytest.raises(FormatError, match="data.pkl.*too large"):
        open_table(tmp_path / "x.pt", "torch")


class _Evil:
    def __init__(self, fn: Any, *args: Any):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


@pytest.mark.parametrize("protocol", [2, 4])
@pytest.mark.parametrize(
    "kind, named",
    [
        ("os.system", ("posix.system", "os.system")),
        ("builtins.eval", ("builtins.eval",)),
        ("subprocess.call", ("subprocess.call",)),
    ],
)
def test_a_pickle_calling_code_is_refused_and_never_runs(
    tmp_path: Path, kind: str, named: tuple, protocol: int
) -> None:
    marker = tmp_path / "PWNED"
    payload = {
        "os.system": _Evil(os.system, f"touch '{marker}'"),
        "builtins.eval": _Evil(eval, f"open({str(marker)!r}, 'w').close()"),
        "subprocess.call": _Evil(subprocess.call, ["touch", str(marker)]),
    }[kind]
    path = tmp_path / "evil.pt"
    torch.save({"aux_hidden_state": torch.ones(2), "x": payload}, path, pickle_protocol=protocol)
    with pytest.raises(UnsafeFileError) as e:
        open_table(path, sniff_container(path))
    assert any(n in str(e.value) for n in named) and "refused" in str(e.value)
    assert not marker.exists()


def test_only_the_allowlist_is_resolved(tmp_path: Path) -> None:
    """A global torch's safe loader refuses is refused; one it accepts that holds no dense tensor is unsupported."""
    path = archive(tmp_path / "np.pt", {"a": np.zeros(2)}, {})
    with pytest.raises(UnsafeFileError, match="numpy"):
        open_table(path, "torch")
    path = tmp_path / "c.pt"
    torch.save({"a": torch.zeros(2, dtype=torch.complex64)}, path)
    with pytest.raises(FormatError, match="torch.ComplexFloatStorage, which hsdiff does not read") as e:
        open_table(path, "torch")
    assert not isinstance(e.value, UnsafeFileError)


def test_opening_an_archive_never_imports_torch(tmp_path: Path) -> None:
    path = tmp_path / "x.pt"
    torch.save({"h": torch.randn(8, 16).bfloat16(), "ids": torch.arange(8)}, path)
    code = (
        "import sys\nfrom pathlib import Path\n"
        "from hsdiff.readers._container import open_table, sniff_container\n"
        f"p = Path({str(path)!r})\nt = open_table(p, sniff_container(p))\n"
        "assert t.entries['h'].rows(0, 8).shape == (8, 16) and t.entries['ids'].loader().sum() == 28\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False", out.stderr
