"""KV-cache INT8/INT4 per token and head, checked against torch and hand-derived vectors."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from npukit.errors import FormatError
from npukit.formats import int4, kvquant


@pytest.mark.parametrize(("bits", "qmax"), [(8, 127), (4, 7)])
def test_matches_torch_per_token_and_head(bits, qmax):
    rng = np.random.default_rng(bits)
    x = rng.standard_normal((17, 2, 256)).astype(np.float32)  # (tokens, kv_heads, head_dim)
    x[3, 1] = 0
    x[5, 0, 7] = 90.0
    codes, scales = kvquant.quantize_kv(x, bits)
    t = torch.from_numpy(x)
    rs = t.abs().amax(dim=-1) / qmax
    rq = torch.where(rs[..., None] > 0, torch.round(t / rs[..., None]), torch.zeros_like(t))
    rq = rq.clamp(-qmax, qmax)
    assert codes.shape == x.shape and codes.dtype == np.int8
    assert scales.shape == (17, 2) and scales.dtype == np.float32
    assert np.array_equal(scales, rs.numpy()) and np.array_equal(codes, rq.to(torch.int8).numpy())
    assert scales[3, 1] == 0 and not codes[3, 1].any()
    d = kvquant.dequantize_kv(codes, scales, bits)
    assert np.array_equal(d, (rq * rs[..., None]).numpy())


def test_hand_derived_int8():
    c, s = kvquant.quantize_kv(np.array([127.0, -63.5, 0.5, 1.5], np.float32), 8)
    assert s == np.float32(1.0) and c.tolist() == [127, -64, 0, 2]


def test_int4_codes_pack_with_the_int4_layout():
    c, _ = kvquant.quantize_kv(np.array([[7.0, -1.0, 3.0, -7.0]], np.float32), 4)
    assert c.tolist() == [[7, -1, 3, -7]]
    assert int4.pack_int4(c).tolist() == [[0xF7, 0x93]]


@given(hnp.arrays(np.float32, st.tuples(st.integers(1, 5), st.integers(1, 3), st.integers(1, 40)),
                  elements=st.floats(-1e4, 1e4, width=32)), st.sampled_from([8, 4]))
def test_roundtrip_error_bound(x, bits):
    c, s = kvquant.quantize_kv(x, bits)
    d = kvquant.dequantize_kv(c, s, bits)
    assert np.all(np.abs(d - x) <= s[..., None] * 0.5 * (1 + 1e-5) + 1e-30)
    assert np.abs(c).max() <= (127 if bits == 8 else 7)


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: kvquant.quantize_kv(np.zeros((2, 4), np.float32), 2), "bits 8 or 4"),
        (lambda: kvquant.quantize_kv(np.zeros((2, 0), np.float32), 8), "non-empty"),
        (lambda: kvquant.quantize_kv(np.array([np.nan], np.float32), 8), "non-finite"),
        (lambda: kvquant.quantize_kv(np.zeros(4, np.uint8), 8), "floating-point"),
        (lambda: kvquant.dequantize_kv(np.zeros((2, 4), np.int16), np.zeros(2, np.float32), 8), "int8"),
        (lambda: kvquant.dequantize_kv(np.zeros((2, 4), np.int8), np.zeros(3, np.float32), 8), "minus the"),
        (lambda: kvquant.dequantize_kv(np.zeros((2, 4), np.int8), np.zeros(2, np.float64), 8), "float32"),
        (lambda: kvquant.dequantize_kv(np.full((1, 4), 9, np.int8), np.ones(1, np.float32), 4), "INT4"),
    ],
)
def test_bad_input_raises_format_error(call, needle):
    with pytest.raises(FormatError, match=needle) as ei:
        call()
    assert "\n" not in str(ei.value)
