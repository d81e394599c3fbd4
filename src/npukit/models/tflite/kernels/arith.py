"""ADD, SUB and MUL on int8 tensors (NumPy broadcasting stands in for TFLite's broadcast loops).

ADD and SUB rescale both inputs to ``2·max(s1, s2)`` after a 2^20 pre-shift (``kernels/add.cc``,
``kernels/sub.cc``); SUB's output multiplier may exceed one. MUL multiplies the offset inputs and
rescales once by ``s1·s2/s_out``, computed in float32 as ``kernels/mul.cc`` does.
"""

from __future__ import annotations

import numpy as np

from npukit.errors import FormatError
from npukit.formats import fixedpoint as fp
from npukit.models.tflite.kernels.common import Arrays, Ctx, Kernel, Requantizer, finish, mbqm

_CODES = np.arange(-128, 128, dtype=np.int64)


def _operands(ctx: Ctx):
    a_t, b_t, y_t = ctx.t(0), ctx.t(1), ctx.out()
    ctx.int8(a_t, b_t, y_t)
    return a_t, b_t, y_t, ctx.q(a_t), ctx.q(b_t), ctx.q(y_t)


def _tabled(table_a, table_b, sign: int, stages, zp: int, lo: int, hi: int, fallback: Kernel) -> Kernel:
    """The compiled form of ADD/SUB: same-shape operands through `_nb_ops.add_kernel` (vector
    arithmetic; the tables for a tail shorter than 16), broadcasting ones through ``fallback`` (the
    NumPy kernel). ``stages``: (offset, multiplier, shift, pre-shift) of input 1, input 2 and the
    output, each one `MultiplyByQuantizedMultiplier` of ``(x + offset) << pre-shift``."""
    from npukit.models.tflite.kernels import _nb_gemm, _nb_ops

    # every table entry is an input rescaled below 2^28 in magnitude: int32 sums cannot overflow
    ta, tb = np.ascontiguousarray(table_a, np.int32), np.ascontiguousarray(table_b, np.int32)
    lanes = _nb_gemm.LANES
    rows = [(off, m, pre + max(e, 0), max(-e, 0)) for off, m, e, pre in stages]
    params = np.vstack([_nb_gemm.requant_params(*(np.full(lanes, v) for v in row)) for row in rows])

    def run(ins: Arrays) -> list[np.ndarray]:
        a, b = ins[0], ins[1]
        if a.shape != b.shape:
            return fallback(ins)
        out = np.empty(a.shape, np.int8)
        _nb_ops.add_kernel(np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(b).reshape(-1), ta, tb,
                           sign, params, zp, lo, hi, out.reshape(-1))
        return [out]

    return run


def prepare_add(ctx: Ctx, compiled: bool = False) -> Kernel:
    _a_t, _b_t, y_t, qa, qb, qy = _operands(ctx)
    try:
        p = fp.add_params(qa.s, qa.zp, qb.s, qb.zp, qy.s, qy.zp)
    except FormatError as exc:
        raise ctx.fail(str(exc)) from None
    lo, hi = ctx.activation(ctx.op.options.fused_activation_function, y_t)
    # each input's rescale depends on its int8 code only: 256-entry tables, same arithmetic
    table_a = mbqm((_CODES + p.input1_offset) << p.left_shift, p.input1_multiplier, p.input1_shift)
    table_b = mbqm((_CODES + p.input2_offset) << p.left_shift, p.input2_multiplier, p.input2_shift)
    requant = Requantizer(p.output_multiplier, p.output_shift)

    def run(ins: Arrays) -> list[np.ndarray]:
        total = table_a[ins[0].astype(np.intp) + 128] + table_b[ins[1].astype(np.intp) + 128]
        return [finish(requant(total, inplace=True), p.output_offset, lo, hi)]

    if compiled:
        stages = ((p.input1_offset, p.input1_multiplier, p.input1_shift, p.left_shift),
                  (p.input2_offset, p.input2_multiplier, p.input2_shift, p.left_shift),
                  (0, p.output_multiplier, p.output_shift, 0))
        return _tabled(table_a, table_b, 1, stages, int(p.output_offset), lo, hi, run)
    return run


def prepare_sub(ctx: Ctx, compiled: bool = False) -> Kernel:
    _a_t, _b_t, y_t, qa, qb, qy = _operands(ctx)
    s1, s2, so = (np.float64(np.float32(v)) for v in (qa.s, qb.s, qy.s))
    left_shift = 20
    twice = 2.0 * max(s1, s2)
    m1, e1 = fp.quantize_multiplier(s1 / twice)
    m2, e2 = fp.quantize_multiplier(s2 / twice)
    mo, eo = fp.quantize_multiplier(twice / ((1 << left_shift) * so))
    lo, hi = ctx.activation(ctx.op.options.fused_activation_function, y_t)
    table_a = mbqm((_CODES - qa.zp) << left_shift, m1, e1)
    table_b = mbqm((_CODES - qb.zp) << left_shift, m2, e2)
    requant = Requantizer(mo, eo)
    zy = qy.zp

    def run(ins: Arrays) -> list[np.ndarray]:
        diff = table_a[ins[0].astype(np.intp) + 128] - table_b[ins[1].astype(np.intp) + 128]
        return [finish(requant(diff, inplace=True), zy, lo, hi)]

    if compiled:
        stages = ((-qa.zp, m1, e1, left_shift), (-qb.zp, m2, e2, left_shift), (0, mo, eo, 0))
        return _tabled(table_a, table_b, -1, stages, int(zy), lo, hi, run)
    return run


def prepare_mul(ctx: Ctx) -> Kernel:
    _a_t, _b_t, y_t, qa, qb, qy = _operands(ctx)
    real = np.float32(qa.s) * np.float32(qb.s) / np.float32(qy.s)  # float arithmetic in mul.cc
    requant = Requantizer(*fp.quantize_multiplier(float(real)))
    lo, hi = ctx.activation(ctx.op.options.fused_activation_function, y_t)
    za, zb, zy = qa.zp, qb.zp, qy.zp

    def run(ins: Arrays) -> list[np.ndarray]:
        a, b = ins[0].astype(np.int64), ins[1].astype(np.int64)
        return [finish(requant((a - za) * (b - zb), inplace=True), zy, lo, hi)]

    return run
