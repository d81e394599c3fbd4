"""pccx W4A8 primitives against independent oracles (ml_dtypes, a BF16 grid, Python ints, math)."""

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from npukit.errors import FormatError
from npukit.targets.pccx import numerics as nx

from ._oracle import bf16_bits_from_f32, bf16_bits_from_f64, bits_equal, gemv_ref

RNG = np.random.default_rng(1234)


def _rand_bf16(n, rng=RNG, finite=True, lo_exp=-20, hi_exp=8):
    """Random BF16 values (float32) with exponents in a range, plus signs."""
    mant = rng.integers(0, 128, n)
    ex = rng.integers(lo_exp, hi_exp, n)
    sign = rng.choice([-1.0, 1.0], n)
    v = sign * (1 + mant / 128.0) * np.exp2(ex.astype(float))
    return v.astype(np.float32)


# --- BF16 rounding --------------------------------------------------------------------------------

def test_bf16_from_f32_matches_ml_dtypes_on_random_bit_patterns():
    bits = RNG.integers(0, 1 << 32, 300_000, dtype=np.uint64).astype(np.uint32)
    bits[:8] = [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x00000001, 0x7F7FFFFF, 0x3F808000]
    x = bits.view(np.float32)
    assert bits_equal(nx.to_bits(x), bf16_bits_from_f32(x))
    # values come back as float32 holding exactly the BF16 value
    fin = np.isfinite(x)
    assert np.array_equal(nx.bf16(x)[fin], x[fin].astype(ml_dtypes.bfloat16).astype(np.float32))


@pytest.mark.parametrize(("value", "bits"), [
    (1.0 + 2.0**-8, 0x3F80),  # tie -> even mantissa 0
    (1.0 + 3 * 2.0**-8, 0x3F82),  # tie between mantissa 1 and 2 -> 2
    (-(1.0 + 2.0**-8 + 2.0**-30), 0xBF81),  # above the tie -> away
    (1.0 + 2.0**-8 + 2.0**-40, 0x3F81),  # float64 input: one rounding (via float32 it would be 0x3F80)
    (3.4028234663852886e38, 0x7F80),  # float32 max is past the BF16 overflow midpoint
    (3.3895313892515355e38, 0x7F7F),  # BF16 max stays
    (2.0**-133, 0x0001),  # smallest BF16 subnormal
    (2.0**-134, 0x0000),  # exact tie to zero (even)
    (3 * 2.0**-135, 0x0001),
    (-0.0, 0x8000),
    (float("inf"), 0x7F80),
    (float("-inf"), 0xFF80),
])
def test_bf16_hand_vectors(value, bits):
    assert int(nx.to_bits(np.float64(value))) == bits


def test_nan_is_quiet_and_widen_is_exact():
    assert int(nx.to_bits(np.float64("nan"))) & 0x7FFF == 0x7FC0
    sig = np.float32(np.array(0x7F800001, np.uint32).view(np.float32))  # signalling NaN in float32
    assert int(nx.to_bits(sig)) & 0x7FC0 == 0x7FC0
    all_bits = np.arange(1 << 16, dtype=np.uint16)
    wide = nx.from_bits(all_bits)
    assert wide.dtype == np.float32
    ref = all_bits.view(ml_dtypes.bfloat16).astype(np.float32)
    assert np.array_equal(wide.view(np.uint32), ref.view(np.uint32))


def test_bf16_from_f64_single_rounding_matches_grid_oracle():
    # values near BF16 midpoints (where double rounding would bite) and random magnitudes
    base = _rand_bf16(600, lo_exp=-140, hi_exp=127).astype(np.float64)
    half_ulp = np.ldexp(1.0, np.frexp(np.abs(base))[1] - 9)
    near = base + half_ulp * RNG.choice([1.0, 1 + 2.0**-30, 1 - 2.0**-30], base.size)
    wild = RNG.standard_normal(600) * np.exp2(RNG.integers(-150, 130, 600))
    x = np.concatenate([near, wild, [3.3961e38, 3.3962e38, -3.3962e38]])
    assert bits_equal(nx.to_bits(x), bf16_bits_from_f64(x))


# --- activation quantization ----------------------------------------------------------------------

@pytest.mark.parametrize(("x", "q", "e"), [
    ([1.0, -0.5, 0.0078125], [64, -32, 0], 0),  # 0.5 step rounds half to even -> 0
    ([1.9921875], [127], 0),  # 127.5 -> 128 -> clipped
    ([-3.0, 0.0234375], [-96, 1], 1),  # 0.75 -> 1
    ([0.0, -0.0], [0, 0], 0),
    ([2.0**-133, -2.0**-133], [64, -64], -133),
    ([0.01171875, 0.005859375], [96, 48], -7),
])
def test_quantize_act_hand_vectors(x, q, e):
    got_q, got_e = nx.quantize_act(np.array(x, np.float32))
    assert got_e == e and got_q.tolist() == q and got_q.dtype == np.int8


def test_quantize_act_rejects_non_finite():
    with pytest.raises(FormatError):
        nx.quantize_act(np.array([1.0, np.inf], np.float32))


def test_int4_packing_layout():
    packed = np.array([[0x8F, 0x70]], np.uint8)  # low nibble first: -1, -8, 0, 7
    assert nx.unpack_int4(packed, 4).tolist() == [[-1, -8, 0, 7]]
    w = RNG.integers(-8, 8, (5, 9))
    assert np.array_equal(nx.unpack_int4(nx.pack_int4(w), 9), w)
    with pytest.raises(FormatError):
        nx.pack_int4(np.array([8]))


# --- GEMV -----------------------------------------------------------------------------------------

@given(st.integers(1, 40), st.integers(1, 70), st.booleans(), st.booleans(), st.integers(0, 2**32 - 1),
       st.sampled_from(["int4", "int8"]))
def test_gemv_int_matches_oracle(m, k, use_s, use_d, seed, fmt):
    rng = np.random.default_rng(seed)
    lim = 8 if fmt == "int4" else 128
    w = rng.integers(-lim, lim, (m, k))
    x = _rand_bf16(k, rng, lo_exp=int(rng.integers(-130, 0)), hi_exp=int(rng.integers(1, 100)))
    x[rng.random(k) < 0.1] = 0.0
    s = rng.standard_normal(m).astype(np.float32) if use_s else None
    d = _rand_bf16(m, rng) if use_d else None
    got = nx.gemv(w, x, s, d, fmt=fmt)
    assert bits_equal(nx.to_bits(got), gemv_ref(w, x, s, d))


@given(st.integers(1, 12), st.integers(1, 64), st.integers(0, 2**32 - 1))
def test_gemv_fp16_fixed_point_matches_oracle(m, k, seed):
    rng = np.random.default_rng(seed)
    w16 = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-24, 4, (m, k)))).astype(np.float16)
    wfix = np.array([[int(math.ldexp(float(v), 24)) for v in row] for row in w16], dtype=object)
    x = _rand_bf16(k, rng)
    got = nx.gemv(w16, x, fmt="fp16")
    assert bits_equal(nx.to_bits(got), gemv_ref(wfix, x, fixed_shift=24))


def test_int_dot_is_exact_for_wide_operands():
    w = RNG.integers(-(2**40) + 1, 2**40, (3, 4000))
    q = RNG.integers(-127, 128, 4000)
    want = [sum(int(a) * int(b) for a, b in zip(row, q, strict=True)) for row in w]
    assert nx.int_dot(w, q).tolist() == want


def test_gemv_poison_and_ksplit():
    out = nx.gemv(np.ones((3, 2), int), np.array([1.0, np.nan], np.float32))
    assert np.isnan(out).all()
    assert [nx.k_splits(k) for k in (1, 4096, 4097, 16384)] == [1, 1, 2, 4]
    with pytest.raises(FormatError):
        nx.gemv(np.ones((3, 2), int), np.ones(3, np.float32))


def test_gemm_is_per_vector_gemv():
    w = RNG.integers(-8, 8, (6, 10))
    xs = np.stack([_rand_bf16(10), _rand_bf16(10, hi_exp=-3)])
    got = nx.gemm(w, xs)
    for n in range(2):
        assert bits_equal(nx.to_bits(got[n]), gemv_ref(w, xs[n]))


def test_findemax_register():
    assert nx.findemax(-np.inf, np.array([1.0, 3.0, -2.0], np.float32)) == np.float32(3.0)
    assert nx.findemax(5.0, np.array([1.0], np.float32)) == np.float32(5.0)


# --- SFU functions --------------------------------------------------------------------------------

def _specials():
    return np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0**-133], np.float32)


def _check_unary(fn, ref, x=None, **kw):
    x = np.concatenate([_rand_bf16(400, lo_exp=-12, hi_exp=6), _specials()]) if x is None else x
    want = np.array([ref(float(v)) for v in x], dtype=np.float64)
    assert bits_equal(nx.to_bits(fn(x, **kw)), bf16_bits_from_f64(want))
    dst = _rand_bf16(x.size)
    want_acc = dst.astype(np.float64) + want
    assert bits_equal(nx.to_bits(fn(x, dst=dst, **kw)), bf16_bits_from_f64(want_acc))


def _safe(f):
    def g(v):
        try:
            return f(v)
        except (ValueError, ZeroDivisionError):
            return float("nan")
        except OverflowError:
            return float("inf")
    return g


def _gelu(v):
    return 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)))


@pytest.mark.parametrize(("fn", "ref"), [
    (nx.cvo_exp, _safe(lambda v: math.exp(v) if not math.isnan(v) else v)),
    (nx.cvo_sqrt, _safe(lambda v: math.sqrt(v) if v >= 0 or math.isnan(v) else float("nan"))),
    (nx.cvo_sin, _safe(lambda v: math.sin(v) if math.isfinite(v) else float("nan"))),
    (nx.cvo_cos, _safe(lambda v: math.cos(v) if math.isfinite(v) else float("nan"))),
    (nx.cvo_tanh, _safe(math.tanh)),
    (nx.cvo_square, lambda v: v * v),
    (nx.cvo_rsqrt, _safe(lambda v: (math.copysign(math.inf, v) if v == 0 else
                                   float("nan") if v < 0 or math.isnan(v) else 1.0 / math.sqrt(v)))),
    (nx.cvo_recip, lambda v: math.copysign(math.inf, v) if v == 0 else 1.0 / v),
])
def test_unary_cvo_functions(fn, ref):
    _check_unary(fn, ref)


def test_gelu_tanh_form():
    x = _rand_bf16(400, lo_exp=-10, hi_exp=5)
    want = np.array([_gelu(float(v)) for v in x])
    assert bits_equal(nx.to_bits(nx.cvo_gelu(x)), bf16_bits_from_f64(want))
    # Gemma's gelu_pytorch_tanh at a hand point: gelu(1) = 0.841192 -> BF16 0x3F57
    assert int(nx.to_bits(nx.cvo_gelu(np.float32(1.0)))) == 0x3F57


def test_exp_sub_emax():
    x = _rand_bf16(300, lo_exp=-4, hi_exp=4)
    emax = float(np.max(x))
    want = np.array([math.exp(float(v) - emax) for v in x])
    assert bits_equal(nx.to_bits(nx.cvo_exp(x, e_max=emax)), bf16_bits_from_f64(want))


def test_reduce_sum_is_serial_float32():
    for n in (1, 7, 1000, 5000):
        x = _rand_bf16(n, lo_exp=-10, hi_exp=10)
        s = np.float32(0.0)
        for v in x:
            s = np.float32(s + v)
        assert int(nx.to_bits(nx.reduce_sum(x))) == int(bf16_bits_from_f32(s))
    # starts from +0.0: a sum of negative zeros is +0
    assert int(nx.to_bits(nx.reduce_sum(np.array([-0.0, -0.0], np.float32)))) == 0x0000
    # serial order is visible: 2**24 + 1 + 1 in float32 stays 2**24, pairwise would give 2**24 + 2
    x = np.array([2.0**24, 1.0, 1.0], np.float32)
    assert float(nx.reduce_sum(x)) == 2.0**24


def test_scale_and_recip_scale():
    x = _rand_bf16(300)
    s = np.float32(-0.375)
    assert bits_equal(nx.to_bits(nx.cvo_scale(x, s)), bf16_bits_from_f64(x.astype(float) * -0.375))
    want = bf16_bits_from_f64(x.astype(float) / -0.375)
    assert bits_equal(nx.to_bits(nx.cvo_scale(x, s, recip=True)), want)
    assert not np.any(nx.to_bits(nx.cvo_scale(x, 0.0, recip=True)) & 0x7FFF)
    dst = _rand_bf16(300)
    want = dst.astype(float) + x.astype(float) * 3.0
    assert bits_equal(nx.to_bits(nx.cvo_scale(x, 3.0, dst=dst)), bf16_bits_from_f64(want))


def test_binary_and_bias_ops():
    x, y = _rand_bf16(500), _rand_bf16(500, lo_exp=-30, hi_exp=2)
    assert bits_equal(nx.to_bits(nx.cvo_mul(x, y)), bf16_bits_from_f64(x.astype(float) * y.astype(float)))
    assert bits_equal(nx.to_bits(nx.cvo_add(x, y)), bf16_bits_from_f64(x.astype(float) + y.astype(float)))
    c = np.float32(0.3125)
    want = np.maximum(x.astype(float) - 0.3125, 0.0)
    assert bits_equal(nx.to_bits(nx.cvo_relu_bias(x, c)), bf16_bits_from_f64(want))
    assert nx.reduce_max(x) == np.max(x)
    assert nx.reduce_max(np.zeros(0, np.float32)) == -np.inf
