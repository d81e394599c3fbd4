"""Speed target for npukit.perf sweeps: 1,000 design points locally in under 60 s on 2 cores.

Runs the same grid the CLI would (`npukit sweep`), process pool of 2 workers, and prints wall time
and points/s as a measured figure. Usage: ``python benchmarks/perf_sweep.py [--workers N]``.
"""

from __future__ import annotations

import argparse
import sys
import time

from npukit.evidence import Ledger, Tier
from npukit.perf.ops import build_ops
from npukit.perf.sweep import Sweep, run_sweep
from npukit.sim.cpu import describe as machine_line

TARGET_S = 60.0


def main() -> int:
    print(machine_line(), file=sys.stderr)  # the CPU and kernel paths measured
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--model", default="gemma3n-e4b")
    args = ap.parse_args()
    # 5 clocks × 4 lane counts × 5 DDR rates × 2 weight formats × 5 contexts = 1,000 points,
    # 20 distinct machines (hardware axes re-run the adapter)
    axes = {"clock_mhz": [200, 300, 400, 500, 600], "gemv.cores_log2": [0, 1, 2, 3],
            "ddr_gbps": [6.4, 12.8, 19.2, 25.6, 38.4], "weights": ["int4", "int8"],
            "context": [512, 2048, 4096, 8192, 32768]}
    t0 = time.perf_counter()
    table = build_ops(args.model)
    sw = Sweep("pccx-v002-kv260", table, axes, {"weights": "int4", "kv": "int4", "context": 1024,
                                                 "sparsity": 0.0}, [])
    rows = run_sweep(sw, workers=args.workers)
    dt = time.perf_counter() - t0
    led = Ledger()
    src = f"benchmarks/perf_sweep.py, {args.workers} workers, wall clock incl. op table and pool start"
    led.add("sweep.points", len(rows), "points", Tier.MEASURED, src)
    led.add("sweep.seconds", dt, "s", Tier.MEASURED, src)
    led.add("sweep.points_per_second", len(rows) / dt, "points/s", Tier.MEASURED, src)
    for name, f in led.items():
        print(f"{name:24s} {f.fmt():>16s}  {f.tier}  {f.source}")
    ok = len(rows) == 1000 and dt < TARGET_S
    print(f"target: 1000 points < {TARGET_S:g} s: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
