"""The SSSE3 INT4 row-dot family (`npukit.sim.nb_ssse3`): which build the pccx kernel table takes, and
that an x86-64-v2 compile target takes it. Its row dots and its GEMV/GEMM builds are tested beside the
AVX2 ones, against int64 NumPy and the readable GEMV (tests/sim/test_nb_avx2.py, parametrized over both
families built by `nb_avx2.maddubs_rows`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("numba")

from npukit.sim import cpu, nb_simd, nb_ssse3
from npukit.targets.pccx.fast import _nbkernels as nbk


def test_kernel_table_takes_ssse3_only_where_neither_vnni_nor_avx2_is_fast() -> None:
    from npukit.sim import nb_avx2

    vnni, avx2, ssse3 = nb_simd.probe()[0], nb_avx2.probe()[0], nb_ssse3.probe()[0]
    first = next((p for p in (vnni, avx2, ssse3) if p != "portable"), "portable")
    assert first == nbk.SIMD
    if nbk.SIMD == "ssse3":
        assert (nbk.KERNELS["gemv_p4"], nbk.KERNELS["gemm_p4"]) == (nbk.gemv_p4_ssse3, nbk.gemm_p4_ssse3)
        assert nbk.KERNELS["gemv_p4_1"] is nbk.KERNELS["gemv_p4_ssse3_1"]


@pytest.mark.slow  # a child process asking LLVM, running the trial and compiling a GEMV (~10 s)
@pytest.mark.skipif(cpu.compile_target().arch not in ("x86_64", "amd64"), reason="x86 CPU names")
def test_x86_64_v2_target_takes_ssse3(tmp_path) -> None:
    """An x86-64-v2 compile target (SSSE3, no AVX2) takes the SSSE3 build where this silicon runs it,
    and its GEMV equals the reference; baseline x86-64 (`generic`) is tested portable in test_cpu.py."""
    code = ("import numpy as np; from npukit.targets.pccx import numerics as nx;"
            "from npukit.targets.pccx.fast import _nbkernels as k, kernels as kx;"
            "rng = np.random.default_rng(5); w = rng.integers(-8, 8, (67, 700), dtype=np.int8);"
            "x = nx.bf16(rng.standard_normal(700)); s = np.full(67, 0.01, np.float32);"
            "d = np.zeros(67, np.uint16);"
            "k.KERNELS['gemv_p4'](nx.to_bits(x), nx.pack_int4(w), s, d, False, np.zeros(716, np.int8),"
            " kx.LUT32, kx.LUT64);"
            "print(k.SIMD, k.KERNELS['gemv_p4'].__name__, np.array_equal(d, nx.to_bits(nx.gemv(w, x, s))))")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_CPU_", "NPUKIT_SIMD"))}
    env = {**base, "NUMBA_CPU_NAME": "x86-64-v2", "NUMBA_CPU_FEATURES": "+64bit",
           "NUMBA_CACHE_DIR": str(tmp_path / "nb"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         timeout=600).stdout.split()
    assert out[2] == "True"
    if nb_ssse3.probe()[0] == "ssse3":  # this silicon runs SSSE3 (the host's own target took it)
        assert out[:2] == ["ssse3", "gemv_p4_ssse3"]
