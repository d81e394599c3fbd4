"""A GGUF (v2/v3) reader: metadata and named tensors, on ``np.memmap``.

Tensors of every type in `npukit.models.gguf.quants` (F32/F16/BF16, Q4_0 … Q8_0, Q2_K … Q6_K,
TQ1_0/TQ2_0) decode to float32 with `GGUFFile.float32`; I2_S (type 36 in bitnet.cpp's ggml fork:
ternary codes, then one fp32 scale per tensor, padded to n/4 + 32 bytes) too. `GGUFFile.raw` gives
the encoded bytes (the BitNet loader keeps ternary tensors ternary). Layout (ggml ``docs/gguf.md``):
magic ``GGUF``, version u32, tensor count u64, metadata count u64, metadata key/values, tensor infos
(name, n_dims, dims with the row length first, type, offset), then the data section at the next
``general.alignment`` boundary.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np

from npukit.errors import FormatError, ModelError
from npukit.formats import ternary
from npukit.models.gguf.quants import GGML_TYPES, UNSUPPORTED_NAMES, dequantize

I2_S = 36
TYPE_NAMES = {**{t.type_id: t.name for t in GGML_TYPES.values()}, I2_S: "I2_S"}
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q",
           12: "<d"}


def _nbytes(tid: int, n: int) -> int:
    if tid == I2_S:
        return n // 4 + 32  # codes, fp32 scale, alignment tail
    t = GGML_TYPES[tid]
    return n // t.block * t.nbytes


class _Cursor:
    def __init__(self, buf: memoryview, where: str) -> None:
        self.buf, self.pos, self.where = buf, 0, where

    def take(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.buf):
            raise ModelError(f"{self.where}: truncated GGUF header")
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return v

    def string(self) -> str:
        n = self.take("<Q")
        if self.pos + n > len(self.buf):
            raise ModelError(f"{self.where}: truncated GGUF string")
        s = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return s.decode("utf-8")
        except UnicodeDecodeError:
            raise ModelError(f"{self.where}: GGUF string is not UTF-8") from None

    def value(self, vtype: int) -> Any:
        if vtype in _SCALAR:
            return self.take(_SCALAR[vtype])
        if vtype == 8:
            return self.string()
        if vtype == 9:
            inner, count = self.take("<I"), self.take("<Q")
            if count > len(self.buf):
                raise ModelError(f"{self.where}: GGUF array length {count} is impossible")
            return [self.value(inner) for _ in range(count)]
        raise ModelError(f"{self.where}: unknown GGUF value type {vtype}")


class GGUFFile:
    """One GGUF file: ``meta`` (key → value), ``tensors`` (name → shape, type id, offset, size)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        except (OSError, ValueError) as exc:
            raise ModelError(f"{self.path}: cannot open ({exc})") from None
        cur = _Cursor(memoryview(self._map), str(self.path))
        if bytes(self._map[:4]) != b"GGUF":
            raise ModelError(f"{self.path}: not a GGUF file (bad magic)")
        cur.pos = 4
        version = cur.take("<I")
        if version not in (2, 3):
            raise ModelError(f"{self.path}: GGUF version {version} unsupported")
        n_tensors, n_kv = cur.take("<Q"), cur.take("<Q")
        self.meta: dict[str, Any] = {}
        for _ in range(n_kv):
            key = cur.string()
            self.meta[key] = cur.value(cur.take("<I"))
        infos = []
        for _ in range(n_tensors):
            name = cur.string()
            nd = cur.take("<I")
            if nd > 8:
                raise ModelError(f"{self.path}: tensor {name!r} has {nd} dimensions")
            dims = [cur.take("<Q") for _ in range(nd)]
            infos.append((name, tuple(reversed(dims)), cur.take("<I"), cur.take("<Q")))
        align = self.meta.get("general.alignment", 32)
        if not isinstance(align, int) or align <= 0:
            raise ModelError(f"{self.path}: GGUF general.alignment {align!r} is not a positive integer")
        start = -(-cur.pos // align) * align
        self.tensors: dict[str, tuple[tuple[int, ...], int, int, int]] = {}
        for name, shape, tid, off in infos:
            if tid not in TYPE_NAMES:
                self.tensors[name] = (shape, tid, start + off, 0)
                continue
            n = int(np.prod(shape, dtype=np.int64))
            block = GGML_TYPES[tid].block if tid in GGML_TYPES else 1
            if shape and shape[-1] % block:
                raise ModelError(f"{self.path}: tensor {name!r} {TYPE_NAMES[tid]} has rows of {shape[-1]}, "
                                 f"not a multiple of its {block}-weight block")
            size = _nbytes(tid, n)
            if start + off + size > self._map.size:
                raise ModelError(f"{self.path}: tensor {name!r} runs past the end of the file (truncated)")
            self.tensors[name] = (shape, tid, start + off, size)

    def _info(self, name: str) -> tuple[tuple[int, ...], int, int, int]:
        try:
            return self.tensors[name]
        except KeyError:
            raise ModelError(f"{self.path}: tensor {name!r} missing") from None

    def shape(self, name: str) -> tuple[int, ...]:
        return self._info(name)[0]

    def type_name(self, name: str) -> str:
        tid = self._info(name)[1]
        if tid not in TYPE_NAMES:
            label = UNSUPPORTED_NAMES.get(tid, "unknown")
            raise ModelError(f"{self.path}: tensor {name!r} has unsupported ggml type {tid} ({label})")
        return TYPE_NAMES[tid]

    def raw(self, name: str) -> np.ndarray:
        _shape, _tid, off, size = self._info(name)
        self.type_name(name)
        return self._map[off:off + size]

    def float32(self, name: str) -> np.ndarray:
        """The tensor decoded to float32, in ``shape(name)`` (bit-identical to gguf-py)."""
        shape, kind = self.shape(name), self.type_name(name)
        raw = self.raw(name)
        if kind != "I2_S":
            return dequantize(raw, kind, shape)
        try:
            trits, scale = ternary.from_i2s(raw, shape)
        except FormatError as exc:
            raise ModelError(f"{self.path}: tensor {name!r}: {exc}") from None
        return trits.astype(np.float32) * np.float32(scale)
