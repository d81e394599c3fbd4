"""The kernels' arithmetic BF16 widening (`_nbkernels.bf16`, `bf16_64`) against NumPy's, every pattern.

The reference is NumPy itself: the 16 bits shifted into a float32 pattern and viewed as float32, then
``astype(np.float64)`` — the tables the kernels used to gather from. Compared bit for bit, NaNs and
subnormals included."""

from __future__ import annotations

import numpy as np
import pytest

nb = pytest.importorskip("numba")

from npukit.targets.pccx.fast import _nbkernels as nbk  # noqa: E402

_ALL = np.arange(1 << 16, dtype=np.uint32)


@nb.njit
def _widen_all(bits16, bits64, out32, out64):
    for i in range(bits16.shape[0]):
        out32[i] = nbk.bf16(bits16[i])
        out64[i] = nbk.bf16_64(bits64[i])  # wider index types take their low 16 bits


def test_every_bf16_pattern_widens_as_numpy_does():
    ref32 = (_ALL << np.uint32(16)).view(np.float32)
    with np.errstate(invalid="ignore"):
        ref64 = ref32.astype(np.float64)
    out32 = np.empty(1 << 16, np.float32)
    out64 = np.empty(1 << 16, np.float64)
    high = _ALL.astype(np.int64) | (np.int64(7) << 16)  # garbage above bit 15 must be ignored
    _widen_all(_ALL.astype(np.uint16), high, out32, out64)
    assert np.array_equal(out32.view(np.uint32), ref32.view(np.uint32))
    assert np.array_equal(out64.view(np.uint64), ref64.view(np.uint64))
    assert np.isnan(out64[0x7F81]) and np.signbit(out64[0xFF81])  # a signalling NaN, quieted, sign kept
