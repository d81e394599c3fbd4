"""The fp16 -> float32 table of the FP8 kernels is the same on every CPU: equal to NumPy's IEEE cast for
every value but the signalling NaNs (which NumPy quiets on aarch64 and keeps on x86), and for those the
x86 rule (payload moved up 13 bits, still signalling)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from npukit.kernels.fp8._nb import F16_TO_F32


def test_table_is_the_ieee_conversion_of_every_fp16_pattern() -> None:
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    got = F16_TO_F32.view(np.uint32)
    snan = ((h & 0x7C00) == 0x7C00) & ((h & 0x3FF) != 0) & ((h & 0x200) == 0)
    with np.errstate(invalid="ignore"):
        ieee = h.view(np.float16).astype(np.float32).view(np.uint32)
    np.testing.assert_array_equal(got[~snan], ieee[~snan])
    hs = h[snan].astype(np.uint32)
    want_snan = ((hs & 0x8000) << 16) | 0x7F800000 | ((hs & 0x3FF) << 13)
    np.testing.assert_array_equal(got[snan], want_snan)
    assert np.isnan(F16_TO_F32[snan]).all() and snan.sum() == 2 * 511
