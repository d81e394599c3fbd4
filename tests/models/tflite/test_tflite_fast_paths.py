"""The interpreter's fused fast paths equal `npukit.formats.fixedpoint` (itself bit-exact with
LiteRT) on random and edge values: requantization, gemmlowp multiply / divide-by-power-of-two,
and the scalar reciprocal used for short softmax rows."""

from __future__ import annotations

import numpy as np

from npukit.formats import fixedpoint as fp
from npukit.models.tflite.kernels import gemmlowp as gl
from npukit.models.tflite.kernels.common import mbqm

EDGES = np.array([-2**31, 2**31 - 1, 0, -1, 1, -2**30, 2**30, -(2**30) - 1, 12345, -12345])


def test_mbqm_equals_fixedpoint():
    rng = np.random.default_rng(0)
    for trial in range(300):
        x = rng.integers(-2**31, 2**31, (50, 8)) if trial % 2 else rng.integers(-2**20, 2**20, (50, 8))
        x[0, :] = EDGES[:8]
        m = rng.integers(0, 2**31, 8 if trial % 3 == 0 else 1)
        s = rng.integers(-31, 31, 8 if trial % 5 == 0 else 1)
        if trial % 7 == 0:
            s[:] = 0
        if trial % 11 == 0:
            s = np.array([0, -3, 2, -31, 30, 0, -1, 1])
        expect = fp.multiply_by_quantized_multiplier(x, m, s).astype(np.int64)
        assert np.array_equal(mbqm(x, m, s), expect), trial
        assert np.array_equal(mbqm(x.copy(), m, s, inplace=True), expect), trial


def test_gemmlowp_mul_and_rdbpot_equal_fixedpoint():
    rng = np.random.default_rng(1)
    a = np.concatenate([EDGES, rng.integers(-2**31, 2**31, 5000)])
    b = np.concatenate([EDGES[::-1], rng.integers(-2**31, 2**31, 5000)])
    assert np.array_equal(gl.mul(a, b), fp.saturating_rounding_doubling_high_mul(a, b))
    assert gl.mul(np.array([-2**31]), np.array([-2**31]))[0] == 2**31 - 1
    e = rng.integers(0, 32, a.size)
    assert np.array_equal(gl.rdbpot(a, e), fp.rounding_divide_by_pot(a, e))


def test_scalar_reciprocal_equals_array_version():
    rng = np.random.default_rng(2)
    xs = np.concatenate([rng.integers(1, 2**31, 3000), 2 ** np.arange(31), 2 ** np.arange(1, 31) - 1])
    scale, bits = gl.reciprocal(xs.astype(np.int64), 12)
    for i, x in enumerate(xs):
        assert gl.reciprocal_scalar(int(x), 12) == (int(scale[i]), int(bits[i]))
    # x = 1.5 and 3.0 in Q12.19: 1/x = (2/3) · 2^-bits_over_unit
    for x, bits_over_unit in ((3 * 2**18, 0), (3 * 2**19, 1)):
        r, b = gl.reciprocal_scalar(x, 12)
        assert b == bits_over_unit and abs(r / 2**31 - 2 / 3) < 1e-8
