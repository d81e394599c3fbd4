"""AVERAGE_POOL_2D, MAX_POOL_2D and MEAN on int8 tensors.

Pooling keeps the input quantization (TFLite requires equal scales): the average divides the sum of
the in-bounds taps by their count, rounding half away from zero as C's ``(acc ± n/2) / n``; padding
taps are left out of both sum and count. MEAN (``reference_ops::QuantizedMeanOrSum``) sums, removes
``zp_in · n`` and rescales by ``s_in/s_out`` with a multiplier that folds in ``1/n``.
"""

from __future__ import annotations

import numpy as np

from npukit.formats import fixedpoint as fp
from npukit.models.tflite.kernels.common import (
    Arrays,
    Ctx,
    Kernel,
    finish,
    geometry,
    mbqm,
    pad_input,
    window_slices,
)


def _pool_common(ctx: Ctx):
    x_t, y_t = ctx.t(0), ctx.out()
    ctx.int8(x_t, y_t)
    qx, qy = ctx.q(x_t), ctx.q(y_t)
    if qx.zp != qy.zp or np.float32(qx.s) != np.float32(qy.s):
        raise ctx.fail("input and output quantization differ (TFLite requires them equal)")
    o = ctx.op.options
    lo, hi = ctx.activation(o.fused_activation_function, y_t)
    return o, lo, hi


def _valid_counts(size: int, out: int, stride: int, filt: int, pad: int) -> np.ndarray:
    origin = np.arange(out) * stride - pad
    return np.minimum(filt, size - origin) - np.maximum(0, -origin)


def prepare_average_pool(ctx: Ctx) -> Kernel:
    o, lo, hi = _pool_common(ctx)
    kh, kw, sh, sw = o.filter_height, o.filter_width, o.stride_h, o.stride_w

    def run(ins: Arrays) -> list[np.ndarray]:
        x = ins[0]
        n, h, w, c = x.shape
        g = geometry(h, w, kh, kw, sh, sw, 1, 1, o.padding)
        if g.oh == g.ow == 1 and g.pt == g.pl == 0 and kh >= h and kw >= w:  # global average
            acc = x.sum(axis=(1, 2), dtype=np.int32, keepdims=True)
            count = np.int32(h * w)
            avg = np.sign(acc) * ((np.abs(acc) + count // 2) // count)
            return [np.clip(avg, lo, hi).astype(np.int8)]
        xp = pad_input(x.astype(np.int32), g.pt, g.pl, g.hp, g.wp, 0)
        acc = np.zeros((n, g.oh, g.ow, c), np.int32)
        for i in range(kh):
            rows = window_slices(g.hp, g.oh, sh, i, 1)
            for j in range(kw):
                acc += xp[:, rows, window_slices(g.wp, g.ow, sw, j, 1), :]
        rows_in = _valid_counts(h, g.oh, sh, kh, g.pt)
        cols_in = _valid_counts(w, g.ow, sw, kw, g.pl)
        count = (rows_in[:, None] * cols_in[None, :])[None, :, :, None].astype(np.int32)
        avg = np.sign(acc) * ((np.abs(acc) + count // 2) // count)
        return [np.clip(avg, lo, hi).astype(np.int8)]

    return run


def prepare_max_pool(ctx: Ctx) -> Kernel:
    o, lo, hi = _pool_common(ctx)
    kh, kw, sh, sw = o.filter_height, o.filter_width, o.stride_h, o.stride_w

    def run(ins: Arrays) -> list[np.ndarray]:
        x = ins[0]
        n, h, w, c = x.shape
        g = geometry(h, w, kh, kw, sh, sw, 1, 1, o.padding)
        xp = pad_input(x.astype(np.int16), g.pt, g.pl, g.hp, g.wp, -32768)
        best = np.full((n, g.oh, g.ow, c), -32768, np.int16)
        for i in range(kh):
            rows = window_slices(g.hp, g.oh, sh, i, 1)
            for j in range(kw):
                np.maximum(best, xp[:, rows, window_slices(g.wp, g.ow, sw, j, 1), :], out=best)
        return [np.clip(best, lo, hi).astype(np.int8)]

    return run


def prepare_mean(ctx: Ctx) -> Kernel:
    x_t, y_t = ctx.t(0), ctx.out()
    ctx.int8(x_t, y_t)
    qx, qy = ctx.q(x_t), ctx.q(y_t)
    rank = len(x_t.shape)
    axes = sorted({int(a) % rank for a in np.atleast_1d(ctx.const(ctx.t(1)))})
    keep = bool(ctx.op.options.keep_dims)
    m, e = fp.quantize_multiplier(float(np.float64(qx.s) / np.float64(qy.s)))
    zp_in, zp_out = qx.zp, qy.zp
    out_shape = y_t.shape

    def run(ins: Arrays) -> list[np.ndarray]:
        x = ins[0]
        count = int(np.prod([x.shape[a] for a in axes]))
        # fold 1/count into the multiplier exactly as the kernel does (int64 division truncates)
        shift = min(count.bit_length() - 1, 32, 31 + e)
        m_n = (m << shift) // count
        total = x.astype(np.int64).sum(axis=tuple(axes), keepdims=keep) - zp_in * count
        y = finish(mbqm(total, m_n, e - shift), zp_out, -128, 127)
        return [y.reshape(out_shape) if y.size == int(np.prod(out_shape)) else y]

    return run
