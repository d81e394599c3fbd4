"""The prefill GEMM kernels (`fast._nbkernels._gemm_p4`, every build this CPU can run) against the
reference GEMV (`numerics.gemv`) per vector, on the layouts each of their paths takes."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from npukit.sim import nb_avx2, nb_simd, nb_ssse3
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.fast import _nbkernels as nbk
from npukit.targets.pccx.fast import kernels as kx


def _builds() -> list:
    """The portable build always; the SIMD builds where their probe says they run here (elsewhere
    running their intrinsics could kill the process: tests/sim/test_cpu.py tests that decision)."""
    out = [nbk.gemm_p4_portable]
    if nb_ssse3.probe()[0] == "ssse3":
        out.append(nbk.gemm_p4_ssse3)
    if nb_avx2.probe()[0] == "avx2":
        out.append(nbk.gemm_p4_avx2)
    if nb_simd.probe()[0] == "avx512-vnni":
        out.append(nbk.gemm_p4_vnni)
    return out


def _packed(w: np.ndarray, strided: bool) -> np.ndarray:
    """The packed image of ``w``; ``strided``: the same bytes as a view whose bytes are 2 apart."""
    p = nx.pack_int4(w)
    if not strided:
        return p
    wide = np.zeros((p.shape[0], 2 * p.shape[1]), np.uint8)
    wide[:, ::2] = p
    return wide[:, ::2]


@pytest.mark.parametrize(("m", "k", "strided", "accm"), [
    (256, 1024, False, False),  # a power-of-two row count, whole 64-byte runs: the SIMD pass alone
    (64, 256, False, True),  # accumulating into the destination
    (45, 256, False, False),  # rows the four-row pass leaves, no row tails
    (46, 300, False, True),  # leftover rows and row tails
    (32, 256, True, False),  # rows not contiguous: the portable loop in every build
    (8, 40, False, False),  # rows shorter than one 64-byte run
])
def test_gemm_builds_equal_the_reference_gemv_per_vector(m: int, k: int, strided: bool, accm: bool) -> None:
    rng = np.random.default_rng(m * 1000 + k)
    n = 6
    w = rng.integers(-8, 8, (m, k), dtype=np.int8)
    w[0, :] = -8  # the extreme codes, against the largest activation codes below
    scale = rng.uniform(0.001, 0.1, m).astype(np.float32)
    xs = [nx.bf16(rng.standard_normal(k) * 10.0 ** rng.integers(-3, 3)) for _ in range(n)]
    xs[1][:] = nx.bf16(np.where(np.arange(k) % 2, -1.0, 1.0))  # every code ±127
    xs[4][k // 2] = np.inf  # this vector's outputs NaN, the others untouched
    dests = [nx.bf16(rng.standard_normal(m)) for _ in range(n)]
    flat = np.zeros(n * (k + m) + 64, np.uint16)
    xoff = np.arange(n, dtype=np.int64) * k
    doff = n * k + np.arange(n, dtype=np.int64) * m
    for t in range(n):
        flat[xoff[t]: xoff[t] + k] = nx.to_bits(xs[t])
        flat[doff[t]: doff[t] + m] = nx.to_bits(dests[t])
    want = [nx.to_bits(nx.gemv(w, x, scale, dest=d if accm else None))
            for x, d in zip(xs, dests, strict=True)]
    for build in _builds():
        out = flat.copy()
        build(out, xoff, k, doff, _packed(w, strided), scale, accm, np.zeros((n, k + 16), np.int8), kx.LUT32,
              kx.LUT64)
        for t in range(n):
            np.testing.assert_array_equal(out[doff[t]: doff[t] + m], want[t], err_msg=f"{build} vector {t}")
        assert np.array_equal(out[: n * k], flat[: n * k]), "the inputs were written"
    assert np.all(want[4] == 0x7FC0)
