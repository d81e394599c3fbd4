"""numba kernels of the compiled int8 path beside `_nb_gemm` and `_nb_ops`: the float32 BLAS
CONV_2D's im2col and requantization (kept for K past the int8 kernels' bound, see `compiled`),
FULLY_CONNECTED with the requantization fused, SOFTMAX, AVERAGE_POOL_2D, MAX_POOL_2D, MEAN, MUL
and the table lookup of an int8 → int8 QUANTIZE, all in portable
integer code (exact on every CPU; LLVM vectorizes the loops for whatever the host offers, no
intrinsics).

The arithmetic is that of the reference kernels in `conv` (the living definition, which the tests
compare these against, and both against LiteRT BUILTIN_REF): int32 sums of ``(x − zp_in) · w``
with padding taps skipped, plus bias; CONV_2D and DEPTHWISE_CONV_2D requantize with
``MultiplyByQuantizedMultiplier`` (see `common.Requantizer` for why the floor form is exact),
FULLY_CONNECTED with LiteRT's double rescale rounded half away from zero.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from npukit.sim import compile_report

compile_report.install()  # first-run compiles are announced, never silent

_OPTS = {"cache": True, "nogil": True, "error_model": "numpy"}


@nb.njit(inline="always")
def _mbqm(acc: np.int64, mult: np.int64, left: np.int64, right: np.int64) -> np.int64:
    x = acc << left
    x = ((x + 2147483648) & 0xFFFFFFFF) - 2147483648  # C's int32 x * (1 << left) wraps
    h = (x * mult + (1 << 30)) >> 31
    if right > 0:
        h = (h + ((np.int64(1) << right) >> 1) - (1 if h < 0 else 0)) >> right
    return h


@nb.njit(inline="always")
def _in_bounds(start, size, extent):
    """The taps [lo, hi) of a pooling window starting at ``start`` (negative inside the padding) that
    fall inside an axis of ``extent``: padding taps take no part."""
    return max(start, 0), min(start + size, extent)


@nb.njit(inline="always")
def _clamp(v: np.int64, lo: np.int64, hi: np.int64) -> np.int64:
    return lo if v < lo else hi if v > hi else v


@nb.njit(**_OPTS)
def fully_connected(x, w, bias, zp_in, scale, zp_out, lo, hi, out):
    """x (B,K) int8; w (K,N) int32 (weight zero point already subtracted); out (B,N) int8."""
    batch, k = x.shape
    units = w.shape[1]
    acc = np.empty(units, np.int32)
    for b in range(batch):
        acc[:] = 0
        for i in range(k):
            xv = np.int32(x[b, i]) - zp_in
            wrow = w[i]
            for o in range(units):
                acc[o] += xv * wrow[o]
        for o in range(units):
            r = float(np.int64(acc[o]) + bias[o]) * scale[o]
            a = abs(r)
            f = math.floor(a)
            if a - f >= 0.5:
                f += 1.0
            v = np.int64(math.copysign(f, r)) + zp_out
            out[b, o] = _clamp(v, lo, hi)



@nb.njit(**_OPTS)
def im2col(x, zp_in, kh, kw, oh, ow, stride, dilation, pad, cols):
    """cols (N·OH·OW, KH·KW·C) float: ``x − zp_in`` under each window, 0 at padding taps (which is
    what skipping them adds). Exact: every value is an integer of magnitude ≤ 255. The input is
    first shifted into a zero-padded float canvas, so each tap is one contiguous copy of C values."""
    nb_, h, wd, cin = x.shape
    sh, sw = stride
    dh, dw = dilation
    pt, pl = pad
    hp = max(h + pt, (oh - 1) * sh + (kh - 1) * dh + 1)
    wp = max(wd + pl, (ow - 1) * sw + (kw - 1) * dw + 1)
    canvas = np.zeros((hp, wp * cin), cols.dtype)
    flat = cols.reshape(-1)  # flat indices: the copies below vectorize
    kk = cols.shape[1]
    run = kw * cin
    r = 0
    for n in range(nb_):
        for y in range(min(h, hp - pt)):
            for xx in range(min(wd, wp - pl)):
                base = (xx + pl) * cin
                for c in range(cin):
                    canvas[y + pt, base + c] = np.int32(x[n, y, xx, c]) - zp_in
        for oy in range(oh):
            for ox in range(ow):
                k = r * kk
                for ky in range(kh):
                    row = canvas[oy * sh + ky * dh]
                    if dw == 1:  # the window's row is one contiguous run of KW·C values
                        src = ox * sw * cin
                        for j in range(run):
                            flat[k + j] = row[src + j]
                        k += run
                        continue
                    for kx in range(kw):
                        src = (ox * sw + kx * dw) * cin
                        for c in range(cin):
                            flat[k + c] = row[src + c]
                        k += cin
                r += 1


@nb.njit(**_OPTS)
def requantize(acc, bias, mult, left, right, zp_out, lo, hi, out):
    """out (M, O) int8 from exact integer sums acc (M, O) (float or int) plus bias."""
    m, cout = acc.shape
    for i in range(m):
        for o in range(cout):
            v = _mbqm(np.int64(acc[i, o]) + bias[o], mult[o], left[o], right[o]) + zp_out
            out[i, o] = _clamp(v, lo, hi)


_I32_MIN = -2147483648
_I32_MAX = 2147483647


@nb.njit(inline="always")
def _wrap32(x: np.int64) -> np.int64:
    return ((x + 2147483648) & 0xFFFFFFFF) - 2147483648


@nb.njit(inline="always")
def _srdhm(a: np.int64, b: np.int64) -> np.int64:
    """gemmlowp's SaturatingRoundingDoublingHighMul (see `gemmlowp.mul`)."""
    if a == _I32_MIN and b == _I32_MIN:
        return _I32_MAX
    return (a * b + (1 << 30)) >> 31


@nb.njit(inline="always")
def _sat_left(x: np.int64, exponent: int) -> np.int64:
    threshold = (np.int64(1) << (31 - exponent)) - 1
    return _I32_MAX if x > threshold else _I32_MIN if x < -threshold else x << exponent


@nb.njit(inline="always")
def _rdbpot(x: np.int64, exponent: np.int64) -> np.int64:
    return (x + ((np.int64(1) << exponent) >> 1) - (1 if (x < 0 and exponent > 0) else 0)) >> exponent


@nb.njit(inline="always")
def _reciprocal(x: np.int64, x_integer_digits: int):
    """TFLite ``GetReciprocal`` for one positive int32 (the formulas of `gemmlowp.reciprocal_scalar`)."""
    bits = 0
    v = x
    while v > 0:
        bits += 1
        v >>= 1
    clz = 32 - bits
    a = _wrap32((x << clz) - (np.int64(1) << 31))
    total = a + _I32_MAX
    half = (total + 1) // 2 if total >= 0 else -((-total + 1) // 2)
    r = _wrap32(1515870810 + _srdhm(half, -1010580540))
    for _ in range(3):
        r = _wrap32(r + _sat_left(_srdhm(r, _wrap32((1 << 29) - _srdhm(half, r))), 2))
    return _sat_left(r, 1), x_integer_digits - clz


@nb.njit(**_OPTS)
def softmax(x, exp, exp_rescaled, used, out):
    """int8 SOFTMAX over the last axis of x (rows, depth) with the prepare step's 256-entry tables
    indexed by ``max − x`` (see `activation.prepare_softmax`); out (rows, depth) int8."""
    rows, depth = x.shape
    for r in range(rows):
        top = np.int64(-128)
        for j in range(depth):
            top = max(top, np.int64(x[r, j]))
        total = np.int64(0)
        for j in range(depth):
            total += exp_rescaled[top - x[r, j]]
        scale, bits_over_unit = _reciprocal(total, 12)
        for j in range(depth):
            d = top - x[r, j]
            if not used[d]:
                out[r, j] = -128
                continue
            v = _rdbpot(_srdhm(scale, exp[d]), bits_over_unit + 31 - 8) - 128
            out[r, j] = _clamp(v, -128, 127)


@nb.njit(**_OPTS)
def average_pool(x, kh, kw, sh, sw, pt, pl, lo, hi, out):
    """int8 AVERAGE_POOL_2D: the sum over the window's in-bounds taps divided by their count,
    rounded half away from zero (TFLite's reference), clamped."""
    nb_, h, wd, c = x.shape
    _, oh, ow, _ = out.shape
    acc = np.empty(c, np.int32)
    for n in range(nb_):
        for oy in range(oh):
            y0, y1 = _in_bounds(oy * sh - pt, kh, h)
            for ox in range(ow):
                x0, x1 = _in_bounds(ox * sw - pl, kw, wd)
                acc[:] = 0
                for iy in range(y0, y1):
                    for ix in range(x0, x1):
                        row = x[n, iy, ix]
                        for ch in range(c):
                            acc[ch] += row[ch]
                count = (y1 - y0) * (x1 - x0)
                half = count // 2
                for ch in range(c):
                    a = acc[ch]
                    v = (a + half) // count if a >= 0 else -((-a + half) // count)
                    out[n, oy, ox, ch] = _clamp(v, lo, hi)


@nb.njit(**_OPTS)
def max_pool(x, kh, kw, sh, sw, pt, pl, lo, hi, out):
    """int8 MAX_POOL_2D: the largest in-bounds tap of each window (padding taps never win),
    clamped to the activation range."""
    nb_, h, wd, c = x.shape
    _, oh, ow, _ = out.shape
    best = np.empty(c, np.int8)
    for n in range(nb_):
        for oy in range(oh):
            y0, y1 = _in_bounds(oy * sh - pt, kh, h)
            for ox in range(ow):
                x0, x1 = _in_bounds(ox * sw - pl, kw, wd)
                best[:] = -128
                for iy in range(y0, y1):
                    for ix in range(x0, x1):
                        row = x[n, iy, ix]
                        for ch in range(c):
                            best[ch] = max(best[ch], row[ch])
                for ch in range(c):
                    out[n, oy, ox, ch] = _clamp(np.int64(best[ch]), lo, hi)


@nb.njit(**_OPTS)
def mean(x, zp_in, mult, left, right, zp_out, out):
    """int8 MEAN over the middle axis of x (outer, count, inner) → out (outer, inner): the int32
    sum less ``zp_in · count``, one `_mbqm` with the multiplier that folds in 1/count, clamped to
    int8 (the prepare step derives the multiplier as `pool.prepare_mean` does)."""
    outer, count, inner = x.shape
    acc = np.empty(inner, np.int64)
    for o in range(outer):
        acc[:] = 0
        for k in range(count):
            row = x[o, k]
            for i in range(inner):
                acc[i] += row[i]
        for i in range(inner):
            v = _mbqm(acc[i] - zp_in * count, mult, left, right) + zp_out
            out[o, i] = _clamp(v, -128, 127)


@nb.njit(**_OPTS)
def mul(a, b, za, zb, mult, left, right, zp_out, lo, hi, out):
    """int8 MUL of same-size flat operands: ``(a − za)·(b − zb)`` through one `_mbqm`, plus the
    output zero point, clamped."""
    for i in range(a.size):
        prod = (np.int64(a[i]) - za) * (np.int64(b[i]) - zb)
        out[i] = _clamp(_mbqm(prod, mult, left, right) + zp_out, lo, hi)


@nb.njit(**_OPTS)
def lookup(x, table, base, out):
    """out[i] = table[x[i] + base]: a per-code table (int8/uint8 → int8/uint8 requantization)."""
    for i in range(x.size):
        out[i] = table[np.int64(x[i]) + base]
