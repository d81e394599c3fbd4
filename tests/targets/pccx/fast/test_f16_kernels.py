"""The FP16-weight GEMV kernels of the fast executor (attention over an FP16 KV ring: Q·Kᵀ row-major,
P·V K-major) against the reference numerics (`numerics.gemv`, the definition the reference simulator
runs, whose FP16 decoding is NumPy's) on random operands with subnormals, ±0 and ±65504, with and
without accumulation, and their non-finite-weight reports."""

from __future__ import annotations

import numpy as np
import pytest

from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.fast import _nbkernels as nk


def _bf16(rng, n) -> np.ndarray:
    return nx.to_bits(rng.standard_normal(n).astype(np.float32) * rng.choice([1e-3, 1.0, 40.0], n))


def _fp16_bits(rng, shape) -> np.ndarray:
    """Random finite FP16 bit patterns: normals of every magnitude, subnormals, ±0 and ±65504."""
    bits = rng.integers(0, 1 << 16, shape, dtype=np.uint32).astype(np.uint16)
    special = np.array([0x0000, 0x8000, 0x0001, 0x83FF, 0x7BFF, 0xFBFF, 0x0400, 0x3C00], np.uint16)
    pick = rng.random(shape) < 0.1
    bits[pick] = rng.choice(special, int(pick.sum()))
    bad = (bits & 0x7C00) == 0x7C00
    bits[bad] &= 0xBFFF  # Inf/NaN -> a finite pattern of the same sign
    return bits


@pytest.mark.parametrize("twin", ["gemv_f16", "gemv_f16_1"])  # parallel; the serial twin fused rows run
@pytest.mark.parametrize("m,k", [(1, 16), (37, 128), (300, 256), (1030, 128)])
def test_row_major_fp16_gemv_matches_reference(m, k, twin):
    kernel = nk.gemv_f16 if twin == "gemv_f16" else nk._SERIAL[twin]
    rng = np.random.default_rng(m * 1000 + k)
    w = _fp16_bits(rng, (m, k))
    for accm in (False, True):
        x = _bf16(rng, k)
        dst = _bf16(rng, m)
        want = nx.to_bits(nx.gemv(w.view(np.float16), nx.from_bits(x),
                                  dest=nx.from_bits(dst) if accm else None, fmt="fp16"))
        q = np.zeros(k + 16, np.int8)
        st = kernel(x, w, np.zeros(0, np.float32), dst, accm, q, nk.LUT32, nk.LUT64)
        assert st == 0
        assert np.array_equal(dst, want)


@pytest.mark.parametrize("k,m", [(5, 16), (64, 128), (257, 256)])
def test_kmajor_fp16_gemv_matches_reference_and_counts_live_rows(k, m):
    rng = np.random.default_rng(k * 7 + m)
    w = _fp16_bits(rng, (k, m))  # [K, M]: a V block of the KV ring, one row per position
    x = _bf16(rng, k)
    x[rng.random(k) < 0.3] = 0  # zero activations: rows the kernel skips
    dst = np.zeros(m, np.uint16)
    want = nx.to_bits(nx.gemv(w.T.view(np.float16), nx.from_bits(x), fmt="fp16"))
    q = np.zeros(k + 16, np.int8)
    live = nk.gemv_km_f16(x, w, np.zeros(0, np.float32), dst, False, q, nk.LUT32, nk.LUT64)
    assert live == int(np.count_nonzero(q[:k]))
    assert np.array_equal(dst, want)


def test_non_finite_weights_are_reported():
    rng = np.random.default_rng(3)
    x = _bf16(rng, 32)
    q = np.zeros(48, np.int8)
    w = _fp16_bits(rng, (8, 32))
    w[5, 17] = 0x7E00  # NaN
    assert nk.gemv_f16(x, w, np.zeros(0, np.float32), np.zeros(8, np.uint16), False, q, nk.LUT32,
                       nk.LUT64) == 2
    wk = _fp16_bits(rng, (32, 8))
    x[:] = nx.to_bits(np.ones(32, np.float32))  # every row live
    wk[9, 3] = 0xFC00  # -Inf in a live row
    assert nk.gemv_km_f16(x, wk, np.zeros(0, np.float32), np.zeros(8, np.uint16), False, q, nk.LUT32,
                          nk.LUT64) == -2


def test_kmajor_non_finite_weight_in_a_dead_row_is_not_read():
    """Only the rows of nonzero activation codes are read (as the reference): a NaN or Inf in a row
    whose code is zero neither reports nor changes the sums; the same one in a live row reports."""
    rng = np.random.default_rng(11)
    k, m = 40, 24
    w = _fp16_bits(rng, (k, m))
    x = _bf16(rng, k)
    x[7] = 0  # row 7's code is zero: a dead row
    want = nx.to_bits(nx.gemv(w.T.view(np.float16), nx.from_bits(x), fmt="fp16"))
    for bad in (0x7C00, 0xFC00, 0x7E00, 0xFFFF):
        wb = w.copy()
        wb[7, rng.integers(m)] = bad
        dst = np.zeros(m, np.uint16)
        q = np.zeros(k + 16, np.int8)
        live = nk.gemv_km_f16(x, wb, np.zeros(0, np.float32), dst, False, q, nk.LUT32, nk.LUT64)
        assert q[7] == 0 and live == int(np.count_nonzero(q[:k])) > 0
        assert np.array_equal(dst, want)
        wb[int(np.flatnonzero(q[:k])[-1]), m - 1] = bad  # the last weight of the last live row
        assert nk.gemv_km_f16(x, wb, np.zeros(0, np.float32), np.zeros(m, np.uint16), False, q, nk.LUT32,
                              nk.LUT64) == -2
