"""numba kernels of `npukit.targets.pccx.kernels` (imported only when numba is installed).

Compiled without fastmath and with ``error_model="numpy"`` (IEEE division), so every float operation is
the IEEE operation NumPy performs; the exactness arguments are in `kernels`.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

_OPTS = {"cache": True, "error_model": "numpy", "nogil": True}
_MAGIC = 6755399441055744.0  # 1.5 * 2^52: (v + M) - M is rint(v), half to even, for |v| < 2^51
_TWO133 = 2.0**133


@nb.njit(**_OPTS)
def _w32(b):
    """BF16 bits -> float32 (exact)."""
    arr = np.empty(1, np.uint32)
    arr[0] = np.uint32(b) << np.uint32(16)
    return arr.view(np.float32)[0]


@nb.njit(**_OPTS)
def _w64(b):
    return np.float64(_w32(b))


@nb.njit(**_OPTS)
def _f32u(t):
    """float32 -> BF16 bits, RNE; NaN -> 0x7FC0 | sign."""
    arr = np.empty(1, np.float32)
    arr[0] = t
    u = arr.view(np.uint32)[0]
    if (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
        return np.uint16(((u >> np.uint32(16)) & np.uint32(0x8000)) | np.uint32(0x7FC0))
    return np.uint16((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))


@nb.njit(**_OPTS)
def _r64(y):
    """float64 -> BF16 bits with one RNE rounding."""
    arr = np.empty(1, np.float64)
    arr[0] = y
    u = arr.view(np.uint64)[0]
    sign = np.uint16((u >> np.uint64(48)) & np.uint64(0x8000))
    mag = u & np.uint64(0x7FFF_FFFF_FFFF_FFFF)
    if mag > np.uint64(0x7FF0_0000_0000_0000):
        return sign | np.uint16(0x7FC0)
    if mag < np.uint64(0x3810_0000_0000_0000):  # below 2^-126: the BF16 subnormal grid 2^-133
        v = abs(y) * _TWO133
        return sign | np.uint16((v + _MAGIC) - _MAGIC)
    mag = (mag + np.uint64(0x0FFF_FFFF_FFFF) + ((mag >> np.uint64(45)) & np.uint64(1))) & ~np.uint64(
        0x1FFF_FFFF_FFFF)
    arr.view(np.uint64)[0] = mag
    return sign | _f32u(np.float32(arr[0]))  # an exact BF16 value; >= 2^128 becomes inf


@nb.njit(**_OPTS)
def quantize(x, q):
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
        v = (_w64(x[i]) * f + _MAGIC) - _MAGIC
        v = min(max(v, -127.0), 127.0)
        q[i] = np.int8(v)
    for i in range(x.shape[0], q.shape[0]):
        q[i] = 0
    return e


@nb.njit(**_OPTS)
def _epilogue(acc_f32, m, scale, has_s, fac, dst, accm):
    t = acc_f32
    if has_s:
        t = t * scale[m]
    t = t * fac
    if accm:
        t = _w32(dst[m]) + t
    dst[m] = _f32u(t)


@nb.njit(parallel=True, **_OPTS)
def gemv_i8(x, w, scale, dst, accm, q):
    """int8 weights [M, K] (INT4 codes, INT8) against BF16 bits x, result bits into dst; 1: x not finite."""
    e = quantize(x, q)
    if e == 999:
        return 1
    fac = np.float32(math.ldexp(1.0, e - 6))
    has_s = scale.shape[0] > 0
    for m in nb.prange(w.shape[0]):
        acc = np.int32(0)
        for j in range(w.shape[1]):
            acc += np.int32(w[m, j]) * np.int32(q[j])
        _epilogue(np.float32(acc), m, scale, has_s, fac, dst, accm)
    return 0


@nb.njit(parallel=True, **_OPTS)
def gemv_p4(x, p, scale, dst, accm, q):
    """Packed INT4 rows [M, ceil(K/2)] read in place (even index in the low nibble)."""
    e = quantize(x, q)
    if e == 999:
        return 1
    fac = np.float32(math.ldexp(1.0, e - 6))
    has_s = scale.shape[0] > 0
    kb = p.shape[1]
    qe = q[0:2 * kb:2]
    qo = q[1:2 * kb:2]
    for m in nb.prange(p.shape[0]):
        acc = np.int32(0)
        for j in range(kb):
            b = np.int8(p[m, j])
            lo = np.int16(np.int8(b << 4) >> 4)
            hi = np.int16(b >> 4)
            acc += np.int32(lo * np.int16(qe[j]) + hi * np.int16(qo[j]))
        _epilogue(np.float32(acc), m, scale, has_s, fac, dst, accm)
    return 0


@nb.njit(parallel=True, **_OPTS)
def gemv_f16(x, w, scale, dst, accm, q):
    """FP16 weights [M, K] (uint16 bits) as exact fixed point w·2^24 in int64; 2 = a weight not finite."""
    e = quantize(x, q)  # a non-finite activation wins over a non-finite weight, as in numerics.gemv
    if e == 999:
        return 1
    for m in range(w.shape[0]):
        for j in range(w.shape[1]):
            if (w[m, j] & 0x7C00) == 0x7C00:
                return 2
    fac = np.float32(math.ldexp(1.0, e - 6))
    has_s = scale.shape[0] > 0
    for m in nb.prange(w.shape[0]):
        acc = np.int64(0)
        for j in range(w.shape[1]):
            h = np.int64(w[m, j])
            ex = (h >> 10) & 0x1F
            mant = h & 0x3FF
            v = ((mant | 0x400) << (ex - 1)) if ex else mant
            if h & 0x8000:
                v = -v
            acc += v * np.int64(q[j])
        _epilogue(np.float32(acc) * np.float32(5.9604644775390625e-08), m, scale, has_s, fac, dst, accm)
    return 0


@nb.njit(**_OPTS)
def cvo(op, x, d, out, s, accm):
    """Fused SFU arithmetic (op codes of `kernels`): widen, float64, optional accm, one rounding."""
    for i in range(x.shape[0]):
        a = _w64(x[i])
        if op == 0:
            y = a * a
        elif op == 1:
            y = a * s
        elif op == 2:
            y = a / s
        elif op == 3:
            y = 0.0
        elif op == 4:
            y = 1.0 / a
        elif op == 5:
            y = 1.0 / np.sqrt(a)
        elif op == 6:
            y = np.sqrt(a)
        elif op == 7:
            y = a - s
            if not np.isnan(y):
                y = y if y > 0.0 else 0.0
        elif op == 8:
            y = a * _w64(d[i])
        elif op == 9:
            y = a + _w64(d[i])
        else:
            y = a
        if accm:
            y = _w64(d[i]) + y
        out[i] = _r64(y)


@nb.njit(**_OPTS)
def round_store(y, d, out, accm):
    for i in range(y.shape[0]):
        v = y[i]
        if accm:
            v = _w64(d[i]) + v
        out[i] = _r64(v)


@nb.njit(**_OPTS)
def reduce_sum(x):
    """Serial float32 sum in index order from +0.0."""
    s = np.float32(0.0)
    for i in range(x.shape[0]):
        s = s + _w32(x[i])
    return s


KERNELS = {"gemv_i8": gemv_i8, "gemv_p4": gemv_p4, "gemv_f16": gemv_f16, "cvo": cvo,
           "round_store": round_store, "reduce_sum": reduce_sum, "quantize": quantize}
