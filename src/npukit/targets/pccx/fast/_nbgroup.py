"""numba kernel of the grouped GEMV (`npukit.targets.pccx.grouped`), imported only when numba is.

Portable numba (no intrinsics: LLVM vectorises the 32-element integer dots and the epilogue across
rows for whatever CPU it compiles for). Compiled without fastmath and with ``error_model="numpy"``, so
every float operation is the IEEE float32 operation `numerics.gemv` performs, in the same order:
per group the exact integer dot (|Σ| ≤ 32·128·127 < 2^31) becomes float32 (exact, < 2^24), is
multiplied by the row's group scale, then by the float32 power of two 2^(e_g − 6) (= ``ldexp``), added
to the running value and rounded to BF16 (round-to-nearest-even on the bit pattern, NaN → 0x7FC0 with
its sign). The offsets are exact int64 fixed point (fp16 · 2^24) times the INT8 group-sum codes, one
int64 → float32 rounding, as `_nbkernels.gemv_f16`.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from npukit.sim import compile_report
from npukit.targets.pccx.fast._nbkernels import quantize, reduce_sum_bits
from npukit.targets.pccx.fast._nbround import bf16

compile_report.install()  # first-run compiles are announced, never silent

_OPTS = {"cache": True, "error_model": "numpy", "nogil": True}
GROUP = 32
ROWS = 256  # rows per parallel block (vector lanes across rows; accumulators stay in cache); fastgroup.ROWS


@nb.njit(**_OPTS)
def _bf16_round(t, out):
    """float32 [n] -> the BF16-rounded float32 values in ``out`` (RNE; NaN -> 0x7FC0 | sign)."""
    u = t.view(np.uint32)
    o = out.view(np.uint32)
    for i in range(u.shape[0]):
        v = u[i]
        r = (v + np.uint32(0x7FFF) + ((v >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
        nan = ((v >> np.uint32(16)) & np.uint32(0x8000)) << np.uint32(16) | np.uint32(0x7FC00000)
        o[i] = nan if (v & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000) else r


@nb.njit(**_OPTS)
def _quantize_all(x, q, es, lut64):
    """Each group's emax alignment (its own exponent) into q [K] and es [G]; False if x is not finite."""
    for g in range(es.shape[0]):
        e = quantize(x[g * GROUP:(g + 1) * GROUP], q[g * GROUP:(g + 1) * GROUP], lut64)
        if e == 999:
            return False
        es[g] = e
    return True


def _grouped_gemv(x, w_blk, packed, scale_blk, fixed_blk, dst, accm, lut32, lut64):
    """BF16 bits x [K] against int8 codes in the `fastgroup.blocked` K-major layout w_blk [B, K, ROWS]
    (``packed``: INT4 pairs of K rows per byte biased by 8, uint8 [B, K/2, ROWS], `_dots_p4`), scales
    scale_blk [B, G, ROWS] (float32) and optional offsets fixed_blk [B, G, ROWS] (int64 fp16·2^24;
    an empty array: none); result bits into dst [M]. Returns 1 when the activation (or a group sum) is
    not finite: every output is then NaN. Each code is a broadcast multiply-add across a block of rows
    (the vector lanes), indexed from 0 in every block so that LLVM vectorises the loops."""
    n_blocks = w_blk.shape[0]
    k = w_blk.shape[1] * (2 if packed else 1)
    m_rows = dst.shape[0]
    groups = k // GROUP
    q = np.zeros(k, np.int8)
    es = np.zeros(groups, np.int64)
    if not _quantize_all(x, q, es, lut64):
        return 1
    has_off = fixed_blk.shape[0] > 0
    qs = np.zeros(groups, np.int8)
    e_s = 0
    if has_off:
        sums = np.zeros(groups, np.uint16)
        for g in range(groups):  # REDUCE_SUM of each group (serial float32 from +0.0, BF16 bits)
            sums[g] = reduce_sum_bits(x[g * GROUP:(g + 1) * GROUP], lut32)
        e_s = quantize(sums, qs, lut64)
        if e_s == 999:
            return 1
    q16 = q.astype(np.int16)
    fac = np.empty(groups, np.float32)
    for g in range(groups):
        fac[g] = np.float32(math.ldexp(1.0, es[g] - 6))  # a float32 power of two (-139..121)
    fac_s = np.float32(math.ldexp(1.0, e_s - 6))
    for blk in nb.prange(n_blocks):
        _block(blk, w_blk[blk], packed, scale_blk[blk], fixed_blk, has_off, q16, qs, fac, fac_s, dst, accm,
               m_rows, lut32)
    return 0


grouped_gemv = nb.njit(parallel=True, **_OPTS)(_grouped_gemv)
grouped_gemv_1 = nb.njit(**_OPTS)(_grouped_gemv)  # the serial twin: small matrices skip the thread pool


@nb.njit(**_OPTS)
def _dots_i8(wb, q16, g, dots):
    """dots[r] = exact Σ_j codes[j, r]·q[j] over group g, 8 codes per pass over the rows. Each pair of
    products is summed in 16 bits (|w·q + w'·q'| <= 2·128·127 < 2^15: exact), so LLVM multiplies and
    adds 16-bit lanes; the pairs are added in 32 bits (|Σ| <= 32·128·127 < 2^31)."""
    dots[:] = 0
    for j in range(g * GROUP, (g + 1) * GROUP, 8):
        q0, q1, q2, q3 = q16[j], q16[j + 1], q16[j + 2], q16[j + 3]
        q4, q5, q6, q7 = q16[j + 4], q16[j + 5], q16[j + 6], q16[j + 7]
        for r in range(ROWS):
            p0 = np.int16(np.int16(wb[j, r]) * q0 + np.int16(wb[j + 1, r]) * q1)
            p1 = np.int16(np.int16(wb[j + 2, r]) * q2 + np.int16(wb[j + 3, r]) * q3)
            p2 = np.int16(np.int16(wb[j + 4, r]) * q4 + np.int16(wb[j + 5, r]) * q5)
            p3 = np.int16(np.int16(wb[j + 6, r]) * q6 + np.int16(wb[j + 7, r]) * q7)
            dots[r] += np.int32(p0) + np.int32(p1) + np.int32(p2) + np.int32(p3)


@nb.njit(**_OPTS)
def _dots_p4(wb, q16, g, dots, d16):
    """`_dots_i8` on packed INT4 pairs stored biased: byte (i, r) holds ``c[2i] + 8`` in the low nibble
    and ``c[2i+1] + 8`` in the high one, so a nibble is a plain unsigned number (no sign extension,
    which LLVM would turn into 64-bit shifts and stop using 16-bit lanes). A group's Σ (u·q) − 8·Σ q
    equals the exact Σ c·q, |Σ c·q| <= 32·8·127 < 2^15: computed modulo 2^16 in 16-bit lanes (whatever
    the partial sums do) it is therefore exact."""
    d16[:] = 0
    bias = 0
    for j in range(g * GROUP, (g + 1) * GROUP):
        bias += 8 * np.int64(q16[j])
    for j in range(g * GROUP, (g + 1) * GROUP, 8):
        i = j // 2
        q0, q1, q2, q3 = q16[j], q16[j + 1], q16[j + 2], q16[j + 3]
        q4, q5, q6, q7 = q16[j + 4], q16[j + 5], q16[j + 6], q16[j + 7]
        for r in range(ROWS):
            b0, b1 = np.int16(wb[i, r]), np.int16(wb[i + 1, r])
            b2, b3 = np.int16(wb[i + 2, r]), np.int16(wb[i + 3, r])
            d16[r] = np.int16(d16[r] + (b0 & 15) * q0 + (b0 >> 4) * q1 + (b1 & 15) * q2 + (b1 >> 4) * q3
                              + (b2 & 15) * q4 + (b2 >> 4) * q5 + (b3 & 15) * q6 + (b3 >> 4) * q7)
    b16 = np.int16(bias)
    for r in range(ROWS):
        dots[r] = np.int16(d16[r] - b16)


@nb.njit(**_OPTS)
def _block(blk, wb, packed, sb, fixed_blk, has_off, q16, qs, fac, fac_s, dst, accm, m_rows, lut32):
    """One block of ROWS rows: every group's epilogue in order, then the offsets."""
    r0 = blk * ROWS
    n = min(m_rows - r0, ROWS)
    groups = sb.shape[0]
    dots = np.empty(ROWS, np.int32)
    d16 = np.empty(ROWS, np.int16)
    run = np.zeros(ROWS, np.float32)
    t = np.empty(ROWS, np.float32)
    if accm:
        for r in range(n):
            run[r] = bf16(dst[r0 + r])
    for g in range(groups):
        if packed:
            _dots_p4(wb, q16, g, dots, d16)
        else:
            _dots_i8(wb, q16, g, dots)
        f = fac[g]
        for r in range(ROWS):
            v = np.float32(np.float32(dots[r]) * sb[g, r]) * f
            t[r] = run[r] + v if (accm or g) else v
        _bf16_round(t, run)
    if has_off:
        fb = fixed_blk[blk]
        a = np.zeros(ROWS, np.int64)
        for g in range(groups):
            qg = np.int64(qs[g])
            if qg != 0:
                for r in range(ROWS):
                    a[r] += fb[g, r] * qg
        for r in range(ROWS):
            a32 = np.float32(a[r]) * np.float32(5.9604644775390625e-08)  # ldexp(., -24), exact
            t[r] = run[r] + a32 * fac_s
        _bf16_round(t, run)
    u = run.view(np.uint32)
    for r in range(n):
        dst[r0 + r] = np.uint16(u[r] >> np.uint32(16))
