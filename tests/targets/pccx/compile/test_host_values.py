"""`compile.host_values.bf16_scalar` (memoised) against `numerics.bf16` (the definition), bit for bit,
including the values a memo keyed by value alone would confuse (-0.0 and 0.0; a float32 and the double
nearest it) and asked twice (the second time from the memo)."""

import numpy as np

from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.compile.host_values import bf16_scalar


def _bits(x) -> int:
    return int(np.asarray(x, np.float32).reshape(-1).view(np.uint32)[0])


def test_bf16_scalar_is_bf16_bit_for_bit_from_the_memo_too():
    rng = np.random.default_rng(5)
    values = [0.0, -0.0, 1.0, -1.0, 2 ** -0.5, 1e-6, 1e-40, -1e-40, 3.4e38, -3.4e38, 1e39, float("inf"),
              float("-inf"), float("nan"), np.float32(0.1), 0.1, np.float32(-0.0), 7, -3, np.float64(2.5e-3),
              *rng.standard_normal(64).tolist(), *rng.standard_normal(16).astype(np.float32)]
    for _ in range(2):
        for v in values:
            assert _bits(bf16_scalar(v)) == _bits(nx.bf16(v)[()]), v
    assert _bits(bf16_scalar(-0.0)) == 0x8000_0000 and _bits(bf16_scalar(0.0)) == 0
    arr = np.array([0.3], np.float32)  # (an array: not memoised, rounded as the definition does)
    assert _bits(bf16_scalar(arr)) == _bits(nx.bf16(arr)[()])
