"""Per-op lowering: each delegated TFLite op becomes one VTA program (built once, static shapes) and
a run function doing the host's share.

Exact mode (bit-identical with LiteRT BUILTIN_REF). VTA does everything up to the int32
accumulator; the host does what VTA's ALU cannot express:

* CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED: the host lays out the im2col matrix (padding taps
  filled with the input zero point, so they contribute nothing); VTA computes ``Σ x·w + bias'`` with
  ``bias' = bias − zp_in·Σw`` folded at build time (the same int32 value TFLite's ``Σ (x − zp_in)·w
  + bias`` gives, modulo 2^32); the host applies TFLite's rescale: per-channel
  ``MultiplyByQuantizedMultiplier`` (31-bit multiplier, 64-bit product, two roundings) for the
  convolutions, ``round(acc · s_in·s_w/s_out)`` in double for FULLY_CONNECTED; then zero point and
  clamp. A depthwise layer is a GEMM whose off-diagonal weight blocks are zero and skipped.
* ADD: the host rescales each int8 input (a 256-entry table of ``MBQM((x − zp)·2^20)``), VTA adds
  the int32 operands, the host applies the output ``MBQM`` and clamp.

With ``requant_on_vta`` (``--set requant=vta``) CONV_2D, DEPTHWISE_CONV_2D and ADD run TFLite's
rescale, zero point and clamp on the ALU too (`delegate.requant`, exact whenever the accumulator
bound is below 2^30) and store int8; FULLY_CONNECTED's double-precision rescale stays on the host.

Alkali mode: the seed's ADD, with the host's 16-bit input rescale (``simulateRealValue``) and the
ALU sequence ADD, MUL, SHR, ADD, MIN, MAX on VTA; the seed does not delegate anything else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from npukit.errors import NpukitError
from npukit.formats import fixedpoint as fp
from npukit.models.tflite.kernels.common import Ctx, geometry, pad_input, round_half_away, window_slices
from npukit.models.tflite.kernels.conv import ConvParams, conv_params
from npukit.models.tflite.model import Model, Op
from npukit.targets.vta.delegate.eltwise import AddProgram
from npukit.targets.vta.delegate.gemm import GemmProgram
from npukit.targets.vta.delegate.requant import Requant
from npukit.targets.vta.hw import VtaHw

GEMM_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")


@dataclass
class Lowered:
    """One delegated op: its VTA program and the function the delegate segment calls."""

    index: int
    name: str
    program: GemmProgram | AddProgram
    run: Callable[[list[np.ndarray]], list[np.ndarray]]
    host_requant: int  # elements the host rescales after VTA
    export_bytes: int  # bytes VTA writes back to DRAM for the host


def supported(model: Model, op: Op, variant: str) -> str | None:
    """None if the op can go to VTA in ``variant``, else the reason it stays on the host."""
    ins = [model.tensors[i] for i in op.inputs if i >= 0]
    out = model.tensors[op.outputs[0]]
    if op.name not in (*GEMM_OPS, "ADD"):
        return "not a VTA op"
    if variant == "alkali" and op.name != "ADD":
        return "the Alkali delegate only offloads ADD"
    if any(t.dtype != np.int8 for t in ins[:2]) or out.dtype != np.int8:
        return "not int8"
    if op.name == "ADD":
        if ins[0].is_const or ins[1].is_const:
            return "constant operand"
        return None
    try:
        p = conv_params(model, op_index(model, op))
    except NpukitError as exc:  # whatever the host kernel rejects stays on the host
        return str(exc)
    if p.weights_zero_point != 0:
        return "asymmetric weights"
    if op.name == "CONV_2D" and ins[0].shape[3] != p.weights.shape[3]:
        return "grouped convolution"
    return None


def op_index(model: Model, op: Op) -> int:
    return next(i for i, o in enumerate(model.ops) if o is op)


def _im2col(x: np.ndarray, kh: int, kw: int, o, zp: int) -> tuple[np.ndarray, tuple[int, int, int]]:
    nb, h, w, c = x.shape
    g = geometry(h, w, kh, kw, o.stride_h, o.stride_w, o.dilation_h_factor, o.dilation_w_factor, o.padding)
    xp = pad_input(x, g.pt, g.pl, g.hp, g.wp, np.int8(zp))
    cols = np.empty((nb, g.oh, g.ow, kh, kw, c), np.int8)
    for i in range(kh):
        rows = window_slices(g.hp, g.oh, o.stride_h, i, o.dilation_h_factor)
        for j in range(kw):
            cols_j = window_slices(g.wp, g.ow, o.stride_w, j, o.dilation_w_factor)
            cols[:, :, :, i, j, :] = xp[:, rows, cols_j, :]
    return cols.reshape(nb * g.oh * g.ow, kh * kw * c), (nb, g.oh, g.ow)


def _weight_matrix(op: Op, p: ConvParams, cin: int) -> tuple[np.ndarray, int, int]:
    """(K, N) int8 weights of the GEMM, kernel height and width."""
    w = p.weights
    if op.name == "FULLY_CONNECTED":
        return np.ascontiguousarray(w.T), 1, 1
    if op.name == "CONV_2D":
        n, kh, kw, c = w.shape
        return np.ascontiguousarray(w.transpose(1, 2, 3, 0).reshape(kh * kw * c, n)), kh, kw
    _, kh, kw, n = w.shape  # depthwise 1HWO: output o reads input channel o // multiplier
    mult = n // cin
    dense = np.zeros((kh * kw, cin, n), np.int8)
    o = np.arange(n)
    dense[:, o // mult, o] = w.reshape(kh * kw, n)
    return dense.reshape(kh * kw * cin, n), kh, kw


def lower_gemm(hw: VtaHw, model: Model, index: int, requant_on_vta: bool = False) -> Lowered:
    op = model.ops[index]
    p = conv_params(model, index)
    x_t, y_t = model.tensors[op.inputs[0]], model.tensors[op.outputs[0]]
    fc = op.name == "FULLY_CONNECTED"
    cin = x_t.shape[-1] if not fc else p.weights.shape[1]
    wmat, kh, kw = _weight_matrix(op, p, cin)
    zp_in, zp_out = p.input_zero_point, p.output_zero_point
    bias = p.bias - zp_in * wmat.astype(np.int64).sum(axis=0)
    bias32 = ((bias + 2**31) % 2**32 - 2**31).astype(np.int32)  # int32 arithmetic wraps alike
    if fc:
        m = int(np.prod(x_t.shape)) // cin
    else:
        g = geometry(x_t.shape[1], x_t.shape[2], kh, kw, p.options.stride_h, p.options.stride_w,
                     p.options.dilation_h_factor, p.options.dilation_w_factor, p.options.padding)
        m = x_t.shape[0] * g.oh * g.ow
    lo, hi = p.act_min, p.act_max
    req = Requant(p.multipliers, p.shifts, zp_out, lo, hi) if requant_on_vta and not fc else None
    prog = GemmProgram(hw, m, wmat, bias32, req)

    def run(ins: list[np.ndarray]) -> list[np.ndarray]:
        x = ins[0]
        a = x.reshape(-1, cin) if fc else _im2col(x, kh, kw, p.options, zp_in)[0]
        acc = prog.run(a).astype(np.int64)
        if prog.requant is not None:  # VTA requantized: int8 already
            return [acc.astype(np.int8).reshape(y_t.shape)]
        if fc:  # LiteRT's reference FULLY_CONNECTED: double rescale, ties away from zero
            scaled = round_half_away(acc.astype(np.float64) * p.real_scales).astype(np.int64)
        else:
            scaled = fp.multiply_by_quantized_multiplier(acc, p.multipliers, p.shifts).astype(np.int64)
        y = np.clip(scaled + zp_out, lo, hi).astype(np.int8)
        return [y.reshape(y_t.shape)]

    host = 0 if prog.requant is not None else m * wmat.shape[1]
    return Lowered(index, op.name, prog, run, host, prog.planes * m * prog.nb * hw.block)


def lower_add(hw: VtaHw, model: Model, index: int, variant: str, requant_on_vta: bool = False) -> Lowered:
    op = model.ops[index]
    ctx = Ctx(model, op)
    a_t, b_t, y_t = ctx.t(0), ctx.t(1), ctx.out()
    qa, qb, qy = ctx.q(a_t), ctx.q(b_t), ctx.q(y_t)
    lo, hi = ctx.activation(op.options.fused_activation_function, y_t)
    n = int(np.prod(y_t.shape))
    codes = np.arange(-128, 128)
    if variant == "alkali":
        vp = fp.vta_add_params(qa.s, qa.zp, qb.s, qb.zp, qy.s, qy.zp)
        table_a = fp.vta_rescale_input(codes, vp.input1_offset, vp.input1_multiplier, vp.input1_shift)
        table_b = fp.vta_rescale_input(codes, vp.input2_offset, vp.input2_multiplier, vp.input2_shift)
        prog = AddProgram(hw, n, (vp.output_multiplier, vp.output_shift, vp.output_offset, lo, hi))
    else:
        p = fp.add_params(qa.s, qa.zp, qb.s, qb.zp, qy.s, qy.zp)
        table_a = fp.multiply_by_quantized_multiplier((codes + p.input1_offset) << p.left_shift,
                                                      p.input1_multiplier, p.input1_shift)
        table_b = fp.multiply_by_quantized_multiplier((codes + p.input2_offset) << p.left_shift,
                                                      p.input2_multiplier, p.input2_shift)
        bound = int(np.abs(table_a.astype(np.int64)).max() + np.abs(table_b.astype(np.int64)).max())
        vreq = None
        if requant_on_vta:
            vreq = Requant(np.array([p.output_multiplier] * hw.block), np.array([p.output_shift] * hw.block),
                           p.output_offset, lo, hi)
        prog = AddProgram(hw, n, bound=bound, exact_requant=vreq)

    def run(ins: list[np.ndarray]) -> list[np.ndarray]:
        a = np.broadcast_to(ins[0], y_t.shape).reshape(-1).astype(np.intp) + 128
        b = np.broadcast_to(ins[1], y_t.shape).reshape(-1).astype(np.intp) + 128
        out = prog.run(table_a[a], table_b[b])
        if variant == "alkali" or prog.exact_requant is not None:
            return [out.reshape(y_t.shape)]
        r = fp.multiply_by_quantized_multiplier(out, p.output_multiplier, p.output_shift).astype(np.int64)
        return [np.clip(r + p.output_offset, lo, hi).astype(np.int8).reshape(y_t.shape)]

    host = 0 if variant == "alkali" or prog.exact_requant is not None else n
    export = prog.rows * hw.block * len(prog.out_addrs)
    return Lowered(index, op.name, prog, run, host, export)
