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


ROWS = 4  # rows per `dot4_u4s8` pass: 8 independent vpdpbusd chains, each activation load shared


def _prefetch(builder, addr) -> None:
    """``llvm.prefetch`` of the cache line at integer address ``addr``: read, keep in all cache levels,
    data (generic LLVM IR: lowered for any CPU, a no-op where there is no prefetch instruction)."""
    i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
    fn = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0i8")
    flags = [ir.Constant(i32, v) for v in (0, 3, 1)]
    builder.call(fn, [builder.inttoptr(addr, i8p), *flags])


def _vnni_rows(builder, p, stride, even, odd, n, rows, ahead):
    """LLVM IR of ``rows`` row sums (`dot_u4s8` each, rows ``stride`` bytes apart): two accumulators per
    row (low and high nibbles), so no vpdpbusd waits on the one before it in the same row, and one load
    of each even/odd activation chunk serves every row. Each weight chunk is prefetched ``ahead`` bytes
    before it is read (short rows read four at a time are too short a stream for the hardware
    prefetcher: measured 55-75% of a NumPy sum's bandwidth without, 85-100% with). Returns the
    ``rows`` int32 sums."""
    mod = builder.module
    dpbusd = cgutils.get_or_insert_function(
        mod, ir.FunctionType(_I32X16, [_I32X16, _I32X16, _I32X16]), "llvm.x86.avx512.vpdpbusd.512")
    hsum = cgutils.get_or_insert_function(
        mod, ir.FunctionType(ir.IntType(32), [_I32X16]), "llvm.vector.reduce.add.v16i32")
    zero = ir.Constant(_I32X16, None)
    accs = [[cgutils.alloca_once_value(builder, zero) for _ in range(2)] for _ in range(rows)]
    ptr_t = _I8X64.as_pointer()
    flip = ir.Constant(_I8X64, [0x88] * 64)
    low = ir.Constant(_I8X64, [0x0F] * 64)
    four = ir.Constant(_I8X64, [4] * 64)
    with cgutils.for_range(builder, n) as loop:
        off = builder.mul(loop.index, ir.Constant(n.type, CHUNK))

        def load(addr):
            return builder.load(builder.inttoptr(addr, ptr_t), align=1)

        ev = builder.bitcast(load(builder.add(even, off)), _I32X16)
        od = builder.bitcast(load(builder.add(odd, off)), _I32X16)
        for r, (acc_lo, acc_hi) in enumerate(accs):
            row = builder.add(p, builder.mul(stride, ir.Constant(stride.type, r))) if r else p
            next_addr = builder.add(builder.add(row, off), ahead)
            _prefetch(builder, next_addr)
            u = builder.xor(load(builder.add(row, off)), flip)
            lo = builder.bitcast(builder.and_(u, low), _I32X16)
            hi = builder.bitcast(builder.lshr(u, four), _I32X16)
            builder.store(builder.call(dpbusd, [builder.load(acc_lo), lo, ev]), acc_lo)
            builder.store(builder.call(dpbusd, [builder.load(acc_hi), hi, od]), acc_hi)
    return [builder.call(hsum, [builder.add(builder.load(a), builder.load(b))]) for a, b in accs]


# the signatures and codegen of a row-dot intrinsic pair over a row-pass builder (``rows_fn``: the
# VNNI `_vnni_rows` here, its AVX2 twin in `nb_avx2`), so both paths' intrinsics share one shape
ONE_ROW_SIG = types.int32(types.intp, types.intp, types.intp, types.intp)
ROWS_SIG = types.void(types.intp, types.intp, types.intp, types.intp, types.intp, types.intp)


def one_row_codegen(rows_fn):
    """Codegen of ``(p_addr, even_addr, odd_addr, chunks) -> int32``: one row through ``rows_fn``."""

    def codegen(context, builder, signature, args):
        p, even, odd, n = args
        ahead = ir.Constant(p.type, 8 * CHUNK)  # one stream: 512 bytes on (the next row in a GEMM)
        return rows_fn(builder, p, ir.Constant(p.type, 0), even, odd, n, 1, ahead)[0]

    return codegen


PREFETCH_AHEAD = 8192  # bytes: a short row pass prefetches whole passes this far on (`pass_ahead`)
LONG_PASS = 4096  # bytes: a pass at least this long prefetches the next pass only


def pass_ahead(builder, stride):
    """How far on a `ROWS`-row pass prefetches: a pass shorter than `LONG_PASS` bytes ``k`` passes on,
    ``k`` the most whole passes within `PREFETCH_AHEAD` bytes; a longer pass the next pass, as before.
    One pass on is only 2 KiB for K = 1024 rows (512 bytes each): too near for a stream from DRAM
    (docs/cpus.md, "Prefetch distance"). For K = 2048 (a 4 KiB pass) two passes on were no faster
    alone and slower inside decode steps, and a K = 4096 pass (8 KiB) gained nothing from two. Whole
    passes keep each prefetch on a row the call reads, also for a row-strided view. (A zero stride, a
    broadcast view, prefetches one pass on, 0 bytes: no division by zero.)"""
    ty = stride.type
    zero, unit = ir.Constant(ty, 0), ir.Constant(ty, 1)
    one = builder.mul(stride, ir.Constant(ty, ROWS))
    nonzero = builder.select(builder.icmp_unsigned("==", one, zero), unit, one)
    passes = builder.udiv(ir.Constant(ty, PREFETCH_AHEAD), nonzero)
    short = builder.icmp_unsigned("<", one, ir.Constant(ty, LONG_PASS))
    passes = builder.select(builder.and_(short, builder.icmp_unsigned(">", passes, unit)), passes, unit)
    return builder.mul(one, passes)


def rows_codegen(rows_fn):
    """Codegen of ``(p_addr, stride, even_addr, odd_addr, chunks, out_addr)``: `ROWS` rows through
    ``rows_fn`` in one pass, their int32 sums stored at ``out_addr``."""

    def codegen(context, builder, signature, args):
        p, stride, even, odd, n, out = args
        sums = rows_fn(builder, p, stride, even, odd, n, ROWS, pass_ahead(builder, stride))
        dst = builder.inttoptr(out, ir.IntType(32).as_pointer())
        for r, v in enumerate(sums):
            builder.store(v, builder.gep(dst, [ir.Constant(ir.IntType(32), r)]), align=4)
        return context.get_dummy_value()

    return codegen


@intrinsic
def prefetch_bytes(typingctx, addr, nbytes):
    """Prefetch the cache lines of ``nbytes`` bytes at ``addr`` for reading. ``llvm.prefetch`` is generic
    LLVM IR, not an x86 intrinsic: LLVM lowers it for any CPU (a no-op where there is no prefetch
    instruction), and a prefetch never faults, so portable builds may call it."""
    sig = types.void(types.intp, types.intp)

    def codegen(context, builder, signature, args):
        addr, n = args
        lines = builder.udiv(builder.add(n, ir.Constant(n.type, 63)), ir.Constant(n.type, 64))
        with cgutils.for_range(builder, lines) as loop:
            _prefetch(builder, builder.add(addr, builder.mul(loop.index, ir.Constant(n.type, 64))))
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def dot_u4s8(typingctx, p_addr, even_addr, odd_addr, chunks):
    """Σ over ``chunks`` × 64 packed bytes at ``p_addr`` of ``(lo ^ 8)·even + (hi ^ 8)·odd`` (int32),
    with ``even``/``odd`` the int8 activation codes of the low/high nibbles (addresses of contiguous
    int8 runs). The caller subtracts ``8 · Σ(even + odd)`` over the same bytes."""
    return ONE_ROW_SIG, one_row_codegen(_vnni_rows)


@intrinsic
def dot4_u4s8(typingctx, p_addr, stride, even_addr, odd_addr, chunks, out_addr):
    """`dot_u4s8` of the `ROWS` rows at ``p_addr``, ``p_addr + stride``, ... against the same activations,
    in one pass; the int32 sums are stored at ``out_addr`` (``ROWS`` consecutive int32). The wrap-free
    lane sums make the result equal to `ROWS` calls of `dot_u4s8`, bit for bit."""
    return ROWS_SIG, rows_codegen(_vnni_rows)


@nb.njit(cache=True, nogil=True)
def _trial(p, even, odd):
    return dot_u4s8(p.ctypes.data, even.ctypes.data, odd.ctypes.data, p.shape[0] // CHUNK)


@nb.njit(cache=True, nogil=True)
def _trial4(rows, even, odd):
    """`dot4_u4s8` over the first `ROWS` rows of the 2-D uint8 ``rows`` (any row stride)."""
    out = np.zeros(ROWS, np.int32)
    dot4_u4s8(rows.ctypes.data, rows.strides[0], even.ctypes.data, odd.ctypes.data, rows.shape[1] // CHUNK,
              out.ctypes.data)
    return out


def _want(p: np.ndarray, even: np.ndarray, odd: np.ndarray) -> np.ndarray:
    """The offset-binary sums in int64 NumPy, one per row of ``p`` (the statement `dot_u4s8` computes)."""
    return ((p & 15) ^ 8).astype(np.int64) @ even + ((p >> 4) ^ 8).astype(np.int64) @ odd


def _trial_ok() -> bool:
    rng = np.random.default_rng(7)
    p = rng.integers(0, 256, (ROWS + 1, 4 * CHUNK), dtype=np.uint8)
    even = rng.integers(-127, 128, p.shape[1], dtype=np.int8)
    odd = rng.integers(-127, 128, p.shape[1], dtype=np.int8)
    want = _want(p, even, odd)
    one = int(_trial(p[0], even, odd)) == int(want[0])
    return one and np.array_equal(_trial4(p[1:], even, odd), want[1:])


FAMILY = cpu.register(cpu.Family(
    name="int4-gemv", fast="avx512-vnni", intrinsics=("vpdpbusd",), trial="npukit.sim.nb_simd:_trial_ok",
    version="2",
    doc="pccx packed-INT4 x INT8 GEMV/GEMM row dot products"))


def probe() -> tuple[str, str]:
    """(``"avx512-vnni"`` | ``"portable"``, reason): `npukit.sim.cpu.choose` for the INT4 row dot
    (LLVM asked whether it can compile ``vpdpbusd`` for numba's target, then a trial in a child
    process). ``NPUKIT_SIMD=portable`` forces the portable loops."""
    chosen = cpu.choose(FAMILY)
    return chosen.path, chosen.reason
