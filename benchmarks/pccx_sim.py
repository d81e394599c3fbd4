"""Functional-simulation speed of pccx's bit-exact GEMV path, against float32 NumPy in the same run.

For each shape, one program (MEMSET shape + weight slot, one INT4 GEMV with row scales) runs on
`npukit.targets.pccx.sim.Simulator`; the GEMV's MAC/s (best of N runs of ``sim.run()``, including
decode and Work emission) is compared with ``np.dot`` of the same M×K float32 matrix and vector.
Usage: ``python benchmarks/pccx_sim.py [--repeat N] [--json]``. All figures are measured here.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time

import numpy as np

from npukit.cli import ui
from npukit.evidence import Ledger, Tier
from npukit.hw import load_hw
from npukit.sim.cpu import INT4_FAMILIES
from npukit.sim.cpu import describe as machine_line
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.asm import assemble
from npukit.targets.pccx.memory import weight_entry, weight_image
from npukit.targets.pccx.sim import Simulator

SHAPES = [(512, 512), (2048, 2048), (4096, 2048), (2048, 8192)]
W_ADDR = 0x1000_0000


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bench(m: int, k: int, repeat: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    w = rng.integers(-8, 8, (m, k))
    scales = rng.random(m).astype(np.float32)
    x = rng.standard_normal(k).astype(np.float32)
    sim = Simulator(load_hw("pccx-v002-kv260"), "extended")
    sim.host.write(W_ADDR, np.frombuffer(weight_image(w, "int4", scales), np.uint8))
    sim.write_l2(0, x)
    fmt, hi, lo = weight_entry("int4", W_ADDR)
    words = assemble(f"memset cache=fmap slot=2 a={m} b=1 c={k}\n"
                     f"memset cache=weight slot=1 a={fmt} b={hi} c={lo}\n"
                     "gemv dest=0x8000 src=0x0 flags=w_scale size=1 shape=2 async\n")

    def run_sim() -> None:
        sim.load_program(words)
        works = sim.run()
        assert sim.error is None and len(works) == 3, sim.error

    run_sim()  # warm-up; also checks the bit-exact result below
    got = sim.read_l2(0x8000, m)
    want = nx.gemv(w.astype(np.int8), nx.from_bits(nx.to_bits(x)), scales)
    if not np.array_equal(nx.to_bits(got), nx.to_bits(want)):
        raise SystemExit(f"GEMV {m}x{k}: simulator result is not bit-exact to numerics.gemv")
    t_sim = _best(run_sim, repeat)
    wf = w.astype(np.float32)
    t_np = _best(lambda: np.dot(wf, x), max(5 * repeat, 20))  # cheap; more tries tame shared-CPU noise
    macs = m * k
    return {"m": m, "k": k, "sim_s": t_sim, "numpy_s": t_np, "sim_macs_per_s": macs / t_sim,
            "numpy_macs_per_s": macs / t_np, "slowdown": t_sim / t_np}


def main() -> int:
    # the CPU and kernel paths measured (both INT4 families: VNNI and AVX2)
    print(machine_line(*INT4_FAMILIES), file=sys.stderr)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [bench(m, k, args.repeat) for m, k in SHAPES]
    src = (f"benchmarks/pccx_sim.py best of {args.repeat}, numpy {np.__version__}, "
           f"{platform.machine()} {platform.python_implementation()} {platform.python_version()}")
    led = Ledger()
    for r in rows:
        tag = f"{r['m']}x{r['k']}"
        led.add(f"gemv {tag} sim MAC/s", r["sim_macs_per_s"], "MAC/s", Tier.MEASURED, src)
        led.add(f"gemv {tag} numpy f32 MAC/s", r["numpy_macs_per_s"], "MAC/s", Tier.MEASURED, src)
        led.add(f"gemv {tag} sim/numpy time ratio", r["slowdown"], "x", Tier.DERIVED, src)
    if args.json:
        ui.emit_json({"rows": rows, "ledger": led})
        return 0
    ui.table([[f"{r['m']}x{r['k']}", f"{r['sim_macs_per_s'] / 1e9:.3f}", f"{r['numpy_macs_per_s'] / 1e9:.3f}",
               f"{r['slowdown']:.1f}x"] for r in rows],
             ["shape MxK", "sim GMAC/s", "np.dot f32 GMAC/s", "sim time / np.dot time"], align="lrrr")
    print(f"\ntier: measured (ratios derived); source: {src}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
