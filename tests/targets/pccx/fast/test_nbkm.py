"""`_nbkm.gemv_km_p4` (the sparse K-major INT4 GEMV on packed bytes) against `numerics.gemv`, the
readable reference of the ISA's W4A8 GEMV (docs/numerics.md §3), bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.fast import _nbkernels as nbk
from npukit.targets.pccx.fast import _nbkm


def _bits(v: np.ndarray) -> np.ndarray:
    return nx.to_bits(v.astype(np.float32))


@pytest.mark.parametrize(("k", "m", "live", "accm", "scaled"), [
    (4096, 1024, 171, False, True),  # a Gemma 3n W_down's shape and a decode token's sparsity
    (257, 33, 257, True, False),  # odd M (a half-used last byte), every row live, accumulate
    (64, 8, 0, True, True),  # no live row: the sums are zero, dest (accm) alone survives
])
def test_packed_kmajor_gemv_matches_the_reference(k: int, m: int, live: int, accm: bool,
                                                  scaled: bool) -> None:
    rng = np.random.default_rng(k + m + live)
    w = rng.integers(-8, 8, (m, k), dtype=np.int8)  # [M, K]; the image holds its transpose, packed
    w[:, 0] = -8  # the extreme codes included
    w[0, :] = 7
    x = np.zeros(k, np.float32)
    on = rng.choice(k, live, replace=False)
    x[on] = rng.standard_normal(live) * np.exp2(rng.integers(-20, 20, live))
    xb = _bits(x)
    scale = (rng.random(m) + 0.5).astype(np.float32) if scaled else np.zeros(0, np.float32)
    dest = _bits(rng.standard_normal(m))
    want = nx.to_bits(nx.gemv(w, nx.from_bits(xb), scale if scaled else None,
                              nx.from_bits(dest) if accm else None))
    got = dest.copy()
    q = np.zeros(k + 8, np.int8)
    n = _nbkm.gemv_km_p4(xb, nx.pack_int4(w.T), scale, got, accm, q, nbk.LUT32, nbk.LUT64)
    assert n == np.count_nonzero(nx.quantize_act(nx.from_bits(xb))[0])
    assert np.array_equal(got, want)


def test_a_non_finite_activation_writes_nothing() -> None:
    x = _bits(np.array([1.0, np.inf, 2.0, 0.5]))
    d = _bits(np.ones(3))
    got = d.copy()
    w = nx.pack_int4(np.ones((4, 3), np.int8))
    assert _nbkm.gemv_km_p4(x, w, np.zeros(0, np.float32), got, False, np.zeros(16, np.int8), nbk.LUT32,
                            nbk.LUT64) == -1
    assert np.array_equal(got, d)
