"""Shared pieces of the int8 reference kernels: checks, activation ranges, padding, requantization.

Every formula mirrors TFLite's reference path (LiteRT ``kernels/kernel_util.cc``,
``kernels/padding.h``, ``kernels/internal/common.h``); the integer requantization itself is
`npukit.formats.fixedpoint`, tested bit-exact against LiteRT.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from npukit.errors import ModelError
from npukit.models.tflite.model import Model, Op, Quant, Tensor
from npukit.models.tflite.options import (
    ACT_NONE,
    ACT_RELU,
    ACT_RELU6,
    ACT_RELU_N1_TO_1,
    ACTIVATION_NAMES,
    PAD_SAME,
    PAD_VALID,
)

Arrays = Sequence[np.ndarray | None]
Kernel = Callable[[Arrays], list[np.ndarray]]

INT8_MIN, INT8_MAX = -128, 127
QRANGE = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255), np.dtype(np.int16): (-32768, 32767)}


class UnsupportedOp(ModelError):
    """An op (or an op configuration) the reference interpreter does not implement."""


@dataclass(frozen=True)
class Ctx:
    """What a kernel's prepare step sees: the model and the op, with helpers that fail in one line."""

    model: Model
    op: Op

    def fail(self, reason: str) -> UnsupportedOp:
        return UnsupportedOp(f"op {self.op.index} {self.op.name}: {reason}")

    def t(self, k: int, outputs: bool = False) -> Tensor:
        idx = (self.op.outputs if outputs else self.op.inputs)
        if k >= len(idx) or idx[k] < 0:
            raise self.fail(f"missing {'output' if outputs else 'input'} {k}")
        return self.model.tensors[idx[k]]

    def has_input(self, k: int) -> bool:
        return k < len(self.op.inputs) and self.op.inputs[k] >= 0

    def out(self, k: int = 0) -> Tensor:
        return self.t(k, outputs=True)

    def q(self, tensor: Tensor, per_tensor: bool = True) -> Quant:
        if tensor.quant is None:
            raise self.fail(f"tensor {tensor.name} has no quantization parameters")
        if per_tensor and tensor.quant.per_channel:
            raise self.fail(f"tensor {tensor.name}: per-channel quantization is not supported here")
        return tensor.quant

    def int8(self, *tensors: Tensor) -> None:
        for t in tensors:
            if t.dtype == np.float32:
                raise self.fail(f"float tensor {t.name}: float models are not supported (int8 only)")
            if t.dtype != np.int8:
                raise self.fail(f"tensor {t.name} is {t.dtype}, expected int8")

    def const(self, tensor: Tensor) -> np.ndarray:
        if tensor.data is None:
            raise self.fail(f"tensor {tensor.name} must be a constant")
        return tensor.data

    def activation(self, act: int, out: Tensor) -> tuple[int, int]:
        return activation_range(act, self.q(out), out.dtype, self)


def round_half_away(x: np.ndarray) -> np.ndarray:
    """C ``round`` on float64 values (ties away from zero), exact for every double."""
    a = np.abs(x)
    r = np.floor(a)
    r += (a - r) >= 0.5
    return np.copysign(r, x)


def quantize_value(f: float, q: Quant) -> int:
    """``zp + TfLiteRound(f / scale)`` with the division in float32, as the kernels' quantize lambda."""
    ratio = np.float32(f) / np.float32(q.s)
    return q.zp + int(round_half_away(np.float64(ratio)))


def activation_range(act: int, q: Quant, dtype: np.dtype, ctx: Ctx | None = None) -> tuple[int, int]:
    """``CalculateActivationRangeQuantized``: the fused activation as an output clamp."""
    lo, hi = QRANGE[np.dtype(dtype)]
    if act == ACT_NONE:
        return lo, hi
    if act == ACT_RELU:
        return max(lo, quantize_value(0.0, q)), hi
    if act == ACT_RELU6:
        return max(lo, quantize_value(0.0, q)), min(hi, quantize_value(6.0, q))
    if act == ACT_RELU_N1_TO_1:
        return max(lo, quantize_value(-1.0, q)), min(hi, quantize_value(1.0, q))
    name = ACTIVATION_NAMES.get(act, str(act))
    if ctx is not None:
        raise ctx.fail(f"fused activation {name} is not supported")
    raise ModelError(f"fused activation {name} is not supported")


def out_size(padding: int, size: int, filt: int, stride: int, dilation: int = 1) -> int:
    eff = (filt - 1) * dilation + 1
    if padding == PAD_SAME:
        return (size + stride - 1) // stride
    if padding == PAD_VALID:
        return (size + stride - eff) // stride
    raise ModelError(f"unknown padding {padding}")


def pad_before(size: int, filt: int, stride: int, dilation: int, out: int) -> int:
    """``ComputePaddingWithOffset``: the leading pad (any odd remainder goes after)."""
    eff = (filt - 1) * dilation + 1
    return max((out - 1) * stride + eff - size, 0) // 2


class Requantizer:
    """``MultiplyByQuantizedMultiplier`` (double rounding) on int64 arrays → int64, fused for speed,
    with its per-channel constants prepared once per op.

    The same function as `fixedpoint.multiply_by_quantized_multiplier` (tested equal on random and
    edge values, and both bit-exact with LiteRT) without its input checks, in a few in-place array
    passes: with ``v = wrap32(x · 2^left) · m``, gemmlowp's SRDHM ``trunc((v + nudge) / 2^31)``
    equals ``(v + 2^30) >> 31`` for either sign (for v < 0, trunc of a negative is a ceiling, and
    ``ceil((v + 1 − 2^30) / 2^31) = floor((v + 2^30) / 2^31)``); the saturating case needs
    m = −2^31, which QuantizeMultiplier never produces. RoundingDivideByPOT by r ≥ 1 is
    ``(h + 2^(r−1) − [h < 0]) >> r`` (half away from zero). Inputs must hold int32 values,
    ``multiplier`` lie in [0, 2^31) and ``shift`` in [−31, 30], scalars or per-channel arrays.
    """

    def __init__(self, multiplier, shift) -> None:
        def squeeze(a: np.ndarray):
            return a.reshape(()) if a.size == 1 and a.ndim <= 1 else a

        m = np.asarray(multiplier, dtype=np.int64)
        s = np.asarray(shift, dtype=np.int64)
        self.m = squeeze(m)
        self.left = squeeze(np.maximum(s, 0))
        self.right = squeeze(np.maximum(-s, 0))
        self.has_left = bool(np.any(self.left))
        self.has_right = bool(np.any(self.right))
        self.all_right = bool(np.all(self.right > 0))
        self.half = squeeze((np.int64(1) << self.right) >> 1)
        self.right_pos = self.right > 0

    def __call__(self, acc: np.ndarray, inplace: bool = False) -> np.ndarray:
        """``inplace=True`` reuses ``acc`` (an int64 array the caller no longer needs)."""
        x = np.asarray(acc, dtype=np.int64)
        if self.has_left:
            x = ((x << self.left) + 2**31 & 0xFFFFFFFF) - 2**31  # C's int32 x * (1 << left) wraps
            inplace = True
        if inplace and (self.m.ndim == 0 or (x.ndim >= 1 and x.shape[-1] == self.m.shape[-1])):
            h = np.multiply(x, self.m, out=x)
        else:
            h = x * self.m
        h += 1 << 30
        h >>= 31
        if not self.has_right:
            return h
        negative = h < 0
        h += self.half
        h -= negative if self.all_right else negative & self.right_pos
        h >>= self.right
        return h


def mbqm(acc: np.ndarray, multiplier, shift, inplace: bool = False) -> np.ndarray:
    """One-off `Requantizer` call (prepare-time tables and small ops)."""
    return Requantizer(multiplier, shift)(acc, inplace)


def finish(acc: np.ndarray, zp: int, lo: int, hi: int, dtype=np.int8) -> np.ndarray:
    """Add the output zero point, clamp to the activation range, narrow (``acc`` is consumed)."""
    acc += zp
    np.maximum(acc, lo, out=acc)
    np.minimum(acc, hi, out=acc)
    return acc.astype(dtype)


def window_slices(size_p: int, out: int, stride: int, k: int, dilation: int) -> slice:
    start = k * dilation
    return slice(start, start + (out - 1) * stride + 1, stride)


def pad_input(x: np.ndarray, pt: int, pl: int, hp: int, wp: int, value) -> np.ndarray:
    """NHWC ``x`` placed at (pt, pl) inside an (hp, wp) canvas filled with ``value``."""
    n, h, w, c = x.shape
    if pt == 0 and pl == 0 and hp == h and wp == w:
        return x
    xp = np.full((n, hp, wp, c), value, dtype=x.dtype)
    xp[:, pt:pt + h, pl:pl + w, :] = x[:, : hp - pt, : wp - pl, :]
    return xp


@dataclass(frozen=True)
class Geometry:
    """Output size and leading padding of a 2-D window op (conv, depthwise conv, pooling)."""

    oh: int
    ow: int
    pt: int
    pl: int
    hp: int  # padded canvas height/width: large enough for every window
    wp: int


def geometry(h: int, w: int, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int, padding: int) -> Geometry:
    oh, ow = out_size(padding, h, kh, sh, dh), out_size(padding, w, kw, sw, dw)
    pt, pl = pad_before(h, kh, sh, dh, oh), pad_before(w, kw, sw, dw, ow)
    hp = max(h + pt, (oh - 1) * sh + (kh - 1) * dh + 1)
    wp = max(w + pl, (ow - 1) * sw + (kw - 1) * dw + 1)
    return Geometry(oh, ow, pt, pl, hp, wp)
