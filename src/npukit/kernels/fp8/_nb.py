"""numba kernels of the fused FP8-as-storage GEMM (imported only where numba is installed).

Per tile of output columns the weight bytes are transcoded through a per-column 256-entry int8 table
(the seed's ``v2_i8lut`` idea: ``w = sat_s8(rne(fp16(lut[b] · inv_n)))`` computed once per column
and byte value) into a small workspace of ``tile × Kp`` bytes, which the int8 GEMM micro-kernel then
reads for every row of A. No full-size int8/fp16/fp32 weight copy exists at any time.

AVX-512 path: the table lookup is two ``vpermi2b`` (VBMI, 128-entry byte permutes) and a select on
the code's top bit, 64 bytes at a time; the GEMM is ``vpdpbusd`` (VNNI) on a 4×4 (or 1×4) register
block of int32 accumulators. ``vpdpbusd`` multiplies *unsigned* by signed bytes, so the table holds
``u = w ^ 0x80 = w + 128`` and ``Σ w·a = Σ u·a − 128·Σ a`` (exact in int32 for K ≤ 65536:
255·128·65536 < 2^31). The portable path runs the same tiles with plain loops.

fp16 rounding without float16 arithmetic: a product of two fp16 values is exact in float32, and only
values in [0.5, 128) survive the final round-and-saturate non-trivially, all of them normal fp16
numbers, so the fp16 rounding is integer arithmetic on the float32 bits (RNE to 10 mantissa bits)
followed by ``rint`` and a clamp (`_sat_rni_f16_inplace`); the epilogue's float32 -> fp16 is the
same kind of bit arithmetic (`_f16_bits`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from npukit.sim import compile_report, cpu

compile_report.install()  # first-run compiles are announced, never silent

_OPTS = {"cache": True, "nogil": True}
CHUNK = 64
_I8X64 = ir.VectorType(ir.IntType(8), 64)
_I32X16 = ir.VectorType(ir.IntType(32), 16)


def _addr_loader(builder, off, ptr_t):
    def load(base):
        return builder.load(builder.inttoptr(builder.add(base, off), ptr_t), align=1)

    return load


def _make_dot(mr: int, nr: int):
    """Intrinsic ``dot(a, a_stride, b, b_stride, chunks, out)``: out[i·nr + j] (int32) = Σ over
    chunks × 64 bytes of ``b_j`` (unsigned) × ``a_i`` (signed), an mr × nr block of vpdpbusd sums."""

    @intrinsic
    def dot(typingctx, a_addr, a_stride, b_addr, b_stride, chunks, out_addr):
        sig = types.void(types.intp, types.intp, types.intp, types.intp, types.intp, types.intp)

        def codegen(context, builder, signature, args):
            a, sa, b, sb, n, out = args
            mod = builder.module
            dpbusd = cgutils.get_or_insert_function(
                mod, ir.FunctionType(_I32X16, [_I32X16, _I32X16, _I32X16]), "llvm.x86.avx512.vpdpbusd.512")
            hsum = cgutils.get_or_insert_function(
                mod, ir.FunctionType(ir.IntType(32), [_I32X16]), "llvm.vector.reduce.add.v16i32")
            accs = [cgutils.alloca_once_value(builder, ir.Constant(_I32X16, None)) for _ in range(mr * nr)]
            ptr_t = _I8X64.as_pointer()
            rows_a = [builder.add(a, builder.mul(sa, ir.Constant(sa.type, i))) for i in range(mr)]
            rows_b = [builder.add(b, builder.mul(sb, ir.Constant(sb.type, j))) for j in range(nr)]
            with cgutils.for_range(builder, n) as loop:
                load = _addr_loader(builder, builder.mul(loop.index, ir.Constant(n.type, CHUNK)), ptr_t)
                av = [builder.bitcast(load(r), _I32X16) for r in rows_a]
                bv = [builder.bitcast(load(r), _I32X16) for r in rows_b]
                for i in range(mr):
                    for j in range(nr):
                        acc = accs[i * nr + j]
                        builder.store(builder.call(dpbusd, [builder.load(acc), bv[j], av[i]]), acc)
            i32p = ir.IntType(32).as_pointer()
            for k, acc in enumerate(accs):
                dst = builder.inttoptr(builder.add(out, ir.Constant(out.type, 4 * k)), i32p)
                builder.store(builder.call(hsum, [builder.load(acc)]), dst)
            return context.get_dummy_value()

        return sig, codegen

    return dot


dot4x4 = _make_dot(4, 4)
dot1x4 = _make_dot(1, 4)


@intrinsic
def transcode64(typingctx, src_addr, tab_addr, dst_addr, chunks):
    """dst[k] = tab[src[k]] for chunks × 64 bytes (tab: 256 bytes), by two vpermi2b and a select."""
    sig = types.void(types.intp, types.intp, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        src, tab, dst, n = args
        perm = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_I8X64, [_I8X64, _I8X64, _I8X64]),
            "llvm.x86.avx512.vpermi2var.qi.512")
        ptr_t = _I8X64.as_pointer()
        quarter = [builder.load(builder.inttoptr(builder.add(tab, ir.Constant(tab.type, 64 * q)), ptr_t),
                                align=1) for q in range(4)]
        zero = ir.Constant(_I8X64, None)
        with cgutils.for_range(builder, n) as loop:
            off = builder.mul(loop.index, ir.Constant(n.type, CHUNK))
            idx = builder.load(builder.inttoptr(builder.add(src, off), ptr_t), align=1)
            lo = builder.call(perm, [quarter[0], idx, quarter[1]])
            hi = builder.call(perm, [quarter[2], idx, quarter[3]])
            val = builder.select(builder.icmp_signed("<", idx, zero), hi, lo)
            builder.store(val, builder.inttoptr(builder.add(dst, off), ptr_t), align=1)
        return context.get_dummy_value()

    return sig, codegen


@nb.njit(inline="always")
def _sat_rni_f16_inplace(prod, n, out, offset):
    """out[i] = sat_s8(rne(fp16(prod[i]))) + offset for i < n (NaN -> 0); ``prod`` is overwritten.

    fp16 rounding without float16 arithmetic: round-to-nearest-even to 10 mantissa bits on the
    float32 bit pattern (exact for every value that can round to a non-zero int8: those are normal
    fp16 numbers; the sign bit is untouched and inf/NaN stay non-finite), then ``rint`` — three
    simple loops that LLVM vectorizes."""
    bits = prod.view(np.uint32)
    for i in range(n):
        u = bits[i]
        bits[i] = (u + np.uint32(0xFFF) + ((u >> np.uint32(13)) & np.uint32(1))) & np.uint32(0xFFFFE000)
    for i in range(n):
        x = prod[i]
        q = np.float32(0.0) if x != x else min(max(np.rint(x), np.float32(-128.0)), np.float32(127.0))
        out[i] = np.int32(q) + offset


@nb.njit(**_OPTS)
def column_table(lut32, inv, prod, tab):
    """tab[b] = uint8(w_b + 128) with w_b = sat_s8(rne(fp16(lut[b] · inv))), for one column."""
    for b in range(256):
        prod[b] = lut32[b] * inv  # fp16 × fp16: exact in float32
    _sat_rni_f16_inplace(prod, 256, tab, 128)


def _f16_to_f32_table() -> np.ndarray:
    """float32 of every fp16 bit pattern, built from the bits: NumPy's float16 -> float32 cast quiets
    signalling NaNs on aarch64 (and warns) but keeps them on x86; this table is the same everywhere
    (NaN payloads moved up by 13 bits, as x86 converts)."""
    h = np.arange(1 << 16, dtype=np.uint32)
    sign, exp, mant = (h >> 15) << 31, (h >> 10) & 0x1F, h & 0x3FF
    normal = sign | ((exp + 112) << 23) | (mant << 13)  # rebias 15 -> 127
    special = sign | 0x7F800000 | (mant << 13)  # inf, NaN
    bits = np.where(exp == 0x1F, special, np.where(exp == 0, sign, normal)).astype(np.uint32)
    out = bits.view(np.float32).copy()
    sub = (exp == 0) & (mant != 0)  # subnormals: mant * 2^-24, exact in float32
    out[sub] = np.where(sign[sub] != 0, -1.0, 1.0).astype(np.float32) * mant[sub].astype(np.float32) \
        * np.float32(2.0**-24)
    return out


F16_TO_F32 = _f16_to_f32_table()


@nb.njit(**_OPTS, inline="always")
def _quantize_row(a16_bits, f16_to_f32, a_inv, a8, asum, m, prod):
    k = a16_bits.shape[1]
    for i in range(k):
        prod[i] = f16_to_f32[a16_bits[m, i]] * a_inv  # fp16 × fp16: exact in float32
    row = a8[m]
    _sat_rni_f16_inplace(prod, k, row, 0)
    s = 0
    for i in range(k):
        s += np.int32(row[i])
    asum[m] = s


@nb.njit(**_OPTS, parallel=True)
def quantize_rows(a16_bits, f16_to_f32, a_inv, a8, asum):
    """a8[m, :K] = sat_s8(rne(fp16(a · a_inv))) for fp16 activations given as bits; asum[m] = Σ a8[m]."""
    for m in nb.prange(a16_bits.shape[0]):
        _quantize_row(a16_bits, f16_to_f32, a_inv, a8, asum, m, np.empty(a16_bits.shape[1], np.float32))


@nb.njit(**_OPTS)
def quantize_rows_serial(a16_bits, f16_to_f32, a_inv, a8, asum):
    prod = np.empty(a16_bits.shape[1], np.float32)
    for m in range(a16_bits.shape[0]):
        _quantize_row(a16_bits, f16_to_f32, a_inv, a8, asum, m, prod)



def _tile_tables(codes, lut32, inv, n0, rows, kp, ws):
    """Transcode columns n0 .. n0+rows-1 into ws[:rows, :Kp] (u8 = w + 128; tail and absent rows 0)."""
    n_cols, k = codes.shape
    full = k // CHUNK
    prod = np.empty(256, np.float32)
    tab = np.empty(256, np.uint8)
    for j in range(rows):
        n = n0 + j
        if n >= n_cols:
            ws[j, :] = 0
            continue
        column_table(lut32, inv[n], prod, tab)
        if _FAST and full:
            _transcode(codes[n].ctypes.data, tab.ctypes.data, ws[j].ctypes.data, full)
            start = full * CHUNK
        else:
            start = 0
        for i in range(start, k):
            ws[j, i] = tab[codes[n, i]]
        ws[j, k:kp] = 0


@nb.njit(**_OPTS)
def _block_portable(a8, ws, m0, mr, j0, kp, res):
    for i in range(mr):
        for j in range(4):
            s = 0
            for t in range(kp):
                s += np.int32(a8[m0 + i, t]) * np.int32(ws[j0 + j, t])
            res[i * 4 + j] = s


@nb.njit(inline="always")
def _f16_bits(bits, v):
    """float32 (bits, value) -> float16 bits, round to nearest even, as NumPy's astype (NaN keeps the
    top payload bits, overflow to inf, subnormals on the 2^-24 grid)."""
    sign = np.uint16((bits >> np.uint32(16)) & np.uint32(0x8000))
    mag = bits & np.uint32(0x7FFFFFFF)
    if mag > np.uint32(0x7F800000):
        h = np.uint32(0x7C00) | ((mag >> np.uint32(13)) & np.uint32(0x3FF))
        return sign | np.uint16(h if h != np.uint32(0x7C00) else h + np.uint32(1))
    if mag >= np.uint32(0x477FF000):  # rounds to >= 65520: inf
        return sign | np.uint16(0x7C00)
    if mag >= np.uint32(0x38800000):  # fp16 normal range: rebias the exponent, RNE on 13 bits
        r = mag + np.uint32(0xFFF) + ((mag >> np.uint32(13)) & np.uint32(1))
        return sign | np.uint16((r - np.uint32(0x38000000)) >> np.uint32(13))
    return sign | np.uint16(np.rint(abs(v) * np.float32(16777216.0)))  # exact scaling, then RNE


def _gemm_tile(a8, asum, codes, lut32, inv, scale, out, nm, n0, ws, res):
    """One tile of output columns n0 .. n0 + len(ws) - 1 for every row (see `fused_gemm`); ``out`` is
    float16 bits, [N, M] when ``nm`` else [M, N]."""
    m_rows, kp = a8.shape
    n_cols = codes.shape[0]
    tile = ws.shape[0]
    chunks = kp // CHUNK
    vals = np.empty(16, np.float32)
    vbits = vals.view(np.uint32)
    _tile_tables(codes, lut32, inv, n0, tile, kp, ws)
    for m0 in range(0, m_rows, 4):
        mr = min(4, m_rows - m0)
        for j0 in range(0, min(tile, n_cols - n0), 4):
            if _FAST and mr == 4:
                _dot4x4(a8[m0].ctypes.data, kp, ws[j0].ctypes.data, kp, chunks, res.ctypes.data)
            elif _FAST:
                for i in range(mr):
                    _dot1x4(a8[m0 + i].ctypes.data, kp, ws[j0].ctypes.data, kp, chunks,
                           res[4 * i:].ctypes.data)
            else:
                _block_portable(a8, ws, m0, mr, j0, kp, res)
            for i in range(mr):
                for j in range(min(4, n_cols - n0 - j0)):
                    n = n0 + j0 + j
                    vals[0] = np.float32(res[i * 4 + j] - 128 * asum[m0 + i]) * scale[n]
                    h = _f16_bits(vbits[0], vals[0])
                    if nm:
                        out[n, m0 + i] = h
                    else:
                        out[m0 + i, n] = h


def _fused_gemm(a8, asum, codes, lut32, inv, scale, out, nm, ws, res):
    """out[m, n] (fp16 bits; out[n, m] when ``nm``) = fp16(f32(acc) · scale[n]) with
    acc = Σ_k a8[m, k] · w[n, k], w transcoded per tile of ``ws.shape[1]`` columns (a multiple of 4)
    into ``ws[thread]``; a8 is [M, Kp] int8 zero-padded to a multiple of 64; ``res`` [threads, 16]
    int32 scratch. Built twice (`_build`): AVX-512 VBMI + VNNI inner loops, and portable ones."""
    tile = ws.shape[1]
    n_tiles = (codes.shape[0] + tile - 1) // tile
    for t in nb.prange(n_tiles):
        tid = nb.get_thread_id()
        _gemm_tile(a8, asum, codes, lut32, inv, scale, out, nm, t * tile, ws[tid], res[tid])


def _fused_gemm_serial(a8, asum, codes, lut32, inv, scale, out, nm, ws, res):
    """`fused_gemm` on the calling thread (small problems: no thread hand-off). Numba caches by
    function, so the serial and parallel builds are two functions, not one jitted twice."""
    tile = ws.shape[1]
    for n0 in range(0, codes.shape[0], tile):
        _gemm_tile(a8, asum, codes, lut32, inv, scale, out, nm, n0, ws[0], res[0])


@nb.njit(**_OPTS)
def _no_transcode(src_addr, tab_addr, dst_addr, chunks):  # never called: _FAST is False
    pass


@nb.njit(**_OPTS)
def _no_dot(a_addr, a_stride, b_addr, b_stride, chunks, out_addr):  # never called: _FAST is False
    pass


_FAST, _transcode, _dot4x4, _dot1x4 = False, _no_transcode, _no_dot, _no_dot  # bound per build


@dataclass(frozen=True)
class Build:
    """One build of the fused GEMM: ``tile`` (one tile, for the trial), ``parallel`` and ``serial``."""

    path: str
    tile: object
    parallel: object
    serial: object


def _build(path: str) -> Build:
    """The kernels of one path as separate compiled functions (npukit.sim.cpu.njit_variant): the
    portable build never types an intrinsic, so LLVM never sees one for a target that lacks it."""
    fast = path != cpu.PORTABLE
    sfx = "vnni_vbmi" if fast else "portable"
    ops = {"_FAST": fast, "_transcode": transcode64 if fast else _no_transcode,
           "_dot4x4": dot4x4 if fast else _no_dot, "_dot1x4": dot1x4 if fast else _no_dot}
    tables = cpu.njit_variant(_tile_tables, f"tile_tables_{sfx}", _OPTS, **ops)
    tile = cpu.njit_variant(_gemm_tile, f"gemm_tile_{sfx}", _OPTS, **ops, _tile_tables=tables)
    par = cpu.njit_variant(_fused_gemm, f"fused_gemm_{sfx}", {**_OPTS, "parallel": True}, _gemm_tile=tile)
    ser = cpu.njit_variant(_fused_gemm_serial, f"fused_gemm_serial_{sfx}", _OPTS, _gemm_tile=tile)
    return Build(path, tile, par, ser)


def _trial() -> bool:
    """Run the VBMI transcode and VNNI micro-kernels once, serially, against integer NumPy."""
    rng = np.random.default_rng(3)
    m, n, k = 5, 9, 200
    kp = -(-k // CHUNK) * CHUNK
    a8 = np.zeros((m, kp), np.int8)
    a8[:, :k] = rng.integers(-128, 128, (m, k))
    asum = a8.astype(np.int64).sum(1).astype(np.int32)
    codes = rng.integers(0, 256, (n, k), dtype=np.uint8)
    lut32 = rng.integers(-300, 300, 256).astype(np.float32)
    inv = np.full(n, 0.5, np.float32)
    w = np.clip(np.rint(lut32 * np.float32(0.5)), -128, 127).astype(np.int64)[codes]
    scale = np.full(n, 2.0**-8, np.float32)  # keeps the products inside the fp16 range
    want = ((a8[:, :k].astype(np.int64) @ w.T).astype(np.float32) * scale).astype(np.float16)
    out = np.zeros((m, n), np.uint16)
    ws = np.empty((8, kp), np.uint8)
    res = np.empty(16, np.int32)
    tile = _build(FAMILY.fast).tile
    for n0 in range(0, n, 8):
        tile(a8, asum, codes, lut32, inv, scale, out, False, n0, ws, res)
    return bool(np.array_equal(out, want.view(np.uint16)))


FAMILY = cpu.register(cpu.Family(
    name="fp8-gemm", fast="avx512-vnni-vbmi", intrinsics=("vpdpbusd", "vpermi2b"),
    trial="npukit.kernels.fp8._nb:_trial", doc="FP8-as-storage GEMM: byte-table transcode + int8 GEMM"))
_BUILDS: dict[str, Build] = {}


def probe() -> tuple[str, str]:
    """("avx512-vnni-vbmi" | "portable", reason): `npukit.sim.cpu.choose` for this family (LLVM asked
    whether it compiles vpdpbusd and vpermi2b for numba's target, then a trial in a child process)."""
    chosen = cpu.choose(FAMILY)
    return chosen.path, chosen.reason


def kernels(portable: bool = False) -> Build:
    """The build this CPU runs (``portable``: the portable one whatever the CPU)."""
    path = cpu.PORTABLE if portable else probe()[0]
    if path not in _BUILDS:
        _BUILDS[path] = _build(path)
    return _BUILDS[path]
