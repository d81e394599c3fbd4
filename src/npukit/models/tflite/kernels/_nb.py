"""numba kernels of the compiled int8 path: CONV_2D's im2col and requantization (its sums are an
exact float32 BLAS product, see `compiled`), DEPTHWISE_CONV_2D and FULLY_CONNECTED with the
requantization fused, all in portable integer code (exact on every CPU; LLVM vectorizes the
output-channel loops for whatever the host offers, no intrinsics).

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
def _clamp(v: np.int64, lo: np.int64, hi: np.int64) -> np.int64:
    return lo if v < lo else hi if v > hi else v


@nb.njit(**_OPTS)
def depthwise(x, w, bias, depth_mult, zp_in, mult, left, right, zp_out, lo, hi, stride, dilation, pad, out):
    """x (N,H,W,C) int8; w (KH,KW,C·mul) int32; output channel c·mul + m."""
    nb_, h, wd, cin = x.shape
    kh, kw, cout = w.shape
    _, oh, ow, _ = out.shape
    sh, sw = stride
    dh, dw = dilation
    pt, pl = pad
    acc = np.empty(cout, np.int32)
    for n in range(nb_):
        for oy in range(oh):
            for ox in range(ow):
                acc[:] = 0
                for ky in range(kh):
                    iy = oy * sh - pt + ky * dh
                    if iy < 0 or iy >= h:
                        continue
                    for kx in range(kw):
                        ix = ox * sw - pl + kx * dw
                        if ix < 0 or ix >= wd:
                            continue
                        wrow = w[ky, kx]
                        for c in range(cin):
                            xv = np.int32(x[n, iy, ix, c]) - zp_in
                            for m in range(depth_mult):
                                o = c * depth_mult + m
                                acc[o] += xv * wrow[o]
                for o in range(cout):
                    v = _mbqm(np.int64(acc[o]) + bias[o], mult[o], left[o], right[o]) + zp_out
                    out[n, oy, ox, o] = _clamp(v, lo, hi)


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
    what skipping them adds). Exact: every value is an integer of magnitude ≤ 255."""
    nb_, h, wd, cin = x.shape
    sh, sw = stride
    dh, dw = dilation
    pt, pl = pad
    r = 0
    for n in range(nb_):
        for oy in range(oh):
            for ox in range(ow):
                k = 0
                for ky in range(kh):
                    iy = oy * sh - pt + ky * dh
                    for kx in range(kw):
                        ix = ox * sw - pl + kx * dw
                        if iy < 0 or iy >= h or ix < 0 or ix >= wd:
                            for c in range(cin):
                                cols[r, k + c] = 0
                        else:
                            for c in range(cin):
                                cols[r, k + c] = np.int32(x[n, iy, ix, c]) - zp_in
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
