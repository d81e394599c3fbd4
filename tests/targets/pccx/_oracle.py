"""Independent BF16 oracles for the pccx tests (no npukit code).

* float32 -> bf16: ml_dtypes' cast (RNE on the float32 bits).
* float64 -> bf16 (a single rounding): nearest neighbour on the sorted grid of all 65,536 BF16
  patterns, ties to the even pattern, beyond the largest finite value by half an ulp -> inf.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

_ALL = np.arange(1 << 16, dtype=np.uint16)
with np.errstate(invalid="ignore"):
    _VALS = _ALL.view(ml_dtypes.bfloat16).astype(np.float64)
_FIN = np.isfinite(_VALS) & ~(_ALL == 0x8000)  # keep +0 only; the sign of zero is fixed below
_GRID_V = _VALS[_FIN]
_GRID_B = _ALL[_FIN]
_ORDER = np.argsort(_GRID_V, kind="stable")
_GRID_V = _GRID_V[_ORDER]
_GRID_B = _GRID_B[_ORDER]
_MAXF = float(_GRID_V[-1])
_HALF_TOP_ULP = 2.0 ** (127 - 7) / 2


def bf16_bits_from_f32(x) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)


def bf16_bits_from_f64(x) -> np.ndarray:
    """Correctly rounded (RNE) BF16 bits of float64 values, NaN -> 0x7FC0 with sign."""
    a = np.atleast_1d(np.asarray(x, dtype=np.float64))
    out = np.zeros(a.shape, dtype=np.uint16)
    for i, v in enumerate(a.ravel()):
        out.flat[i] = _one(float(v))
    return out


def _one(v: float) -> int:
    sign = 0x8000 if np.signbit(v) else 0
    if np.isnan(v):
        return sign | 0x7FC0
    m = abs(v)
    if m >= _MAXF + _HALF_TOP_ULP:
        return sign | 0x7F80
    j = int(np.searchsorted(_GRID_V, m))  # _GRID_V[j-1] < m <= _GRID_V[j]
    j = min(j, len(_GRID_V) - 1)
    hi_v, hi_b = float(_GRID_V[j]), int(_GRID_B[j])
    if hi_v == m or j == 0:
        return sign | hi_b
    lo_v, lo_b = float(_GRID_V[j - 1]), int(_GRID_B[j - 1])
    d_lo, d_hi = m - lo_v, hi_v - m
    if d_lo < d_hi:
        b = lo_b
    elif d_hi < d_lo:
        b = hi_b
    else:
        b = lo_b if lo_b % 2 == 0 else hi_b
    return sign | b


def bits_equal(a, b) -> bool:
    """Bit equality of two uint16 BF16 arrays, every NaN pattern counted equal to every other."""
    a = np.asarray(a, dtype=np.uint16)
    b = np.asarray(b, dtype=np.uint16)
    nan_a = ((a & 0x7F80) == 0x7F80) & ((a & 0x7F) != 0)
    nan_b = ((b & 0x7F80) == 0x7F80) & ((b & 0x7F) != 0)
    return bool(np.array_equal(nan_a, nan_b) and np.array_equal(a[~nan_a], b[~nan_b]))


def gemv_ref(w, x, s=None, dest=None, fixed_shift=0):
    """Written from numerics.md §3 with Python ints and math, independent of npukit."""
    xs = [float(v) for v in x]
    mx = max(abs(v) for v in xs)
    if mx == 0:
        e = 0
    else:
        e = math.floor(math.log2(mx))
    q = [max(-127, min(127, round(v / 2.0 ** (e - 6)))) for v in xs]
    out = []
    for m in range(w.shape[0]):
        acc = sum(int(w[m, k]) * q[k] for k in range(len(q)))
        t = np.float32(acc)  # acc < 2**53 in these tests: exact double, one float32 rounding
        if fixed_shift:
            t = np.float32(t * np.float32(2.0**-fixed_shift))
        if s is not None:
            t = np.float32(t * np.float32(s[m]))
        t = np.float32(t * np.float32(2.0 ** (e - 6)))
        if dest is not None:
            t = np.float32(np.float32(dest[m]) + t)
        out.append(t)
    return bf16_bits_from_f32(np.array(out, np.float32))
