"""RESHAPE, SQUEEZE, CONCATENATION and PAD: data movement, no arithmetic.

Int8 CONCATENATION requires every input to share the output's scale and zero point (TFLite checks
it in Prepare); PAD fills with the output zero point, i.e. real zero.
"""

from __future__ import annotations

import numpy as np

from npukit.models.tflite.kernels.common import Arrays, Ctx, Kernel
from npukit.models.tflite.options import ACT_NONE


def _target_shape(ctx: Ctx) -> tuple[int, ...]:
    shape = list(ctx.out().shape)
    if ctx.op.name == "RESHAPE":
        if ctx.has_input(1) and ctx.t(1).data is not None:
            shape = [int(v) for v in ctx.t(1).data.reshape(-1)]
        elif ctx.op.options is not None and ctx.op.options.new_shape:
            shape = list(ctx.op.options.new_shape)
    return tuple(shape)


def prepare_reshape(ctx: Ctx) -> Kernel:
    x_t, y_t = ctx.t(0), ctx.out()
    if x_t.dtype != y_t.dtype:
        raise ctx.fail(f"input {x_t.dtype} and output {y_t.dtype} differ")
    target = _target_shape(ctx)

    def run(ins: Arrays) -> list[np.ndarray]:
        return [ins[0].reshape(target)]

    return run


def prepare_squeeze(ctx: Ctx) -> Kernel:
    x_t = ctx.t(0)
    dims = ctx.op.options.squeeze_dims if ctx.op.options is not None else ()
    rank = len(x_t.shape)
    axes = tuple(sorted({d % rank for d in dims})) if dims else None

    def run(ins: Arrays) -> list[np.ndarray]:
        x = ins[0]
        if axes is None:
            return [np.squeeze(x)]
        return [np.squeeze(x, axis=axes)]

    return run


def prepare_concatenation(ctx: Ctx) -> Kernel:
    y_t = ctx.out()
    ins_t = [ctx.t(k) for k in range(len(ctx.op.inputs))]
    ctx.int8(*ins_t, y_t)
    qy = ctx.q(y_t)
    for t in ins_t:
        q = ctx.q(t)
        if q.zp != qy.zp or np.float32(q.s) != np.float32(qy.s):
            raise ctx.fail(f"input {t.name} quantization differs from the output's (TFLite requires equal)")
    o = ctx.op.options
    if o.fused_activation_function != ACT_NONE:
        raise ctx.fail("a fused activation on CONCATENATION is not supported")
    axis = o.axis % len(y_t.shape)

    def run(ins: Arrays) -> list[np.ndarray]:
        return [np.concatenate(list(ins), axis=axis)]

    return run


def prepare_pad(ctx: Ctx) -> Kernel:
    x_t, y_t = ctx.t(0), ctx.out()
    ctx.int8(x_t, y_t)
    pads = ctx.const(ctx.t(1)).astype(np.int64).reshape(-1, 2)
    if np.any(pads < 0):
        raise ctx.fail("negative paddings are not supported")
    widths = [(int(a), int(b)) for a, b in pads]
    fill = ctx.q(y_t).zp

    def run(ins: Arrays) -> list[np.ndarray]:
        return [np.pad(ins[0], widths, mode="constant", constant_values=fill)]

    return run
