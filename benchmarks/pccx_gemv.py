"""The pccx packed INT4 GEMV alone: weight bytes per second of each build against a NumPy sum.

Run: ``python benchmarks/pccx_gemv.py [--mib 64] [--calls 60] [--quick] [--json]``. Shapes: the decode
GEMVs of a Gemma 3n at hidden 1024 and 2048 (q/o, gate/up, down, the 32 768-row LM head, a 256-row K/V
projection). Each build (the portable loop; the AVX-512 VNNI or the AVX2 one where `npukit.sim.cpu`
chose it; each serial and parallel) reads its own set of random packed matrices, ``--mib`` MiB in all,
one after another, so every call streams weights that are not in the caches, as a decode token does;
the builds take turns call by call so that the machine's load hits them alike. ``--gap-us N`` keeps the
calling thread busy N µs before each call, as a decode step's host work does between its GEMVs: the
parallel builds then pay what numba's idle OpenMP workers cost to wake under the process's wait policy
(`npukit.sim.threads`; the policy heads the output). A NumPy ``uint64`` sum over the
same bytes (a fourth set) is the reference stream: what one core reads from memory here. Before
timing, every build's output is checked bit for bit against the readable reference GEMV
(`numerics.gemv`) on the first matrix of a smaller shape. Figures: the lower quartile of the call
times (``measured``), GB/s and the ratio to the NumPy sum ``derived``; the CPU model, numba's target and
the kernel path head the output, the load average ends it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from npukit.sim.cpu import INT4_FAMILIES
from npukit.sim.cpu import describe as machine_line

SHAPES = ((1024, 1024), (4096, 1024), (1024, 4096), (32768, 1024), (256, 1024),
          (2048, 2048), (8192, 2048), (2048, 8192))
QUICK = ((256, 1024), (64, 256))


def builds() -> dict:
    from npukit.targets.pccx.fast import _nbkernels as nbk

    out = {"portable serial": nbk.KERNELS["gemv_p4_portable_1"], "portable parallel": nbk.gemv_p4}
    if nbk.SIMD == "avx512-vnni":
        out |= {"vnni serial": nbk.KERNELS["gemv_p4_vnni_1"], "vnni parallel": nbk.gemv_p4_vnni}
    if nbk.SIMD == "avx2":
        out |= {"avx2 serial": nbk.KERNELS["gemv_p4_avx2_1"], "avx2 parallel": nbk.gemv_p4_avx2}
    if nbk.SIMD == "ssse3":
        out |= {"ssse3 serial": nbk.KERNELS["gemv_p4_ssse3_1"], "ssse3 parallel": nbk.gemv_p4_ssse3}
    return out


def check(kernels: dict) -> None:
    from npukit.targets.pccx import numerics as nx
    from npukit.targets.pccx.fast import kernels as kx

    rng = np.random.default_rng(3)
    m, k = 37, 1000
    w = rng.integers(-8, 8, (m, k), dtype=np.int8)
    x = nx.bf16(rng.standard_normal(k))
    scale = rng.uniform(0.01, 0.1, m).astype(np.float32)
    want = nx.to_bits(nx.gemv(w, x, scale))
    for name, f in kernels.items():
        dst = np.zeros(m, np.uint16)
        f(nx.to_bits(x), nx.pack_int4(w), scale, dst, False, np.zeros(k + 16, np.int8), kx.LUT32, kx.LUT64)
        if not np.array_equal(dst, want):
            raise SystemExit(f"{name} differs from the reference GEMV; not timing it")


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def shape_row(m: int, k: int, kernels: dict, mib: int, calls: int, gap_s: float = 0.0) -> dict:
    from npukit.targets.pccx import numerics as nx
    from npukit.targets.pccx.fast import kernels as kx

    rng = np.random.default_rng(m + k)
    nbytes = m * k // 2
    sets = max(2, (mib << 20) // nbytes)
    x = nx.to_bits(nx.bf16(rng.standard_normal(k)))
    dst, q, scale = np.zeros(m, np.uint16), np.zeros(k + 16, np.int8), np.ones(m, np.float32)
    mats = {name: [rng.integers(0, 256, (m, k // 2), dtype=np.uint8) for _ in range(sets)]
            for name in [*kernels, "numpy sum"]}

    def run(name: str, i: int) -> None:
        p = mats[name][i % sets]
        if name == "numpy sum":
            p.view(np.uint64).sum()
        else:
            kernels[name](x, p, scale, dst, False, q, kx.LUT32, kx.LUT64)

    times: dict[str, list[float]] = {name: [] for name in mats}
    for i in range(calls + 1):
        for name in mats:
            if gap_s:
                _busy(gap_s)
            t0 = time.perf_counter()
            run(name, i)
            if i:  # the first round warms up
                times[name].append(time.perf_counter() - t0)
    best = {name: sorted(t)[len(t) // 4] for name, t in times.items()}
    ref = nbytes / best["numpy sum"]
    return {"m": m, "k": k, "bytes": nbytes, "matrices": sets,
            "gb_per_s": {n: nbytes / t / 1e9 for n, t in best.items()},
            "of_numpy_sum": {n: nbytes / t / ref for n, t in best.items() if n != "numpy sum"}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=64, help="MiB of matrices per build (more than the caches)")
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--quick", action="store_true", help="two small shapes (a smoke run)")
    ap.add_argument("--gap-us", type=float, default=0.0,
                    help="busy host work before each call, in µs (a decode step's gaps between GEMVs)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from npukit.sim import threads

    machine = machine_line(*INT4_FAMILIES)
    pool = threads.start().describe()
    if args.gap_us:
        pool += f"; {args.gap_us:g} µs host work before each call"
    print(machine, "|", pool, file=sys.stderr)
    kernels = builds()
    check(kernels)
    rows = []
    for m, k in QUICK if args.quick else SHAPES:
        rows.append(shape_row(m, k, kernels, args.mib, args.calls, args.gap_us * 1e-6))
        print(f"  {m}x{k} done", file=sys.stderr, flush=True)
    load = " / ".join(f"{v:.1f}" for v in os.getloadavg())
    if args.json:
        print(json.dumps({"machine": machine, "threads": pool, "load_average": load, "rows": rows,
                          "tier": "measured (call times), derived (GB/s, ratios)"}, indent=2))
        return 0
    names = [*kernels, "numpy sum"]
    print(f"packed INT4 GEMV, GB/s of weights (measured lower-quartile call times; GB/s and the share of the"
          f" NumPy sum derived); {machine}; numba {pool}")
    print(f"{'M x K':>12} {'MB':>6} " + " ".join(f"{n:>18}" for n in names))
    for r in rows:
        cells = [f"{r['gb_per_s'][n]:6.1f} ({r['of_numpy_sum'][n]:4.0%})" if n != "numpy sum"
                 else f"{r['gb_per_s'][n]:6.1f}" for n in names]
        print(f"{r['m']:>6}x{r['k']:<5} {r['bytes'] / 1e6:6.2f} " + " ".join(f"{c:>18}" for c in cells))
    print(f"load average at the end {load} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
