"""npukit's own safetensors reader (and a small writer) on ``np.memmap``.

Format: an 8-byte little-endian header length N, N bytes of JSON mapping each tensor name to
``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative to the byte after the
header), an optional ``__metadata__`` string map, then the data. Tensors are read as zero-copy
views of one read-only memory map; ``float32()`` widens F16/BF16 on request (BF16 by a 16-bit
shift of the bit pattern, exact). Every structural problem — short file, bad header length or
JSON, unknown dtype, shape×itemsize ≠ span, span past the end, overlapping spans — raises
`ModelError` with a one-line reason naming the file.

Sharded checkpoints (``model.safetensors.index.json`` with a ``weight_map``) are opened by
`open_checkpoint`, which presents the same interface over all shards.
"""

from __future__ import annotations

import itertools
import json
import math
import struct
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Protocol

import numpy as np

from npukit.errors import ModelError

# safetensors dtype name -> numpy storage dtype (BF16 and FP8 are kept as raw unsigned bits).
DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"), "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"), "F8_E4M3": np.dtype("u1"), "F8_E5M2": np.dtype("u1"),
}
_FLOAT_WIDEN = ("F64", "F32", "F16", "BF16")
_MAX_HEADER = 100 * 1024 * 1024  # the reference implementation's own limit
INDEX_NAME = "model.safetensors.index.json"


class TensorSource(Protocol):
    """Anything that hands out named tensors one at a time (a file, a shard set, a generator)."""

    def keys(self) -> list[str]: ...
    def shape(self, name: str) -> tuple[int, ...]: ...
    def dtype(self, name: str) -> str: ...
    def float32(self, name: str) -> np.ndarray: ...
    def rows(self, name: str, index: np.ndarray | slice) -> np.ndarray: ...
    def is_mapped(self, name: str) -> bool: ...


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """Widen bfloat16 bit patterns (uint16) to float32 exactly."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _widen(raw: np.ndarray, dtype: str, where: str) -> np.ndarray:
    if dtype == "F32":
        return raw
    if dtype == "BF16":
        return bf16_to_f32(raw)
    if dtype in ("F16", "F64"):
        return raw.astype(np.float32)
    raise ModelError(f"{where}: dtype {dtype} is not a float type npukit widens to float32")


class SafetensorsFile:
    """One ``.safetensors`` file, validated on open, tensors served as memmap views."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        p = self.path
        try:
            size = p.stat().st_size
            with p.open("rb") as f:
                head = f.read(8)
                if len(head) < 8:
                    raise ModelError(f"{p}: truncated safetensors file ({size} bytes, no header length)")
                (n,) = struct.unpack("<Q", head)
                if n > _MAX_HEADER or 8 + n > size:
                    raise ModelError(f"{p}: header length {n} does not fit a {size}-byte file "
                                     "(truncated or not safetensors)")
                text = f.read(n)
        except OSError as exc:
            raise ModelError(f"{p}: cannot read ({exc.strerror or exc})") from None
        try:
            header = json.loads(text.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelError(f"{p}: corrupt safetensors header (invalid JSON: {exc.args[0]})") from None
        if not isinstance(header, dict):
            raise ModelError(f"{p}: corrupt safetensors header (not a JSON object)")
        meta = header.pop("__metadata__", None)
        if meta is not None and not (isinstance(meta, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in meta.items())):
            raise ModelError(f"{p}: corrupt safetensors header (__metadata__ must map strings to strings)")
        self.metadata: dict[str, str] = meta or {}
        self._data_start = 8 + n
        data_len = size - self._data_start
        self._entries: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
        for name, e in header.items():
            self._entries[name] = self._check_entry(name, e, data_len)
        spans = sorted((b, e, k) for k, (_, _, b, e) in self._entries.items() if e > b)
        for (_b0, e0, k0), (b1, _e1, k1) in itertools.pairwise(spans):
            if b1 < e0:
                raise ModelError(f"{p}: corrupt safetensors header (tensors {k0!r} and {k1!r} overlap)")
        self._map = (np.memmap(p, dtype=np.uint8, mode="r", offset=self._data_start, shape=(data_len,))
                     if data_len > 0 else np.zeros(0, np.uint8))

    def _check_entry(self, name: str, e: object, data_len: int) -> tuple[str, tuple[int, ...], int, int]:
        where = f"{self.path}: tensor {name!r}"
        if not isinstance(e, dict) or not {"dtype", "shape", "data_offsets"} <= e.keys():
            raise ModelError(f"{where}: header entry needs dtype, shape and data_offsets")
        dt, shape, offs = e["dtype"], e["shape"], e["data_offsets"]
        if dt not in DTYPES:
            raise ModelError(f"{where}: unknown dtype {dt!r}")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape):
            raise ModelError(f"{where}: shape must be a list of non-negative integers")
        if not (isinstance(offs, list) and len(offs) == 2 and all(
                isinstance(o, int) and not isinstance(o, bool) for o in offs)) or not 0 <= offs[0] <= offs[1]:
            raise ModelError(f"{where}: data_offsets must be [begin, end] with 0 <= begin <= end")
        want = math.prod(shape) * DTYPES[dt].itemsize
        if offs[1] - offs[0] != want:
            raise ModelError(f"{where}: shape {shape} × {dt} needs {want} bytes "
                             f"but spans {offs[1] - offs[0]}")
        if offs[1] > data_len:
            raise ModelError(f"{where}: data ends at byte {offs[1]} past the {data_len}-byte data section "
                             "(truncated file)")
        return dt, tuple(shape), offs[0], offs[1]

    def _entry(self, name: str) -> tuple[str, tuple[int, ...], int, int]:
        try:
            return self._entries[name]
        except KeyError:
            raise ModelError(f"{self.path}: no tensor {name!r}") from None

    def keys(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._entry(name)[1]

    def dtype(self, name: str) -> str:
        return self._entry(name)[0]

    def raw(self, name: str) -> np.ndarray:
        """The stored values as a read-only view (BF16/FP8 as unsigned integer bits)."""
        dt, shape, b, e = self._entry(name)
        return self._map[b:e].view(DTYPES[dt]).reshape(shape)

    def float32(self, name: str) -> np.ndarray:
        """float32 values: a zero-copy view for F32, a widened copy for F16/BF16/F64."""
        return _widen(self.raw(name), self.dtype(name), f"{self.path}: tensor {name!r}")

    def rows(self, name: str, index: np.ndarray | slice) -> np.ndarray:
        """float32 rows of a tensor (widening only the rows asked for)."""
        return _widen(self.raw(name)[index], self.dtype(name), f"{self.path}: tensor {name!r}")

    def is_mapped(self, name: str) -> bool:
        return self.dtype(name) == "F32"


class ShardedCheckpoint:
    """Several safetensors files behind one name → tensor interface."""

    def __init__(self, files: Iterable[SafetensorsFile], weight_map: Mapping[str, str] | None = None) -> None:
        self.files = list(files)
        self._where: dict[str, SafetensorsFile] = {}
        by_name = {f.path.name: f for f in self.files}
        if weight_map is not None:
            for key, fname in weight_map.items():
                f = by_name.get(fname)
                if f is None or key not in f:
                    raise ModelError(f"{INDEX_NAME}: tensor {key!r} is not in shard {fname!r}")
                self._where[key] = f
        else:
            for f in self.files:
                for key in f:
                    if key in self._where:
                        raise ModelError(f"{f.path}: tensor {key!r} appears in more than one file")
                    self._where[key] = f

    def _file(self, name: str) -> SafetensorsFile:
        try:
            return self._where[name]
        except KeyError:
            raise ModelError(f"checkpoint has no tensor {name!r}") from None

    def keys(self) -> list[str]:
        return list(self._where)

    def __contains__(self, name: object) -> bool:
        return name in self._where

    def shape(self, name: str) -> tuple[int, ...]:
        return self._file(name).shape(name)

    def dtype(self, name: str) -> str:
        return self._file(name).dtype(name)

    def raw(self, name: str) -> np.ndarray:
        return self._file(name).raw(name)

    def float32(self, name: str) -> np.ndarray:
        return self._file(name).float32(name)

    def rows(self, name: str, index: np.ndarray | slice) -> np.ndarray:
        return self._file(name).rows(name, index)

    def is_mapped(self, name: str) -> bool:
        return self._file(name).is_mapped(name)

    @property
    def metadata(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for f in self.files:
            out.update(f.metadata)
        return out


def open_checkpoint(path: str | Path) -> ShardedCheckpoint:
    """Open a ``.safetensors`` file, or a directory holding one file, a sharded set with
    ``model.safetensors.index.json``, or several ``*.safetensors`` files."""
    p = Path(path)
    if p.is_file():
        return ShardedCheckpoint([SafetensorsFile(p)])
    if not p.is_dir():
        raise ModelError(f"{p}: no such checkpoint file or directory")
    index = p / INDEX_NAME
    if index.is_file():
        try:
            data = json.loads(index.read_text())
            wmap = data["weight_map"]
            if not isinstance(wmap, dict) or not all(isinstance(v, str) for v in wmap.values()):
                raise TypeError
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
            raise ModelError(f"{index}: corrupt index (needs a JSON object with a weight_map)") from None
        names = sorted(set(wmap.values()))
        for n in names:
            if Path(n).name != n or not (p / n).is_file():
                raise ModelError(f"{index}: shard {n!r} is missing")
        return ShardedCheckpoint([SafetensorsFile(p / n) for n in names], wmap)
    files = sorted(p.glob("*.safetensors"))
    if not files:
        raise ModelError(f"{p}: no *.safetensors files")
    return ShardedCheckpoint([SafetensorsFile(f) for f in files])


def save_safetensors(path: str | Path, tensors: Mapping[str, np.ndarray],
                     dtypes: Mapping[str, str] | None = None,
                     metadata: Mapping[str, str] | None = None) -> None:
    """Write tensors to a safetensors file. ``dtypes`` names the safetensors dtype where the numpy
    dtype is ambiguous (a uint16 array holding BF16 bits: ``{"name": "BF16"}``)."""
    dtypes = dict(dtypes or {})
    by_np = {np.dtype(v).str: k for k, v in reversed(list(DTYPES.items())) if k not in ("BF16",)}
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    arrays = []
    off = 0
    for name, arr in tensors.items():
        a = np.ascontiguousarray(arr)
        dt = dtypes.get(name) or by_np.get(a.dtype.newbyteorder("<").str if a.dtype.itemsize > 1
                                           else a.dtype.str)
        if dt is None or DTYPES[dt].itemsize != a.dtype.itemsize:
            raise ModelError(f"cannot store tensor {name!r} of dtype {a.dtype} in safetensors")
        a = a.astype(DTYPES[dt], copy=False)
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        arrays.append(a)
        off += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # keep the data section 8-byte aligned
    with Path(path).open("wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for a in arrays:
            f.write(a.tobytes())
