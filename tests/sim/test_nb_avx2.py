"""The 8-bit-lane INT4 row dots built by `npukit.sim.nb_avx2.maddubs_rows` (AVX2 on 32-byte registers,
`npukit.sim.nb_ssse3` on 16-byte ones) and the pccx GEMV/GEMM builds bound to them, against integer
arithmetic in NumPy (int64, no saturation anywhere) and the readable pccx GEMV (`numerics.gemv`);
which build the kernel table takes for the AVX2 path (the SSSE3 one: tests/sim/test_nb_ssse3.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("numba")

from npukit.sim import cpu, nb_avx2, nb_simd, nb_ssse3
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.fast import _nbkernels as nbk
from npukit.targets.pccx.fast import kernels as kx

CHUNK, ROWS = nb_simd.CHUNK, nb_simd.ROWS


# each family by the path its probe names where it runs: its module, GEMV (serial twin: + "_1"), GEMM
FAMILIES = {"avx2": (nb_avx2, "gemv_p4_avx2", "gemm_p4_avx2"),
            "ssse3": (nb_ssse3, "gemv_p4_ssse3", "gemm_p4_ssse3")}


def _family_or_skip(path: str):
    """The family's module where its probe says this CPU runs it; else the test is skipped (running the
    intrinsics could kill the process: the decision itself is tested in tests/sim/test_cpu.py, the
    portable kernels by every fastsim test)."""
    mod = FAMILIES[path][0]
    if mod.probe()[0] != path:
        pytest.skip(f"{path} build not usable here: {mod.probe()[1]}")
    return mod


def _int64_sums(rows: np.ndarray, even: np.ndarray, odd: np.ndarray) -> np.ndarray:
    """Σ (lo ^ 8)·even + (hi ^ 8)·odd per row, in int64 NumPy (the statement the kernels compute)."""
    lo = ((rows & 15) ^ 8).astype(np.int64)
    hi = ((rows >> 4) ^ 8).astype(np.int64)
    return lo @ even.astype(np.int64) + hi @ odd.astype(np.int64)


@pytest.mark.parametrize("path", sorted(FAMILIES))
@pytest.mark.parametrize(("chunks", "pad"), [(1, 0), (2, 64), (5, 17), (16, 1)])
def test_row_dots_equal_int64_sums_on_random_codes(chunks: int, pad: int, path: str) -> None:
    """One row alone and `ROWS` rows in one pass (rows ``pad`` bytes apart beyond their length)."""
    fam = _family_or_skip(path)
    rng = np.random.default_rng(chunks * 31 + pad)
    n = chunks * CHUNK
    rows = rng.integers(0, 256, (ROWS, n + pad), dtype=np.uint8)[:, :n]
    even = rng.integers(-128, 128, n, dtype=np.int8)
    odd = rng.integers(-128, 128, n, dtype=np.int8)
    want = _int64_sums(rows, even, odd)
    np.testing.assert_array_equal(fam._trial4(rows, even, odd), want)
    assert [int(fam._trial(np.ascontiguousarray(r), even, odd)) for r in rows] == want.tolist()


@pytest.mark.parametrize("path", sorted(FAMILIES))
@pytest.mark.parametrize("code", [-128, -127, 127])
@pytest.mark.parametrize("nibbles", [(15, 15), (0, 0), (15, 0), (0, 15)])
def test_extreme_nibbles_and_codes_neither_saturate_nor_wrap(code: int, nibbles: tuple[int, int],
                                                             path: str) -> None:
    """Every offset-binary nibble at its bound against every code at its bound: the largest int16 lane
    sums the byte multiply-add and the per-chunk int16 adds can see (|lane| = 4 · 2 · 15 · 128 = 15360
    over AVX2's two halves, 30720 over SSSE3's four quarters: within 2^15 with 2047 to spare)."""
    fam = _family_or_skip(path)
    lo, hi = nibbles
    byte = ((hi ^ 8) << 4) | (lo ^ 8)  # stored two's-complement nibbles whose flip is (lo, hi)
    n = 64 * CHUNK
    rows = np.full((ROWS, n), byte, np.uint8)
    q = np.full(n, code, np.int8)
    want = _int64_sums(rows, q, q)
    assert int(want[0]) == n * (lo + hi) * code  # the statement itself, by hand
    np.testing.assert_array_equal(fam._trial4(rows, q, q), want)
    assert int(fam._trial(np.ascontiguousarray(rows[0]), q, q)) == int(want[0])


@pytest.mark.parametrize("path", sorted(FAMILIES))
def test_gemv_p4_equals_portable_and_reference_at_the_largest_k(path: str) -> None:
    """All weights -8 against all activations at -127 over K = 65 535 (odd: a tail and the padding
    nibble): |sum| near 2^26, exact in every build."""
    _family_or_skip(path)
    k, m = 65_535, 5
    w = np.full((m, k), -8, np.int8)
    x = nx.bf16(np.full(k, -1.0))
    ones = np.ones(m, np.float32)
    want = nx.to_bits(nx.gemv(w, x, ones))
    for kern in (getattr(nbk, FAMILIES[path][1]), nbk.gemv_p4):
        dst = np.zeros(m, np.uint16)
        kern(nx.to_bits(x), nx.pack_int4(w), ones, dst, False, np.zeros(k + 16, np.int8), kx.LUT32, kx.LUT64)
        np.testing.assert_array_equal(dst, want)


@pytest.mark.parametrize("path", sorted(FAMILIES))
@pytest.mark.parametrize(("m", "k", "view"), [(1, 256, "contiguous"), (3, 129, "rows"), (9, 4097, "rows"),
                                              (38, 2048, "contiguous"), (41, 383, "columns")])
def test_gemv_p4_builds_equal_the_reference(m: int, k: int, view: str, path: str) -> None:
    """Parallel and serial builds: M not a multiple of the pass, odd K and tails, rows of a wider
    image and a column-strided image (no 64-byte runs: the portable loop for all of it)."""
    _family_or_skip(path)
    rng = np.random.default_rng(m + k)
    w = rng.integers(-8, 8, (m, k), dtype=np.int8)
    packed = nx.pack_int4(w)
    if view == "rows":
        wide = rng.integers(0, 256, (m, packed.shape[1] + 40), dtype=np.uint8)
        wide[:, : packed.shape[1]] = packed
        packed = wide[:, : packed.shape[1]]
    elif view == "columns":
        wide = rng.integers(0, 256, (m, 2 * packed.shape[1]), dtype=np.uint8)
        wide[:, ::2] = packed
        packed = wide[:, ::2]
    x = nx.bf16(rng.standard_normal(k) * 3.0)
    scale = rng.uniform(0.001, 0.1, m).astype(np.float32)
    want = nx.to_bits(nx.gemv(w, x, scale))
    name = FAMILIES[path][1]
    kernels = [getattr(nbk, name)] + ([nbk.KERNELS[f"{name}_1"]] if view == "contiguous" else [])
    for kern in kernels:
        dst = np.zeros(m, np.uint16)
        assert kern(nx.to_bits(x), packed, scale, dst, False, np.zeros(k + 16, np.int8), kx.LUT32,
                    kx.LUT64) == 0
        np.testing.assert_array_equal(dst, want, err_msg=str(kern))


@pytest.mark.parametrize("path", sorted(FAMILIES))
@pytest.mark.parametrize("k", [7, 300, 2049])
def test_gemm_p4_equals_per_vector_reference(k: int, path: str) -> None:
    """The GEMM's build == the reference GEMV per vector (own exponent each); a non-finite vector gives
    NaN outputs for that vector only."""
    _family_or_skip(path)
    rng = np.random.default_rng(k + 5)
    m, n = 47, 4
    w = rng.integers(-8, 8, (m, k), dtype=np.int8)
    scale = rng.uniform(0.001, 0.1, m).astype(np.float32)
    xs = [nx.bf16(rng.standard_normal(k) * 10.0 ** rng.integers(-3, 3)) for _ in range(n)]
    xs[2][k // 3] = np.nan
    flat = np.zeros(n * (k + m) + 64, np.uint16)
    xoff = np.arange(n, dtype=np.int64) * k
    doff = n * k + np.arange(n, dtype=np.int64) * m
    for t, x in enumerate(xs):
        flat[xoff[t]: xoff[t] + k] = nx.to_bits(x)
    getattr(nbk, FAMILIES[path][2])(flat, xoff, k, doff, nx.pack_int4(w), scale, False,
                                    np.zeros((n, k + 16), np.int8), kx.LUT32, kx.LUT64)
    for t, x in enumerate(xs):
        np.testing.assert_array_equal(flat[doff[t]: doff[t] + m], nx.to_bits(nx.gemv(w, x, scale)))
    assert np.all(flat[doff[2]: doff[2] + m] == 0x7FC0)


def test_kernel_table_follows_the_chosen_path() -> None:
    """VNNI first, AVX2 where VNNI is not fast, then SSSE3 (tests/sim/test_nb_ssse3.py), else portable;
    the serial twin and the GEMM follow."""
    want = {"avx512-vnni": (nbk.gemv_p4_vnni, nbk.gemm_p4_vnni), "avx2": (nbk.gemv_p4_avx2, nbk.gemm_p4_avx2),
            "ssse3": (nbk.gemv_p4_ssse3, nbk.gemm_p4_ssse3),
            "portable": (nbk.gemv_p4, nbk.gemm_p4_portable)}[nbk.SIMD]
    assert (nbk.KERNELS["gemv_p4"], nbk.KERNELS["gemm_p4"]) == want
    assert nbk.KERNELS["gemv_p4_1"].__name__ == want[0].__name__ + "_1"
    vnni, avx2 = nb_simd.probe()[0], nb_avx2.probe()[0]
    if vnni != "portable" or avx2 != "portable":
        assert (vnni if vnni != "portable" else avx2) == nbk.SIMD


@pytest.mark.slow  # two child processes, each asking LLVM and running a trial (~9 s)
@pytest.mark.skipif(cpu.compile_target().arch not in ("x86_64", "amd64"), reason="x86 CPU names")
def test_haswell_target_takes_avx2_and_generic_does_not(tmp_path) -> None:
    """A Haswell compile target (AVX2, no AVX-512) takes the AVX2 build where this silicon runs it;
    baseline x86-64 never does (LLVM cannot select vpmaddubsw there)."""
    code = ("from npukit.targets.pccx.fast import _nbkernels as k;"
            "print(k.SIMD, k.KERNELS['gemv_p4'].__name__)")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_CPU_", "NPUKIT_SIMD"))}
    runs = {}
    for name, feats in (("haswell", "+64bit"), ("generic", "")):
        env = {**base, "NUMBA_CPU_NAME": name, "NUMBA_CPU_FEATURES": feats,
               "NUMBA_CACHE_DIR": str(tmp_path / name), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
        runs[name] = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                    check=True, timeout=600).stdout.split()
    assert runs["generic"] == ["portable", "gemv_p4"]
    if nb_avx2.probe()[0] == "avx2":  # this silicon runs AVX2 (the host's own target took it)
        assert runs["haswell"] == ["avx2", "gemv_p4_avx2"]
