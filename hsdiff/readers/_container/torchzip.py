"""torch.save zip archives read without torch: a restricted unpickler over memory-mapped storages.

An archive holds ``<prefix>/data.pkl`` (the pickled object), ``<prefix>/data/<key>`` (each storage's
raw bytes, stored uncompressed) and ``<prefix>/byteorder``. :class:`TensorUnpickler` resolves only
the globals a dict of tensors needs, a subset of what ``torch.load(weights_only=True)`` accepts
(``torch/_weights_only_unpickler.py``, ``_get_allowed_globals``, torch 2.13); any other global
raises :class:`pickle.UnpicklingError` naming ``GLOBAL module.name`` before anything is called.
Storages are read-only slices of one ``np.memmap`` of the file, so no tensor byte is read until
used; every view is checked against its storage's size first.

>>> obj = load_archive(Path("data_0.ckpt"))                    # doctest: +SKIP
>>> dtype_name(obj["hidden_state"]), type(obj["hidden_state"]).__name__   # doctest: +SKIP
('bfloat16', 'memmap')
"""

from __future__ import annotations

import io
import math
import pickle
import re
import struct
import zipfile
from _compat_pickle import IMPORT_MAPPING, NAME_MAPPING
from collections import Counter, OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

from ...arrays import np_dtype
from ...errors import FormatError

#: Largest ``data.pkl`` read (bytes). It holds only the object tree (about 100 bytes a tensor); the
#: tensor bytes live in the storage members, so a larger one is damage or a decompression bomb.
MAX_DATA_PKL = 64 * 2**20
#: A view may repeat its storage's elements (stride 0, as ``expand`` saves) but not claim more than this.
MAX_VIRTUAL_ELEMENTS = 2**27

#: torch's legacy storage classes -> the dtype of their elements
STORAGES = {
    "DoubleStorage": "float64",
    "FloatStorage": "float32",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
}
#: torch dtype names (``torch.float32`` and its aliases) -> the names hsdiff reads
DTYPES = {
    "float64": "float64",
    "double": "float64",
    "float32": "float32",
    "float": "float32",
    "float16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "float8_e4m3fn": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2",
    "int64": "int64",
    "long": "int64",
    "int32": "int32",
    "int": "int32",
    "int16": "int16",
    "short": "int16",
    "int8": "int8",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "bool": "bool",
}
#: Globals torch's safe loader also accepts but that hold nothing hsdiff reads (quantized, sparse,
#: complex, sub-byte tensors, tensor subclasses): refused as unsupported, not as unsafe.
_TORCH_ONLY = re.compile(
    r"torch\.(\w*Storage|cuda\.\w+Storage|storage\.TypedStorage|(complex|qu?int|bits|float4|float8|u?int)\w*|per_\w+"
    r"|Tensor|\w+Tensor|nn\.parameter\.Parameter|serialization\._get_layout|_tensor\._rebuild_from_type_v2"
    r"|_utils\._rebuild_\w+)"
)
_KEY_RE = re.compile(r"[\w.-]{1,200}")


class _Frozen:
    """A value the unpickler hands out; the pickle cannot change it afterwards (``BUILD`` is refused)."""

    __slots__ = ()

    def __setstate__(self, state: Any) -> None:
        raise pickle.UnpicklingError(f"cannot set the state of a {type(self).__name__.lstrip('_')}")


class _Dtype(_Frozen):
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


class _TensorType(_Frozen):
    """``torch.Tensor`` or ``torch.nn.Parameter`` named as the type a tensor is rebuilt as: a marker,
    never called."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


class _StorageType(_Frozen):
    __slots__ = ("dtype",)

    def __init__(self, dtype: str | None) -> None:
        self.dtype = dtype  # None: an untyped (byte) storage, the tensor names its dtype


class _Storage(_Frozen):
    __slots__ = ("key", "dtype", "data")

    def __init__(self, key: str, dtype: str | None, data: np.ndarray) -> None:
        self.key, self.dtype, self.data = key, dtype, data


class TensorUnpickler(pickle._Unpickler):
    """Unpickles a torch archive's ``data.pkl`` into numpy arrays viewing ``storage(key, ...)``.

    The pure-Python unpickler, as torch's safe loader: its memo is a dict, where the C unpickler's is
    an array that one ``LONG_BINPUT 2**31`` in a 500-byte pickle grows to gigabytes.
    """

    def __init__(self, file: Any, path: Path, storage: Callable[[str, str | None, int], _Storage]) -> None:
        super().__init__(file, encoding="utf-8")
        self.path = path
        self._storage = storage
        self._storages: dict[str, _Storage] = {}
        self._globals: dict[str, Any] = {
            "collections.OrderedDict": OrderedDict,
            "collections.Counter": Counter,
            "torch._utils._rebuild_tensor": self._rebuild_tensor,
            "torch._utils._rebuild_tensor_v2": self._rebuild_tensor_v2,
            "torch._utils._rebuild_tensor_v3": self._rebuild_tensor_v3,
            "torch._utils._rebuild_parameter": _rebuild_parameter,
            "torch._utils._rebuild_parameter_with_state": _rebuild_parameter_with_state,
            "torch.storage.UntypedStorage": _StorageType(None),
            "torch.UntypedStorage": _StorageType(None),
            "torch.Size": _size,
            "torch.device": _device,
            "_codecs.encode": _encode,
            "builtins.set": set,
            "builtins.complex": complex,
            "builtins.bytearray": _bytearray,
        }
        self._globals.update(
            {n: _TensorType(n) for n in ("torch.Tensor", "torch._tensor.Tensor", "torch.nn.parameter.Parameter")}
        )
        self._globals["torch._tensor._rebuild_from_type_v2"] = self._rebuild_from_type_v2
        self._globals.update({f"torch.{k}": _StorageType(v) for k, v in STORAGES.items()})
        self._globals.update({f"torch.{k}": _Dtype(v) for k, v in DTYPES.items()})

    def release(self) -> None:
        """Drop what refers back to this unpickler, so that the file's mapping goes with the last array viewing it."""
        self._globals.clear()
        self._storages.clear()
        self.memo.clear()  # type: ignore[attr-defined]  # set by pickle._Unpickler.__init__

    def find_class(self, module: str, name: str) -> Any:
        # protocol-2 pickles spell some modules and names the Python 2 way (__builtin__, commands)
        module, name = NAME_MAPPING.get((module, name), (IMPORT_MAPPING.get(module, module), name))
        full = f"{module}.{name}"
        found = self._globals.get(full)
        if found is not None:
            return found
        if _TORCH_ONLY.fullmatch(full):
            raise FormatError(
                f"torch file holds {full}, which hsdiff does not read",
                path=self.path,
                hint="save hidden states as plain dense tensors (float, bfloat16, float8, integer or bool)",
            )
        raise pickle.UnpicklingError(f"Unsupported global: GLOBAL {full} is not a tensor, dtype or container")

    def persistent_load(self, pid: Any) -> Any:
        if type(pid) is not tuple or len(pid) != 5 or pid[0] not in ("storage", b"storage"):
            raise pickle.UnpicklingError(f"persistent id {str(pid)[:80]} is not a storage")
        _, kind, key, _location, numel = pid
        key = key.decode("ascii", "replace") if isinstance(key, bytes) else key
        if not isinstance(kind, _StorageType) or not isinstance(key, str) or not _KEY_RE.fullmatch(key):
            raise pickle.UnpicklingError(f"persistent id {str(pid)[:80]} is not a storage")
        if type(numel) is not int or numel < 0:
            raise pickle.UnpicklingError(f"storage {key} claims {str(numel)[:40]} elements")
        if key not in self._storages:
            self._storages[key] = self._storage(key, kind.dtype, numel)
        return self._storages[key]

    def _rebuild_tensor(self, storage: Any, offset: Any, size: Any, stride: Any) -> np.ndarray:
        return self._view(storage, offset, size, stride, None)

    def _rebuild_tensor_v2(
        self,
        storage: Any,
        offset: Any,
        size: Any,
        stride: Any,
        requires_grad: Any,
        backward_hooks: Any,
        metadata: Any = None,
    ) -> np.ndarray:
        return self._view(storage, offset, size, stride, None)

    def _rebuild_tensor_v3(
        self,
        storage: Any,
        offset: Any,
        size: Any,
        stride: Any,
        requires_grad: Any,
        backward_hooks: Any,
        dtype: Any,
        metadata: Any = None,
    ) -> np.ndarray:
        if not isinstance(dtype, _Dtype):
            raise pickle.UnpicklingError(f"tensor dtype {str(dtype)[:40]} is not a torch dtype")
        return self._view(storage, offset, size, stride, dtype.name)

    def _rebuild_from_type_v2(self, func: Any, new_type: Any, args: Any, state: Any) -> np.ndarray:
        """A plain tensor (or parameter) that carried Python attributes: rebuilt, its attributes
        (``state``, never hidden states) left out."""
        rebuilds = (self._rebuild_tensor, self._rebuild_tensor_v2, self._rebuild_tensor_v3, _rebuild_parameter)
        if not isinstance(new_type, _TensorType) or func not in rebuilds or type(args) is not tuple:
            raise pickle.UnpicklingError("a tensor is rebuilt as something that is not a plain tensor")
        return func(*args)  # type: ignore[no-any-return]

    def _view(self, storage: Any, offset: Any, size: Any, stride: Any, dtype: str | None) -> np.ndarray:
        """The tensor ``storage[offset:]`` seen with ``size`` and ``stride`` (in elements), bounds checked."""
        if not isinstance(storage, _Storage):
            raise pickle.UnpicklingError("a tensor is rebuilt from something that is not a storage")
        dtype = dtype or storage.dtype
        if dtype is None:
            raise pickle.UnpicklingError(f"the tensor on byte storage {storage.key} names no dtype")
        shape, steps = _ints(size), _ints(stride)
        if shape is None or steps is None or len(shape) != len(steps) or type(offset) is not int or offset < 0:
            raise pickle.UnpicklingError(f"tensor on storage {storage.key} has a malformed size, stride or offset")
        dt = np_dtype(dtype)
        count = storage.data.size // dt.itemsize
        numel = math.prod(shape)
        last = offset + sum((n - 1) * s for n, s in zip(shape, steps)) if numel else offset - 1
        if last >= count or (numel > count and numel > MAX_VIRTUAL_ELEMENTS):
            raise FormatError(
                f"torch file is damaged: a tensor of shape {list(shape)[:8]} at offset {offset} reads past the end "
                f"of storage {storage.key} ({count} {dtype} elements)",
                path=self.path,
                hint="re-copy or re-dump the file",
            )
        typed = storage.data[: count * dt.itemsize].view(dt)
        if numel == 0:
            return typed[:0].reshape(shape)
        if _is_contiguous(shape, steps):
            return typed[offset : offset + numel].reshape(shape)
        strided = np.lib.stride_tricks.as_strided(
            typed[offset:], shape=shape, strides=tuple(s * dt.itemsize for s in steps), writeable=False
        )
        return strided.view(dt)  # as_strided keeps the bits, not the dtype's bfloat16/float8 tag


def load_archive(path: Path) -> Any:
    """The object a torch.save zip archive holds, its tensors as read-only memory-mapped numpy arrays.

    Raises :class:`pickle.UnpicklingError` when the pickle asks for a global outside the allowlist
    (the message names ``GLOBAL module.name``) or is damaged, :class:`FormatError` when the archive is.
    """
    limit = MAX_DATA_PKL  # read when called: a test or caller may change it
    with zipfile.ZipFile(path) as z:
        infos = {i.filename: i for i in z.infolist()}
        pkl = min(
            (n for n in infos if n == "data.pkl" or (n.endswith("/data.pkl") and n.count("/") == 1)),
            key=len,
            default=None,
        )
        if pkl is None:
            raise FormatError("zip archive holds no data.pkl: it is not a torch.save archive", path=path)
        prefix = pkl[: -len("data.pkl")]
        if prefix + "constants.pkl" in infos:
            raise FormatError(
                "torch file is a TorchScript archive (a compiled model), not saved tensors",
                path=path,
                hint="save the hidden states with torch.save (a dict of tensors) or as safetensors",
            )
        if infos[pkl].file_size > limit:
            raise _too_large(path, infos[pkl].file_size, limit)
        with z.open(infos[pkl]) as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise _too_large(path, len(data), limit)
        order = b"little"
        if prefix + "byteorder" in infos:
            with z.open(infos[prefix + "byteorder"]) as f:
                order = f.read(16).strip()
    if order not in (b"little", b"big"):
        raise FormatError(
            f"torch archive names an unknown byte order {order[:20]!r}", path=path, hint="re-copy or re-dump the file"
        )
    if len(data) >= 2 and data[0] == pickle.PROTO[0] and data[1] >= 4:
        raise pickle.UnpicklingError(f"Unsupported operand: pickle protocol {data[1]}")
    size = path.stat().st_size
    whole = np.memmap(path, dtype=np.uint8, mode="r")

    with open(path, "rb") as raw:  # the storages' local headers are read through it

        def storage(key: str, dtype: str | None, numel: int) -> _Storage:
            info = infos.get(f"{prefix}data/{key}")
            if info is None:
                raise FormatError(
                    f"torch file is damaged: storage {key} (member {prefix}data/{key}) is missing",
                    path=path,
                    hint="re-copy or re-dump the file",
                )
            start = _data_offset(path, info, raw)
            itemsize = 1 if dtype is None else np_dtype(dtype).itemsize
            if info.file_size != numel * itemsize or start + info.file_size > size:
                raise FormatError(
                    f"torch file is damaged or truncated: storage {key} holds {info.file_size} bytes "
                    f"({max(0, min(info.file_size, size - start))} present) but its tensors need {numel * itemsize}",
                    path=path,
                    hint="re-copy or re-dump the file",
                )
            if order == b"big" and itemsize > 1:
                raise FormatError(
                    "torch file was saved on a big-endian machine; hsdiff reads little-endian tensors",
                    path=path,
                    hint="re-save it on a little-endian machine (x86, ARM) or as safetensors",
                )
            return _Storage(key, dtype, whole[start : start + info.file_size])

        unpickler = TensorUnpickler(io.BytesIO(data), path, storage)
        try:
            return unpickler.load()
        finally:  # its table of bound methods is a reference cycle that would keep the mapping until a gc run
            unpickler.release()


def _data_offset(path: Path, info: zipfile.ZipInfo, f: IO[bytes]) -> int:
    """Where a stored (uncompressed) member's bytes start, read from its local file header."""
    if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1 or info.compress_size != info.file_size:
        raise FormatError(
            f"torch archive member {info.filename} is compressed or encrypted; torch.save stores storages as they are",
            path=path,
            hint="re-save it with torch.save (never re-zip the archive) or as safetensors",
        )
    f.seek(info.header_offset)
    head = f.read(30)
    if len(head) != 30 or head[:4] != b"PK\x03\x04":
        raise FormatError(
            f"torch file is damaged: member {info.filename} has no local header",
            path=path,
            hint="re-copy or re-dump the file",
        )
    name_len, extra_len = struct.unpack("<HH", head[26:30])
    if f.read(name_len) != info.orig_filename.encode("utf-8"):
        raise FormatError(
            f"torch file is damaged: member {info.filename}'s local header names another file",
            path=path,
            hint="re-copy or re-dump the file",
        )
    return info.header_offset + 30 + name_len + extra_len


def _too_large(path: Path, n: int, limit: int) -> FormatError:
    return FormatError(
        f"torch archive's data.pkl is {n / 2**20:.0f} MiB (more than {limit / 2**20:.0f} MiB): too large for a dict "
        "of tensors",
        path=path,
        hint="the file is damaged or not a tensor dump; re-copy it or save it as safetensors",
    )


def _ints(v: Any) -> tuple[int, ...] | None:
    if not isinstance(v, tuple) or not all(type(x) is int and x >= 0 for x in v):
        return None
    return v


def _is_contiguous(shape: tuple[int, ...], steps: tuple[int, ...]) -> bool:
    """torch's rule: row-major strides, dimensions of size 1 ignored."""
    expected = 1
    for n, s in zip(reversed(shape), reversed(steps)):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def _rebuild_parameter(data: Any, requires_grad: Any, backward_hooks: Any) -> Any:
    if not isinstance(data, np.ndarray):
        raise pickle.UnpicklingError("a parameter wraps something that is not a tensor")
    return data


def _rebuild_parameter_with_state(data: Any, requires_grad: Any, backward_hooks: Any, state: Any) -> Any:
    """A parameter that carried Python attributes: its tensor, the attributes left out."""
    return _rebuild_parameter(data, requires_grad, backward_hooks)


def _size(dims: Any = ()) -> tuple[int, ...]:
    t = tuple(dims) if isinstance(dims, (list, tuple)) else None
    if t is None or not all(type(d) is int for d in t):
        raise pickle.UnpicklingError("torch.Size of something that is not a list of integers")
    return t


def _device(kind: Any, index: Any = None) -> str:
    if not isinstance(kind, str) or not (index is None or type(index) is int):
        raise pickle.UnpicklingError("torch.device of something that is not a device name")
    return kind if index is None else f"{kind}:{index}"


def _encode(text: Any, encoding: Any = "utf-8") -> bytes:
    """``_codecs.encode`` as protocol-2 pickles of ``bytes`` use it: a string to latin-1 bytes, nothing else."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("_codecs.encode is only read for latin-1 strings (pickled bytes)")
    return text.encode("latin-1")


def _bytearray(data: Any = b"", encoding: Any = None) -> bytearray:
    if isinstance(data, (bytes, bytearray)) and encoding is None:
        return bytearray(data)
    if isinstance(data, str) and encoding in ("latin1", "latin-1"):
        return bytearray(data, "latin-1")
    raise pickle.UnpicklingError("bytearray is only read from bytes")  # never bytearray(n): n bytes of memory
