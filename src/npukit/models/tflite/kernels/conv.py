"""CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED, int8 with per-tensor or per-channel weights.

Accumulation: ``Σ (x − zp_in) · w + bias`` as TFLite's ``reference_integer_ops`` (weights symmetric,
padding taps skipped, which equals padding with the input zero point). The sums are computed with a
BLAS float matmul only where it is provably exact: every product is an integer of at most
255 · max|w| and a float32 (float64) matmul is exact while any partial sum stays below 2^24 (2^53),
so ``K · 255 · max|w| < 2^24`` picks float32 and anything else float64 (always exact for int8 data).

Requantization: CONV_2D and DEPTHWISE_CONV_2D use ``MultiplyByQuantizedMultiplier`` with per-channel
``QuantizeMultiplier(s_in · s_w[c] / s_out)`` in double (``PopulateConvolutionQuantizationParams``);
LiteRT's reference FULLY_CONNECTED int8 rescales in double instead:
``round(acc · (double(s_in) · double(s_w) / double(s_out)))``, ties away from zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from npukit.formats import fixedpoint as fp
from npukit.models.tflite.kernels.common import (
    Arrays,
    Ctx,
    Kernel,
    Requantizer,
    UnsupportedOp,
    finish,
    geometry,
    pad_input,
    round_half_away,
    window_slices,
)
from npukit.models.tflite.model import Model


def _exact_float_dtype(k: int, w: np.ndarray) -> np.dtype:
    wmax = int(np.abs(w.astype(np.int64)).max()) if w.size else 0
    return np.dtype(np.float32) if k * 255 * max(wmax, 1) < 2**24 else np.dtype(np.float64)


def _bias(ctx: Ctx, k: int, n: int) -> np.ndarray:
    if not ctx.has_input(k):
        return np.zeros(n, np.int64)
    b = ctx.t(k)
    if b.dtype != np.int32:
        raise ctx.fail(f"bias {b.name} is {b.dtype}, expected int32")
    return ctx.const(b).astype(np.int64).reshape(n)


@dataclass(frozen=True)
class ConvParams:
    """What TFLite's reference Prepare derives for CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED, as
    data (for delegates that compute the same layer elsewhere)."""

    weights: np.ndarray  # int8 as stored: OHWI (conv), 1HWO (depthwise), (N, K) (fully connected)
    weights_zero_point: int  # 0 except per-tensor FULLY_CONNECTED weights, which may be asymmetric
    bias: np.ndarray  # int64 (N,), zeros when the op has none
    input_zero_point: int
    output_zero_point: int
    real_scales: np.ndarray  # float64 (N,): double(s_in)·double(s_w[c])/double(s_out)
    multipliers: np.ndarray  # int32 (N,): QuantizeMultiplier(real_scales) (conv and depthwise use these)
    shifts: np.ndarray  # int32 (N,)
    act_min: int
    act_max: int
    options: Any


def _params(ctx: Ctx, n_axis: int) -> ConvParams:
    """Checks shared by the three ops and their quantization parameters; ``n_axis`` = output-channel
    axis of the stored weights."""
    x_t, w_t, y_t = ctx.t(0), ctx.t(1), ctx.out()
    ctx.int8(x_t, w_t, y_t)
    w = ctx.const(w_t)
    n = w.shape[n_axis]
    qx, qy, qw = ctx.q(x_t), ctx.q(y_t), ctx.q(w_t, per_tensor=False)
    if qw.scale.size not in (1, n):
        raise ctx.fail(f"filter has {qw.scale.size} scales for {n} output channels")
    if np.any(qw.zero_point != 0) and (qw.per_channel or ctx.op.name != "FULLY_CONNECTED"):
        raise ctx.fail("filter zero points must be 0 (symmetric int8 weights)")
    reals = np.float64(qx.s) * np.broadcast_to(qw.scale.astype(np.float64), (n,)) / np.float64(qy.s)
    mult, shift = fp.quantize_multipliers(reals)
    lo, hi = ctx.activation(ctx.op.options.fused_activation_function, y_t)
    wzp = 0 if qw.per_channel else int(qw.zero_point[0])
    return ConvParams(w, wzp, _bias(ctx, 2, n), qx.zp, qy.zp, reals, mult, shift, lo, hi, ctx.op.options)


def conv_params(model: Model, index: int) -> ConvParams:
    """`ConvParams` of op ``index`` (CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED)."""
    op = model.ops[index]
    axis = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 0}.get(op.name)
    if axis is None:
        raise UnsupportedOp(f"op {index} {op.name}: not a convolution or fully connected layer")
    return _params(Ctx(model, op), axis)


def prepare_conv2d(ctx: Ctx) -> Kernel:
    p = _params(ctx, 0)
    o, bias, lo, hi = p.options, p.bias, p.act_min, p.act_max
    w = p.weights.astype(np.int64)  # OHWI
    n, kh, kw, cin = w.shape
    if ctx.t(0).shape[3] != cin:
        raise ctx.fail(f"grouped convolution (input {ctx.t(0).shape[3]} channels, filter {cin}) "
                       "is not supported")
    requant = Requantizer(p.multipliers, p.shifts)
    zp_in, zp_out = p.input_zero_point, p.output_zero_point
    sh, sw, dh, dw = o.stride_h, o.stride_w, o.dilation_h_factor, o.dilation_w_factor
    k = kh * kw * cin
    dt = _exact_float_dtype(k, w)
    wmat = w.transpose(1, 2, 3, 0).reshape(k, n).astype(dt)  # (KH·KW·C, N), im2col column order
    pointwise = kh == kw == 1 and sh == sw == 1

    def run(ins: Arrays) -> list[np.ndarray]:
        x = ins[0]
        nb, h, wd, _ = x.shape
        g = geometry(h, wd, kh, kw, sh, sw, dh, dw, o.padding)
        xo = x.astype(dt) - dt.type(zp_in)
        if pointwise:
            cols = xo.reshape(-1, cin)
        else:
            xp = pad_input(xo, g.pt, g.pl, g.hp, g.wp, 0)
            cols = np.empty((nb, g.oh, g.ow, kh, kw, cin), dtype=dt)
            for i in range(kh):
                rows = window_slices(g.hp, g.oh, sh, i, dh)
                for j in range(kw):
                    cols[:, :, :, i, j, :] = xp[:, rows, window_slices(g.wp, g.ow, sw, j, dw), :]
            cols = cols.reshape(-1, k)
        acc = (cols @ wmat).astype(np.int64)
        acc += bias
        return [finish(requant(acc, inplace=True), zp_out, lo, hi).reshape(nb, g.oh, g.ow, n)]

    return run


def prepare_depthwise(ctx: Ctx) -> Kernel:
    p = _params(ctx, 3)
    o, bias, lo, hi = p.options, p.bias, p.act_min, p.act_max
    w = p.weights.astype(np.int32)  # 1HWO
    _, kh, kw, n = w.shape
    cin = ctx.t(0).shape[3]
    mul = o.depth_multiplier if o.depth_multiplier > 0 else n // cin
    if cin * mul != n:
        raise ctx.fail(f"input channels {cin} × depth multiplier {mul} ≠ {n} output channels")
    requant = Requantizer(p.multipliers, p.shifts)
    zp_in, zp_out = p.input_zero_point, p.output_zero_point
    sh, sw, dh, dw = o.stride_h, o.stride_w, o.dilation_h_factor, o.dilation_w_factor
    taps = w.reshape(kh, kw, cin, mul)  # output channel c·mul + m
    # per-channel matrices for the batched-matmul path: (C, KH·KW, mul), exact in float32 (see top)
    dt = _exact_float_dtype(kh * kw, w)
    per_channel = taps.reshape(kh * kw, cin, mul).transpose(1, 0, 2).astype(dt)

    def accumulate_taps(xp: np.ndarray, g) -> np.ndarray:
        acc = np.zeros((xp.shape[0], g.oh, g.ow, cin, mul), np.int32)  # |acc| ≤ KH·KW·255·128
        for i in range(kh):
            rows = window_slices(g.hp, g.oh, sh, i, dh)
            for j in range(kw):
                acc += xp[:, rows, window_slices(g.wp, g.ow, sw, j, dw), :][..., None] * taps[i, j]
        return acc.reshape(xp.shape[0], g.oh, g.ow, n).astype(np.int64)

    def batched_matmul(xp: np.ndarray, g) -> np.ndarray:
        nb = xp.shape[0]
        s0, s1, s2, s3 = xp.strides
        win = np.lib.stride_tricks.as_strided(
            xp, (nb, g.oh, g.ow, kh, kw, cin), (s0, s1 * sh, s2 * sw, s1 * dh, s2 * dw, s3), writeable=False)
        cols = np.ascontiguousarray(win.reshape(nb * g.oh * g.ow, kh * kw, cin).transpose(2, 0, 1))
        out = cols @ per_channel  # (C, M, mul)
        return out.transpose(1, 0, 2).reshape(nb, g.oh, g.ow, n).astype(np.int64)

    def run(ins: Arrays) -> list[np.ndarray]:
        x = ins[0]
        _, h, wd, _ = x.shape
        g = geometry(h, wd, kh, kw, sh, sw, dh, dw, o.padding)
        # many taps per channel (depth multiplier, few channels or small maps): one batched matmul;
        # otherwise a vectorized loop over the taps (measured faster for wide maps of many channels)
        if mul > 1 or g.oh * g.ow <= 64:
            xp = pad_input(x.astype(dt) - dt.type(zp_in), g.pt, g.pl, g.hp, g.wp, 0)
            acc64 = batched_matmul(xp, g)
        else:
            acc64 = accumulate_taps(pad_input(x.astype(np.int32) - zp_in, g.pt, g.pl, g.hp, g.wp, 0), g)
        acc64 += bias
        return [finish(requant(acc64, inplace=True), zp_out, lo, hi)]

    return run


def prepare_fully_connected(ctx: Ctx) -> Kernel:
    p = _params(ctx, 0)
    if p.options.weights_format != 0:
        raise ctx.fail("shuffled FULLY_CONNECTED weights are not supported")
    w = p.weights.astype(np.int64) - p.weights_zero_point  # (N, K)
    k = w.shape[1]
    bias, lo, hi, scale = p.bias, p.act_min, p.act_max, p.real_scales
    zp_in, zp_out = p.input_zero_point, p.output_zero_point
    dt = _exact_float_dtype(k, w)
    wmat = w.T.astype(dt)
    out_shape = ctx.out().shape

    def run(ins: Arrays) -> list[np.ndarray]:
        x = ins[0]
        xo = x.reshape(-1, k).astype(dt) - dt.type(zp_in)
        acc = (xo @ wmat).astype(np.int64) + bias
        scaled = round_half_away(acc.astype(np.float64) * scale).astype(np.int64)
        y = finish(scaled, zp_out, lo, hi)
        return [y.reshape(out_shape) if y.size == int(np.prod(out_shape)) else y]

    return run
