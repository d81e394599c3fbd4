"""INT4: quantization rule against torch (independent float32 implementation), packing by hand."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from npukit.errors import FormatError
from npukit.formats import int4


def _torch_ref(w, group):
    """amax/7 scale and half-even rounding, written with torch over (rows, groups, g)."""
    t = torch.from_numpy(w).reshape(w.shape[0], -1, group)
    amax = t.abs().amax(dim=-1)
    scale = amax / 7.0
    q = torch.where(scale[..., None] > 0, torch.round(t / scale[..., None]), torch.zeros_like(t))
    return q.clamp(-8, 7).to(torch.int8).reshape(w.shape).numpy(), scale.numpy()


@pytest.mark.parametrize("group", [None, 32, 128])
def test_quantize_matches_torch(group):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((48, 256)).astype(np.float32)
    w[::5, ::17] *= 20
    w[2] = 0
    q, s = int4.quantize_int4(w, group_size=group)
    rq, rs = _torch_ref(w, group or w.shape[1])
    assert q.dtype == np.int8 and s.dtype == np.float32
    assert np.array_equal(q, rq)
    assert np.array_equal(s, rs if group else rs[:, 0])
    assert s.shape == ((48,) if group is None else (48, 256 // group))
    assert q.min() >= -7 and q.max() <= 7 and np.abs(q).max() == 7


def test_axis_zero_equals_transposed_axis_last():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((64, 10)).astype(np.float32)
    q0, s0 = int4.quantize_int4(w, axis=0, group_size=32)
    q1, s1 = int4.quantize_int4(w.T, axis=-1, group_size=32)
    assert np.array_equal(q0, q1.T) and np.array_equal(s0, s1.T) and s0.shape == (2, 10)
    d = int4.dequantize_int4(q0, s0, axis=0, group_size=32)
    assert np.array_equal(d, int4.dequantize_int4(q1, s1, group_size=32).T)


def test_hand_derived_values():
    w = np.array([[7.0, -3.5, 0.5, 1.5, -7.0, 2.5, 0.0, 0.49]], np.float32)
    q, s = int4.quantize_int4(w)
    assert s.tolist() == [1.0]
    assert q.tolist() == [[7, -4, 0, 2, -7, 2, 0, 0]]  # -3.5 and 2.5 tie to even
    assert int4.pack_int4(q).tolist() == [[0xC7, 0x20, 0x29, 0x00]]
    assert int4.pack_int4(np.array([1, -1, -8], np.int8)).tolist() == [0xF1, 0x08]  # odd: zero pad


@given(hnp.arrays(np.float32, st.tuples(st.integers(1, 4), st.sampled_from([32, 64])),
                  elements=st.floats(-1e6, 1e6, width=32)), st.sampled_from([None, 32]))
def test_roundtrip_error_is_at_most_half_a_step(w, group):
    q, s = int4.quantize_int4(w, group_size=group)
    d = int4.dequantize_int4(q, s, group_size=group)
    step = np.repeat(s[:, None] if group is None else s, group or w.shape[1], axis=1)
    assert np.all(np.abs(d - w) <= step * 0.5 * (1 + 1e-5) + 1e-30)


@given(hnp.arrays(np.int8, hnp.array_shapes(min_dims=1, max_dims=3, max_side=9), elements=st.integers(-8, 7)))
def test_pack_unpack_roundtrip(q):
    p = int4.pack_int4(q)
    assert p.shape == (*q.shape[:-1], (q.shape[-1] + 1) // 2)
    assert np.array_equal(int4.unpack_int4(p, q.shape), q)
    assert np.array_equal(int4.unpack_int4(p.ravel(), q.shape), q)


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: int4.quantize_int4(np.zeros((2, 48), np.float32), group_size=32), "not a multiple"),
        (lambda: int4.quantize_int4(np.zeros((2, 4), np.int32)), "floating-point"),
        (lambda: int4.quantize_int4(np.array([[1.0, np.inf]], np.float32)), "non-finite"),
        (lambda: int4.quantize_int4(np.zeros((2, 4), np.float32), axis=2), "axis"),
        (lambda: int4.quantize_int4(np.float32(1)), "scalar"),
        (lambda: int4.pack_int4(np.array([8], np.int16)), r"\[-8, 7\]"),
        (lambda: int4.pack_int4(np.array([1.0])), "integers"),
        (lambda: int4.unpack_int4(np.zeros(3, np.uint8), (2, 4)), "needs 4 bytes"),
        (lambda: int4.unpack_int4(np.zeros(4, np.int8), (2, 4)), "uint8"),
        (lambda: int4.dequantize_int4(np.zeros((2, 4), np.int8), np.zeros(3, np.float32)), "do not match"),
        (lambda: int4.dequantize_int4(np.full((1, 2), 9, np.int8), np.ones(1, np.float32)), r"\[-8, 7\]"),
    ],
)
def test_bad_input_raises_format_error(call, needle):
    with pytest.raises(FormatError, match=needle) as ei:
        call()
    assert "\n" not in str(ei.value)
