"""Shared machinery for small binary floating-point formats (FP8, FP6, FP4, E8M0).

A format is described by a `Minifloat`: exponent bits, mantissa bits, bias and which codes are
special. Encoding is vectorized integer arithmetic on the float32 bit pattern (round to nearest,
ties to even); decoding is a table lookup. Two lookup tables are kept per format: 256 entries
(one code -> one float32) and 65536 entries (two codes read as one little-endian uint16 -> two
float32 read as one uint64), which halves the number of gathers on the hot path.

Special-value styles (``kind``):

* ``"ieee"``: the all-ones exponent is reserved; mantissa 0 is ±inf, anything else NaN
  (E5M2, the IEEE-style E4M3 that ml_dtypes calls ``float8_e4m3``);
* ``"fn"``: finite except S.1…1.1…1, which is NaN (OCP E4M3FN);
* ``"none"``: every code is a finite number (OCP MX FP6 E2M3/E3M2 and FP4 E2M1).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from npukit.errors import FormatError

_F32_EXP_INF = 0x7F800000


@dataclass(frozen=True)
class Minifloat:
    name: str
    ebits: int
    mbits: int
    bias: int
    kind: str  # "ieee" | "fn" | "none"

    @property
    def bits(self) -> int:
        return 1 + self.ebits + self.mbits

    @property
    def sign_bit(self) -> int:
        return 1 << (self.ebits + self.mbits)

    @property
    def max_mag(self) -> int:
        """Magnitude code of the largest finite value."""
        top = (1 << self.ebits) - 1
        mant = (1 << self.mbits) - 1
        if self.kind == "ieee":
            return ((top - 1) << self.mbits) | mant
        if self.kind == "fn":
            return (top << self.mbits) | (mant - 1)
        return (top << self.mbits) | mant

    @property
    def inf_mag(self) -> int | None:
        return ((1 << self.ebits) - 1) << self.mbits if self.kind == "ieee" else None

    @property
    def nan_mag(self) -> int | None:
        """The NaN magnitude code an encoder writes (the quiet pattern ml_dtypes writes)."""
        top = ((1 << self.ebits) - 1) << self.mbits
        if self.kind == "ieee":
            return top | (1 << (self.mbits - 1))
        if self.kind == "fn":
            return top | ((1 << self.mbits) - 1)
        return None

    @property
    def max_value(self) -> float:
        return float(self.table[self.max_mag])

    @cached_property
    def table(self) -> np.ndarray:
        """float32 value of every code, indexed by code (2**bits entries)."""
        codes = np.arange(1 << self.bits, dtype=np.int64)
        sign = np.where(codes & self.sign_bit, -1.0, 1.0)
        e = (codes >> self.mbits) & ((1 << self.ebits) - 1)
        m = codes & ((1 << self.mbits) - 1)
        frac = np.where(e == 0, m / (1 << self.mbits), 1.0 + m / (1 << self.mbits))
        mag = np.ldexp(frac, np.maximum(e, 1) - self.bias)
        val = sign * mag  # exact in float64, and exact again in float32
        magc = codes & (self.sign_bit - 1)
        if self.kind == "ieee":
            val = np.where(magc == self.inf_mag, sign * np.inf, val)
            val = np.where(magc > self.inf_mag, np.copysign(np.nan, sign), val)
        elif self.kind == "fn":
            val = np.where(magc == self.nan_mag, np.copysign(np.nan, sign), val)
        out = val.astype(np.float32)
        out.flags.writeable = False
        return out

    @cached_property
    def pair_table(self) -> np.ndarray:
        return make_pair_table(self.table)


def make_pair_table(table: np.ndarray) -> np.ndarray:
    """uint64 entry k = bits(table[k & 0xFF]) | bits(table[k >> 8]) << 32 (missing codes read 0).

    A little-endian uint16 view of two consecutive 8-bit codes indexes it directly.
    """
    full = np.zeros(256, np.float32)
    full[: table.size] = table
    pair = np.stack([np.tile(full, 256), np.repeat(full, 256)], axis=1).view(np.uint64).ravel().copy()
    pair.flags.writeable = False
    return pair


def as_float32(x: object, what: str) -> np.ndarray:
    """Floating input as a float32 array (exact for float16/float32; float64 is rounded once)."""
    arr = np.asarray(x)
    if arr.dtype.kind != "f":
        raise FormatError(f"{what}: expected a floating-point array, got dtype {arr.dtype}")
    return np.asarray(arr, dtype=np.float32, order="C")  # (ascontiguousarray would make 0-d 1-d)


def check_codes(codes: object, fmt: Minifloat, what: str) -> np.ndarray:
    arr = np.asarray(codes)
    if arr.dtype != np.uint8:
        raise FormatError(f"{what}: codes must be uint8, got dtype {arr.dtype}")
    if fmt.bits < 8 and arr.size and int(arr.max()) >= (1 << fmt.bits):
        raise FormatError(f"{what}: code {int(arr.max())} out of range for {fmt.bits}-bit {fmt.name}")
    return arr


def encode(x: np.ndarray, fmt: Minifloat, saturate: bool) -> np.ndarray:
    """float32 array -> uint8 codes, round to nearest even, directly from float32 (no double rounding).

    Overflow (after rounding): ``saturate`` -> ±max finite (inf inputs too); otherwise the format's
    own rule: NaN for "fn", ±inf for "ieee", ±max for "none". NaN inputs keep their sign and become
    the format's quiet NaN code; "none" formats have no NaN and write ±0 (callers handle NaN).
    """
    u = np.asarray(x, dtype=np.float32, order="C").reshape(-1).view(np.uint32)
    a = u & np.uint32(0x7FFFFFFF)
    shift = 23 - fmt.mbits
    # Normal path: round the float32 magnitude bits to `mbits` mantissa bits; a carry out of the
    # mantissa bumps the exponent, which is exactly what rounding up into the next binade means.
    r = (a >> np.uint32(shift)) & np.uint32(1)
    r += a
    r += np.uint32((1 << (shift - 1)) - 1)
    r >>= np.uint32(shift)
    r -= np.uint32((127 - fmt.bias) << fmt.mbits)  # wraps for target subnormals; replaced below
    # Target-subnormal path: adding a power of two whose float32 ulp is the smallest step lets the
    # FPU do the round-half-even; the low bits of the sum are then the code (0 … 2**mbits).
    magic = np.float32(2.0 ** (23 + 1 - fmt.bias - fmt.mbits))
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/inf lanes are discarded below
        sub = np.add(a.view(np.float32), magic).view(np.uint32)
    sub -= magic.view(np.uint32)
    small = a < np.uint32((127 + 1 - fmt.bias) << 23)
    np.copyto(r, sub, where=small)
    over = r > np.uint32(fmt.max_mag)
    if saturate or fmt.kind == "none":
        np.copyto(r, np.uint32(fmt.max_mag), where=over)
    else:
        np.copyto(r, np.uint32(fmt.nan_mag if fmt.kind == "fn" else fmt.inf_mag), where=over)
    nan_in = a > np.uint32(_F32_EXP_INF)
    np.copyto(r, np.uint32(fmt.nan_mag or 0), where=nan_in)
    out = r.astype(np.uint8)
    sign = (u >> np.uint32(32 - fmt.bits)).astype(np.uint8)  # top bits; keep only the sign
    sign &= np.uint8(fmt.sign_bit)
    out |= sign
    return out.reshape(np.shape(x))


def decode(codes: np.ndarray, fmt: Minifloat, out: np.ndarray | None = None) -> np.ndarray:
    """uint8 codes (already range-checked) -> float32 of the same shape, via the pair table."""
    return decode_with(codes, fmt.table, fmt.pair_table, out)


def decode_with(codes: np.ndarray, table: np.ndarray, pair: np.ndarray,
                out: np.ndarray | None = None) -> np.ndarray:
    """Table decode of uint8 codes; ``pair`` is `make_pair_table(table)`."""
    c = np.asarray(codes, order="C")
    if out is None:
        out = np.empty(c.shape, np.float32)
    flat = c.reshape(-1)
    dst = out.reshape(-1)
    if sys.byteorder != "little":  # the pair table assumes little-endian uint16/uint64 views
        np.take(table, flat, out=dst)
        return out
    n2 = flat.size & ~1
    if n2:
        # mode="clip" skips the bounds check; every uint16 is a valid index into 65536 entries.
        np.take(pair, flat[:n2].view(np.uint16), out=dst[:n2].view(np.uint64), mode="clip")
    if flat.size & 1:
        dst[-1] = table[flat[-1]]
    return out
