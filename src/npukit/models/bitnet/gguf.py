"""A minimal GGUF (v2/v3) reader: metadata and the raw bytes of named tensors, on ``np.memmap``.

Only what a BitNet checkpoint needs: F32 / F16 / BF16 tensors (widened to float32) and ternary
tensors TQ1_0 (ggml type 34), TQ2_0 (35) and I2_S (36 in bitnet.cpp's ggml fork), returned raw for
`npukit.formats.ternary` to decode. Layout (ggml ``docs/gguf.md``): magic ``GGUF``, version u32,
tensor count u64, metadata count u64, metadata key/values, tensor infos (name, n_dims, dims with the
row length first, type, offset), then the data section at the next ``general.alignment`` boundary.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np

from npukit.errors import ModelError

TYPE_NAMES = {0: "F32", 1: "F16", 30: "BF16", 34: "TQ1_0", 35: "TQ2_0", 36: "I2_S"}
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q",
           12: "<d"}


def _nbytes(kind: str, n: int) -> int:
    if kind == "F32":
        return 4 * n
    if kind in ("F16", "BF16"):
        return 2 * n
    if kind == "TQ1_0":
        return n // 256 * 54
    if kind == "TQ2_0":
        return n // 256 * 66
    return n // 4 + 32  # I2_S: codes, fp32 scale, alignment tail


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
        align = int(self.meta.get("general.alignment", 32))
        start = -(-cur.pos // align) * align
        self.tensors: dict[str, tuple[tuple[int, ...], int, int, int]] = {}
        for name, shape, tid, off in infos:
            if tid not in TYPE_NAMES:
                self.tensors[name] = (shape, tid, start + off, 0)
                continue
            n = int(np.prod(shape, dtype=np.int64))
            size = _nbytes(TYPE_NAMES[tid], n)
            if start + off + size > self._map.size:
                raise ModelError(f"{self.path}: tensor {name!r} runs past the end of the file")
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
            raise ModelError(f"{self.path}: tensor {name!r} has unsupported ggml type {tid}")
        return TYPE_NAMES[tid]

    def raw(self, name: str) -> np.ndarray:
        _shape, _tid, off, size = self._info(name)
        self.type_name(name)
        return self._map[off:off + size]

    def float32(self, name: str) -> np.ndarray:
        shape, kind = self.shape(name), self.type_name(name)
        raw = self.raw(name)
        if kind == "F32":
            return raw.view("<f4").reshape(shape).astype(np.float32)
        if kind == "F16":
            return raw.view("<f2").reshape(shape).astype(np.float32)
        if kind == "BF16":
            return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
        raise ModelError(f"{self.path}: tensor {name!r} is {kind}, not a float tensor")
