"""SOFTMAX, LOGISTIC, HARD_SWISH, QUANTIZE and DEQUANTIZE.

Element-wise int8 → int8 functions depend on one byte only, so they are evaluated once per op on all
256 codes with TFLite's exact arithmetic and then applied as a table lookup:
LOGISTIC as LiteRT's reference resolver builds its table (``LUTPopulate``: float32 dequantize,
``1/(1+exp(−x))``, round half away from zero), HARD_SWISH with the int16 fixed-point steps of
``reference_ops::HardSwish``. SOFTMAX is gemmlowp's fixed-point exp / reciprocal
(``reference_ops::Softmax``), row by row over the last axis, vectorized.
"""

from __future__ import annotations

import math

import numpy as np

from npukit.formats import fixedpoint as fp
from npukit.models.tflite.kernels import gemmlowp as gl
from npukit.models.tflite.kernels.common import (
    QRANGE,
    Arrays,
    Ctx,
    Kernel,
    finish,
    mbqm,
    quantize_value,
    round_half_away,
)

_CODES = np.arange(-128, 128, dtype=np.int64)


def _lut_kernel(table: np.ndarray) -> Kernel:
    lut = np.asarray(table, dtype=np.int8)

    def run(ins: Arrays) -> list[np.ndarray]:
        return [lut[ins[0].astype(np.int16) + 128]]

    return run


def _float_lut(ctx: Ctx, fn) -> Kernel:
    """``LUTPopulate``: float32 dequantize, ``fn`` in float32, rescale, round half away from zero."""
    x_t, y_t = ctx.t(0), ctx.out()
    ctx.int8(x_t, y_t)
    qx, qy = ctx.q(x_t), ctx.q(y_t)
    deq = np.float32(qx.s) * (_CODES - qx.zp).astype(np.float32)
    transformed = fn(deq)
    rescaled = round_half_away((transformed * (np.float32(1.0) / np.float32(qy.s))).astype(np.float64))
    return _lut_kernel(np.clip(rescaled.astype(np.int64) + qy.zp, -128, 127))


def _sigmoid32(x: np.ndarray) -> np.ndarray:
    e = np.exp(-x.astype(np.float64)).astype(np.float32)  # exp in double rounded: the correct expf
    return np.float32(1.0) / (np.float32(1.0) + e)


def prepare_logistic(ctx: Ctx) -> Kernel:
    return _float_lut(ctx, _sigmoid32)


def prepare_tanh(ctx: Ctx) -> Kernel:
    return _float_lut(ctx, lambda x: np.tanh(x.astype(np.float64)).astype(np.float32))


_RELU_BOUNDS = {"RELU": (0.0, None), "RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0)}


def prepare_relu(ctx: Ctx) -> Kernel:
    """``QuantizedReluX``: requantize by float32 ``s_in/s_out``, clamp to the bounds quantized with
    ``roundf(bound / s_out)``."""
    x_t, y_t = ctx.t(0), ctx.out()
    ctx.int8(x_t, y_t)
    qx, qy = ctx.q(x_t), ctx.q(y_t)
    lower, upper = _RELU_BOUNDS[ctx.op.name]
    m, e = fp.quantize_multiplier(float(np.float32(qx.s) / np.float32(qy.s)))
    lo = max(-128, quantize_value(lower, qy))
    hi = 127 if upper is None else min(127, quantize_value(upper, qy))
    return _lut_kernel(finish(mbqm(_CODES - qx.zp, m, e), qy.zp, lo, hi))


def _cdiv(n: int, d: int) -> int:
    """C integer division (truncates toward zero)."""
    q = abs(n) // d
    return q if n >= 0 else -q


def _srdhm16(a: int, b: int) -> int:
    if a == b == -32768:
        return 32767
    ab = a * b
    return _cdiv(ab + ((1 << 14) if ab >= 0 else 1 - (1 << 14)), 1 << 15)


def _rdbpot(x: int, e: int) -> int:
    mask = (1 << e) - 1
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> e) + (1 if (x & mask) > threshold else 0)


def _sat_left16(x: int, amount: int) -> int:
    return max(-32768, min(32767, x * (1 << amount)))


def _down_scale_16(m32: int) -> int:
    if m32 >= 2**31 - 1 - (1 << 15):
        return 32767
    return (m32 + (1 << 15)) >> 16


def prepare_hard_swish(ctx: Ctx) -> Kernel:
    x_t, y_t = ctx.t(0), ctx.out()
    ctx.int8(x_t, y_t)
    qx, qy = ctx.q(x_t), ctx.q(y_t)
    hires = np.float32(1.0 / 128.0) * np.float32(qx.s)  # float32 arithmetic, as HardSwishPrepare
    out_m32, out_e = fp.quantize_multiplier(float(hires / np.float32(qy.s)))
    relu_m32, relu_e = fp.quantize_multiplier(float(hires / np.float32(3.0 / 32768.0)))
    if out_e > 0:
        raise ctx.fail("output scale too small for HARD_SWISH (multiplier exponent > 0)")
    out_m, relu_m = _down_scale_16(out_m32), _down_scale_16(relu_m32)
    table = []
    for code in range(-128, 128):
        v = (code - qx.zp) * 128
        pre_out = _srdhm16(v, out_m)
        r = v
        if relu_e > 0:
            r = _sat_left16(r, relu_e - 1)
        r = _srdhm16(r, relu_m)
        if relu_e > 0:
            r = _sat_left16(r, 1)
        if relu_e < 0:
            r = _rdbpot(r, -relu_e)
        r = (r + (1 << 15)) >> 1
        prod = r * pre_out
        pre_shift = 32767 if r == pre_out == -32768 else _cdiv(prod, 1 << 15)
        y = _rdbpot(pre_shift, -out_e) + qy.zp
        table.append(max(-128, min(127, y)))
    return _lut_kernel(np.array(table))


def prepare_softmax(ctx: Ctx, compiled: bool = False) -> Kernel:
    """``compiled``: the same tables, rows walked by the numba kernel `_nb.softmax`."""
    x_t, y_t = ctx.t(0), ctx.out()
    ctx.int8(x_t, y_t)
    qx, qy = ctx.q(x_t), ctx.q(y_t)
    if qy.zp != -128 or abs(qy.s - 1 / 256) > 0.001 / 256:
        raise ctx.fail("int8 SOFTMAX output must have scale 1/256 and zero point -128")
    beta = float(np.float32(ctx.op.options.beta))
    real = min(beta * float(np.float32(qx.s)) * float(1 << 26), float(2**31 - 1))
    multiplier, left_shift = fp.quantize_multiplier(real)
    diff_min = -math.floor(31.0 * (1 << 26) / (1 << left_shift))
    # everything before the row sum depends only on d = max − x ∈ [0, 255]: tabulate it
    d = np.arange(256, dtype=np.int64)
    used = -d >= diff_min
    # the left shift can wrap for unused differences; their values are never read
    exp = gl.exp_on_negative_values(gl.mul(gl.wrap32(-d << left_shift), multiplier), 5)
    exp = np.where(used, exp, 0)
    exp_rescaled = np.where(used, gl.rdbpot(exp, 12), 0)
    if compiled:
        from npukit.models.tflite.kernels import _nb

        tables = (np.ascontiguousarray(exp, np.int64), np.ascontiguousarray(exp_rescaled, np.int64),
                  np.ascontiguousarray(used))

        def run_compiled(ins: Arrays) -> list[np.ndarray]:
            x = ins[0]
            out = np.empty(x.shape, np.int8)
            depth = x.shape[-1]
            _nb.softmax(np.ascontiguousarray(x).reshape(-1, depth), *tables, out.reshape(-1, depth))
            return [out]

        return run_compiled

    def run(ins: Arrays) -> list[np.ndarray]:
        x = ins[0].astype(np.int16)
        idx = (x.max(axis=-1, keepdims=True) - x).astype(np.intp)
        total = exp_rescaled[idx].sum(axis=-1, keepdims=True)
        if total.size <= 16:  # a few rows: Python ints beat NumPy's per-call overhead
            pairs = [gl.reciprocal_scalar(int(t), 12) for t in total.reshape(-1)]
            scale = np.array([p[0] for p in pairs], np.int64).reshape(total.shape)
            bits_over_unit = np.array([p[1] for p in pairs], np.int64).reshape(total.shape)
        else:
            scale, bits_over_unit = gl.reciprocal(total, 12)
        out = gl.rdbpot(gl.mul(scale, exp[idx]), bits_over_unit + 31 - 8) - 128
        return [np.where(used[idx], np.clip(out, -128, 127), -128).astype(np.int8)]

    return run


def prepare_quantize(ctx: Ctx) -> Kernel:
    x_t, y_t = ctx.t(0), ctx.out()
    qy = ctx.q(y_t)
    if y_t.dtype not in QRANGE or y_t.dtype == np.int16:
        raise ctx.fail(f"quantizing to {y_t.dtype} is not supported")
    lo, hi = QRANGE[y_t.dtype]
    if x_t.dtype == np.float32:
        inv_scale = np.float32(qy.s)

        def run_float(ins: Arrays) -> list[np.ndarray]:
            q = round_half_away((ins[0].astype(np.float32) / inv_scale).astype(np.float64))
            return [np.clip(q + qy.zp, lo, hi).astype(y_t.dtype)]

        return run_float
    if x_t.dtype not in (np.int8, np.uint8):
        raise ctx.fail(f"requantizing from {x_t.dtype} is not supported")
    qx = ctx.q(x_t)
    m, e = fp.quantize_multiplier(float(np.float64(qx.s) / np.float64(qy.s)))
    codes = np.arange(QRANGE[x_t.dtype][0], QRANGE[x_t.dtype][1] + 1, dtype=np.int64)
    lut = finish(mbqm(codes - qx.zp, m, e), qy.zp, lo, hi, y_t.dtype)
    base = -int(codes[0])

    def run_requant(ins: Arrays) -> list[np.ndarray]:
        return [lut[ins[0].astype(np.int16) + base]]

    return run_requant


def prepare_dequantize(ctx: Ctx) -> Kernel:
    x_t, y_t = ctx.t(0), ctx.out()
    if x_t.dtype not in (np.int8, np.uint8) or y_t.dtype != np.float32:
        raise ctx.fail(f"dequantizing {x_t.dtype} to {y_t.dtype} is not supported")
    qx = ctx.q(x_t)
    scale, zp = np.float64(np.float32(qx.s)), qx.zp

    def run(ins: Arrays) -> list[np.ndarray]:
        return [(scale * (ins[0].astype(np.float64) - zp)).astype(np.float32)]

    return run
