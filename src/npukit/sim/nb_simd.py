"""SIMD building blocks for numba kernels (imported only where numba is installed).

numba's auto-vectoriser turns a packed-INT4 × INT8 dot product into sign extensions and ``vpmaddwd``
(about 5–7 GB/s of packed weights per core here); the same sum on AVX-512 VNNI's ``vpdpbusd``
(64 unsigned × signed byte products into 16 int32 lanes, no saturation) streams about 25 GB/s per
core, so a GEMV becomes bound by DRAM, as the hardware it emulates is. The instruction is emitted as
an LLVM intrinsic from `dot_u4s8`, called only from kernels built for that path; whether they are
used is decided by `probe` (`npukit.sim.cpu`: LLVM must compile it for numba's target, and a trial in a
child process must run it exactly; a VM may advertise a feature it faults on).

Exactness: offset-binary nibbles ``u = n ^ 8`` (``u = s + 8`` for the two's-complement nibble ``s``)
are unsigned 0..15, so ``Σ s·q = Σ u·q − 8·Σ q``; every product and lane sum is an exact int32
(15 · 127 · 65 535 < 2^31 for any K the ISA's 16-bit shape field allows).
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from npukit.sim import compile_report, cpu

compile_report.install()  # first-run compiles are announced, never silent

CHUNK = 64  # packed bytes (128 INT4 weights) per vpdpbusd pair
_I8X64 = ir.VectorType(ir.IntType(8), 64)
_I32X16 = ir.VectorType(ir.IntType(32), 16)


@intrinsic
def dot_u4s8(typingctx, p_addr, even_addr, odd_addr, chunks):
    """Σ over ``chunks`` × 64 packed bytes at ``p_addr`` of ``(lo ^ 8)·even + (hi ^ 8)·odd`` (int32),
    with ``even``/``odd`` the int8 activation codes of the low/high nibbles (addresses of contiguous
    int8 runs). The caller subtracts ``8 · Σ(even + odd)`` over the same bytes."""
    sig = types.int32(types.intp, types.intp, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        p, even, odd, n = args
        mod = builder.module
        dpbusd = cgutils.get_or_insert_function(
            mod, ir.FunctionType(_I32X16, [_I32X16, _I32X16, _I32X16]), "llvm.x86.avx512.vpdpbusd.512")
        hsum = cgutils.get_or_insert_function(
            mod, ir.FunctionType(ir.IntType(32), [_I32X16]), "llvm.vector.reduce.add.v16i32")
        acc = cgutils.alloca_once_value(builder, ir.Constant(_I32X16, None))
        ptr_t = _I8X64.as_pointer()
        flip = ir.Constant(_I8X64, [0x88] * 64)
        low = ir.Constant(_I8X64, [0x0F] * 64)
        four = ir.Constant(_I8X64, [4] * 64)
        with cgutils.for_range(builder, n) as loop:
            off = builder.mul(loop.index, ir.Constant(n.type, CHUNK))

            def load(base):
                return builder.load(builder.inttoptr(builder.add(base, off), ptr_t), align=1)

            u = builder.xor(load(p), flip)
            lo = builder.bitcast(builder.and_(u, low), _I32X16)
            hi = builder.bitcast(builder.lshr(u, four), _I32X16)
            a = builder.call(dpbusd, [builder.load(acc), lo, builder.bitcast(load(even), _I32X16)])
            a = builder.call(dpbusd, [a, hi, builder.bitcast(load(odd), _I32X16)])
            builder.store(a, acc)
        return builder.call(hsum, [builder.load(acc)])

    return sig, codegen


@nb.njit(cache=True, nogil=True)
def _trial(p, even, odd):
    return dot_u4s8(p.ctypes.data, even.ctypes.data, odd.ctypes.data, p.shape[0] // CHUNK)


def _trial_ok() -> bool:
    rng = np.random.default_rng(7)
    p = rng.integers(0, 256, 4 * CHUNK, dtype=np.uint8)
    even = rng.integers(-127, 128, p.size, dtype=np.int8)
    odd = rng.integers(-127, 128, p.size, dtype=np.int8)
    want = int(((p & 15) ^ 8).astype(np.int64) @ even + ((p >> 4) ^ 8).astype(np.int64) @ odd)
    return int(_trial(p, even, odd)) == want


FAMILY = cpu.register(cpu.Family(
    name="int4-gemv", fast="avx512-vnni", intrinsics=("vpdpbusd",), trial="npukit.sim.nb_simd:_trial_ok",
    doc="pccx packed-INT4 x INT8 GEMV/GEMM row dot products"))


def probe() -> tuple[str, str]:
    """(``"avx512-vnni"`` | ``"portable"``, reason): `npukit.sim.cpu.choose` for the INT4 row dot
    (LLVM asked whether it can compile ``vpdpbusd`` for numba's target, then a trial in a child
    process). ``NPUKIT_SIMD=portable`` forces the portable loops."""
    chosen = cpu.choose(FAMILY)
    return chosen.path, chosen.reason
