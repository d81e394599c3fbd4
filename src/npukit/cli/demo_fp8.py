"""``npukit demo fp8``: FP8-as-storage GEMM — the contract on a small shape, its error, the speed row.

1. a 64 × 256 × 512 GEMM of FP8 (E4M3, the seed's format) weights: the fused kernel against the
   NumPy reference of the contract, bit for bit;
2. its error against the float64 GEMM of the original (pre-FP8) weights, stage by stage;
3. the headline row: fused vs naive decode + matmul vs cached fp32 at M = 16 on a 4096 × 4096
   projection, timed here (measured), with resident weight bytes.
Runs on the core install (numba; no torch needed: the naive and cached paths then use NumPy).
"""

from __future__ import annotations

import argparse

SUMMARY = "FP8-as-storage GEMM: the seed's contract bit-exact on CPU, its error vs fp64, one speed row"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fmt", default="e4m3", choices=("e4m3", "e4m3fn", "e5m2"))


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from npukit.cli import ui
    from npukit.kernels import fp8 as K
    from npukit.kernels.fp8 import bench, fast, harness

    fmt = getattr(args, "fmt", "e4m3")
    with ui.step("1. the fused kernel and the NumPy reference on 64x256x512"):
        x, w = harness.synthetic(64, 256, 512, seed=0)
        stored = K.encode(w, fmt, "tensor")
        x16 = x.astype(np.float32).astype(np.float16)
        a_inv = K.activation_inv_scale(x16)
        kw = {"fmt": fmt, "a_inv_scale": a_inv}
        got = K.gemm(x16, stored.codes, stored.col_scales, **kw)
        ref = K.gemm_reference(x16, stored.codes, stored.col_scales, **kw)
    same = bool(np.array_equal(got.view(np.uint16), ref.view(np.uint16)))
    simd = fast.simd()[0] if fast.available() else "numpy reference"
    print(f"1. contract: 64x256x512, {fmt} weights, fp16 activations (v4) — fused [{simd}] == NumPy "
          f"reference bit for bit: {same}")
    print("2. error vs the float64 GEMM of the original weights (derived):")
    with ui.step("2. errors against float64"):
        errors = harness.stage_errors(x, w, fmt, "tensor")
    for e in errors:
        print(f"   {e.stage:<7} max rel {e.max_rel:.2e}  mean rel {e.mean_rel:.2e}  cosine {e.cosine:.6f}")
    with ui.step("3. timing fused, naive and cached paths at M=16, N=K=4096"):
        r = bench.bench_shape("4096x4096 projection", 16, 4096, 4096, fmt=fmt, reps=3)
    print("3. M=16, N=K=4096 (measured here, best of 3):")
    for p, v in r.paths.items():
        mib = v.resident_bytes / 2**20
        print(f"   {p:<6} {v.ms:8.2f} ms  {r.tops(p):6.3f} TOPS  resident weights {mib:5.1f} MiB  {v.note}")
    less = r.paths["cached"].resident_bytes / r.paths["fused"].resident_bytes
    print(f"   fused is {r.ratio('naive'):.2f}x the naive decode+matmul and {r.ratio('cached'):.2f}x the "
          f"cached fp32 matmul, with {less:.1f}x fewer resident weight bytes than the cached path (derived)")
    return 0 if same else 1
