"""The per-token host inputs (embedding, PLE and RoPE rows) cross into L2 through `host_bits`: float32,
then one round-to-nearest-even to BF16. Oracle: ml_dtypes' bfloat16 conversion of the same float32."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from npukit.targets.pccx.compile.host_values import host_bits


def test_host_bits_rounds_like_ml_dtypes():
    rng = np.random.default_rng(0)
    f = rng.standard_normal(20_000) * np.exp2(rng.integers(-140, 128, 20_000))  # float64: subnormal..inf
    ties = (rng.integers(0, 1 << 16, 2_000, dtype=np.uint32) << 16 | 0x8000).view(np.float32)  # exact ties
    special = np.array([0.0, -0.0, np.inf, -np.inf, 3.4028235e38, -3.4028235e38, 1e-45, -1e-45,
                        1.1754942e-38, 9.2e-41, 65504.0, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8], np.float64)
    x = np.concatenate([f, ties.astype(np.float64), special])
    with np.errstate(over="ignore"):
        want = x.astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
    got = host_bits(x)
    assert got.dtype == np.uint16 and got.shape == x.shape
    assert np.array_equal(got, want)


def test_host_bits_nan_is_canonical_with_sign():
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF812345, 0x7FFFFFFF, 0xFFFFFFFF],
                    np.uint32).view(np.float32)
    got = host_bits(nans)
    assert np.all(np.isnan((got.astype(np.uint32) << 16).view(np.float32)))  # still NaN
    assert list(got) == [0x7FC0, 0xFFC0, 0x7FC0, 0xFFC0, 0x7FC0, 0xFFC0]
