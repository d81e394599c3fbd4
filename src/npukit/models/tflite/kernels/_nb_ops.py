"""Portable numba kernels of the compiled int8 path beside CONV_2D: DEPTHWISE_CONV_2D, ADD/SUB of
same-shape operands and QUANTIZE from float. One build each (plain LLVM vector IR and loops, no
target intrinsic: exact on every CPU); their requantization is the conv family's vectorised
epilogue (`_nb_gemm._requant16`, TFLite's ``MultiplyByQuantizedMultiplier``), so both paths round
the same way by construction and are tested against the readable kernels and LiteRT.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from npukit.models.tflite.kernels._nb_gemm import (
    LANES,
    _copy_row,
    _epilogue,
    _fill_bytes,
    mbqm_ir,
    params_ir,
    splat_ir,
    store_int8_ir,
)
from npukit.sim import compile_report

compile_report.install()  # first-run compiles are announced, never silent

_OPTS = {"cache": True, "nogil": True, "error_model": "numpy"}
_I32X16 = ir.VectorType(ir.IntType(32), 16)


@nb.njit(inline="always")
def _fill_canvas(x, n, dm, zp_in, wp, pt, pl, canvas):
    """Image n of x per output channel (input channel o // dm) into the int8 canvas; padding taps
    hold the input zero point (``x − zp = 0``: what skipping them adds)."""
    _, h, wd, cin = x.shape
    cout = cin * dm
    _fill_bytes(canvas.ctypes.data, zp_in, canvas.size)
    xf = x.reshape(-1)
    for y in range(h):
        src = (n * h + y) * wd * cin
        base = ((y + pt) * wp + pl) * cout
        if dm == 1:  # numba's slice assignment costs ~1 ns a byte
            _copy_row(canvas.ctypes.data + base, xf.ctypes.data + src, wd * cin)
            continue
        for k in range(wd * cin):
            for m in range(dm):
                canvas[base + k * dm + m] = xf[src + k]


@intrinsic
def _dw_pixels(typingctx, x_addr, x_step, taps_addr, ntaps, pairs, w_addr, w_row_bytes, params_addr,
               params_rb, zp_out, lo, hi, dst_addr, dst_step, count):
    """``count`` output pixels (``x_step`` canvas bytes and ``dst_step`` output bytes apart) of one
    block of 16 depthwise channels: Σ over taps t of x[taps[t] + lane] · w[t][lane] (int16 weights,
    products and pair sums in int16 lanes — exact, see `product` — accumulated in int32 lanes),
    requantized (`mbqm_ir`) and stored as int8. The block's requantization rows are loaded once for
    the whole run of pixels and the sums never leave registers. The first ``2·pairs`` taps go two at a
    time (their int16 sum is exact while no weight is −128, which the caller checks: two −128·−128
    products make 32,768); the rest one at a time. Plain LLVM vector IR (every build)."""
    sig = types.void(types.intp, types.intp, types.intp, types.intp, types.intp, types.intp, types.intp,
                     types.intp, types.intp, types.int64, types.int64, types.int64, types.intp, types.intp,
                     types.intp)

    def codegen(context, builder, signature, args):
        xa, xs, ta, n, pairs, wa, wrb, par, prb, zp, lo_, hi_, dst, ds, count = args
        i64, i16x16 = ir.IntType(64), ir.VectorType(ir.IntType(16), 16)
        i8x16_p = ir.VectorType(ir.IntType(8), 16).as_pointer()
        rows = params_ir(builder, par, prb, 0)

        def product(x0, t):  # x·w of tap t in int16 lanes: |x·w| ≤ 128·128 = 16,384
            tap = builder.load(builder.inttoptr(builder.add(ta, builder.mul(t, ir.Constant(n.type, 8))),
                                                i64.as_pointer()))
            codes = builder.load(builder.inttoptr(builder.add(x0, tap), i8x16_p), align=1)
            w_at = builder.inttoptr(builder.add(wa, builder.mul(t, wrb)), i16x16.as_pointer())
            w = builder.load(w_at, align=1)
            return builder.mul(builder.sext(codes, i16x16), w)

        with cgutils.for_range(builder, count) as pixels:
            x0 = builder.add(xa, builder.mul(pixels.index, xs))
            acc = cgutils.alloca_once_value(builder, ir.Constant(_I32X16, None))
            with cgutils.for_range(builder, pairs) as loop:  # two taps summed in int16: ≤ 32,512, exact
                t = builder.shl(loop.index, ir.Constant(n.type, 1))
                pair = builder.add(product(x0, t), product(x0, builder.add(t, ir.Constant(n.type, 1))))
                builder.store(builder.add(builder.load(acc), builder.sext(pair, _I32X16)), acc)
            paired = builder.shl(pairs, ir.Constant(n.type, 1))
            with cgutils.for_range(builder, builder.sub(n, paired)) as loop:  # the taps left, one by one
                single = product(x0, builder.add(paired, loop.index))
                builder.store(builder.add(builder.load(acc), builder.sext(single, _I32X16)), acc)
            out = builder.add(dst, builder.mul(pixels.index, ds))
            store_int8_ir(builder, mbqm_ir(builder, builder.load(acc), rows), zp, lo_, hi_, out)
        return context.get_dummy_value()

    return sig, codegen


@nb.njit(**_OPTS)
def depthwise_kernel(x, w, meta, taps, params, out):
    """DEPTHWISE_CONV_2D int8: x (N,H,W,C); w (taps, C·dm) int16; out (N,OH,OW,C·dm). The canvas
    (`_fill_canvas`) holds the int8 codes with the zero point at padding taps, so every tap is a
    straight row of multiply-adds; ``Σ x·w`` differs from ``Σ (x − zp)·w`` by ``zp · Σ_t w``, which
    the prepare step folds into the bias (``params``). Each block of 16 channels runs a whole
    output row at a time (`_dw_pixels`); a channel count that is not a multiple of 16 ends in
    scalar loops. Scalars: ``meta`` = (dm, zp_in, oh, ow, sh, sw, pt, pl, hp, wp, zp_out, lo, hi),
    int64."""
    dm, zp_in, oh, ow, sh, sw, pt, pl, hp, wp, zp_out, lo, hi = (
        meta[0], meta[1], meta[2], meta[3], meta[4], meta[5], meta[6], meta[7], meta[8], meta[9], meta[10],
        meta[11], meta[12])
    nbatch, _, _, cin = x.shape
    cout = cin * dm
    canvas = np.empty(hp * wp * cout + 64, np.int8)
    acc = np.zeros(LANES, np.int32)
    vectors = cout // LANES
    ntaps = taps.shape[0]
    of = out.reshape(-1)
    rb = 4 * params.shape[1]
    pairs = ntaps // 2 if w.size == 0 or w.min() >= -127 else 0  # −128·−128 twice overflows int16
    for n in range(nbatch):
        _fill_canvas(x, n, dm, zp_in, wp, pt, pl, canvas)
        for oy in range(oh):
            row = oy * sh * wp * cout
            first = (n * oh + oy) * ow * cout
            for v in range(vectors):
                _dw_pixels(canvas.ctypes.data + row + v * LANES, sw * cout, taps.ctypes.data, ntaps, pairs,
                           w.ctypes.data + 2 * v * LANES, 2 * cout, params.ctypes.data + 4 * v * LANES, rb,
                           zp_out, lo, hi, of.ctypes.data + first + v * LANES, cout, ow)
            if vectors * LANES == cout:
                continue
            for ox in range(ow):  # the channels past the last full block of 16
                base = row + ox * sw * cout
                for o in range(vectors * LANES, cout):
                    total = np.int32(0)
                    for t in range(ntaps):
                        total += np.int32(canvas[base + taps[t] + o]) * w[t, o]
                    acc[o - vectors * LANES] = total
                _epilogue(acc, 0, vectors * LANES, cout - vectors * LANES, params, zp_out, lo, hi, of,
                          first + ox * cout + vectors * LANES)


def depthwise_plan(h: int, w: int, cout: int, kh: int, kw: int, oh: int, ow: int, stride, dilation, pad
                   ) -> tuple[tuple[int, int], np.ndarray]:
    """(canvas rows and columns, byte offset of each window tap) for `depthwise_kernel`."""
    (sh, sw), (dh, dw), (pt, pl) = stride, dilation, pad
    hp = max(h + pt, (oh - 1) * sh + (kh - 1) * dh + 1)
    wp = max(w + pl, (ow - 1) * sw + (kw - 1) * dw + 1)
    taps = [(ky * dh * wp + kx * dw) * cout for ky in range(kh) for kx in range(kw)]
    return (hp, wp), np.array(taps, np.int64)


@intrinsic
def _add_blocks(typingctx, a_addr, b_addr, sign, params_addr, row_bytes, zp_out, lo, hi, dst_addr, blocks):
    """``blocks`` × 16 int8 ADD (sign 1) / SUB (sign −1) outputs at ``dst``: each input rescaled as
    TFLite does (``((code + offset) << 20)`` through its multiplier: parameter rows 0–5 and 6–11),
    the sum (difference) through the output multiplier (rows 12–17), clamped. The parameters are
    loaded once for all blocks. Plain LLVM vector IR."""
    sig = types.void(types.intp, types.intp, types.int64, types.intp, types.intp, types.int64, types.int64,
                     types.int64, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        pa, pb, sgn, par, rb, zp, lo_, hi_, dst, n = args
        i8x16 = ir.VectorType(ir.IntType(8), 16).as_pointer()
        rows_a, rows_b, rows_out = (params_ir(builder, par, rb, first) for first in (0, 6, 12))
        signs = splat_ir(builder, sgn)
        with cgutils.for_range(builder, n) as loop:
            off = builder.mul(loop.index, ir.Constant(n.type, LANES))

            def scaled(addr, rows):
                codes = builder.load(builder.inttoptr(builder.add(addr, off), i8x16), align=1)
                return mbqm_ir(builder, builder.sext(codes, _I32X16), rows)

            total = builder.add(scaled(pa, rows_a), builder.mul(scaled(pb, rows_b), signs))
            store_int8_ir(builder, mbqm_ir(builder, total, rows_out), zp, lo_, hi_, builder.add(dst, off))
        return context.get_dummy_value()

    return sig, codegen


@nb.njit(**_OPTS)
def add_kernel(a, b, table_a, table_b, sign, params, zp_out, lo, hi, out):
    """ADD (sign 1) / SUB (sign −1) of same-shape int8 operands, flat: 16 at a time in vector
    arithmetic (`_add_blocks`), the last few through the 256-entry tables of each input's rescale (the
    same values) and the scalar epilogue (output parameters: ``params[12:]``)."""
    size = a.size
    full = size - size % LANES
    rb = 4 * params.shape[1]
    _add_blocks(a.ctypes.data, b.ctypes.data, sign, params.ctypes.data, rb, zp_out, lo, hi, out.ctypes.data,
                full // LANES)
    total = np.zeros(LANES, np.int32)
    for j in range(size - full):
        i = full + j
        total[j] = table_a[np.int64(a[i]) + 128] + sign * table_b[np.int64(b[i]) + 128]
    _epilogue(total, 0, 0, size - full, params[12:], zp_out, lo, hi, out, full)


@nb.njit(**_OPTS)
def quantize_kernel(x, scale, zp, lo, hi, out):
    """QUANTIZE float32 → int8/uint8 as LiteRT's reference: ``round(x / scale)`` (float32 division,
    ties away from zero) ``+ zp``, clamped; x and out flat."""
    for i in range(x.size):
        v = np.float64(np.float32(x[i] / scale))
        a = abs(v)
        f = np.floor(a)
        if a - f >= 0.5:
            f += 1.0
        q = np.int64(np.copysign(f, v)) + zp if v == v else zp
        out[i] = lo if q < lo else hi if q > hi else q


@nb.njit(**_OPTS)
def dequantize_kernel(x, scale, zp, out):
    """DEQUANTIZE int8 → float32 as LiteRT's reference: ``float32(double(scale) · (x − zp))``."""
    for i in range(x.size):
        out[i] = np.float32(scale * (np.float64(x[i]) - zp))
