"""OCP MX against independent oracles: ml_dtypes element/E8M0 casts, float64 log2, gguf MXFP4."""

import gguf
import ml_dtypes
import numpy as np
import pytest
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize as gguf_quantize
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from npukit.errors import FormatError
from npukit.formats import mx

ELEM = {
    "mxfp8_e4m3": ml_dtypes.float8_e4m3fn,
    "mxfp8_e5m2": ml_dtypes.float8_e5m2,
    "mxfp6_e2m3": ml_dtypes.float6_e2m3fn,
    "mxfp6_e3m2": ml_dtypes.float6_e3m2fn,
    "mxfp4_e2m1": ml_dtypes.float4_e2m1fn,
}
EMAX = {"mxfp8_e4m3": 8, "mxfp8_e5m2": 15, "mxfp6_e2m3": 2, "mxfp6_e3m2": 4, "mxfp4_e2m1": 2, "mxint8": 0}
FMTS = [*ELEM, "mxint8"]


def _bits(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def _same_floats(a, b):
    na, nb = np.isnan(a), np.isnan(b)
    return np.array_equal(na, nb) and np.array_equal(_bits(a)[~na], _bits(b)[~nb])


def _ref_quantize(x, fmt):
    """The spec's rule written independently: float64 log2 for the scale, ml_dtypes for elements."""
    xb = x.reshape(-1, 32).astype(np.float64)
    amax = np.abs(xb).max(axis=1)
    with np.errstate(divide="ignore"):
        shared = np.where(amax > 0, np.floor(np.log2(amax)) - EMAX[fmt], -127)
    shared = np.clip(shared, -127, 127)
    v = xb / np.exp2(shared)[:, None]
    if fmt == "mxint8":
        el = np.clip(np.round(v * 64), -127, 127).astype(np.int8).view(np.uint8)
    else:
        t = ELEM[fmt]
        m = float(ml_dtypes.finfo(t).max)
        el = np.clip(v, -m, m).astype(t).view(np.uint8)
    return el.reshape(x.shape), (shared + 127).astype(np.uint8).reshape(*x.shape[:-1], -1)


def _test_input(seed):
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((64, 256)).astype(np.float32)
    g[::7, ::31] *= 50  # outliers
    g[3] = 0  # all-zero blocks
    g[5] *= np.float32(1e-40)  # float32-subnormal blocks (scale clamps at 2^-127)
    g[6] *= np.float32(1e37)  # near the top of float32
    bits = rng.integers(0, 2**32, 64 * 256, dtype=np.uint64).astype(np.uint32)
    r = bits.view(np.float32).reshape(64, 256)
    r = np.where(np.isfinite(r), r, 1.0).astype(np.float32)
    return np.concatenate([g, r])


def test_element_tables_match_ml_dtypes():
    for fmt, t in ELEM.items():
        e = mx.FORMATS[fmt].elem
        ref = np.arange(1 << e.bits, dtype=np.uint8).view(t).astype(np.float32)
        assert _same_floats(e.table, ref), fmt


def test_e8m0_decode_matches_ml_dtypes():
    codes = np.arange(256, dtype=np.uint8)
    ref = codes.view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    assert _same_floats(mx.e8m0_decode(codes), ref)


@pytest.mark.parametrize("fmt", FMTS)
def test_quantize_matches_independent_reference(fmt):
    x = _test_input(len(fmt))
    q = mx.quantize(x, fmt)
    el, sc = _ref_quantize(x, fmt)
    assert q.scales.shape == (128, 8) and q.elements.shape == x.shape
    assert np.array_equal(q.scales, sc)
    assert np.array_equal(q.elements, el)


@pytest.mark.parametrize("fmt", FMTS)
def test_dequantize_matches_ml_dtypes_product(fmt):
    rng = np.random.default_rng(7)
    bits = mx.spec(fmt).bits
    el = rng.integers(0, 1 << bits, (6, 64), dtype=np.uint8)
    sc = rng.integers(0, 256, (6, 2), dtype=np.uint8)
    sc[0] = [0, 254]
    if fmt == "mxint8":
        ev = el.view(np.int8).astype(np.float32) / np.float32(64)
    else:
        ev = el.view(ELEM[fmt]).astype(np.float32)
    with np.errstate(over="ignore"):  # 448 * 2^127 is +inf in float32, on both sides
        ref = ev * np.repeat(sc.view(ml_dtypes.float8_e8m0fnu).astype(np.float32), 32, axis=1)
    assert _same_floats(mx.dequantize(el, sc, fmt), ref)


def test_mxfp4_decodes_like_gguf_and_scales_agree():
    x = _test_input(3)[:64]
    q = mx.quantize(x, "mxfp4_e2m1")
    blocks = mx.to_gguf_mxfp4(q)
    ref = gguf_dequantize(blocks.reshape(x.shape[0], -1), gguf.GGMLQuantizationType.MXFP4)
    assert _same_floats(np.abs(mx.dequantize(q.elements, q.scales, "mxfp4_e2m1")), np.abs(ref))
    # gguf's own quantizer picks the same power-of-two scale (its element ties differ: argmin),
    # except where the spec clamps the exponent at -127 and gguf lets the byte wrap
    theirs = gguf_quantize(x, gguf.GGMLQuantizationType.MXFP4).reshape(-1, 17)
    nz = np.abs(x.reshape(-1, 32)).max(axis=1) >= 2.0**-125
    assert nz.sum() > 300
    assert np.array_equal(theirs[nz, 0], q.scales.reshape(-1)[nz])
    back = mx.from_gguf_mxfp4(blocks, x.shape)
    assert np.array_equal(back.elements, q.elements) and np.array_equal(back.scales, q.scales)


def test_hand_derived_blocks():
    b = np.zeros(32, np.float32)
    b[:6] = [6.0, -3.0, 0.5, 0.25, 7.0, -0.75]
    q = mx.quantize(b, "mxfp4_e2m1")  # amax 7: floor(log2 7) - 2 = 0 -> X = 1
    assert q.scales.tolist() == [127]
    # E2M1 codes: 6 = 0 11 1, -3 = 1 10 1, 0.5 = 0 00 1, 0.25 -> tie to 0, 7 saturates, -0.75 -> -1 (even)
    assert q.elements[:6].tolist() == [0x7, 0xD, 0x1, 0x0, 0x7, 0xA]
    i = mx.quantize(np.full(32, 1.999, np.float32), "mxint8")  # 127.936 rounds to 128, clipped
    assert i.scales.tolist() == [127] and set(i.elements.tolist()) == {127}
    f = mx.quantize(np.full(32, 511.0, np.float32), "mxfp8_e4m3")
    assert f.scales.tolist() == [127] and set(f.elements.tolist()) == {0x7E}  # saturates at 448
    n = np.ones(64, np.float32)
    n[40] = np.inf
    qn = mx.quantize(n, "mxfp6_e2m3")
    assert qn.scales.tolist() == [125, 255] and not qn.elements[32:].any()
    d = qn.dequantize()
    assert np.all(d[:32] == 1) and np.all(np.isnan(d[32:]))


def test_bits_per_element_and_packed_bytes():
    assert [mx.spec(f).bits_per_element for f in FMTS] == [8.25, 8.25, 6.25, 6.25, 4.25, 8.25]
    x = np.ones((4, 64), np.float32)
    assert mx.quantize(x, "mxfp6_e3m2").nbytes == 4 * 48 + 8
    assert mx.pack(np.array([1, 2, 3, 4] * 8, np.uint8), "mxfp6_e2m3")[:3].tolist() == [0x81, 0x30, 0x10]
    assert mx.pack(np.array([1, 2] * 16, np.uint8), "mxfp4_e2m1")[0] == 0x21


@pytest.mark.parametrize("fmt", FMTS)
@given(data=st.data())
def test_pack_unpack_roundtrip(fmt, data):
    nb = data.draw(st.integers(1, 3))
    bits = mx.spec(fmt).bits
    el = data.draw(hnp.arrays(np.uint8, (2, 32 * nb), elements=st.integers(0, (1 << bits) - 1)))
    p = mx.pack(el, fmt)
    assert p.shape == (2, 32 * nb * bits // 8)
    assert np.array_equal(mx.unpack(p, fmt), el)


@pytest.mark.parametrize("fmt", FMTS)
@given(x=hnp.arrays(np.float32, (2, 64), elements=st.floats(-(2.0**100), 2.0**100, width=32)))
def test_quantize_is_idempotent_on_its_own_output(fmt, x):
    q = mx.quantize(x, fmt)
    q2 = mx.quantize(q.dequantize(), fmt)
    assert np.array_equal(q.scales, q2.scales) and np.array_equal(q.elements, q2.elements)


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: mx.quantize(np.zeros(48, np.float32), "mxfp4_e2m1"), "multiple of 32"),
        (lambda: mx.quantize(np.zeros(32, np.int32), "mxfp4_e2m1"), "floating-point"),
        (lambda: mx.quantize(np.zeros(32, np.float32), "mxfp5"), "unknown MX format"),
        (lambda: mx.dequantize(np.full(32, 16, np.uint8), np.zeros(1, np.uint8), "mxfp4_e2m1"),
         "out of range"),
        (lambda: mx.dequantize(np.zeros(64, np.uint8), np.zeros(1, np.uint8), "mxint8"), "blocks of 32"),
        (lambda: mx.dequantize(np.zeros(32, np.int8), np.zeros(1, np.uint8), "mxint8"), "uint8"),
        (lambda: mx.pack(np.full(32, 64, np.uint8), "mxfp6_e3m2"), "out of range"),
        (lambda: mx.unpack(np.zeros(25, np.uint8), "mxfp6_e3m2"), "whole blocks"),
        (lambda: mx.from_gguf_mxfp4(np.zeros(17, np.uint8), (2, 32)), "17-byte blocks"),
        (lambda: mx.e8m0_decode(np.zeros(3, np.int64)), "uint8"),
    ],
)
def test_bad_input_raises_format_error(call, needle):
    with pytest.raises(FormatError, match=needle) as ei:
        call()
    assert "\n" not in str(ei.value)
