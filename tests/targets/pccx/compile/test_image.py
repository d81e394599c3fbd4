"""The device image's k-major INT4 layout against the nibble layout written out element by element
(`formats/int4.py`'s docstring: two's-complement nibbles, the even index in the low nibble)."""

from __future__ import annotations

import numpy as np
import pytest

from npukit.targets.pccx.compile.image import kmajor_packed


@pytest.mark.parametrize("rows,k", [(6, 10), (7, 10), (6, 9), (1, 1), (33, 65), (129, 40), (130, 7)])
def test_kmajor_packed_pairs_rows_of_the_transpose(rows, k):
    rng = np.random.default_rng(rows * 100 + k)
    codes = rng.integers(-8, 8, (rows, k))
    packed = np.zeros((rows, (k + 1) // 2), np.uint8)  # along K, as the INT4 store holds them
    for r in range(rows):
        for c in range(k):
            packed[r, c // 2] |= (int(codes[r, c]) & 0xF) << (4 * (c % 2))
    want = np.zeros((k, (rows + 1) // 2), np.uint8)  # along the rows, per column of the transpose
    for c in range(k):
        for r in range(rows):
            want[c, r // 2] |= (int(codes[r, c]) & 0xF) << (4 * (r % 2))
    got = kmajor_packed(packed, k)
    assert got.dtype == np.uint8 and got.flags.c_contiguous
    assert np.array_equal(got, want)
