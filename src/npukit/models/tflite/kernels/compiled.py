"""Prepare steps of the compiled int8 path: the same ops as `conv`, planned once (weights reordered
for the numba kernels in `_nb`, per-channel multipliers split into left/right shifts, padding and
output geometry fixed from the model's shapes) and bound into a closure that only allocates the
output and calls one compiled function. Any batch size along N runs through the same plan.

`COMPILED_KERNELS` maps an op name to its prepare step; ops without one keep the reference kernel.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from npukit.formats import fixedpoint as fp
from npukit.models.tflite.kernels import _nb, _nb_gemm, _nb_ops, activation, arith, pool
from npukit.models.tflite.kernels.common import QRANGE, Arrays, Ctx, Kernel, finish, geometry, mbqm
from npukit.models.tflite.kernels.conv import conv_params


def _shifts(p) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    shift = p.shifts.astype(np.int64)
    return p.multipliers.astype(np.int64), np.maximum(shift, 0), np.maximum(-shift, 0)


def _window(ctx: Ctx, kh: int, kw: int):
    o = ctx.op.options
    _, h, w, _ = ctx.t(0).shape
    g = geometry(h, w, kh, kw, o.stride_h, o.stride_w, o.dilation_h_factor, o.dilation_w_factor, o.padding)
    return (g.oh, g.ow, (o.stride_h, o.stride_w), (o.dilation_h_factor, o.dilation_w_factor), (g.pt, g.pl))


def prepare_conv2d(ctx: Ctx) -> Kernel:
    p = conv_params(ctx.model, ctx.op.index)
    _, kh, kw, cin = p.weights.shape
    if ctx.t(0).shape[3] != cin:
        raise ctx.fail(f"grouped convolution (input {ctx.t(0).shape[3]} channels, filter {cin}) "
                       "is not supported")
    mult, left, right = _shifts(p)
    if kh * kw * cin > _nb_gemm.MAX_K:  # beyond the int32 bound of the packed int8 GEMM
        return _conv_gemm(ctx, p, _window(ctx, kh, kw), (mult, left, right))
    return _conv_int8(ctx, p, _window(ctx, kh, kw), (mult, left, right))


def _conv_int8(ctx: Ctx, p, window, requant) -> Kernel:
    """CONV_2D on the fused int8 kernel family (`_nb_gemm`): weights packed and the column-sum
    correction folded into the bias here, once."""
    n, kh, kw, cin = p.weights.shape
    oh, ow, stride, dilation, pad = window
    _, h, w, _ = ctx.t(0).shape
    plan = _nb_gemm.canvas_plan(h, w, cin, kh, kw, oh, ow, stride, dilation, pad)
    canvas_hw, c4, taps, runs, run_len = plan
    wide = np.zeros((n, kh, kw, c4), np.int8)  # channels padded like the canvas, with zero weights
    wide[..., :cin] = p.weights
    wmat = p.weights.reshape(n, -1)
    path = _nb_gemm.chosen_path()
    pack = _nb_gemm.pack_weights(wide.reshape(n, -1), path)
    zp_in = p.input_zero_point
    bias = p.bias.astype(np.int64) - (zp_in + 128) * wmat.astype(np.int64).sum(axis=1)
    params = _nb_gemm.requant_params(bias, *requant)
    kernel = _nb_gemm.build(path)
    meta = np.array([-(-kh * kw * c4 // 4) * 4, n, zp_in, oh, ow, *stride, *pad, *canvas_hw, c4, run_len,
                     p.output_zero_point, p.act_min, p.act_max], np.int64)

    def run(ins: Arrays) -> list[np.ndarray]:
        x = np.ascontiguousarray(ins[0])
        out = np.empty((x.shape[0], oh, ow, n), np.int8)
        kernel(x, pack, meta, taps, runs, params, out)
        return [out]

    return run


def _k_chunks(k: int, w: np.ndarray) -> list[tuple[int, int]]:
    """Splits of the K axis whose float32 partial sums stay exact: every product is an integer of
    at most 255·max|w|, and float32 adds integers exactly while the sum stays below 2^24."""
    wmax = max(int(np.abs(w.astype(np.int64)).max()) if w.size else 0, 1)
    step = max((2**24 - 1) // (255 * wmax), 1)
    return [(a, min(a + step, k)) for a in range(0, k, step)]


def _conv_gemm(ctx: Ctx, p, window, requant) -> Kernel:
    """CONV_2D as an exact float32 GEMM: numba im2col, one BLAS product per exact K chunk (integer
    sums added in int32 as TFLite accumulates), numba requantization."""
    n, kh, kw, cin = p.weights.shape
    oh, ow, stride, dilation, pad = window
    k = kh * kw * cin
    wmat = np.ascontiguousarray(p.weights.transpose(1, 2, 3, 0).reshape(k, n).astype(np.float32))
    chunks = _k_chunks(k, p.weights)
    zp_in = p.input_zero_point
    args = (p.bias, *requant, p.output_zero_point, p.act_min, p.act_max)

    def run(ins: Arrays) -> list[np.ndarray]:
        x = ins[0]
        m = x.shape[0] * oh * ow
        cols = np.empty((m, k), np.float32)
        _nb.im2col(x, zp_in, kh, kw, oh, ow, stride, dilation, pad, cols)
        if len(chunks) == 1:
            acc = cols @ wmat
        else:
            acc = np.zeros((m, n), np.int32)
            for a, b in chunks:
                acc += (cols[:, a:b] @ wmat[a:b]).astype(np.int32)
        out = np.empty((m, n), np.int8)
        _nb.requantize(acc, *args, out)
        return [out.reshape(x.shape[0], oh, ow, n)]

    run.uses_blas = True  # the interpreter limits BLAS to one thread around runs that call it
    return run


def prepare_depthwise(ctx: Ctx) -> Kernel:
    p = conv_params(ctx.model, ctx.op.index)
    _, kh, kw, n = p.weights.shape
    _, h, w, cin = ctx.t(0).shape
    o = p.options
    depth_mult = o.depth_multiplier if o.depth_multiplier > 0 else n // cin
    if cin * depth_mult != n:
        raise ctx.fail(f"input channels {cin} × depth multiplier {depth_mult} ≠ {n} output channels")
    wt = np.ascontiguousarray(p.weights.astype(np.int16).reshape(kh * kw, n))  # int16 lanes in the kernel
    mult, left, right = _shifts(p)
    # the kernel sums x·w over every tap (padding taps hold zp_in): Σ (x − zp)·w = Σ x·w − zp·Σ_t w
    bias = p.bias.astype(np.int64) - p.input_zero_point * wt.astype(np.int64).sum(axis=0)
    params = _nb_gemm.requant_params(bias, mult, left, right)
    oh, ow, stride, dilation, pad = _window(ctx, kh, kw)
    canvas_hw, taps = _nb_ops.depthwise_plan(h, w, n, kh, kw, oh, ow, stride, dilation, pad)
    meta = np.array([depth_mult, p.input_zero_point, oh, ow, *stride, *pad, *canvas_hw, p.output_zero_point,
                     p.act_min, p.act_max], np.int64)

    def run(ins: Arrays) -> list[np.ndarray]:
        x = np.ascontiguousarray(ins[0])
        out = np.empty((x.shape[0], oh, ow, n), np.int8)
        _nb_ops.depthwise_kernel(x, wt, meta, taps, params, out)
        return [out]

    return run


def prepare_quantize(ctx: Ctx) -> Kernel:
    activation.prepare_quantize(ctx)  # checks types
    x_t, y_t = ctx.t(0), ctx.out()
    if x_t.dtype != np.float32:
        return _requantize_codes(ctx)
    lo, hi = QRANGE[np.dtype(y_t.dtype)]
    scale, zp, dtype = np.float32(ctx.q(y_t).s), ctx.q(y_t).zp, y_t.dtype

    def run(ins: Arrays) -> list[np.ndarray]:
        x = np.ascontiguousarray(ins[0], dtype=np.float32)
        out = np.empty(x.shape, dtype)
        _nb_ops.quantize_kernel(x.reshape(-1), scale, zp, lo, hi, out.reshape(-1))
        return [out]

    return run


def _requantize_codes(ctx: Ctx) -> Kernel:
    """QUANTIZE int8/uint8 → int8/uint8: each input code's result tabled once (the arithmetic of
    `activation.prepare_quantize`), looked up in numba."""
    x_t, y_t = ctx.t(0), ctx.out()
    qx, qy = ctx.q(x_t), ctx.q(y_t)
    lo, hi = QRANGE[np.dtype(y_t.dtype)]
    first, last = QRANGE[np.dtype(x_t.dtype)]
    m, e = fp.quantize_multiplier(float(np.float64(qx.s) / np.float64(qy.s)))
    codes = np.arange(first, last + 1, dtype=np.int64)
    table = finish(mbqm(codes - qx.zp, m, e), qy.zp, lo, hi, y_t.dtype)
    dtype = y_t.dtype

    def run(ins: Arrays) -> list[np.ndarray]:
        x = np.ascontiguousarray(ins[0])
        out = np.empty(x.shape, dtype)
        _nb.lookup(x.reshape(-1), table, -first, out.reshape(-1))
        return [out]

    return run


def prepare_fully_connected(ctx: Ctx) -> Kernel:
    p = conv_params(ctx.model, ctx.op.index)
    if p.options.weights_format != 0:
        raise ctx.fail("shuffled FULLY_CONNECTED weights are not supported")
    w = np.ascontiguousarray((p.weights.astype(np.int32) - p.weights_zero_point).T)  # (K, N)
    k, units = w.shape
    out_shape = tuple(ctx.out().shape)
    size = int(np.prod(out_shape))
    scale = np.ascontiguousarray(p.real_scales, dtype=np.float64)
    args = (p.input_zero_point, scale, p.output_zero_point, p.act_min, p.act_max)
    bias = p.bias

    def run(ins: Arrays) -> list[np.ndarray]:
        x = np.ascontiguousarray(ins[0]).reshape(-1, k)
        out = np.empty((x.shape[0], units), np.int8)
        _nb.fully_connected(x, w, bias, *args, out)
        return [out.reshape(out_shape) if out.size == size else out]

    return run


def _prepare_pool(ctx: Ctx, reference: Kernel, kernel) -> Kernel:
    """A 2-D pooling op on its numba ``kernel``; the readable ``reference`` (which has already checked
    types and options) where the output is empty."""
    o = ctx.op.options
    lo, hi = ctx.activation(o.fused_activation_function, ctx.out())
    kh, kw, sh, sw = o.filter_height, o.filter_width, o.stride_h, o.stride_w
    _, h, w, c = ctx.t(0).shape
    g = geometry(h, w, kh, kw, sh, sw, 1, 1, o.padding)
    if g.oh == 0 or g.ow == 0:
        return reference

    def run(ins: Arrays) -> list[np.ndarray]:
        x = np.ascontiguousarray(ins[0])
        out = np.empty((x.shape[0], g.oh, g.ow, c), np.int8)
        kernel(x, kh, kw, sh, sw, g.pt, g.pl, lo, hi, out)
        return [out]

    return run


def prepare_average_pool(ctx: Ctx) -> Kernel:
    return _prepare_pool(ctx, pool.prepare_average_pool(ctx), _nb.average_pool)


def prepare_dequantize(ctx: Ctx) -> Kernel:
    reference = activation.prepare_dequantize(ctx)  # checks types
    x_t = ctx.t(0)
    if x_t.dtype != np.int8:
        return reference
    qx = ctx.q(x_t)
    scale, zp = np.float64(np.float32(qx.s)), qx.zp

    def run(ins: Arrays) -> list[np.ndarray]:
        x = np.ascontiguousarray(ins[0])
        out = np.empty(x.shape, np.float32)
        _nb_ops.dequantize_kernel(x.reshape(-1), scale, zp, out.reshape(-1))
        return [out]

    return run


def prepare_max_pool(ctx: Ctx) -> Kernel:
    return _prepare_pool(ctx, pool.prepare_max_pool(ctx), _nb.max_pool)


def prepare_mean(ctx: Ctx) -> Kernel:
    """MEAN with the reduced axes moved last-but-inner: the input viewed as (outer, count, inner)
    when the reduced axes are adjacent (NHWC's H, W: no copy), else transposed once per run."""
    reference = pool.prepare_mean(ctx)  # checks types
    x_t, y_t = ctx.t(0), ctx.out()
    qx, qy = ctx.q(x_t), ctx.q(y_t)
    rank = len(x_t.shape)
    axes = sorted({int(a) % rank for a in np.atleast_1d(ctx.const(ctx.t(1)))})
    if not axes:
        return reference
    adjacent = axes == list(range(axes[0], axes[-1] + 1))
    order = list(range(axes[0])) + axes + [a for a in range(axes[0], rank) if a not in axes]
    keep_dims = bool(ctx.op.options.keep_dims)
    m, e = fp.quantize_multiplier(float(np.float64(qx.s) / np.float64(qy.s)))
    out_shape = tuple(y_t.shape)

    def run(ins: Arrays) -> list[np.ndarray]:
        x = ins[0]
        shape = x.shape
        count = int(np.prod([shape[a] for a in axes]))
        outer = int(np.prod(shape[:axes[0]]))
        view = x if adjacent else np.transpose(x, order)
        view = np.ascontiguousarray(view).reshape(outer, count, -1)
        shift = min(count.bit_length() - 1, 32, 31 + e)  # 1/count folded in as `pool.prepare_mean` does
        m_n, s = (m << shift) // count, e - shift
        out = np.empty((outer, view.shape[2]), np.int8)
        _nb.mean(view, qx.zp, m_n, max(s, 0), max(-s, 0), qy.zp, out)
        natural = tuple(1 if a in axes else d for a, d in enumerate(shape)) if keep_dims else \
            tuple(d for a, d in enumerate(shape) if a not in axes)
        return [out.reshape(out_shape) if out.size == int(np.prod(out_shape)) else out.reshape(natural)]

    return run


def prepare_mul(ctx: Ctx) -> Kernel:
    arith.prepare_mul(ctx)  # checks types
    a_t, b_t, y_t = ctx.t(0), ctx.t(1), ctx.out()
    qa, qb, qy = ctx.q(a_t), ctx.q(b_t), ctx.q(y_t)
    real = np.float32(qa.s) * np.float32(qb.s) / np.float32(qy.s)  # float arithmetic in mul.cc
    m, e = fp.quantize_multiplier(float(real))
    lo, hi = ctx.activation(ctx.op.options.fused_activation_function, y_t)
    args = (qa.zp, qb.zp, m, max(e, 0), max(-e, 0), qy.zp, lo, hi)

    def run(ins: Arrays) -> list[np.ndarray]:
        a, b = ins[0], ins[1]
        if a.shape != b.shape:  # broadcasting as the reference kernel's NumPy does
            a, b = np.broadcast_arrays(a, b)
        out = np.empty(a.shape, np.int8)
        _nb.mul(np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(b).reshape(-1), *args,
                out.reshape(-1))
        return [out]

    return run


COMPILED_KERNELS: dict[str, Callable[[Ctx], Kernel]] = {
    "AVERAGE_POOL_2D": prepare_average_pool,
    "SOFTMAX": lambda ctx: activation.prepare_softmax(ctx, compiled=True),
    "ADD": lambda ctx: arith.prepare_add(ctx, compiled=True),
    "SUB": lambda ctx: arith.prepare_sub(ctx, compiled=True),
    "CONV_2D": prepare_conv2d,
    "DEPTHWISE_CONV_2D": prepare_depthwise,
    "QUANTIZE": prepare_quantize,
    "DEQUANTIZE": prepare_dequantize,
    "FULLY_CONNECTED": prepare_fully_connected,
    "MAX_POOL_2D": prepare_max_pool,
    "MEAN": prepare_mean,
    "MUL": prepare_mul,
}
