"""FP8 against ml_dtypes (the independent oracle): all 256 decodes, >10^6 encodes both modes."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from npukit.errors import FormatError
from npukit.formats import fp8

ORACLE = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2, "e4m3": ml_dtypes.float8_e4m3}
FMTS = list(ORACLE)
ALL = np.arange(256, dtype=np.uint8)


def _ref_decode(fmt):
    return ALL.view(ORACLE[fmt]).astype(np.float32)


def _ref_encode(x, fmt, saturate):
    with np.errstate(invalid="ignore", over="ignore"):
        if saturate:
            m = float(ml_dtypes.finfo(ORACLE[fmt]).max)
            x = np.clip(x, -m, m)  # NaN passes through clip, ±inf clamps to ±max
        return x.astype(ORACLE[fmt]).view(np.uint8)


def _boundary_inputs(fmt):
    """float32 values within a few ulps of every rounding midpoint, max, subnormals and zero."""
    ref = _ref_decode(fmt).astype(np.float64)
    vals = np.unique(np.abs(ref[np.isfinite(ref)]))
    mids = (vals[:-1] + vals[1:]) / 2  # exact in float64 and float32 (few mantissa bits)
    top = vals[-1] + (vals[-1] - vals[-2]) / 2  # the overflow tie
    centres = np.concatenate([vals, mids, [top, 2 * vals[-1]]]).astype(np.float32)
    base = centres.view(np.uint32).astype(np.int64)
    offs = np.arange(-40, 41)
    bits = (base[:, None] + offs[None, :]).ravel()
    bits = bits[(bits >= 0) & (bits < 0x7F800000)].astype(np.uint32)
    pos = bits.view(np.float32)
    # dense sweep of the whole subnormal-and-first-binade range of the format
    lo = np.float32(2 * vals[1] * 2 ** 3)
    sweep = np.linspace(0, lo, 200_001, dtype=np.float32)
    x = np.concatenate([pos, sweep])
    return np.concatenate([x, -x])


def _random_bits(n, seed):
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    # force every one of the 256 float32 exponents (both signs) to appear many times
    exps = np.arange(n, dtype=np.uint32) % 512
    bits = (bits & np.uint32(0x007FFFFF)) | (exps << np.uint32(23))
    return bits.view(np.float32)


def _same_codes(a, b):
    bad = np.flatnonzero(a != b)
    return bad.size == 0, bad[:5]


@pytest.mark.parametrize("fmt", FMTS)
def test_all_256_codes_decode_like_ml_dtypes(fmt):
    ref, got = _ref_decode(fmt), fp8.decode(ALL, fmt)
    assert np.array_equal(np.isnan(ref), np.isnan(got))
    fin = ~np.isnan(ref)
    assert np.array_equal(ref.view(np.uint32)[fin], got.view(np.uint32)[fin])  # -0.0 included
    assert np.array_equal(fp8.table(fmt)[fin].view(np.uint32), ref[fin].view(np.uint32))


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("saturate", [False, True])
def test_encode_matches_ml_dtypes_on_a_million_inputs(fmt, saturate):
    rand = _random_bits(1_000_000, seed=len(fmt) + saturate)
    edge = _boundary_inputs(fmt)
    specials = np.array([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0], np.float32)
    x = np.concatenate([rand, edge, specials])
    assert x.size > 1_000_000
    ok, where = _same_codes(fp8.encode(x, fmt, saturate=saturate), _ref_encode(x, fmt, saturate))
    assert ok, (fmt, saturate, x[where])


@pytest.mark.parametrize(
    ("fmt", "x", "sat", "nosat"),
    [
        ("e4m3fn", 448.0, 0x7E, 0x7E),
        ("e4m3fn", 464.0, 0x7E, 0x7E),  # tie: 448's mantissa is even
        ("e4m3fn", 464.1, 0x7E, 0x7F),
        ("e4m3fn", np.inf, 0x7E, 0x7F),
        ("e4m3fn", -np.inf, 0xFE, 0xFF),
        ("e5m2", 61439.0, 0x7B, 0x7B),
        ("e5m2", 61440.0, 0x7B, 0x7C),  # tie: 57344's mantissa is odd -> rounds up to inf
        ("e5m2", -np.inf, 0xFB, 0xFC),
        ("e4m3", 247.9, 0x77, 0x77),
        ("e4m3", 248.0, 0x77, 0x78),
        ("e4m3", np.nan, 0x7C, 0x7C),
        ("e4m3fn", -np.nan, 0xFF, 0xFF),
        ("e4m3fn", 7.75 * 2.0**-9, 0x08, 0x08),  # carries from subnormal into the smallest normal
        ("e4m3fn", 2.0**-10, 0x00, 0x00),  # half of the smallest subnormal: tie to even -> 0
        ("e4m3fn", 1.5 * 2.0**-10, 0x01, 0x01),
        ("e4m3fn", -0.0, 0x80, 0x80),
    ],
)
def test_hand_derived_vectors(fmt, x, sat, nosat):
    a = np.array([x], np.float32)
    assert fp8.encode(a, fmt, saturate=True)[0] == sat
    assert fp8.encode(a, fmt, saturate=False)[0] == nosat


def test_max_values_from_the_spec():
    assert [fp8.max_value(f) for f in FMTS] == [448.0, 57344.0, 240.0]


@given(st.integers(0, 255), st.sampled_from(FMTS))
def test_roundtrip_code_value_code(code, fmt):
    c = np.array([code], np.uint8)
    v = fp8.decode(c, fmt)
    if np.isnan(v[0]):
        assert np.isnan(fp8.decode(fp8.encode(v, fmt), fmt)[0])
        return
    assert fp8.encode(v, fmt, saturate=False)[0] == code
    if np.isfinite(v[0]):
        assert fp8.encode(v, fmt, saturate=True)[0] == code


@given(st.floats(width=32, allow_nan=False, allow_infinity=False), st.sampled_from(FMTS))
def test_encode_picks_a_nearest_value(x, fmt):
    got = float(fp8.decode(fp8.encode(np.array([x], np.float32), fmt), fmt)[0])
    vals = fp8.table(fmt)[np.isfinite(fp8.table(fmt))].astype(np.float64)
    best = np.min(np.abs(vals - x))
    assert abs(got - x) == best or abs(x) > fp8.max_value(fmt)


def test_shapes_and_out_buffer_preserved():
    x = np.linspace(-3, 3, 2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)  # odd element count
    c = fp8.encode(x, "e4m3fn")
    assert c.shape == x.shape and c.dtype == np.uint8
    out = np.empty(x.shape, np.float32)
    assert fp8.decode(c, "e4m3fn", out=out) is out
    assert np.array_equal(out, x.astype(ml_dtypes.float8_e4m3fn).astype(np.float32))
    nc = np.asfortranarray(c)
    assert np.array_equal(fp8.decode(nc, "e4m3fn"), out)


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: fp8.encode(np.arange(4), "e4m3fn"), "floating-point"),
        (lambda: fp8.encode(np.zeros(4, np.float32), "e3m4"), "unknown FP8 format"),
        (lambda: fp8.decode(np.zeros(4, np.int16), "e5m2"), "uint8"),
        (lambda: fp8.decode(np.zeros(4, np.uint8), "e5m2", out=np.empty(3, np.float32)), "out must"),
        (lambda: fp8.max_value(None), "unknown FP8 format"),
    ],
)
def test_bad_input_raises_format_error(call, needle):
    with pytest.raises(FormatError, match=needle) as ei:
        call()
    assert "\n" not in str(ei.value)
