"""The packed INT4 × INT8 row dot on 128-bit SSSE3 integer instructions: the ``int4-gemv-ssse3`` family.

x86-64 CPUs without AVX2 (the ``x86-64-v2`` level: Nehalem .. Ivy Bridge, AMD Bulldozer without
AVX2, and VMs whose CPU model stops at v2, e.g. QEMU's and Proxmox's default ``x86-64-v2-AES``) would
otherwise run the portable loop, which LLVM vectorises into 16-bit lanes (~4.4 GB/s of packed weights
per core on the AMD EPYC host). ``pmaddubsw`` (SSSE3, ``llvm.x86.ssse3.pmadd.ub.sw.128``) and
``pmaddwd`` (SSE2, ``llvm.x86.sse2.pmadd.wd``) are `npukit.sim.nb_avx2`'s two instructions on 16-byte
registers: the same row-pass builder (`nb_avx2.maddubs_rows`), the same 64-byte chunks, the same callers
and the same ``8 · Σ q`` correction by the caller.

Exactness: as in `nb_avx2`, one ``pmaddubsw`` lane is ``u0·q0 + u1·q1`` with ``u`` in 0..15 and ``q`` in
-128..127, ``|lane| ≤ 3840``; a 64-byte chunk is four 16-byte quarters, each adding two products (low
and high nibbles) to the int16 lane: ``|sum| ≤ 8 · 3840 = 30720 < 2^15``, no saturation and no wrap.
``pmaddwd`` by ones then widens to int32 once per chunk.

Used where neither `nb_simd` (AVX-512 VNNI) nor `nb_avx2` is fast and `npukit.sim.cpu.choose` says yes
for this family (LLVM selects both instructions for numba's target, a trial reproduces NumPy).
"""

from __future__ import annotations

from npukit.sim import compile_report, cpu
from npukit.sim.nb_avx2 import maddubs_rows, row_intrinsics, trial_builds, trial_ok

compile_report.install()  # first-run compiles are announced, never silent

QUARTER = 16  # bytes per xmm register: a 64-byte chunk is four quarters
dot_u4s8_ssse3, dot4_u4s8_ssse3 = row_intrinsics(
    maddubs_rows(QUARTER, "llvm.x86.ssse3.pmadd.ub.sw.128", "llvm.x86.sse2.pmadd.wd"), "ssse3")


_trial, _trial4 = trial_builds("ssse3", dot_u4s8_ssse3, dot4_u4s8_ssse3)


def _trial_ok() -> bool:
    return trial_ok(_trial, _trial4)


FAMILY = cpu.register(cpu.Family(
    name="int4-gemv-ssse3", fast="ssse3", intrinsics=("pmaddubsw", "pmaddwd"),
    trial="npukit.sim.nb_ssse3:_trial_ok",
    doc="pccx packed-INT4 x INT8 GEMV/GEMM row dot products where neither AVX-512 VNNI nor AVX2 is fast"))


def probe() -> tuple[str, str]:
    """(``"ssse3"`` | ``"portable"``, reason): `npukit.sim.cpu.choose` for this family."""
    chosen = cpu.choose(FAMILY)
    return chosen.path, chosen.reason
