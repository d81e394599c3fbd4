"""The packed INT4 × INT8 row dot on AVX2 integer instructions: the ``int4-gemv-avx2`` kernel family.

CPUs with AVX2 but without AVX-512 VNNI (Haswell .. Alder Lake laptops, AMD Zen 1-3, and Skylake-SP,
whose AVX-512 has no VNNI) otherwise run the portable loop, which LLVM vectorises into sign
extensions and ``vpmaddwd`` on 16-bit lanes. Here the sum is built from 8-bit lanes instead:
``vpmaddubsw`` (``llvm.x86.avx2.pmadd.ub.sw``) multiplies 32 unsigned bytes by 32 signed bytes and
adds adjacent pairs into 16 int16 lanes, ``vpmaddwd`` (``llvm.x86.avx2.pmadd.wd``) with ones adds
adjacent int16 pairs into 8 int32 lanes. Same statement as `npukit.sim.nb_simd.dot_u4s8` (the same
callers, the same 64-byte chunks, the same ``8 · Σ q`` correction by the caller).

Exactness (no saturation, no wrap): the nibbles are offset-binary, ``u = n ^ 8`` in 0..15 (unsigned
operand), the activation codes int8 in -128..127 (the quantizer emits -127..127; the bound holds for
the whole int8 range). One ``vpmaddubsw`` lane is ``u0·q0 + u1·q1``, so ``|lane| ≤ 2·15·128 = 3840``:
far inside int16, the instruction's saturating add never saturates. A 64-byte chunk adds four such
products per int16 lane (low and high nibbles of two 32-byte halves) with plain int16 adds:
``|sum| ≤ 4·3840 = 15360 < 2^15``, no wrap. ``vpmaddwd`` by ones then adds two such lanes into int32
(``≤ 30720``), exact; the int32 row accumulator holds at most ``15·128·K < 2^31`` for any
K < 2^20, beyond every shape the ISA's 16-bit fields allow (65 535).

Whether this build is used is decided by `npukit.sim.cpu.choose` (LLVM must select both
instructions for numba's target; a trial in a child process must reproduce NumPy), and the pccx
kernels use it only where the VNNI family (`npukit.sim.nb_simd`) is not fast.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba.core import cgutils
from numba.extending import intrinsic

from npukit.sim import compile_report, cpu
from npukit.sim.nb_simd import (
    CHUNK,
    ONE_ROW_SIG,
    ROWS,
    ROWS_SIG,
    _prefetch,
    _want,
    one_row_codegen,
    rows_codegen,
)

compile_report.install()  # first-run compiles are announced, never silent

HALF = 32  # bytes per ymm register: a 64-byte chunk is two halves
_I8X32 = ir.VectorType(ir.IntType(8), 32)
_I16X16 = ir.VectorType(ir.IntType(16), 16)
_I32X8 = ir.VectorType(ir.IntType(32), 8)


def _chunk_sum(builder, fns, row_at, acts):
    """int16 lanes of one 64-byte chunk of one row: Σ over both halves of ``pmaddubsw(lo, even) +
    pmaddubsw(hi, odd)`` (|lane| ≤ 4 · 3840 = 15360, module docstring: no saturation, no wrap)."""
    maddubs, consts = fns["maddubs"], fns["consts"]
    total = None
    for h, (ev, od) in enumerate(acts):
        raw = builder.load(builder.inttoptr(row_at(h), _I8X32.as_pointer()), align=1)
        u = builder.xor(raw, consts["flip"])
        lo = builder.and_(u, consts["low"])
        hi = builder.lshr(u, consts["four"])
        pair = builder.add(builder.call(maddubs, [lo, ev]), builder.call(maddubs, [hi, od]))
        total = pair if total is None else builder.add(total, pair)
    return total


def _avx2_rows(builder, p, stride, even, odd, n, rows, ahead):
    """LLVM IR of ``rows`` row sums (rows ``stride`` bytes apart) over ``n`` 64-byte chunks: each
    even/odd activation half is loaded once for every row, every row keeps its own int32 accumulator,
    and each row's chunk ``ahead`` bytes on is prefetched (as `nb_simd._vnni_rows`). Returns the
    ``rows`` int32 sums."""
    mod = builder.module
    fns = {"maddubs": cgutils.get_or_insert_function(
        mod, ir.FunctionType(_I16X16, [_I8X32, _I8X32]), "llvm.x86.avx2.pmadd.ub.sw"),
        "consts": {"flip": ir.Constant(_I8X32, [0x88] * HALF), "low": ir.Constant(_I8X32, [0x0F] * HALF),
                   "four": ir.Constant(_I8X32, [4] * HALF)}}
    maddwd = cgutils.get_or_insert_function(
        mod, ir.FunctionType(_I32X8, [_I16X16, _I16X16]), "llvm.x86.avx2.pmadd.wd")
    hsum = cgutils.get_or_insert_function(
        mod, ir.FunctionType(ir.IntType(32), [_I32X8]), "llvm.vector.reduce.add.v8i32")
    ones = ir.Constant(_I16X16, [1] * 16)
    accs = [cgutils.alloca_once_value(builder, ir.Constant(_I32X8, None)) for _ in range(rows)]
    with cgutils.for_range(builder, n) as loop:
        off = builder.mul(loop.index, ir.Constant(n.type, CHUNK))

        def act(base, h):
            addr = builder.add(builder.add(base, off), ir.Constant(n.type, h * HALF))
            return builder.load(builder.inttoptr(addr, _I8X32.as_pointer()), align=1)

        acts = [(act(even, h), act(odd, h)) for h in range(CHUNK // HALF)]
        for r, acc in enumerate(accs):
            row = builder.add(builder.add(p, builder.mul(stride, ir.Constant(stride.type, r))), off)
            _prefetch(builder, builder.add(row, ahead))

            def row_at(h, row=row):
                return builder.add(row, ir.Constant(n.type, h * HALF))

            s16 = _chunk_sum(builder, fns, row_at, acts)
            builder.store(builder.add(builder.load(acc), builder.call(maddwd, [s16, ones])), acc)
    return [builder.call(hsum, [builder.load(a)]) for a in accs]


@intrinsic
def dot_u4s8_avx2(typingctx, p_addr, even_addr, odd_addr, chunks):
    """`npukit.sim.nb_simd.dot_u4s8` on AVX2: Σ over ``chunks`` × 64 packed bytes at ``p_addr`` of
    ``(lo ^ 8)·even + (hi ^ 8)·odd`` (int32); the caller subtracts ``8 · Σ(even + odd)``."""
    return ONE_ROW_SIG, one_row_codegen(_avx2_rows)


@intrinsic
def dot4_u4s8_avx2(typingctx, p_addr, stride, even_addr, odd_addr, chunks, out_addr):
    """`dot_u4s8_avx2` of the `ROWS` rows at ``p_addr``, ``p_addr + stride``, ... in one pass, the int32
    sums stored at ``out_addr`` (as `npukit.sim.nb_simd.dot4_u4s8`)."""
    return ROWS_SIG, rows_codegen(_avx2_rows)


@nb.njit(cache=True, nogil=True)
def _trial(p, even, odd):
    return dot_u4s8_avx2(p.ctypes.data, even.ctypes.data, odd.ctypes.data, p.shape[0] // CHUNK)


@nb.njit(cache=True, nogil=True)
def _trial4(rows, even, odd):
    """`dot4_u4s8_avx2` over the first `ROWS` rows of the 2-D uint8 ``rows`` (any row stride)."""
    out = np.zeros(ROWS, np.int32)
    dot4_u4s8_avx2(rows.ctypes.data, rows.strides[0], even.ctypes.data, odd.ctypes.data,
                   rows.shape[1] // CHUNK, out.ctypes.data)
    return out


def _trial_ok() -> bool:
    """Random rows (one alone, four in a pass, a row stride) and the extreme corner (every nibble 15
    or 0 against every code -128 or 127: the largest int16 lane sums) against int64 NumPy."""
    rng = np.random.default_rng(11)
    p = rng.integers(0, 256, (ROWS + 1, 4 * CHUNK), dtype=np.uint8)
    even = rng.integers(-128, 128, p.shape[1], dtype=np.int8)
    odd = rng.integers(-128, 128, p.shape[1], dtype=np.int8)
    ok = int(_trial(p[0], even, odd)) == int(_want(p[:1], even, odd)[0])
    ok = ok and np.array_equal(_trial4(p[1:], even, odd), _want(p[1:], even, odd))
    corner = np.array([[0x77] * 2 * CHUNK, [0x88] * 2 * CHUNK, [0x87] * 2 * CHUNK, [0x78] * 2 * CHUNK],
                      np.uint8)  # nibbles 15/15, 0/0, 15/0, 0/15 after the flip
    low = np.full(2 * CHUNK, -128, np.int8)
    return ok and np.array_equal(_trial4(corner, low, low), _want(corner, low, low))


FAMILY = cpu.register(cpu.Family(
    name="int4-gemv-avx2", fast="avx2", intrinsics=("vpmaddubsw", "vpmaddwd"),
    trial="npukit.sim.nb_avx2:_trial_ok",
    doc="pccx packed-INT4 x INT8 GEMV/GEMM row dot products where AVX-512 VNNI is not fast"))


def probe() -> tuple[str, str]:
    """(``"avx2"`` | ``"portable"``, reason): `npukit.sim.cpu.choose` for this family."""
    chosen = cpu.choose(FAMILY)
    return chosen.path, chosen.reason
