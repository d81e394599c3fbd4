"""numba kernels of `npukit.targets.pccx.fast.kernels` (imported only when numba is installed).

Compiled without fastmath and with ``error_model="numpy"`` (IEEE division), so every float operation is
the IEEE operation NumPy performs; the exactness arguments are in `kernels`.
"""

from __future__ import annotations

import importlib
import math

import numba as nb
import numpy as np

from npukit.sim import compile_report
from npukit.sim.cpu import INT4_FAMILIES, njit_variant
from npukit.sim.nb_avx2 import dot4_u4s8_avx2, dot_u4s8_avx2
from npukit.sim.nb_simd import ROWS, dot4_u4s8, dot_u4s8, prefetch_bytes
from npukit.sim.nb_ssse3 import dot4_u4s8_ssse3, dot_u4s8_ssse3
from npukit.targets.pccx.fast._nbround import bf16, bf16_64, f32_bits, rne16, round64

compile_report.install()  # first-run compiles are announced, never silent

_OPTS = {"cache": True, "error_model": "numpy", "nogil": True}
_MAGIC = 6755399441055744.0  # 1.5 * 2^52: (v + M) - M is rint(v), half to even, for |v| < 2^51


_ALL = np.arange(1 << 16, dtype=np.uint32)
LUT32 = (_ALL << 16).view(np.float32)  # BF16 bits -> float32 (exact); passed to kernels, no bit casts
with np.errstate(invalid="ignore"):
    LUT64 = LUT32.astype(np.float64)


@nb.njit(**_OPTS)
def _round32(t, out):
    """float32 [n] -> BF16 bits [n], RNE; NaN -> 0x7FC0 | sign (`_nbround.rne16` of each pattern)."""
    u = t.view(np.uint32)
    for i in range(u.shape[0]):
        out[i] = rne16(u[i])


_round64 = round64  # float64 [n] -> BF16 bits [n], one RNE rounding (`_nbround.bits64` per element)


@nb.njit(**_OPTS)
def quantize(x, q, lut64):
    """Emax alignment of BF16 bits ``x`` into ``q`` (int8, zero-padded); returns e, or 999 if not finite."""
    top = 0
    for i in range(x.shape[0]):
        m = int(x[i]) & 0x7FFF
        if m > top:
            top = m
    if top >= 0x7F80:
        return 999
    e = 0
    if top:
        ex = top >> 7
        if ex:
            e = ex - 127
        else:
            mm = top & 0x7F
            b = 0
            while mm > 1:
                mm >>= 1
                b += 1
            e = b - 133
    f = math.ldexp(1.0, 6 - e)
    for i in range(x.shape[0]):
        v = (bf16_64(x[i]) * f + _MAGIC) - _MAGIC
        v = min(max(v, -127.0), 127.0)
        q[i] = np.int8(v)
    for i in range(x.shape[0], min(q.shape[0], x.shape[0] + 8)):  # the odd-K nibble reads q[K]
        q[i] = 0
    return e


@nb.njit(**_OPTS)
def _epilogue(acc, e, scale, dst, accm, lut32):
    """numerics.gemv's float32 epilogue on the exact sums ``acc`` (already float32), bits into dst."""
    fac = np.float32(math.ldexp(1.0, e - 6))  # = ldexp(t, e-6): 2^(e-6) is a float32 (-139..121)
    has_s = scale.shape[0] > 0
    for m in range(acc.shape[0]):
        t = acc[m]
        if has_s:
            t = t * scale[m]
        t = t * fac
        if accm:
            t = bf16(dst[m]) + t
        acc[m] = t
    _round32(acc, dst)


@nb.njit(parallel=True, **_OPTS)
def gemv_i8(x, w, scale, dst, accm, q, lut32, lut64):
    """int8 weights [M, K] (INT4 codes, INT8) against BF16 bits x, result bits into dst; 1: x not finite."""
    e = quantize(x, q, lut64)
    if e == 999:
        return 1
    accs = np.empty(w.shape[0], np.int32)  # the int32 store lets LLVM keep 32-bit lanes (2x faster)
    q16 = q[: w.shape[1]].astype(np.int16)
    for m in nb.prange(w.shape[0]):
        acc = np.int32(0)
        for j in range(w.shape[1]):  # 16-bit products (|w·q| <= 128 · 127 < 2^15, exact): LLVM's
            acc += np.int32(np.int16(w[m, j]) * q16[j])  # multiply-add of 16-bit pairs, 1.3-2x here
        accs[m] = acc  # exact: |acc| <= 65535 * 128 * 127 < 2^31
    _epilogue(accs.astype(np.float32), e, scale, dst, accm, lut32)
    return 0


_BLOCK = 64  # rows per parallel task of the portable packed GEMV
_AHEAD = 4  # rows ahead that the portable packed GEMV prefetches


@nb.njit(**_OPTS)
def _rows_p4(p, qe, qo, accs, m0, m1):
    """Σ over each row m0..m1 of the packed image of ``(lo ^ 8)·qe + (hi ^ 8)·qo`` (offset-binary
    nibbles, see `gemv_p4`), exact in int32. Only int32 values reach the int32 store: with an int64
    term in the row's arithmetic LLVM no longer used 16-bit pair multiply-adds (2-3x slower here)."""
    base, stride, kb = p.ctypes.data, p.strides[0], p.shape[1] * p.strides[1]
    for m in range(m0, m1):
        prefetch_bytes(base + (m + _AHEAD) * stride, kb)
        acc = np.int32(0)
        for j in range(p.shape[1]):
            u = np.int32(p[m, j] ^ np.uint8(0x88))
            acc += (u & 15) * np.int32(qe[j]) + (u >> 4) * np.int32(qo[j])
        accs[m] = acc


@nb.njit(parallel=True, **_OPTS)
def gemv_p4(x, p, scale, dst, accm, q, lut32, lut64):
    """Packed INT4 rows [M, ceil(K/2)] read in place (even index in the low nibble). The nibbles are
    taken offset-binary in int32 lanes (``u = b ^ 0x88``: ``u & 15 = s_lo + 8``, ``u >> 4 = s_hi + 8``)
    and ``8 · Σ(q)`` subtracted once: no sign extension of 4-bit fields, which LLVM vectorises about
    twice as fast as the sign-extending loop on AVX2 and AVX-512 targets (measured on this host's
    Haswell, Skylake-SP and x86-64-v2 builds); the same exact int32 sums."""
    e = quantize(x, q, lut64)
    if e == 999:
        return 1
    kb = p.shape[1]
    qe = np.empty(kb, np.int16)  # int16, not int32: half the activation bytes each row reads
    qo = np.empty(kb, np.int16)
    offset = _split_codes(q, qe, qo, kb)
    mm = p.shape[0]
    accs = np.empty(mm, np.int32)
    blocks = (mm + _BLOCK - 1) // _BLOCK
    for g in nb.prange(blocks):
        _rows_p4(p, qe, qo, accs, g * _BLOCK, min(mm, (g + 1) * _BLOCK))
    for m in range(mm):
        accs[m] -= 8 * offset
    _epilogue(accs.astype(np.float32), e, scale, dst, accm, lut32)
    return 0


@nb.njit(**_OPTS)
def _split_codes(q, qe, qo, body):
    """Even/odd activation codes into ``qe``/``qo`` (one per packed byte, int8 or int16); returns
    Σ(qe + qo) over the first ``body`` bytes, the correction of their offset-binary (s + 8) sums."""
    for j in range(qe.shape[0]):
        qe[j] = q[2 * j]
        qo[j] = q[2 * j + 1]
    offset = np.int32(0)
    for j in range(body):
        offset += np.int32(qe[j]) + np.int32(qo[j])
    return offset


@nb.njit(**_OPTS)
def _tail_p4(p, m, j0, qe, qo):
    """Row ``m`` of the packed image from byte ``j0`` on, two's-complement nibbles, exact int32."""
    acc = np.int32(0)
    for j in range(j0, p.shape[1]):
        b = np.int8(p[m, j])
        acc += np.int32(np.int8(b << 4) >> 4) * np.int32(qe[j]) + np.int32(b >> 4) * np.int32(qo[j])
    return acc


def _gemv_p4_simd(x, p, scale, dst, accm, q, lut32, lut64):  # pragma: no cover - numba
    """`gemv_p4` with the row dot products on SIMD intrinsics over whole 64-byte runs of each row
    (bound per build: AVX-512 VNNI `nb_simd.dot4_u4s8`, AVX2 `nb_avx2.dot4_u4s8_avx2` or SSSE3
    `nb_ssse3.dot4_u4s8_ssse3`), `ROWS` rows per pass (each activation load serves them all, and their
    chains overlap), leftover rows one at a time, the tail in the portable loop; the same exact int32
    sums."""
    e = quantize(x, q, lut64)
    if e == 999:
        return 1
    kb, mm = p.shape[1], p.shape[0]
    chunks = kb // 64 if p.strides[1] == 1 else 0
    body = chunks * 64
    qe = np.empty(kb, np.int8)
    qo = np.empty(kb, np.int8)
    offset = _split_codes(q, qe, qo, body)
    base, stride = p.ctypes.data, p.strides[0]
    ea, oa = qe.ctypes.data, qo.ctypes.data
    accs = np.empty(mm, np.int32)
    out = accs.ctypes.data
    groups = mm // ROWS
    for g in nb.prange(groups):
        m = g * ROWS
        _rows_dot(base + m * stride, stride, ea, oa, chunks, out + 4 * m)
    for m in range(groups * ROWS, mm):
        accs[m] = _row_dot(base + m * stride, ea, oa, chunks)
    for m in range(mm):
        acc = accs[m] - 8 * offset
        if body < kb:
            acc += _tail_p4(p, m, body, qe, qo)
        accs[m] = acc
    _epilogue(accs.astype(np.float32), e, scale, dst, accm, lut32)
    return 0


@nb.njit(**_OPTS)
def _dot_vnni(p_addr, even_addr, odd_addr, chunks):
    return dot_u4s8(p_addr, even_addr, odd_addr, chunks)


@nb.njit(**_OPTS)
def _dot_avx2(p_addr, even_addr, odd_addr, chunks):
    return dot_u4s8_avx2(p_addr, even_addr, odd_addr, chunks)


@nb.njit(**_OPTS)
def _dot_ssse3(p_addr, even_addr, odd_addr, chunks):
    return dot_u4s8_ssse3(p_addr, even_addr, odd_addr, chunks)


@nb.njit(**_OPTS)
def _dot_none(p_addr, even_addr, odd_addr, chunks):  # never called: chunks is 0 in the portable build
    return np.int32(0)


@nb.njit(**_OPTS)
def _dot4_vnni(p_addr, stride, even_addr, odd_addr, chunks, out_addr):
    dot4_u4s8(p_addr, stride, even_addr, odd_addr, chunks, out_addr)


@nb.njit(**_OPTS)
def _dot4_avx2(p_addr, stride, even_addr, odd_addr, chunks, out_addr):
    dot4_u4s8_avx2(p_addr, stride, even_addr, odd_addr, chunks, out_addr)


@nb.njit(**_OPTS)
def _dot4_ssse3(p_addr, stride, even_addr, odd_addr, chunks, out_addr):
    dot4_u4s8_ssse3(p_addr, stride, even_addr, odd_addr, chunks, out_addr)


@nb.njit(**_OPTS)
def _dot4_none(p_addr, stride, even_addr, odd_addr, chunks, out_addr):  # never called: no chunks
    return


_row_dot, _rows_dot, _ROW_SIMD = _dot_none, _dot4_none, False  # bound per build by `njit_variant`


def _gemm_p4(flat, xoff, k, doff, p, scale, accm, q2, lut32, lut64):
    """GEMM on packed INT4 rows: T activation vectors at flat[xoff[t]: +k], results into flat[doff[t]:
    +M]; each vector quantized with its own exponent (the reference's per-vector GEMV numerics), each
    weight row read once for all T. The row sums: the build's SIMD pass over whole 64-byte runs (four
    rows at a time for every vector, the rows staying in L1; leftover rows and row tails after it) where
    it has one and the rows are contiguous, else the decode GEMV's portable offset-binary loop
    (`_rows_p4`) over 64-row blocks for every vector. The sums are kept [vector, row] and only ever
    walked along a vector: down a column, a power-of-two row count put every vector's sum in one cache
    set (the walk at M = 2048 took 15x its time at M = 2000). The caller guarantees inputs and outputs
    do not overlap."""
    nt, kb, mm = xoff.shape[0], p.shape[1], p.shape[0]
    es = np.empty(nt, np.int64)
    for t in range(nt):
        es[t] = quantize(flat[xoff[t]: xoff[t] + k], q2[t], lut64)
    accs = np.empty((nt, mm), np.int32)
    offset = np.zeros(nt, np.int32)  # Σ of each vector's codes over the bytes summed offset-binary
    if _ROW_SIMD and p.strides[1] == 1 and kb >= 64:
        chunks = kb // 64
        body = chunks * 64
        qe = np.empty((nt, kb), np.int8)
        qo = np.empty((nt, kb), np.int8)
        for t in range(nt):
            offset[t] = _split_codes(q2[t], qe[t], qo[t], body)
        base, stride, groups = p.ctypes.data, p.strides[0], mm // ROWS
        ea, oa, out = qe.ctypes.data, qo.ctypes.data, accs.ctypes.data
        for g in nb.prange(groups):
            m = g * ROWS
            for t in range(nt):
                _rows_dot(base + m * stride, stride, ea + t * kb, oa + t * kb, chunks, out + 4 * (t * mm + m))
        rest = groups * ROWS if body == kb else 0  # the first row the pass did not finish
        for b in nb.prange((mm - rest + _BLOCK - 1) // _BLOCK):
            for t in range(nt):
                for m in range(rest + b * _BLOCK, min(mm, rest + (b + 1) * _BLOCK)):
                    if m < groups * ROWS:
                        acc = accs[t, m]
                    else:
                        acc = _row_dot(base + m * stride, ea + t * kb, oa + t * kb, chunks)
                    if body < kb:
                        acc += _tail_p4(p, m, body, qe[t], qo[t])
                    accs[t, m] = acc
    else:
        qe16 = np.empty((nt, kb), np.int16)
        qo16 = np.empty((nt, kb), np.int16)
        for t in range(nt):
            offset[t] = _split_codes(q2[t], qe16[t], qo16[t], kb)
        for b in nb.prange((mm + _BLOCK - 1) // _BLOCK):
            for t in range(nt):
                _rows_p4(p, qe16[t], qo16[t], accs[t], b * _BLOCK, min(mm, (b + 1) * _BLOCK))
    _gemm_store(flat, doff, accs, offset, es, scale, accm, lut32)


@nb.njit(**_OPTS)
def _gemm_store(flat, doff, accs, offset, es, scale, accm, lut32):
    """Each vector's exact sums less its offset-binary correction through the GEMV epilogue into
    flat[doff[t]: +M]; a vector that was not finite (``es`` 999): its outputs NaN (numerics.gemv)."""
    nt, mm = accs.shape
    a = np.empty(mm, np.float32)
    for t in range(nt):
        d = flat[doff[t]: doff[t] + mm]
        if es[t] == 999:
            d[:] = 0x7FC0
            continue
        o = 8 * offset[t]
        for m in range(mm):
            a[m] = np.float32(accs[t, m] - o)  # (the int32 sum's value: |Σ| < 2^31, as for the GEMV)
        _epilogue(a, es[t], scale, d, accm, lut32)


# separate builds (npukit.sim.cpu.njit_variant): the portable one never types an x86 intrinsic, the
# AVX2 one never the VNNI one
_PAR = {"parallel": True, **_OPTS}
_VNNI = {"_row_dot": _dot_vnni, "_rows_dot": _dot4_vnni, "_ROW_SIMD": True}
_AVX2 = {"_row_dot": _dot_avx2, "_rows_dot": _dot4_avx2, "_ROW_SIMD": True}
_SSSE3 = {"_row_dot": _dot_ssse3, "_rows_dot": _dot4_ssse3, "_ROW_SIMD": True}
gemv_p4_vnni = njit_variant(_gemv_p4_simd, "gemv_p4_vnni", _PAR, **_VNNI)
gemv_p4_avx2 = njit_variant(_gemv_p4_simd, "gemv_p4_avx2", _PAR, **_AVX2)
gemv_p4_ssse3 = njit_variant(_gemv_p4_simd, "gemv_p4_ssse3", _PAR, **_SSSE3)
gemm_p4_vnni = njit_variant(_gemm_p4, "gemm_p4_vnni", _PAR, **_VNNI)
gemm_p4_avx2 = njit_variant(_gemm_p4, "gemm_p4_avx2", _PAR, **_AVX2)
gemm_p4_ssse3 = njit_variant(_gemm_p4, "gemm_p4_ssse3", _PAR, **_SSSE3)
gemm_p4_portable = njit_variant(_gemm_p4, "gemm_p4_portable", _PAR, _row_dot=_dot_none, _rows_dot=_dot4_none,
                                _ROW_SIMD=False)


@nb.njit(parallel=True, **_OPTS)
def gemv_f16(x, w, scale, dst, accm, q, lut32, lut64):
    """FP16 weights [M, K] (uint16 bits) as exact fixed point w·2^24 in int64; 2 = a weight not finite.
    The finiteness of the weights is tallied in the product loop (one pass over them, not two): only
    the status is returned then, before anything is written."""
    e = quantize(x, q, lut64)  # a non-finite activation wins over a non-finite weight, as in numerics.gemv
    if e == 999:
        return 1
    accs = np.empty(w.shape[0], np.int64)
    bad = 0
    for m in nb.prange(w.shape[0]):
        acc, row_bad = np.int64(0), np.int32(0)
        for j in range(w.shape[1]):
            # a normal value's significand (mant | 2^10) times the code, exact in int32 (11 + 8 bits), then
            # shifted by ex - 1 in int64 (a subnormal's mant by 0); the sign by xor/subtract; no branch, the
            # int32 steps with int32 constants, so LLVM vectorises the loop (1.6-1.8x the int64 form, in
            # which every step was widened: 98-111 -> 56-70 µs for a 1 030 x 128 score product, znver3)
            h = np.int32(w[m, j])
            ex = (h >> np.int32(10)) & np.int32(0x1F)  # (a bare literal is int64 to numba: it widens)
            row_bad += np.int32(ex == np.int32(0x1F))
            normal = np.int32(ex != np.int32(0))
            neg = -(h >> np.int32(15))  # 0 or -1
            p = ((((h & np.int32(0x3FF)) | (normal << np.int32(10))) * np.int32(q[j])) ^ neg) - neg
            acc += np.int64(p) << np.int64(ex - normal)
        accs[m] = acc
        bad += row_bad
    if bad:
        return 2
    a32 = accs.astype(np.float32)  # int64 -> float32: the single rounding
    for m in range(a32.shape[0]):
        a32[m] = a32[m] * np.float32(5.9604644775390625e-08)  # ldexp(., -24), exact
    _epilogue(a32, e, scale, dst, accm, lut32)
    return 0


@nb.njit(**_OPTS)
def _cvo_y(op, x, d, s, y):
    """y = op(x[, d or S]) in float64; the op switch is outside the element loops (they vectorise)."""
    n = x.shape[0]
    if op == 0:
        for i in range(n):
            a = bf16_64(x[i])
            y[i] = a * a
    elif op == 1:
        for i in range(n):
            y[i] = bf16_64(x[i]) * s
    elif op == 2:
        for i in range(n):
            y[i] = bf16_64(x[i]) / s
    elif op == 3:
        for i in range(n):
            y[i] = 0.0
    elif op == 4:
        for i in range(n):
            y[i] = 1.0 / bf16_64(x[i])
    elif op == 5:
        for i in range(n):
            y[i] = 1.0 / np.sqrt(bf16_64(x[i]))
    elif op == 6:
        for i in range(n):
            y[i] = np.sqrt(bf16_64(x[i]))
    elif op == 7:
        for i in range(n):
            v = bf16_64(x[i]) - s
            if not np.isnan(v):
                v = v if v > 0.0 else 0.0
            y[i] = v
    elif op == 8:
        for i in range(n):
            y[i] = bf16_64(x[i]) * bf16_64(d[i])
    elif op == 9:
        for i in range(n):
            y[i] = bf16_64(x[i]) + bf16_64(d[i])
    else:
        for i in range(n):
            y[i] = bf16_64(x[i])


@nb.njit(**_OPTS)
def cvo(op, x, d, out, s, accm, lut64):
    """Fused SFU arithmetic (op codes of `kernels`): widen, float64, optional accm, one rounding."""
    y = np.empty(x.shape[0], np.float64)
    _cvo_y(op, x, d, s, y)
    if accm:
        for i in range(y.shape[0]):
            y[i] = bf16_64(d[i]) + y[i]
    _round64(y, out)


@nb.njit(**_OPTS)
def round_store(y, d, out, accm, lut64):
    if accm:
        z = np.empty(y.shape[0], np.float64)
        for i in range(y.shape[0]):
            z[i] = bf16_64(d[i]) + y[i]
        _round64(z, out)
    else:
        _round64(y, out)


@nb.njit(**_OPTS)
def reduce_sum(x, lut32):
    """Serial float32 sum in index order from +0.0."""
    s = np.float32(0.0)
    for i in range(x.shape[0]):
        s = s + bf16(x[i])
    return s


@nb.njit(**_OPTS)
def gemv_km(x, w, scale, dst, accm, q, lut32, lut64):
    """K-major int8 codes w [K, M]: only rows whose activation code is nonzero are read (the value is the
    dense GEMV's: zero codes add exact zeros). Returns the live row count, or -1 if x is not finite."""
    e = quantize(x, q, lut64)
    if e == 999:
        return -1
    acc = np.zeros(w.shape[1], np.int32)
    live = 0
    for j in range(w.shape[0]):
        qj = np.int32(q[j])
        if qj != 0:
            live += 1
            for m in range(w.shape[1]):
                acc[m] += np.int32(w[j, m]) * qj
    _epilogue(acc.astype(np.float32), e, scale, dst, accm, lut32)
    return live


@nb.njit(**_OPTS)
def gemv_km_f16(x, w, scale, dst, accm, q, lut32, lut64):
    """K-major FP16 weights w [K, M] (uint16 bits), rows of zero activation codes skipped (as
    `gemv_f16`, exact fixed point). Returns the live row count; -1: x not finite; -2: a live weight is
    not finite (the reference reads only the live rows)."""
    e = quantize(x, q, lut64)
    if e == 999:
        return -1
    kk, mm = w.shape
    acc = np.zeros(mm, np.int64)
    live = 0
    for j in range(kk):
        qj = np.int32(q[j])
        if qj == 0:
            continue
        live += 1
        bad = 0
        for m in range(mm):  # branch-free, so that LLVM vectorises it (2.7x the branchy loop at 256 x 128)
            h = np.int32(w[j, m])
            ex = (h >> 10) & 0x1F
            bad += ex == 0x1F
            # the significand times the code is exact in int32 (11 + 8 bits); then the exponent's shift
            p = ((h & 0x3FF) | (np.int32(ex != 0) << 10)) * qj
            acc[m] += np.int64(-p if h & 0x8000 else p) << max(ex - 1, 0)
        if bad:  # (a row's weights are all read before it is judged: nothing is written either way)
            return -2
    a32 = acc.astype(np.float32)
    for m in range(mm):
        a32[m] = a32[m] * np.float32(5.9604644775390625e-08)
    _epilogue(a32, e, scale, dst, accm, lut32)
    return live


@nb.njit(**_OPTS)
def max_bits(e_bits, d, lut32):
    """findemax on BF16 bits when the answer is unambiguous: the bits of max(e_max, d), or -1 when a NaN
    is present or the maximum is zero (±0 ties: the caller uses the reference reduction)."""
    best = bf16(e_bits)
    bb = np.int64(e_bits)
    if best != best:
        return -1
    for i in range(d.shape[0]):
        v = bf16(d[i])
        if v != v:
            return -1
        if v > best:
            best = v
            bb = np.int64(d[i])
    if best == 0.0:
        return -1
    return bb


# the INT4 row-dot path: the first fast family of `INT4_FAMILIES` (fastest first), chosen before any
# kernel is compiled (remembered per CPU and target: npukit.sim.cpu): "avx512-vnni" where LLVM compiles
# vpdpbusd for numba's target and a trial ran it exactly, else "avx2" where the same holds for
# vpmaddubsw/vpmaddwd on 256 bits, else "ssse3" for their 128-bit forms, else "portable". A family is
# asked only where the ones before it are not fast.
for _module in INT4_FAMILIES:
    SIMD, SIMD_REASON = importlib.import_module(_module).probe()
    if SIMD != "portable":
        break
# each path's GEMV and GEMM builds (the portable ones where no family is fast)
_P4, _GEMM = {"avx512-vnni": (gemv_p4_vnni, gemm_p4_vnni), "avx2": (gemv_p4_avx2, gemm_p4_avx2),
              "ssse3": (gemv_p4_ssse3, gemm_p4_ssse3)}.get(SIMD, (gemv_p4, gemm_p4_portable))
# the same loops without a parallel region: small GEMVs run on the calling thread, and a parallel
# region even with one thread waits on the pool (a descheduled worker on a shared machine). Each under
# its own name: numba's disk cache is keyed by the name, so a twin sharing it would get the other build.
_SERIAL = {name: njit_variant(f.py_func, name, _OPTS) for name, f in
           (("gemv_i8_1", gemv_i8), ("gemv_f16_1", gemv_f16), ("gemv_p4_1", gemv_p4),
            ("gemv_p4_vnni_1", gemv_p4_vnni), ("gemv_p4_avx2_1", gemv_p4_avx2),
            ("gemv_p4_ssse3_1", gemv_p4_ssse3))}
_SERIAL["gemv_p4_portable_1"] = _SERIAL["gemv_p4_1"]
_SERIAL["gemv_p4_1"] = _SERIAL[f"{_P4.__name__}_1"]  # (the portable twin's own name where no family is fast)


@nb.njit(**_OPTS)
def reduce_sum_bits(x, lut32):
    """`reduce_sum` rounded to BF16 bits (`_nbround.rne16` of its float32 pattern)."""
    return rne16(f32_bits(reduce_sum(x, lut32)))


KERNELS = {**_SERIAL, "reduce_sum_bits": reduce_sum_bits, "gemv_km": gemv_km, "gemv_km_f16": gemv_km_f16,
           "max_bits": max_bits,
           "gemm_p4": _GEMM,
           "gemv_i8": gemv_i8, "gemv_p4": _P4, "gemv_f16": gemv_f16,
           "gemv_p4_portable": gemv_p4, "gemv_p4_vnni": gemv_p4_vnni, "gemv_p4_avx2": gemv_p4_avx2,
           "gemv_p4_ssse3": gemv_p4_ssse3,
           "cvo": cvo,
           "round_store": round_store, "reduce_sum": reduce_sum, "quantize": quantize}
