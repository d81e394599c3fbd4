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
    declared = tuple(x_t.shape)

    def run(ins: Arrays) -> list[np.ndarray]:
        x = ins[0]
        if x.shape[:1] != declared[:1] and declared[:1] == (1,) and target[:1] == (1,):
            return [x.reshape((x.shape[0], *target[1:]))]  # a batch along N (`Interpreter.run_batch`)
        return [x.reshape(target)]

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


def _same_quant(ctx: Ctx, tensors) -> None:
    """int8 data movement keeps the quantization: every tensor must share the output's."""
    out = ctx.out()
    if out.dtype != np.int8:
        return
    qy = ctx.q(out)
    for t in tensors:
        q = ctx.q(t)
        if q.zp != qy.zp or np.float32(q.s) != np.float32(qy.s):
            raise ctx.fail(f"input {t.name} quantization differs from the output's")


def prepare_shape(ctx: Ctx) -> Kernel:
    dtype = ctx.out().dtype
    if dtype not in (np.int32, np.int64):
        raise ctx.fail(f"SHAPE output type {dtype} is not supported")

    def run(ins: Arrays) -> list[np.ndarray]:
        return [np.array(ins[0].shape, dtype=dtype)]

    return run


def prepare_pack(ctx: Ctx) -> Kernel:
    ins_t = [ctx.t(k) for k in range(len(ctx.op.inputs))]
    if any(t.dtype != ctx.out().dtype for t in ins_t) or ctx.out().dtype not in (np.int8, np.int32):
        raise ctx.fail("PACK needs int8 or int32 inputs of the output's type")
    _same_quant(ctx, ins_t)
    axis = ctx.op.options.axis % len(ctx.out().shape)

    def run(ins: Arrays) -> list[np.ndarray]:
        return [np.stack(list(ins), axis=axis)]

    return run


def _bits(mask: int, i: int) -> bool:
    return bool((mask >> i) & 1)


def prepare_strided_slice(ctx: Ctx) -> Kernel:
    """Begin/end masks, shrink-axis mask, negative indices and strides, or ``offset`` (end = begin +
    size) without masks; no ellipsis or new-axis masks. Python slicing clamps out-of-range bounds
    the way TFLite does."""
    o = ctx.op.options
    x_t, y_t = ctx.t(0), ctx.out()
    if x_t.dtype not in (np.int8, np.int32) or y_t.dtype != x_t.dtype:
        raise ctx.fail("STRIDED_SLICE needs int8 or int32 data")
    _same_quant(ctx, [x_t])
    if o.ellipsis_mask or o.new_axis_mask:
        raise ctx.fail("ellipsis and new-axis masks are not supported")
    if o.offset and (o.begin_mask or o.end_mask or o.shrink_axis_mask):
        raise ctx.fail("masks together with offset=true are not supported")

    def run(ins: Arrays) -> list[np.ndarray]:
        x, begin, end = ins[0], ins[1].reshape(-1), ins[2].reshape(-1)
        strides = ins[3].reshape(-1) if len(ins) > 3 and ins[3] is not None else np.ones_like(begin)
        index: list[slice | int] = []
        for i in range(begin.size):
            b, e, s = int(begin[i]), int(end[i]), int(strides[i])
            if o.offset:
                e += b
            if _bits(o.shrink_axis_mask, i):
                index.append(b + x.shape[i] if b < 0 else b)
                continue
            index.append(slice(None if _bits(o.begin_mask, i) else b, None if _bits(o.end_mask, i) else e, s))
        return [np.array(x[tuple(index)])]  # a copy that keeps 0-d results 0-d

    return run
