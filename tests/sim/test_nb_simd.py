"""The VNNI INT4 dot product and the GEMV built on it against integer arithmetic in NumPy and the pccx
reference GEMV (`numerics.gemv`); the probe's decision and its override."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("numba")

from npukit.sim import nb_simd
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.fast import _nbkernels as nbk
from npukit.targets.pccx.fast import kernels as kx


def test_probe_decides_and_kernel_table_follows() -> None:
    simd, reason = nb_simd.probe()
    assert simd in ("avx512-vnni", "portable") and reason
    assert (nbk.KERNELS["gemv_p4"] is nbk.gemv_p4_vnni) == (simd == "avx512-vnni")
    # without VNNI: the AVX2 build where that family is fast (tests/sim/test_nb_avx2.py), else portable
    assert (nbk.KERNELS["gemv_p4"] is nbk.gemv_p4) == (nbk.SIMD == "portable")


def test_env_override_forces_portable() -> None:
    env = {**os.environ, "NPUKIT_SIMD": "portable"}
    out = subprocess.run([sys.executable, "-c", "from npukit.targets.pccx.fast import _nbkernels as k;"
                          "print(k.SIMD, k.KERNELS['gemv_p4'] is k.gemv_p4)"],
                         env=env, capture_output=True, text=True, check=True).stdout.split()
    assert out == ["portable", "True"]


def _vnni_or_fail() -> None:
    if nb_simd.probe()[0] != "avx512-vnni":
        # where the probe refused VNNI, running the intrinsic could kill the process: the decision
        # itself was tested above, the portable kernel by every fastsim test
        pytest.skip(f"AVX-512 VNNI not usable here: {nb_simd.probe()[1]}")


@pytest.mark.parametrize("nbytes", [64, 128, 1024])
def test_dot_u4s8_is_the_offset_binary_integer_sum(nbytes: int) -> None:
    _vnni_or_fail()
    rng = np.random.default_rng(nbytes)
    p = rng.integers(0, 256, nbytes, dtype=np.uint8)
    even = rng.integers(-128, 128, nbytes, dtype=np.int8)
    odd = rng.integers(-128, 128, nbytes, dtype=np.int8)
    want = int(((p & 15) ^ 8).astype(np.int64) @ even + ((p >> 4) ^ 8).astype(np.int64) @ odd)
    assert int(nb_simd._trial(p, even, odd)) == want


@pytest.mark.parametrize("k", [2, 127, 128, 129, 1000, 2048, 4097])
def test_gemv_p4_vnni_equals_reference_gemv(k: int) -> None:
    """Whole 64-byte runs on VNNI, the tail (and odd K's padding nibble) in the portable loop."""
    _vnni_or_fail()
    rng = np.random.default_rng(k)
    m = 37
    w = rng.integers(-8, 8, (m, k), dtype=np.int8)
    packed = nx.pack_int4(w)
    packed[:, -1] |= np.uint8(0xF0) if k % 2 else np.uint8(0)  # garbage in the padding nibble
    x = nx.bf16(rng.standard_normal(k) * 3.0)
    scale = rng.uniform(0.001, 0.1, m).astype(np.float32)
    want = nx.to_bits(nx.gemv(w, x, scale))
    for kern in (nbk.gemv_p4_vnni, nbk.gemv_p4, nbk.KERNELS["gemv_p4_1"]):
        dst = np.zeros(m, np.uint16)
        q = np.zeros(k + 16, np.int8)
        assert kern(nx.to_bits(x), packed, scale, dst, False, q, kx.LUT32, kx.LUT64) == 0
        np.testing.assert_array_equal(dst, want)


def test_extreme_codes_do_not_overflow() -> None:
    """All weights -8 against all activations -127 over the largest K: |sum| near 2^26, exact."""
    _vnni_or_fail()
    k, m = 65_535, 3
    w = np.full((m, k), -8, np.int8)
    x = nx.bf16(np.full(k, -1.0))
    dst = np.zeros(m, np.uint16)
    q = np.zeros(k + 16, np.int8)
    nbk.gemv_p4_vnni(nx.to_bits(x), nx.pack_int4(w), np.ones(m, np.float32), dst, False, q, kx.LUT32,
                     kx.LUT64)
    np.testing.assert_array_equal(dst, nx.to_bits(nx.gemv(w, x, np.ones(m, np.float32))))


@pytest.mark.parametrize("k", [7, 300, 2048])
def test_gemm_p4_equals_per_vector_reference(k: int) -> None:
    """GEMM (each row read once for all vectors) == the reference GEMV per vector, own exponent each;
    a non-finite vector gives NaN outputs for that vector only."""
    rng = np.random.default_rng(k + 1)
    m, n = 45, 5
    w = rng.integers(-8, 8, (m, k), dtype=np.int8)
    scale = rng.uniform(0.001, 0.1, m).astype(np.float32)
    xs = [nx.bf16(rng.standard_normal(k) * 10.0 ** rng.integers(-3, 3)) for _ in range(n)]
    xs[3][k // 2] = np.inf
    flat = np.zeros(n * (k + m) + 64, np.uint16)
    xoff = np.arange(n, dtype=np.int64) * k
    doff = n * k + np.arange(n, dtype=np.int64) * m
    for t, x in enumerate(xs):
        flat[xoff[t]: xoff[t] + k] = nx.to_bits(x)
    kernels = [nbk.gemm_p4_portable] + ([nbk.gemm_p4_vnni] if nb_simd.probe()[0] == "avx512-vnni" else [])
    for kern in kernels:
        out = flat.copy()
        kern(out, xoff, k, doff, nx.pack_int4(w), scale, False, np.zeros((n, k + 16), np.int8), kx.LUT32,
             kx.LUT64)
        for t, x in enumerate(xs):
            np.testing.assert_array_equal(out[doff[t]: doff[t] + m], nx.to_bits(nx.gemv(w, x, scale)))
        assert np.all(out[doff[3]: doff[3] + m] == 0x7FC0)


@pytest.mark.parametrize(("chunks", "pad"), [(1, 0), (3, 64), (16, 17), (32, 1)])
def test_dot4_u4s8_equals_the_int64_sums_row_by_row(chunks: int, pad: int) -> None:
    """Four rows in one pass (rows ``pad`` bytes apart beyond their length: strided views) == the
    offset-binary statement in int64 NumPy for each row, and == `dot_u4s8` one row at a time."""
    _vnni_or_fail()
    rng = np.random.default_rng(chunks * 100 + pad)
    n = chunks * nb_simd.CHUNK
    wide = rng.integers(0, 256, (nb_simd.ROWS, n + pad), dtype=np.uint8)
    rows = wide[:, :n]
    even = rng.integers(-128, 128, n, dtype=np.int8)
    odd = rng.integers(-128, 128, n, dtype=np.int8)
    want = nb_simd._want(rows, even, odd)
    np.testing.assert_array_equal(nb_simd._trial4(rows, even, odd), want)
    assert [int(nb_simd._trial(np.ascontiguousarray(r), even, odd)) for r in rows] == want.tolist()


def _gemv_kernels(serial: bool) -> list:
    """The packed GEMV builds this CPU may run; ``serial``: also the serial twins (the same source
    compiled without the parallel region; each array layout is one more compile of every build)."""
    vnni = nb_simd.probe()[0] == "avx512-vnni"
    out = [nbk.gemv_p4] + ([nbk.gemv_p4_vnni] if vnni else [])
    if serial:
        out += [nbk.KERNELS["gemv_p4_portable_1"]] + ([nbk.KERNELS["gemv_p4_vnni_1"]] if vnni else [])
    return out


@pytest.mark.slow  # ~9 s of first-run compiling (strided layouts), then well under a second
@pytest.mark.parametrize(("m", "k", "view"), [(1, 256, "rows"), (3, 129, "rows"), (4, 4097, "rows"),
                                              (5, 200, "contiguous"), (9, 1024, "columns"),
                                              (38, 2048, "rows"), (41, 383, "contiguous")])
def test_gemv_p4_builds_equal_the_reference_on_views(m: int, k: int, view: str) -> None:
    """Every build (portable and VNNI, parallel and serial) on row counts that are not a multiple of
    the VNNI pass, K odd or not a multiple of 128 (a tail), rows of a wider image (row stride >
    length) and a column-strided image (no 64-byte runs: the portable loop for all of it)."""
    rng = np.random.default_rng(m * k)
    w = rng.integers(-8, 8, (m, k), dtype=np.int8)
    packed = nx.pack_int4(w)
    if view == "rows":
        wide = rng.integers(0, 256, (m, packed.shape[1] + 48), dtype=np.uint8)
        wide[:, : packed.shape[1]] = packed
        packed = wide[:, : packed.shape[1]]
    elif view == "columns":
        wide = rng.integers(0, 256, (m, 2 * packed.shape[1]), dtype=np.uint8)
        wide[:, ::2] = packed
        packed = wide[:, ::2]
    x = nx.bf16(rng.standard_normal(k) * 2.0)
    scale = rng.uniform(0.001, 0.1, m).astype(np.float32)
    want = nx.to_bits(nx.gemv(w, x, scale))
    for kern in _gemv_kernels(serial=view == "contiguous"):
        dst = np.zeros(m, np.uint16)
        assert kern(nx.to_bits(x), packed, scale, dst, False, np.zeros(k + 16, np.int8), kx.LUT32,
                    kx.LUT64) == 0
        np.testing.assert_array_equal(dst, want, err_msg=str(kern))


def test_short_row_passes_prefetch_8_kib_on_long_ones_the_next_pass() -> None:
    """`nb_simd.pass_ahead`: a whole number of `ROWS`-row passes; a pass shorter than `LONG_PASS` as
    many as fit in `PREFETCH_AHEAD` bytes (512-byte rows, K = 1024: 8 KiB on rather than one 2 KiB
    pass), a longer one the next pass. Runs the LLVM the row passes emit (plain integer IR)."""
    from numba import njit, types
    from numba.extending import intrinsic

    @intrinsic
    def ahead(typingctx, stride):  # pragma: no cover - numba
        def codegen(context, builder, signature, args):
            return nb_simd.pass_ahead(builder, args[0])

        return types.intp(types.intp), codegen

    run = njit(lambda s: ahead(s))
    for stride in (64, 256, 512, 700, 1000, 1024, 2048, 3000, 4096):
        one, got = nb_simd.ROWS * stride, int(run(stride))
        assert got % one == 0 and got >= one, stride
        if one < nb_simd.LONG_PASS:
            assert got <= nb_simd.PREFETCH_AHEAD < got + one, stride  # no further whole pass fits
        else:
            assert got == one, stride
    assert (int(run(512)), int(run(256)), int(run(1024)), int(run(4096))) == (8192, 8192, 4096, 16384)
    assert int(run(0)) == 0  # a broadcast view: no division by zero
