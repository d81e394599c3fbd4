"""pccx device memory as the host and the descriptors see it: the spec next to the ISA spec.

* `HostDDR` — byte-addressed host memory as non-overlapping regions (a multi-GB image needs no dense
  array); a device access outside a mapped region is a `DeviceFault` (the error interrupt).
* Weight descriptors — the weight-shape cache entry ``(a, b, c)`` of a GEMV/GEMM operand: ``a[1:0]``
  the format (`FORMATS`), npukit's extended layout bits (`W_KMAJOR`, `W_SPLIT_SCALES`,
  `W_ACT_SCALE`, `W_GROUPED`, `W_GROUP_OFFSETS`, the byte offset in ``a[11:8]``;
  docs/targets/pccx.md, "Weight descriptor extensions"), ``b:c`` the 16-byte unit address;
  `weight_entry` / `scale_entry` build them, `weight_image` / `row_bytes` the images they point at.
* KV storage — `kv_quantize`, the KV write path (MEMCPY L2 -> DDR with quantization, pccx kv_cache
  §2.1) in the formats `KV_FORMATS`.

The functional simulators, the compiler and the driver all take these from here.
"""

from __future__ import annotations

import bisect
from typing import Any

import numpy as np

from npukit.errors import ConfigError, NpukitError
from npukit.formats.int4 import absmax_quantize
from npukit.targets.pccx import numerics as nx

F32 = np.float32
WORD_BYTES = 16
FORMATS = {0: "int4", 1: "int8", 2: "fp16"}
FORMAT_CODES = {v: k for k, v in FORMATS.items()}
# Weight-slot ``a`` field: bits [1:0] the format; npukit's extended profile adds layout bits
# (docs/targets/pccx.md, "Weight descriptor extensions"). Strict programs must leave them 0.
W_FMT_MASK = 0x3
W_KMAJOR = 0x4  # image stored K-major (row k = M values); rows whose activation quantizes to 0 are skipped
W_SPLIT_SCALES = 0x8  # the row scales (w_scale) sit at the host address of weight slot + 1
W_ACT_SCALE = 0x10  # K FP32 scales at weight slot + 1 multiply the activation first: x' = bf16(x · s)
W_OFFSET_SHIFT = 8  # a[11:8]: byte offset of the image inside its 16-byte unit (KV ring rows)
W_OFFSET_MASK = 0xF << W_OFFSET_SHIFT
W_GROUPED = 0x20  # per-group scales: FP32 [M, K/32] after the rows, one epilogue per group (pccx/grouped.py)
W_GROUP_OFFSETS = 0x40  # with W_GROUPED: FP16 offsets [M, K/32] after the scales, applied to group sums
W_EXT_BITS = W_KMAJOR | W_SPLIT_SCALES | W_ACT_SCALE | W_GROUPED | W_GROUP_OFFSETS | W_OFFSET_MASK

class DeviceFault(NpukitError, ValueError):
    """A fault found while executing an instruction (becomes the error interrupt)."""


# --- host DDR ---------------------------------------------------------------------------------------

class HostDDR:
    """Byte-addressed host memory as non-overlapping regions, so a multi-GB image needs no dense array.

    `map` attaches an existing buffer (e.g. an ``np.memmap``) without copying; `write` fills an
    existing region or creates a new one; `read` must fall inside one region.
    """

    def __init__(self, size_bytes: int = 1 << 32) -> None:
        self.size = int(size_bytes)
        self._bases: list[int] = []
        self._bufs: list[np.ndarray] = []

    def _find(self, addr: int, n: int) -> tuple[np.ndarray, int] | None:
        i = bisect.bisect_right(self._bases, addr) - 1
        if i >= 0 and addr + n <= self._bases[i] + self._bufs[i].size:
            return self._bufs[i], addr - self._bases[i]
        return None

    def _overlaps(self, addr: int, n: int) -> bool:
        i = bisect.bisect_left(self._bases, addr + n)
        return i > 0 and self._bases[i - 1] + self._bufs[i - 1].size > addr

    def map(self, addr: int, data: Any) -> np.ndarray:
        """Attach ``data`` (size in bytes, or any array viewed as bytes) as a region at ``addr``."""
        buf = np.zeros(int(data), np.uint8) if isinstance(data, int) else np.asarray(data).reshape(-1).view(
            np.uint8)
        self._check(addr, buf.size)
        if self._overlaps(addr, buf.size):
            raise DeviceFault(f"host region 0x{addr:X}+{buf.size} overlaps an existing region")
        i = bisect.bisect_left(self._bases, addr)
        self._bases.insert(i, addr)
        self._bufs.insert(i, buf)
        return buf

    def _check(self, addr: int, n: int) -> None:
        if addr < 0 or n < 0 or addr + n > self.size:
            raise DeviceFault(f"host range 0x{addr:X}+{n} is outside host DDR ({self.size} bytes)")

    def write(self, addr: int, data: Any) -> None:
        raw = np.frombuffer(data, np.uint8) if isinstance(data, bytes | bytearray) else np.ascontiguousarray(
            data).reshape(-1).view(np.uint8)
        self._check(addr, raw.size)
        hit = self._find(addr, raw.size)
        if hit is None:
            self.map(addr, raw.copy())
        else:
            buf, off = hit
            buf[off: off + raw.size] = raw

    def read(self, addr: int, n: int) -> np.ndarray:
        self._check(addr, n)
        if n == 0:
            return np.zeros(0, np.uint8)
        hit = self._find(addr, n)
        if hit is None:
            raise DeviceFault(f"host range 0x{addr:X}+{n} is not mapped")
        buf, off = hit
        return buf[off: off + n].copy()

    def touched(self, addr: int, n: int) -> None:
        """Bytes [addr, addr+n) were written through a view of a region (`map`'s array): nothing to
        do here; a subclass that caches what it reads from host DDR hears of it
        (`fast.ddr.TrackedDDR`)."""

    def store(self, addr: int, raw: np.ndarray) -> None:
        """A device-side write: must land inside a mapped region."""
        self._check(addr, raw.size)
        hit = self._find(addr, raw.size)
        if hit is None:
            raise DeviceFault(f"host range 0x{addr:X}+{raw.size} is not mapped")
        buf, off = hit
        buf[off: off + raw.size] = raw


class HostWords:
    """BF16 words of a host DDR read by address, again and again (a program's staged K/V blocks and
    logits): through a view of their region where the host hands one out (`fast.ddr.TrackedDDR
    .region_words`; kept per (address, words): a region is never unmapped or moved), else as a copy."""

    def __init__(self, host: HostDDR) -> None:
        self.host = host
        self._views: dict[tuple[int, int], np.ndarray] = {}

    def view(self, addr: int, n: int) -> np.ndarray | None:
        """``n`` words from ``addr`` as a writable uint16 view of their region, or None (a `HostDDR`
        hands out none; a range not in one region)."""
        got = self._views.get((addr, n))
        if got is None:
            region_words = getattr(self.host, "region_words", None)
            hit = region_words(addr, 2 * n) if region_words is not None else None
            if hit is None:
                return None
            got = self._views[addr, n] = hit[0][hit[1]: hit[1] + n]
        return got

    def read(self, addr: int, n: int) -> np.ndarray:
        """``n`` words from ``addr``: the view, else a copy (`HostDDR.read`)."""
        got = self.view(addr, n)
        return self.host.read(addr, 2 * n).view("<u2") if got is None else got


# --- weight images ------------------------------------------------------------------------------------

def row_bytes(fmt: str, k: int) -> int:
    """Bytes of one ``k``-element weight row in ``fmt`` (KeyError for another format). Branches, not a
    dict made per call: compiled GEMV rows ask for it once per binding."""
    if fmt == "int4":
        return -(-k // 2)
    if fmt == "int8":
        return k
    if fmt == "fp16":
        return 2 * k
    raise KeyError(fmt)


def weight_image(w: np.ndarray, fmt: str = "int4", scales: np.ndarray | None = None) -> bytes:
    """Host DDR image of one weight matrix [M, K]: rows back to back, then FP32 row scales (LE) at the
    next 16-byte boundary (docs/targets/pccx.md, "GEMV operands")."""
    a = np.asarray(w)
    if fmt == "int4":
        body = nx.pack_int4(a).tobytes()
    elif fmt == "int8":
        body = a.astype(np.int8).tobytes()
    elif fmt == "fp16":
        body = a.astype("<f2").tobytes()
    else:
        raise DeviceFault(f"unknown weight format {fmt!r}")
    if scales is None:
        return body
    pad = (-len(body)) % WORD_BYTES
    return body + b"\0" * pad + np.asarray(scales, "<f4").tobytes()


def weight_entry(fmt: str, host_addr: int, ext: int = 0) -> tuple[int, int, int]:
    """The weight-shape cache values (a, b, c) naming a weight image at a 16-byte-aligned host address;
    ``ext`` ORs in the extended layout bits (`W_KMAJOR`, `W_SPLIT_SCALES`, `W_ACT_SCALE`). With ``ext``
    set, an unaligned address is allowed: its byte offset goes to a[11:8]."""
    off = host_addr % WORD_BYTES
    if (off and not ext) or not 0 <= host_addr < 1 << 36:
        raise DeviceFault(f"weight image address 0x{host_addr:X} must be 16-byte aligned and < 64 GiB")
    unit = host_addr // WORD_BYTES
    return FORMAT_CODES[fmt] | ext | off << W_OFFSET_SHIFT, unit >> 16, unit & 0xFFFF


def scale_entry(host_addr: int) -> tuple[int, int, int]:
    """Weight slot + 1 for split row scales / activation scales: (byte offset in the unit, hi, lo)."""
    unit = host_addr // WORD_BYTES
    return host_addr % WORD_BYTES, unit >> 16, unit & 0xFFFF


# --- KV cache storage ---------------------------------------------------------------------------------

KV_FORMATS = ("fp16", "int8", "int4")
_KV_QMAX = {"int8": 127, "int4": 7}


def kv_quantize(x: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray | None]:
    """The KV write path (MEMCPY L2 -> DDR): BF16 [heads, head_dim] -> stored codes, scales.

    fp16: exact widening of BF16 where in range (overflow to ±inf, tiny values to fp16 subnormals
    with round-to-nearest-even), no scale. int8/int4: per (token, head) absmax rule of
    `npukit.formats.int4.absmax_quantize`: scale = f32(max|x|) / qmax, q = clip(rint(x / scale)).
    """
    a = np.asarray(x, dtype=F32)
    if fmt == "fp16":
        with np.errstate(over="ignore"):
            return a.astype(np.float16), None
    if fmt not in _KV_QMAX:
        raise ConfigError(f"unknown KV cache format {fmt!r} (known: {', '.join(KV_FORMATS)})")
    q, s = absmax_quantize(a, _KV_QMAX[fmt])
    return q, s
