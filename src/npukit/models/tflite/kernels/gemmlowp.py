"""gemmlowp fixed-point transcendental functions (``fixedpoint/fixedpoint.h``) on int32 raw values.

Values are int64 arrays holding int32 raw fixed-point numbers; a ``FixedPoint<int32, I>`` has
31 − I fractional bits. Multiplication is `saturating_rounding_doubling_high_mul`, addition wraps
as int32 does, and the constants are gemmlowp's. Used by the int8 SOFTMAX reference kernel.
"""

from __future__ import annotations

import numpy as np

_I32_MAX = 2**31 - 1
_I32_MIN = -(2**31)


def wrap32(x: np.ndarray) -> np.ndarray:
    return ((x + 2**31) & 0xFFFFFFFF) - 2**31


def mul(a, b) -> np.ndarray:
    """``SaturatingRoundingDoublingHighMul``: ``(a·b + 2^30) >> 31`` (see `common.mbqm` for why the
    floor form equals gemmlowp's nudge-and-truncate), saturating only for INT32_MIN · INT32_MIN."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    out = (a * b + (1 << 30)) >> 31
    both_min = (a == _I32_MIN) & (b == _I32_MIN)
    return np.where(both_min, _I32_MAX, out) if np.any(both_min) else out


def rdbpot(x, exponent) -> np.ndarray:
    """``RoundingDivideByPOT`` (half away from zero) for exponents in [0, 31], scalar or array."""
    x = np.asarray(x, dtype=np.int64)
    e = np.asarray(exponent, dtype=np.int64)
    return (x + ((np.int64(1) << e) >> 1) - ((x < 0) & (e > 0))) >> e


def sat_shift_left(x: np.ndarray, exponent: int) -> np.ndarray:
    """``SaturatingRoundingMultiplyByPOT<exponent>`` for exponent > 0."""
    threshold = (1 << (31 - exponent)) - 1
    return np.where(x > threshold, _I32_MAX, np.where(x < -threshold, _I32_MIN, x << exponent))


def exp_on_interval_minus_quarter_to_0(a: np.ndarray) -> np.ndarray:
    """exp(a) for a ∈ [−1/4, 0), Q0.31 in and out: a Taylor expansion around −1/8."""
    constant_term = 1895147668  # exp(-1/8)
    one_third = 715827883
    x = wrap32(a + (1 << 28))
    x2 = mul(x, x)
    x3 = mul(x2, x)
    x4 = mul(x2, x2)
    x4_over_4 = rdbpot(x4, 2)
    poly = rdbpot(wrap32(mul(wrap32(x4_over_4 + x3), one_third) + x2), 1)
    return wrap32(constant_term + mul(constant_term, wrap32(x + poly)))


_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535),
           (3, 720401), (4, 242))


def exp_on_negative_values(a: np.ndarray, integer_bits: int) -> np.ndarray:
    """exp(a) for a ≤ 0 given as FixedPoint<int32, integer_bits>; result Q0.31."""
    frac = 31 - integer_bits
    quarter = 1 << (frac - 2)
    a_mod = wrap32((a & (quarter - 1)) - quarter)
    result = exp_on_interval_minus_quarter_to_0(sat_shift_left(a_mod, integer_bits) if integer_bits
                                                else a_mod)
    remainder = wrap32(a_mod - a)
    for exponent, multiplier in _BARREL:
        if integer_bits > exponent:
            bit = 1 << (frac + exponent)
            result = np.where((remainder & bit) != 0, mul(result, multiplier), result)
    if integer_bits > 5:
        clamp = -(1 << (36 - integer_bits))
        result = np.where(a < clamp, 0, result)
    return np.where(a == 0, _I32_MAX, result)


def one_over_one_plus_x_for_x_in_0_1(a: np.ndarray) -> np.ndarray:
    """1/(1+a) for a ∈ [0, 1) in Q0.31: Newton–Raphson with gemmlowp's 48/17 − 32/17·d start."""
    total = a + _I32_MAX
    half_denominator = np.where(total >= 0, (total + 1) // 2, -((-total + 1) // 2))  # RoundingHalfSum
    x = wrap32(1515870810 + mul(half_denominator, -1010580540))  # Q2.29
    one_q2 = 1 << 29
    for _ in range(3):
        one_minus = wrap32(one_q2 - mul(half_denominator, x))
        x = wrap32(x + sat_shift_left(mul(x, one_minus), 2))
    return sat_shift_left(x, 1)


def reciprocal(x: np.ndarray, x_integer_digits: int) -> tuple[np.ndarray, np.ndarray]:
    """TFLite ``GetReciprocal``: (1/x as Q0.31 scaled into [0.5, 1), bits over unit) for x > 0."""
    bits = np.zeros(x.shape, np.int64)
    v = x.astype(np.int64).copy()
    for s in (16, 8, 4, 2, 1):  # bit length of each (positive, < 2^31) value
        big = v >= (1 << s)
        bits += np.where(big, s, 0)
        v = np.where(big, v >> s, v)
    bits += v  # v is now 0 or 1
    clz = 32 - bits
    num_bits_over_unit = x_integer_digits - clz
    shifted_minus_one = ((x.astype(np.int64) << clz) - (1 << 31)) & 0xFFFFFFFF
    shifted_minus_one = np.where(shifted_minus_one >= 2**31, shifted_minus_one - 2**32, shifted_minus_one)
    return one_over_one_plus_x_for_x_in_0_1(shifted_minus_one), num_bits_over_unit


# scalar twins of the above on Python ints: a softmax over a few rows spends its time in NumPy call
# overhead otherwise (same formulas; tested equal to the array versions)


def _mul_s(a: int, b: int) -> int:
    return _I32_MAX if a == b == _I32_MIN else (a * b + (1 << 30)) >> 31


def _wrap_s(x: int) -> int:
    return ((x + 2**31) & 0xFFFFFFFF) - 2**31


def _sat_left_s(x: int, exponent: int) -> int:
    threshold = (1 << (31 - exponent)) - 1
    return _I32_MAX if x > threshold else _I32_MIN if x < -threshold else x << exponent


def reciprocal_scalar(x: int, x_integer_digits: int) -> tuple[int, int]:
    """`reciprocal` for one positive int32 value."""
    clz = 32 - int(x).bit_length()
    a = _wrap_s((int(x) << clz) - (1 << 31))
    total = a + _I32_MAX
    half = (total + 1) // 2 if total >= 0 else -((-total + 1) // 2)
    r = _wrap_s(1515870810 + _mul_s(half, -1010580540))
    for _ in range(3):
        r = _wrap_s(r + _sat_left_s(_mul_s(r, _wrap_s((1 << 29) - _mul_s(half, r))), 2))
    return _sat_left_s(r, 1), x_integer_digits - clz
