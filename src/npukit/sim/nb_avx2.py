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


def _chunk_sum(builder, fns, row_at, acts):
    """int16 lanes of one 64-byte chunk of one row: Σ over its register-wide parts of
    ``pmaddubsw(lo, even) + pmaddubsw(hi, odd)`` (|lane| ≤ 2 · 3840 per part: 15360 over AVX2's two
    halves, 30720 over SSSE3's four quarters; module docstring: no saturation, no wrap)."""
    maddubs, consts, vec = fns["maddubs"], fns["consts"], fns["vec"]
    total = None
    for h, (ev, od) in enumerate(acts):
        raw = builder.load(builder.inttoptr(row_at(h), vec.as_pointer()), align=1)
        u = builder.xor(raw, consts["flip"])
        lo = builder.and_(u, consts["low"])
        hi = builder.lshr(u, consts["four"])
        pair = builder.add(builder.call(maddubs, [lo, ev]), builder.call(maddubs, [hi, od]))
        total = pair if total is None else builder.add(total, pair)
    return total


def maddubs_rows(width: int, maddubs_name: str, maddwd_name: str):
    """A row-pass builder (`nb_simd.rows_codegen`'s ``rows_fn``) on ``width``-byte registers: the
    unsigned × signed byte multiply-add ``maddubs_name`` (``width`` bytes -> ``width/2`` int16) and the
    int16 pair add ``maddwd_name`` (-> ``width/4`` int32). AVX2 (32 bytes) here, SSSE3/SSE2 (16 bytes)
    in `npukit.sim.nb_ssse3`: the same sums, the same callers."""
    i8 = ir.VectorType(ir.IntType(8), width)
    i16 = ir.VectorType(ir.IntType(16), width // 2)
    i32 = ir.VectorType(ir.IntType(32), width // 4)

    def rows_fn(builder, p, stride, even, odd, n, rows, ahead):
        """LLVM IR of ``rows`` row sums (rows ``stride`` bytes apart) over ``n`` 64-byte chunks: each
        even/odd activation part is loaded once for every row, every row keeps its own int32
        accumulator, and each row's chunk ``ahead`` bytes on is prefetched (as `nb_simd._vnni_rows`).
        Returns the ``rows`` int32 sums."""
        mod = builder.module
        fns = {"vec": i8, "maddubs": cgutils.get_or_insert_function(
            mod, ir.FunctionType(i16, [i8, i8]), maddubs_name),
            "consts": {"flip": ir.Constant(i8, [0x88] * width), "low": ir.Constant(i8, [0x0F] * width),
                       "four": ir.Constant(i8, [4] * width)}}
        maddwd = cgutils.get_or_insert_function(mod, ir.FunctionType(i32, [i16, i16]), maddwd_name)
        hsum = cgutils.get_or_insert_function(
            mod, ir.FunctionType(ir.IntType(32), [i32]), f"llvm.vector.reduce.add.v{width // 4}i32")
        ones = ir.Constant(i16, [1] * (width // 2))
        accs = [cgutils.alloca_once_value(builder, ir.Constant(i32, None)) for _ in range(rows)]
        with cgutils.for_range(builder, n) as loop:
            off = builder.mul(loop.index, ir.Constant(n.type, CHUNK))

            def act(base, h):
                addr = builder.add(builder.add(base, off), ir.Constant(n.type, h * width))
                return builder.load(builder.inttoptr(addr, i8.as_pointer()), align=1)

            acts = [(act(even, h), act(odd, h)) for h in range(CHUNK // width)]
            for r, acc in enumerate(accs):
                row = builder.add(builder.add(p, builder.mul(stride, ir.Constant(stride.type, r))), off)
                _prefetch(builder, builder.add(row, ahead))

                def row_at(h, row=row):
                    return builder.add(row, ir.Constant(n.type, h * width))

                s16 = _chunk_sum(builder, fns, row_at, acts)
                builder.store(builder.add(builder.load(acc), builder.call(maddwd, [s16, ones])), acc)
        return [builder.call(hsum, [builder.load(a)]) for a in accs]

    return rows_fn


def row_intrinsics(rows_fn, path: str) -> tuple:
    """A family's two intrinsics over the row-pass builder ``rows_fn``: ``dot_u4s8_<path>(p_addr,
    even_addr, odd_addr, chunks) -> int32`` (`npukit.sim.nb_simd.dot_u4s8`'s statement: Σ over ``chunks``
    × 64 packed bytes at ``p_addr`` of ``(lo ^ 8)·even + (hi ^ 8)·odd``; the caller subtracts
    ``8 · Σ(even + odd)``) and ``dot4_u4s8_<path>(p_addr, stride, even_addr, odd_addr, chunks,
    out_addr)``: the `ROWS` rows at ``p_addr``, ``p_addr + stride``, ... in one pass, the int32 sums
    stored at ``out_addr`` (as `npukit.sim.nb_simd.dot4_u4s8`)."""

    def one(typingctx, p_addr, even_addr, odd_addr, chunks):
        return ONE_ROW_SIG, one_row_codegen(rows_fn)

    def four(typingctx, p_addr, stride, even_addr, odd_addr, chunks, out_addr):
        return ROWS_SIG, rows_codegen(rows_fn)

    for fn, name in ((one, f"dot_u4s8_{path}"), (four, f"dot4_u4s8_{path}")):
        fn.__name__ = fn.__qualname__ = name
    return intrinsic(one), intrinsic(four)


dot_u4s8_avx2, dot4_u4s8_avx2 = row_intrinsics(
    maddubs_rows(HALF, "llvm.x86.avx2.pmadd.ub.sw", "llvm.x86.avx2.pmadd.wd"), "avx2")


_dot = _dot4 = None  # a family's one-row and four-row intrinsics, bound per build by `trial_builds`


def _one_row(p, even, odd):  # pragma: no cover - numba
    return _dot(p.ctypes.data, even.ctypes.data, odd.ctypes.data, p.shape[0] // CHUNK)


def _four_rows(rows, even, odd):  # pragma: no cover - numba
    """The four-row intrinsic over the first `ROWS` rows of the 2-D uint8 ``rows`` (any row stride)."""
    out = np.zeros(ROWS, np.int32)
    _dot4(rows.ctypes.data, rows.strides[0], even.ctypes.data, odd.ctypes.data, rows.shape[1] // CHUNK,
          out.ctypes.data)
    return out


def trial_builds(name: str, dot, dot4) -> tuple:
    """A family's trial twins (one row, `ROWS` rows in a pass) compiled with its intrinsics ``dot`` and
    ``dot4``, each under its own name (numba's disk cache keeps the families apart)."""
    opts = {"cache": True, "nogil": True}
    return (cpu.njit_variant(_one_row, f"trial_{name}", opts, _dot=dot, _dot4=dot4),
            cpu.njit_variant(_four_rows, f"trial4_{name}", opts, _dot=dot, _dot4=dot4))


_trial, _trial4 = trial_builds("avx2", dot_u4s8_avx2, dot4_u4s8_avx2)


def trial_ok(one, four) -> bool:
    """Random rows (one alone through ``one``, four in a pass through ``four``, a row stride) and the
    extreme corner (every nibble 15 or 0 against every code -128 or 127: the largest int16 lane sums)
    against int64 NumPy; ``one``/``four`` are a family's `_trial`/`_trial4` twins."""
    rng = np.random.default_rng(11)
    p = rng.integers(0, 256, (ROWS + 1, 4 * CHUNK), dtype=np.uint8)
    even = rng.integers(-128, 128, p.shape[1], dtype=np.int8)
    odd = rng.integers(-128, 128, p.shape[1], dtype=np.int8)
    ok = int(one(p[0], even, odd)) == int(_want(p[:1], even, odd)[0])
    ok = ok and np.array_equal(four(p[1:], even, odd), _want(p[1:], even, odd))
    corner = np.array([[0x77] * 2 * CHUNK, [0x88] * 2 * CHUNK, [0x87] * 2 * CHUNK, [0x78] * 2 * CHUNK],
                      np.uint8)  # nibbles 15/15, 0/0, 15/0, 0/15 after the flip
    low = np.full(2 * CHUNK, -128, np.int8)
    return ok and np.array_equal(four(corner, low, low), _want(corner, low, low))


def _trial_ok() -> bool:
    return trial_ok(_trial, _trial4)


FAMILY = cpu.register(cpu.Family(
    name="int4-gemv-avx2", fast="avx2", intrinsics=("vpmaddubsw", "vpmaddwd"),
    trial="npukit.sim.nb_avx2:_trial_ok",
    doc="pccx packed-INT4 x INT8 GEMV/GEMM row dot products where AVX-512 VNNI is not fast"))


def probe() -> tuple[str, str]:
    """(``"avx2"`` | ``"portable"``, reason): `npukit.sim.cpu.choose` for this family."""
    chosen = cpu.choose(FAMILY)
    return chosen.path, chosen.reason
