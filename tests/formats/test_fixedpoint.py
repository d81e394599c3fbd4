"""TFLite requantization against an independent scalar reference (Python ints, following the C
source step by step), hand vectors, and LiteRT's reference kernels; the VTA delegate variant
against its own scalar transliteration and the measurements in the Alkali notes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from npukit.errors import FormatError
from npukit.formats import fixedpoint as fp

I32_MIN, I32_MAX = -(2**31), 2**31 - 1


# ----------------------------------------------------------------------- scalar C reference


def c_div(n: int, d: int) -> int:
    """C integer division: truncate toward zero."""
    q = abs(n) // abs(d)
    return q if (n >= 0) == (d > 0) else -q


def wrap32(v: int) -> int:
    return (v + 2**31) % 2**32 - 2**31


def ref_srdhm(a: int, b: int) -> int:
    if a == b == I32_MIN:
        return I32_MAX
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    return c_div(ab + nudge, 1 << 31)


def ref_rdbpot(x: int, exponent: int) -> int:
    mask = (1 << exponent) - 1
    remainder = x & mask  # two's complement AND on Python ints matches int32
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


def ref_mbqm(x: int, m: int, shift: int) -> int:
    left = shift if shift > 0 else 0
    right = -shift if shift < 0 else 0
    return ref_rdbpot(ref_srdhm(wrap32(x * (1 << left)), m), right)


def ref_mbqm_single(x: int, m: int, shift: int) -> int:
    """TFLITE_SINGLE_ROUNDING: one 64-bit product, one rounding shift."""
    total = 31 - shift
    return wrap32((x * m + (1 << (total - 1))) >> total)


def ref_quantize_multiplier(d: float) -> tuple[int, int]:
    if d == 0.0:
        return 0, 0
    q, shift = math.frexp(d)
    qf = q * 2**31
    fixed = math.floor(qf) + (1 if qf - math.floor(qf) >= 0.5 else 0)  # std::round, q > 0
    if fixed == 2**31:
        fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return fixed, shift


# ----------------------------------------------------------------------- hand vectors


def test_srdhm_hand_vectors():
    a = [1, -1, 3, -3, 5, -5, I32_MIN, I32_MIN, I32_MAX, 7]
    b = [2**30, 2**30, 2**30, 2**30, 2**30, 2**30, I32_MIN, I32_MAX, I32_MAX, 0]
    # x·2^30/2^31 = x/2: ties go toward +inf (−0.5 → 0, −2.5 → −2); the lone overflow saturates
    expect = [1, 0, 2, -1, 3, -2, I32_MAX, -(2**31 - 1), 2**31 - 2, 0]
    assert fp.saturating_rounding_doubling_high_mul(a, b).tolist() == expect


def test_rdbpot_hand_vectors():
    x = [1, -1, 3, -3, 5, -5, 6, -6, I32_MIN, I32_MAX, 7]
    e = [1, 1, 1, 1, 1, 1, 2, 2, 31, 31, 0]
    # ties away from zero: ±0.5 → ±1, ±1.5 → ±2, ±2.5 → ±3, ±1.5 → ±2
    expect = [1, -1, 2, -2, 3, -3, 2, -2, -1, 1, 7]
    assert fp.rounding_divide_by_pot(x, e).tolist() == expect


def test_mbqm_hand_vectors_show_double_rounding():
    # M = 0.25 as (2^30, −1). 5·0.25 = 1.25 rounds to 1 once, but SRDHM gives 3 (2.5 up) and
    # RDBPOT(3, 1) gives 2. −5: SRDHM −2.5 → −2, then −1. −3: −1.5 → −1, then −0.5 → −1.
    x = [5, -5, -3, 3, 100]
    assert fp.multiply_by_quantized_multiplier(x, 2**30, -1).tolist() == [2, -1, -1, 1, 25]
    # left shift: M = 2.0 as (2^30, 2): 7 · 4 · 0.5 = 14
    assert fp.multiply_by_quantized_multiplier([7, -7], 2**30, 2).tolist() == [14, -14]


def test_quantize_multiplier_hand_vectors():
    assert fp.quantize_multiplier(0.5) == (2**30, 0)
    assert fp.quantize_multiplier(1.0) == (2**30, 1)
    assert fp.quantize_multiplier(0.75) == (3 * 2**29, 0)
    assert fp.quantize_multiplier(0.0) == (0, 0)
    assert fp.quantize_multiplier(2.0**-40) == (0, 0)  # shift −39 < −31
    assert fp.quantize_multiplier(2.0**-32) == (2**30, -31)
    # q = 1 − 2^-33 rounds to 2^31: halved, shift bumped
    assert fp.quantize_multiplier((1 - 2.0**-33) * 8) == (2**30, 4)
    # ties: q·2^31 = 2^30 + 0.5 rounds up (std::round is half away from zero)
    assert fp.quantize_multiplier((2**30 + 0.5) / 2**31) == (2**30 + 1, 0)
    # the Alkali example ADD's input-1 multiplier (s1 / 2·s1) as LiteRT printed it
    assert fp.add_params(0.02529984, -1, 0.02394966, 17, 0.03020681, -4).input1_multiplier == 2**30


# ----------------------------------------------------------------------- random agreement


def _random_cases(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    kind = rng.integers(0, 4, n)
    x = np.where(
        kind == 0,
        rng.integers(I32_MIN, I32_MAX, n, endpoint=True),
        np.where(kind == 1, rng.integers(-(2**16), 2**16, n), rng.integers(-300, 300, n)),
    )
    x[:8] = [I32_MIN, I32_MAX, -1, 0, 1, I32_MIN + 1, -(2**30), 2**30]
    m = np.where(rng.random(n) < 0.2, 2**30, rng.integers(2**30, 2**31, n))  # 2^30 makes exact ties
    m[:3] = [0, I32_MAX, 2**30]
    # mostly right shifts (TFLite's usual case); left shifts keep x small enough to matter
    shift = np.where(rng.random(n) < 0.8, rng.integers(-31, 1, n), rng.integers(0, 31, n))
    return x, m, shift


def test_mbqm_matches_scalar_reference_on_1e5_cases():
    rng = np.random.default_rng(2024)
    x, m, s = _random_cases(rng, 120_000)
    ours = fp.multiply_by_quantized_multiplier(x, m, s)
    ref = np.array([ref_mbqm(int(a), int(b), int(c)) for a, b, c in zip(x, m, s, strict=True)])
    assert ours.dtype == np.int32
    assert np.array_equal(ours, ref)


def test_single_rounding_matches_scalar_reference():
    rng = np.random.default_rng(77)
    x, m, s = _random_cases(rng, 20_000)
    ours = fp.multiply_by_quantized_multiplier(x, m, s, rounding="single")
    ref = [ref_mbqm_single(int(a), int(b), int(c)) for a, b, c in zip(x, m, s, strict=True)]
    assert ours.tolist() == ref
    # 5 · 0.25 = 1.25 → 1 with one rounding (double rounding gave 2); −0.75 → −1; 0.5 → 1; −0.5 → 0
    got = fp.multiply_by_quantized_multiplier([5, -3, 2, -2], 2**30, -1, rounding="single")
    assert got.tolist() == [1, -1, 1, 0]


def test_negative_ties_match_scalar_reference():
    # every odd x with M = 2^-k (multiplier 2^30) lands exactly on .5 at one of the two roundings
    x = np.arange(-4001, 4001, 2)
    for shift in (-1, -2, -5, 0):
        ours = fp.multiply_by_quantized_multiplier(x, 2**30, shift)
        ref = [ref_mbqm(int(v), 2**30, shift) for v in x]
        assert ours.tolist() == ref
    srdhm = fp.saturating_rounding_doubling_high_mul(x, 2**30)
    assert srdhm.tolist() == [ref_srdhm(int(v), 2**30) for v in x]


@given(st.integers(I32_MIN, I32_MAX), st.integers(I32_MIN, I32_MAX))
def test_srdhm_property(a, b):
    assert int(fp.saturating_rounding_doubling_high_mul(a, b)) == ref_srdhm(a, b)


@given(st.integers(I32_MIN, I32_MAX), st.integers(0, 31))
def test_rdbpot_property(x, e):
    assert int(fp.rounding_divide_by_pot(x, e)) == ref_rdbpot(x, e)


@given(st.floats(1e-12, 1e6, allow_nan=False))
def test_quantize_multiplier_property(d):
    m, s = fp.quantize_multiplier(d)
    assert (m, s) == ref_quantize_multiplier(d)
    if m:
        assert 2**30 <= m < 2**31
        assert abs(m * 2.0 ** (s - 31) - d) <= d * 2.0**-31


def test_quantize_multipliers_per_channel():
    reals = np.array([0.5, 0.0, 3.0, 1e-3])
    m, s = fp.quantize_multipliers(reals)
    assert m.dtype == np.int32 and s.dtype == np.int32
    assert list(zip(m.tolist(), s.tolist(), strict=True)) == [ref_quantize_multiplier(r) for r in reals]


# ----------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "call",
    [
        lambda: fp.multiply_by_quantized_multiplier(np.array([1.5]), 2**30, 0),
        lambda: fp.multiply_by_quantized_multiplier(np.array([2**31]), 2**30, 0),
        lambda: fp.multiply_by_quantized_multiplier([1], -5, 0),
        lambda: fp.multiply_by_quantized_multiplier([1], 2**30, 31),
        lambda: fp.multiply_by_quantized_multiplier([1], 2**30, -32),
        lambda: fp.rounding_divide_by_pot([1], 32),
        lambda: fp.multiply_by_quantized_multiplier([1], 2**30, 0, rounding="nearest"),
        lambda: fp.saturating_rounding_doubling_high_mul(["a"], [1]),
        lambda: fp.quantize_multiplier(-0.5),
        lambda: fp.quantize_multiplier(float("nan")),
        lambda: fp.quantize_multiplier("x"),
        lambda: fp.add_params(0.1, 0, 0.0, 0, 0.1, 0),
        lambda: fp.add_int8([200], [0], fp.add_params(0.1, 0, 0.1, 0, 0.1, 0)),
        lambda: fp.vta_quantize_multiplier(-1.0),
        lambda: fp.vta_rescale_input([1], 0, 16384, 1),
    ],
)
def test_errors(call):
    with pytest.raises(FormatError):
        call()


# ----------------------------------------------------------------------- VTA delegate


def ref_simulate_real_value(val: int, offset: int, mult: int, shift: int) -> int:
    """vta-delegate.cpp simulateRealValue, one int16/int32 C statement at a time."""

    def i16(v: int) -> int:
        return (v + 2**15) % 2**16 - 2**15

    valoffset = i16(offset + val)
    valshift = i16(valoffset * (1 << 7))
    overflow = valshift == mult and valshift == -(2**15)
    raw = valshift * mult
    nudge = (1 << 14) if raw >= 0 else 1 - (1 << 14)
    scaled = (raw + nudge) >> 15  # arithmetic shift: floor
    sat = 2**15 - 1 if overflow else i16(scaled)
    return sat >> -shift


def ref_vta_add(x: int, y: int, p: fp.VtaAddParams) -> int:
    a = ref_simulate_real_value(x, p.input1_offset, p.input1_multiplier, p.input1_shift)
    b = ref_simulate_real_value(y, p.input2_offset, p.input2_multiplier, p.input2_shift)
    acc = wrap32((a + b) * p.output_multiplier)
    acc = acc >> (15 - p.output_shift) if p.output_shift <= 15 else wrap32(acc << (p.output_shift - 15))
    return max(-128, min(127, acc + p.output_offset))


ALKALI = (0.02529984, -1, 0.02394966, 17, 0.03020681, -4)  # example ADD, input order [t1, t0]


def test_vta_params_match_alkali_notes():
    v = fp.vta_add_params(*ALKALI)
    got = [(v.input1_multiplier, v.input1_shift), (v.input2_multiplier, v.input2_shift),
           (v.output_multiplier, v.output_shift)]
    assert got == [(16384, 0), (31019, -1), (27445, -6)]


def test_vta_and_tflite_on_the_alkali_example_input():
    t0, t1 = np.array([5, 8, 2, 3]), np.array([2, 4, 2, 2])
    # LiteRT's output for the example model and the delegate emulation, both from the Alkali notes
    assert fp.add_int8(t1, t0, fp.add_params(*ALKALI)).tolist() == [-11, -7, -13, -13]
    assert fp.vta_add_int8(t1, t0, fp.vta_add_params(*ALKALI)).tolist() == [-12, -7, -14, -13]


def test_vta_add_exhaustive_against_scalar_reference_and_tflite():
    a, b = (v.ravel() for v in np.meshgrid(np.arange(-128, 128), np.arange(-128, 128)))
    vp = fp.vta_add_params(*ALKALI)
    vta = fp.vta_add_int8(a, b, vp)
    sample = slice(None, None, 97)
    assert vta[sample].tolist() == [ref_vta_add(int(x), int(y), vp) for x, y in zip(a[sample], b[sample],
                                                                                     strict=True)]
    diff = vta.astype(int) - fp.add_int8(a, b, fp.add_params(*ALKALI)).astype(int)
    values, counts = np.unique(diff, return_counts=True)
    # the notes measured −1 on 28,285 and 0 on 37,251 of the 65,536 pairs
    assert dict(zip(values.tolist(), counts.tolist(), strict=True)) == {-1: 28285, 0: 37251}


def test_vta_never_above_tflite_on_random_adds():
    rng = np.random.default_rng(11)
    a, b = (v.ravel() for v in np.meshgrid(np.arange(-128, 128), np.arange(-128, 128)))
    for _ in range(5):
        s1, s2 = np.exp(rng.uniform(np.log(0.005), np.log(0.1), 2))
        so = (s1 + s2) * rng.uniform(0.6, 1.5)
        z1, z2, zo = (int(z) for z in rng.integers(-128, 128, 3))
        diff = (fp.vta_add_int8(a, b, fp.vta_add_params(s1, z1, s2, z2, so, zo)).astype(int)
                - fp.add_int8(a, b, fp.add_params(s1, z1, s2, z2, so, zo)).astype(int))
        assert set(np.unique(diff).tolist()) <= {-1, 0}
        assert (diff == -1).any()  # floor shifts lose the rounding half the time or so


def test_vta_requantize_left_shift_and_clamp():
    # shift > 15 makes the SHR immediate negative: the ALU shifts left (sim_driver.cc)
    assert fp.vta_requantize([1, -1, 1000], 1, 16, 0).tolist() == [2, -2, 127]
    assert fp.vta_requantize([3 * 2**15, -(2**15) - 1], 1, 0, 5).tolist() == [8, 3]  # floor: −1.00003 → −2
