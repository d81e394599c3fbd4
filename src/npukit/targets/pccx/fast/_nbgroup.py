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
from npukit.targets.pccx.fast._nbkernels import quantize

compile_report.install()  # first-run compiles are announced, never silent

_OPTS = {"cache": True, "error_model": "numpy", "nogil": True}
GROUP = 32
ROWS = 128  # rows per parallel block: their codes stay in the core's cache across the groups


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
def _group_sums(x, lut32, sums):
    """REDUCE_SUM of each group of x (BF16 bits): serial float32 from +0.0, BF16 bits into ``sums``."""
    acc = np.zeros(sums.shape[0], np.float32)
    for g in range(sums.shape[0]):
        s = np.float32(0.0)
        for i in range(g * GROUP, (g + 1) * GROUP):
            s = np.float32(s + lut32[x[i]])
        acc[g] = s
    _bf16_round(acc, acc)
    u = acc.view(np.uint32)
    for g in range(sums.shape[0]):
        sums[g] = np.uint16(u[g] >> np.uint32(16))


@nb.njit(**_OPTS)
def _quantize_all(x, q, es, lut64):
    """Each group's emax alignment (its own exponent) into q [K] and es [G]; False if x is not finite."""
    for g in range(es.shape[0]):
        e = quantize(x[g * GROUP:(g + 1) * GROUP], q[g * GROUP:(g + 1) * GROUP], lut64)
        if e == 999:
            return False
        es[g] = e
    return True


@nb.njit(parallel=True, **_OPTS)
def grouped_gemv(x, w, scale_t, fixed_t, dst, accm, lut32, lut64):
    """BF16 bits x [K] against int8 codes w [M, K] with scales scale_t [G, M] (float32) and optional
    offsets fixed_t [G, M] (int64 fp16·2^24; G = 0 rows: none); result bits into dst [M].
    Returns 1 when the activation (or a group sum) is not finite: every output is then NaN."""
    m_rows, k = w.shape
    groups = k // GROUP
    q = np.zeros(k, np.int8)
    es = np.zeros(groups, np.int64)
    if not _quantize_all(x, q, es, lut64):
        return 1
    has_off = fixed_t.shape[0] > 0
    qs = np.zeros(groups, np.int8)
    e_s = 0
    if has_off:
        sums = np.zeros(groups, np.uint16)
        _group_sums(x, lut32, sums)
        e_s = quantize(sums, qs, lut64)
        if e_s == 999:
            return 1
    q16 = q.astype(np.int16)
    fac = np.empty(groups, np.float32)
    for g in range(groups):
        fac[g] = np.float32(math.ldexp(1.0, es[g] - 6))  # a float32 power of two (-139..121)
    fac_s = np.float32(math.ldexp(1.0, e_s - 6))
    n_blocks = -(-m_rows // ROWS)
    for blk in nb.prange(n_blocks):
        r0 = blk * ROWS
        r1 = min(m_rows, r0 + ROWS)
        n = r1 - r0
        dots = np.empty((groups, n), np.int32)
        for r in range(n):
            for g in range(groups):
                acc = np.int32(0)
                for j in range(g * GROUP, (g + 1) * GROUP):
                    acc += np.int32(np.int16(w[r0 + r, j]) * q16[j])
                dots[g, r] = acc
        run = np.empty(n, np.float32)
        t = np.empty(n, np.float32)
        if accm:
            for r in range(n):
                run[r] = lut32[dst[r0 + r]]
        for g in range(groups):
            f = fac[g]
            for r in range(n):
                v = np.float32(np.float32(dots[g, r]) * scale_t[g, r0 + r]) * f
                t[r] = run[r] + v if (accm or g) else v
            _bf16_round(t, run)
        if has_off:
            for r in range(n):
                a = np.int64(0)
                for g in range(groups):
                    a += fixed_t[g, r0 + r] * np.int64(qs[g])
                a32 = np.float32(a) * np.float32(5.9604644775390625e-08)  # ldexp(., -24), exact
                t[r] = run[r] + a32 * fac_s
            _bf16_round(t, run)
        u = run.view(np.uint32)
        for r in range(n):
            dst[r0 + r] = np.uint16(u[r] >> np.uint32(16))
    return 0
