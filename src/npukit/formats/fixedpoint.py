"""TFLite integer requantization, bit-exact, and the Alkali VTA delegate's 16-bit variant.

TFLite (reference kernels, default double rounding; LiteRT ``tflite/kernels/internal/common.h``,
``quantization_util.cc``; gemmlowp ``fixedpoint/fixedpoint.h``) represents a positive real
multiplier M as ``M ≈ multiplier · 2^(shift − 31)`` with ``multiplier ∈ [2^30, 2^31)`` and rescales
an int32 ``x`` by::

    MultiplyByQuantizedMultiplier(x, m, shift) =
        RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(x · 2^max(shift, 0), m), max(−shift, 0))

SRDHM computes ``x·m / 2^31`` with a nudge of 2^30 (or 1 − 2^30 for negative products) followed
by C division, which truncates toward zero: the net rounding is to nearest with ties toward +∞
(−2.5 → −2, +2.5 → 3), and the single overflow case INT32_MIN·INT32_MIN saturates to INT32_MAX.
RDBPOT is an arithmetic shift rounding to nearest with ties away from zero (−2.5 → −3). The two
roundings in a row ("double rounding") can differ by one from rounding ``x·M`` once. All of it
is vectorized over int64 intermediates here.

The VTA delegate (antmicro/alkali-csd-fw ``apu-app/src/vta-delegate.cpp``, commit 50f6c5f9) keeps
the same structure with a 16-bit multiplier (``M ≈ m · 2^(shift − 15)``), an input left shift of 7
instead of TFLite's 20, and plain arithmetic right shifts (floor) where TFLite rounds, so it is
deliberately not bit-exact with TFLite (its own tests accept ±1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from npukit.errors import FormatError

__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "AddParams",
    "VtaAddParams",
    "add_int8",
    "add_params",
    "multiply_by_quantized_multiplier",
    "quantize_multiplier",
    "quantize_multipliers",
    "rounding_divide_by_pot",
    "saturating_rounding_doubling_high_mul",
    "vta_add_int8",
    "vta_add_params",
    "vta_quantize_multiplier",
    "vta_requantize",
    "vta_rescale_input",
]

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
_INT16_MIN = -(2**15)
_INT16_MAX = 2**15 - 1
TFLITE_ADD_LEFT_SHIFT = 20  # kernels/add.cc, int8
VTA_LEFT_SHIFT = 7  # vta-delegate.hpp QuantizationData::left_shift


# ---------------------------------------------------------------------------------------------
# input checks


def _int_array(x: object, what: str, lo: int = INT32_MIN, hi: int = INT32_MAX) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        raise FormatError(f"{what}: expected an integer array, got dtype {a.dtype}")
    if a.dtype.kind == "u" and a.dtype.itemsize == 8 and a.size and int(a.max()) > hi:
        raise FormatError(f"{what}: values exceed {hi}")
    a = a.astype(np.int64)
    if a.size and (int(a.min()) < lo or int(a.max()) > hi):
        raise FormatError(f"{what}: values must lie in [{lo}, {hi}], found [{a.min()}, {a.max()}]")
    return a


def _positive_real(real: float, what: str) -> float:
    try:
        r = float(real)
    except (TypeError, ValueError):
        raise FormatError(f"{what}: expected a real number, got {real!r}") from None
    if not math.isfinite(r) or r < 0:
        raise FormatError(f"{what}: multiplier must be finite and non-negative, got {r}")
    return r


def _round_half_away(v: float) -> int:
    # std::round; exact for |v| < 2^52 since v + 0.5 is then representable
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def _wrap(v: np.ndarray, bits: int) -> np.ndarray:
    half = 1 << (bits - 1)
    return ((v + half) % (1 << bits)) - half


# ---------------------------------------------------------------------------------------------
# TFLite



def _mantissa_and_shift(r: float, bits: int) -> tuple[int, int]:
    """``r = m · 2^(shift − bits)`` with ``m`` rounded half away from zero to ``bits`` bits; a
    round-up to ``2^bits`` halves it and bumps the shift; shifts below ``−bits`` give (0, 0)."""
    q, shift = math.frexp(r)
    m = _round_half_away(q * 2.0**bits)
    if m == 2**bits:
        m //= 2
        shift += 1
    if shift < -bits:
        return 0, 0
    return m, shift

def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite ``QuantizeMultiplier``: ``real ≈ multiplier · 2^(shift − 31)``.

    ``frexp`` splits ``real = q · 2^shift`` with q ∈ [0.5, 1); ``multiplier = round(q · 2^31)``
    (half away from zero); a round-up to 2^31 halves it and bumps the shift; ``shift < −31`` gives
    (0, 0), as does ``real == 0``. Negative reals are rejected (no TFLite kernel produces one).
    """
    r = _positive_real(real, "quantize_multiplier")
    return (0, 0) if r == 0.0 else _mantissa_and_shift(r, 31)


def quantize_multipliers(reals: object) -> tuple[np.ndarray, np.ndarray]:
    """`quantize_multiplier` over an array (per-channel scales) → (int32 multipliers, int32 shifts)."""
    r = np.asarray(reals, dtype=np.float64)
    pairs = [quantize_multiplier(v) for v in r.reshape(-1)]  # one per channel: not a hot path
    m = np.array([p[0] for p in pairs], dtype=np.int64).reshape(r.shape).astype(np.int32)
    s = np.array([p[1] for p in pairs], dtype=np.int64).reshape(r.shape).astype(np.int32)
    return m, s


def _trunc_div_pow2(x: np.ndarray, e: int) -> np.ndarray:
    """C ``x / 2^e`` on int64: truncation toward zero (``>>`` alone would floor)."""
    q = x >> e
    return q + ((x < 0) & ((x & ((1 << e) - 1)) != 0))


def saturating_rounding_doubling_high_mul(a: object, b: object) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingDoublingHighMul`` on int32 arrays (broadcasting) → int32.

    ``round(a·b / 2^31)`` with ties toward +∞; ``(INT32_MIN, INT32_MIN)`` → INT32_MAX.
    """
    x = _int_array(a, "saturating_rounding_doubling_high_mul(a)")
    y = _int_array(b, "saturating_rounding_doubling_high_mul(b)")
    ab = x * y  # |ab| ≤ 2^62: exact in int64
    nudge = np.where(ab >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    hi = _trunc_div_pow2(ab + nudge, 31)
    overflow = (x == INT32_MIN) & (y == INT32_MIN)
    return np.where(overflow, np.int64(INT32_MAX), hi).astype(np.int32)


def rounding_divide_by_pot(x: object, exponent: object) -> np.ndarray:
    """gemmlowp ``RoundingDivideByPOT``: ``x / 2^exponent`` rounded to nearest, ties away from 0."""
    v = _int_array(x, "rounding_divide_by_pot(x)")
    e = _int_array(exponent, "rounding_divide_by_pot(exponent)", 0, 31)
    mask = (np.int64(1) << e) - 1
    remainder = v & mask
    threshold = (mask >> 1) + (v < 0)
    return ((v >> e) + (remainder > threshold)).astype(np.int32)


def multiply_by_quantized_multiplier(
    x: object, multiplier: object, shift: object, rounding: Literal["double", "single"] = "double"
) -> np.ndarray:
    """TFLite ``MultiplyByQuantizedMultiplier``, vectorized and broadcasting → int32.

    ``x`` int32 values, ``multiplier`` in [0, 2^31), ``shift`` in [−31, 30] (scalars or per-channel
    arrays). ``rounding="double"`` is the default build (gemmlowp SRDHM then RDBPOT); the pre-shift
    ``x · 2^shift`` is an int32 product in C and wraps here as on every two's-complement target.
    ``rounding="single"`` is the ``TFLITE_SINGLE_ROUNDING`` formula
    ``(x·m + 2^(30−shift)) >> (31 − shift)`` (one rounding, ties toward +∞); pip LiteRT 2.3.0's
    reference FULLY_CONNECTED int8 kernel behaves this way while its ADD and CONV_2D use double
    rounding (measured, see docs/formats.md).
    """
    v = _int_array(x, "multiply_by_quantized_multiplier(x)")
    m = _int_array(multiplier, "multiply_by_quantized_multiplier(multiplier)", 0, INT32_MAX)
    s = _int_array(shift, "multiply_by_quantized_multiplier(shift)", -31, 30)
    if rounding == "single":
        total = 31 - s
        out = (v * m + (np.int64(1) << (total - 1))) >> total  # |v·m| < 2^62: exact in int64
        return _wrap(out, 32).astype(np.int32)
    if rounding != "double":
        raise FormatError(f"multiply_by_quantized_multiplier: rounding {rounding!r} is not 'double'/'single'")
    left = np.maximum(s, 0)
    shifted = _wrap(v << left, 32)  # int32 wrap-around of x * (1 << left)
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(shifted, m), np.maximum(-s, 0))


@dataclass(frozen=True)
class AddParams:
    """Quantized int8 ADD as TFLite's ``kernels/add.cc`` Prepare sets it up."""

    input1_offset: int
    input2_offset: int
    output_offset: int
    left_shift: int
    input1_multiplier: int
    input1_shift: int
    input2_multiplier: int
    input2_shift: int
    output_multiplier: int
    output_shift: int


def _f32(v: float) -> float:
    # flatbuffer scales are float32; kernels promote them to double
    return float(np.float32(v))


def add_params(s1: float, zp1: int, s2: float, zp2: int, s_out: float, zp_out: int) -> AddParams:
    """TFLite int8 ADD parameters: inputs rescaled to ``2·max(s1, s2)``, pre-shifted by 2^20."""
    s1, s2, so = _f32(s1), _f32(s2), _f32(s_out)
    if min(s1, s2, so) <= 0:
        raise FormatError(f"add_params: scales must be positive, got {s1}, {s2}, {so}")
    twice = 2.0 * max(s1, s2)
    ls = TFLITE_ADD_LEFT_SHIFT
    reals = (s1 / twice, s2 / twice, twice / ((1 << ls) * so))
    (m1, e1), (m2, e2), (mo, eo) = (quantize_multiplier(r) for r in reals)
    if max(e1, e2, eo) > 0:
        raise FormatError(f"add_params: output scale {so} too small for ADD (multiplier ≥ 1)")
    return AddParams(-int(zp1), -int(zp2), int(zp_out), ls, m1, e1, m2, e2, mo, eo)


def add_int8(x: object, y: object, p: AddParams, act_min: int = -128, act_max: int = 127) -> np.ndarray:
    """``reference_integer_ops::Add`` element-wise on int8 inputs → int8."""
    a = _int_array(x, "add_int8(x)", -128, 127)
    b = _int_array(y, "add_int8(y)", -128, 127)
    sa = multiply_by_quantized_multiplier((a + p.input1_offset) << p.left_shift, p.input1_multiplier,
                                          p.input1_shift).astype(np.int64)
    sb = multiply_by_quantized_multiplier((b + p.input2_offset) << p.left_shift, p.input2_multiplier,
                                          p.input2_shift).astype(np.int64)
    r = multiply_by_quantized_multiplier(sa + sb, p.output_multiplier, p.output_shift).astype(np.int64)
    return np.clip(r + p.output_offset, act_min, act_max).astype(np.int8)


# ---------------------------------------------------------------------------------------------
# Alkali VTA delegate


def vta_quantize_multiplier(real: float) -> tuple[int, int]:
    """``computeQuantizationParameters``: ``real ≈ m · 2^(shift − 15)`` with int16 m.

    Below 1e-6 → (0, 0); ``m = round(q · 2^15)`` half away from zero with the same 2^15 carry as
    TFLite; ``shift < −15`` → (0, 0).
    """
    r = _positive_real(real, "vta_quantize_multiplier")
    return (0, 0) if r < 1e-6 else _mantissa_and_shift(r, 15)


@dataclass(frozen=True)
class VtaAddParams:
    """The delegate's ``QuantizationData`` for the two inputs and the output of an ADD."""

    input1_offset: int
    input2_offset: int
    output_offset: int
    input1_multiplier: int
    input1_shift: int
    input2_multiplier: int
    input2_shift: int
    output_multiplier: int
    output_shift: int


def vta_add_params(s1: float, zp1: int, s2: float, zp2: int, s_out: float, zp_out: int) -> VtaAddParams:
    """VTA delegate ADD parameters (``VTAALUOp`` constructor): TFLite's recipe with left shift 7."""
    s1, s2, so = _f32(s1), _f32(s2), _f32(s_out)
    if min(s1, s2, so) <= 0:
        raise FormatError(f"vta_add_params: scales must be positive, got {s1}, {s2}, {so}")
    twice = 2.0 * max(s1, s2)
    reals = (s1 / twice, s2 / twice, twice / ((1 << VTA_LEFT_SHIFT) * so))
    (m1, e1), (m2, e2), (mo, eo) = (vta_quantize_multiplier(r) for r in reals)
    return VtaAddParams(-int(zp1), -int(zp2), int(zp_out), m1, e1, m2, e2, mo, eo)


def vta_rescale_input(x: object, offset: int, multiplier: int, shift: int) -> np.ndarray:
    """``simulateRealValue``: int8 input → int16 value fed to the VTA accumulator (as int32).

    ``v = int16((x + offset) · 2^7)``; ``p = v·m``; ``(p ± 2^14) >> 15`` (floor, not truncation);
    saturate only for (−32768)·(−32768); then ``>> −shift`` (floor). Requires shift ≤ 0.
    """
    a = _int_array(x, "vta_rescale_input(x)", -128, 127)
    if shift > 0:
        raise FormatError(f"vta_rescale_input: shift must be ≤ 0 for an input multiplier, got {shift}")
    v = _wrap(_wrap(a + offset, 16) << VTA_LEFT_SHIFT, 16)
    p = v * int(multiplier)
    nudge = np.where(p >= 0, 1 << 14, 1 - (1 << 14))
    scaled = (p + nudge) >> 15
    sat = np.where((v == _INT16_MIN) & (multiplier == _INT16_MIN), _INT16_MAX, _wrap(scaled, 16))
    return (sat >> (-int(shift))).astype(np.int32)


def vta_requantize(acc: object, multiplier: int, shift: int, offset: int) -> np.ndarray:
    """VTA ALU tail (and ``requantizeResults``): ``((acc · m) >> (15 − shift)) + offset``, clamp.

    int32 wrap-around multiply, arithmetic (floor) shift, a negative shift amount shifts left,
    clamp to [−128, 127].
    """
    a = _int_array(acc, "vta_requantize(acc)")
    prod = _wrap(a * int(multiplier), 32)
    amount = 15 - int(shift)
    shifted = prod >> amount if amount >= 0 else _wrap(prod << -amount, 32)
    return np.clip(shifted + int(offset), -128, 127).astype(np.int8)


def vta_add_int8(x: object, y: object, p: VtaAddParams) -> np.ndarray:
    """The delegate's int8 ADD: CPU input rescale, then VTA ALU ADD, MUL, SHR, ADD, MIN, MAX."""
    a = vta_rescale_input(x, p.input1_offset, p.input1_multiplier, p.input1_shift).astype(np.int64)
    b = vta_rescale_input(y, p.input2_offset, p.input2_multiplier, p.input2_shift).astype(np.int64)
    return vta_requantize(_wrap(a + b, 32), p.output_multiplier, p.output_shift, p.output_offset)
