"""FP8-as-storage GEMM on this CPU: fused vs naive decode+matmul vs cached fp32 vs torch int8.

Run: ``python benchmarks/fp8_gemm.py [--quick] [--fmt e4m3] [--reps 3] [--json]`` (the same tables
as ``npukit fp8 bench``). Shapes: the seed's 4096³, then M ∈ {1, 16, 128, 512} over the q, k, gate
and down projections of Gemma 3n E4B and Llama-3-8B. Before timing, the fused output is checked bit
for bit against the NumPy reference on a slice of the first shape (a faster wrong answer is not a
result). Timings are tier ``measured`` (best of ``--reps`` after a warm-up, all paths in one run);
TOPS and ratios are ``derived``; the RTX 3090 Ti rows are ``projected`` next to the seed's
``measured`` figures.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from npukit.cli import ui
from npukit.kernels import fp8 as K
from npukit.kernels.fp8 import bench, fast, gpu
from npukit.sim.cpu import describe as machine_line


def check(fmt: str) -> bool:
    a16, w, a_inv = bench.make_operands(33, 257, 1000, fmt, seed=1)
    kw = {"fmt": fmt, "a_inv_scale": a_inv}
    got = K.gemm(a16, w.codes, w.col_scales, **kw)
    ref = K.gemm_reference(a16, w.codes, w.col_scales, **kw)
    return bool(np.array_equal(got.view(np.uint16), ref.view(np.uint16)))


def main(argv: list[str] | None = None) -> int:
    print(machine_line("npukit.kernels.fp8._nb"), file=sys.stderr)  # the CPU and kernel paths measured
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--fmt", default="e4m3", choices=K.FORMATS)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not check(args.fmt):
        print("fused output differs from the reference; not timing it", file=sys.stderr)
        return 1
    simd = fast.simd()[0] if fast.available() else "numpy-reference"
    results = bench.run(bench.default_shapes(args.quick), fmt=args.fmt, reps=args.reps,
                        progress=None if args.json else lambda r: print(f"  {r.label} M={r.m} done",
                                                                        file=sys.stderr, flush=True))
    if args.json:
        ui.emit_json({"simd": simd, "results": bench.to_json(results), "gpu": gpu.seed_table()})
        return 0
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"FP8-as-storage GEMM, {args.fmt}, {simd}; measured (best of {args.reps}+ rounds, paths taking "
          f"turns), TOPS and ratios derived; load average at the end {load} on {os.cpu_count()} CPUs")
    print("\n".join(bench.speed_table(results)))
    print("\nMemory MiB: resident / tracemalloc peak per call / peak-RSS growth per call (measured)")
    print("\n".join(bench.memory_table(results)))
    print("\nRTX 3090 Ti model (projected) vs the seed (measured):")
    print("\n".join(gpu.seed_lines()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
