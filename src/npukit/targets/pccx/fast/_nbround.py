"""BF16 rounding of float64 values for the compiled kernels: `round64`, vectorisable and exact.

The reference (`numerics.bf16` on a float64) rounds the exact value once, to nearest even. Done on
the float64 bit pattern that takes some twenty 64-bit operations per element (the exponent, the
subnormal grid, the clamp to infinity). Here the value first goes to float32 by *round to odd*: the
float32 conversion, and if it was inexact, the float32 pattern truncated toward zero with its last
bit set. Float32 carries 16 bits more than BF16, so rounding that float32 to nearest even gives the
BF16 value that rounding the float64 directly gives (round to odd keeps every value strictly between
two float32 values off the BF16 midpoints, which are float32 values; a standard result, e.g. Boldo
and Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using rounding to
odd", IEEE TC 2008). The BF16 rounding of a float32 pattern is the usual integer add-and-shift, on
normal, subnormal and infinite values alike; a float64 beyond float32's range converts to infinity,
which the truncation turns into the largest float32 (odd), which rounds to infinity again. A NaN
becomes 0x7FC0 with its sign. About a dozen operations per element, half of them 32-bit.

Compiled without fastmath; plain LLVM IR bitcasts (no intrinsics of any CPU), so it is portable.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

_OPTS = {"cache": True, "error_model": "numpy", "nogil": True}


@intrinsic
def f32_bits(typingctx, x):  # pragma: no cover - numba
    """The bit pattern of float32 ``x`` as uint32 (an LLVM bitcast)."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.uint32(x), codegen


@intrinsic
def f32_of_bits(typingctx, u):  # pragma: no cover - numba
    """The float32 whose bit pattern is uint32 ``u`` (an LLVM bitcast)."""
    if u != types.uint32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(u), codegen


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


@nb.njit(**_OPTS, inline="always")
def odd32(v):
    """float64 ``v`` rounded to float32 by round to odd, as a bit pattern (uint32); a NaN stays one."""
    f = np.float32(v)
    back = np.float64(f)
    u = f32_bits(f)
    # (each result cast back to uint32: numba widens integer arithmetic to 64 bits, and LLVM then
    # keeps the vector lanes 32 bits wide only where it sees the truncation)
    toward_zero = np.uint32(u - np.uint32(1)) if abs(back) > abs(v) else u  # (never at 0: 0 > |v|)
    return np.uint32(toward_zero | np.uint32(1)) if back != v else u


@nb.njit(**_OPTS, inline="always")
def bits64(v):
    """float64 ``v`` as BF16 bits, one rounding to nearest even (`numerics.to_bits` on a float64)."""
    return rne16(odd32(v))


@nb.njit(**_OPTS)
def round64(y, out):
    """float64 [n] -> BF16 bits [n] (`bits64` of each element)."""
    for i in range(y.shape[0]):
        out[i] = bits64(y[i])
