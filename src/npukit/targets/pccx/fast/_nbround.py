"""BF16 for the compiled kernels: widening (`bf16`, `bf16_64`) and rounding of float64 (`bits64`,
`round64`) and of float32 patterns (`rne16`), with the scalar bit casts they use.

`bits64` rounds a float64 once to BF16, to nearest even (`numerics.to_bits` on a float64), in integer
arithmetic on its bit pattern: the carry of the round-to-nearest-even add moves into the exponent,
which is then rebased to BF16's and clamped to infinity; below 2^-126 the value is scaled onto BF16's
subnormal grid (2^-133) and rounded by the 1.5·2^52 trick; a NaN becomes 0x7FC0 with its sign.
Branch-free (both candidates computed, one selected), so LLVM vectorises the loops that call it. (A
round-to-odd variant, float64 -> float32 by round to odd then the float32 pattern's integer rounding,
is exact too but was ~30 % slower here: 651 against 491 ns per 1 024 values, measured.)

`rne16` rounds a float32 pattern (uint32) to BF16 bits the same way, in 32-bit lanes.

Compiled without fastmath; plain LLVM IR bitcasts (no intrinsics of any CPU), so it is portable.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

_OPTS = {"cache": True, "error_model": "numpy", "nogil": True}


def _bitcast(name: str, src: types.Type, dst: types.Type, dst_ir: ir.Type):
    """An intrinsic named ``name``: a scalar of numba type ``src`` reinterpreted as ``dst`` (one LLVM
    bitcast, the same width: no conversion, no intrinsic of any CPU)."""

    def cast(typingctx, x):  # pragma: no cover - numba
        if x != src:
            return None

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], dst_ir)

        return dst(x), codegen

    cast.__name__ = cast.__qualname__ = name  # numba names the intrinsic (and its cache entries) by it
    return intrinsic(cast)


f32_bits = _bitcast("f32_bits", types.float32, types.uint32, ir.IntType(32))  # float32 -> its uint32 bits
f64_bits = _bitcast("f64_bits", types.float64, types.uint64, ir.IntType(64))  # float64 -> its uint64 bits


@intrinsic
def bf16(typingctx, bits):  # pragma: no cover - numba
    """BF16 ``bits`` (any integer; its low 16 bits) as the float32 they encode: a shift and a bit cast
    in plain LLVM IR, equal bit for bit to `_nbkernels.LUT32[bits]`. The kernels widen by arithmetic,
    not by LUT32 / LUT64 gathers: those tables (256 / 512 KiB) are evicted by every GEMV's weight
    stream, so each gather of a small CVO row missed the cache (~1-3 µs a row at hidden 1024)."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        v = args[0]
        if bits.bitwidth != 16:  # (its low 16 bits)
            v = builder.trunc(v, ir.IntType(16)) if bits.bitwidth > 16 else builder.zext(v, ir.IntType(16))
        v = builder.zext(v, i32)
        return builder.bitcast(builder.shl(v, ir.Constant(i32, 16)), ir.FloatType())

    return types.float32(bits), codegen


@nb.njit(**_OPTS, inline="always")
def bf16_64(bits):
    """BF16 ``bits`` as float64, equal bit for bit to `_nbkernels.LUT64[bits]` (the float32 widened,
    as NumPy's ``astype`` widens it: a signalling NaN comes out quiet both ways)."""
    return np.float64(bf16(bits))


@nb.njit(**_OPTS, inline="always")
def rne16(u):
    """A float32 pattern ``u`` (uint32) rounded to BF16 bits, to nearest even; NaN -> 0x7FC0 | sign."""
    nan = np.uint32(np.uint32(np.uint32(u >> np.uint32(16)) & np.uint32(0x8000)) | np.uint32(0x7FC0))
    return np.uint16(nan if np.uint32(u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000) else rne16_finite(u))


@nb.njit(**_OPTS, inline="always")
def rne16_finite(u):
    """`rne16` of a pattern known not to be a NaN (infinities round to themselves)."""
    lsb = np.uint32(np.uint32(u >> np.uint32(16)) & np.uint32(1))
    return np.uint16(np.uint32(np.uint32(u + np.uint32(0x7FFF)) + lsb) >> np.uint32(16))


_TWO133 = 2.0**133
_MAGIC = 6755399441055744.0  # 1.5 * 2^52: (v + M) - M is rint(v), half to even, for |v| < 2^51


@nb.njit(**_OPTS, inline="always")
def bits64(v):
    """float64 ``v`` as BF16 bits, one rounding to nearest even (module docstring)."""
    u = f64_bits(v)
    sign = (u >> np.uint64(48)) & np.uint64(0x8000)
    mag = u & np.uint64(0x7FFF_FFFF_FFFF_FFFF)
    r = (mag + np.uint64(0x0FFF_FFFF_FFFF) + ((mag >> np.uint64(45)) & np.uint64(1))) >> np.uint64(45)
    e = np.int64(r >> np.uint64(7)) - 1023 + 127
    normal = min((e << 7) | np.int64(r & np.uint64(0x7F)), np.int64(0x7F80))
    a = abs(v) * _TWO133
    a = a if a < 65536.0 else 0.0
    tiny = np.int64((a + _MAGIC) - _MAGIC)
    res = normal if mag >= np.uint64(0x3810_0000_0000_0000) else tiny
    res = np.int64(0x7FC0) if mag > np.uint64(0x7FF0_0000_0000_0000) else res
    return np.uint16(np.int64(sign) | res)


@nb.njit(**_OPTS)
def round64(y, out):
    """float64 [n] -> BF16 bits [n] (`bits64` of each element)."""
    for i in range(y.shape[0]):
        out[i] = bits64(y[i])
