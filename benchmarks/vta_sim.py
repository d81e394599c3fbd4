"""VTA simulation speed: simulated VTA cycles per wall-clock second, functional and timing.

Run: ``python benchmarks/vta_sim.py [--models resnet8-cifar10,zoo:digits] [--rounds R]
[--requant host|vta] [--json]``.

For each model the exact delegate lowers every supported op to a VTA program once. Then, per round:
one inference through the functional simulator (all delegated programs, host ops included, outputs
checked bit-identical to the host reference interpreter first) and one timing pass of all programs
on the shared event-driven core. Reported (tier ``measured`` for wall times, ``derived`` for rates):
simulated cycles, instructions, functional wall time per inference, timing wall time, and the
simulated cycles per second of each. The median over rounds is reported. Peer: TVM's fsim reports no
cycles at all (no timing model), so there is no like-for-like rate to compare with.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np

from npukit.cli import ui
from npukit.evidence import Figure, Tier
from npukit.models.tflite import Interpreter, read_model, zoo
from npukit.sim.cpu import describe as machine_line
from npukit.targets.vta.delegate import make_delegate
from npukit.targets.vta.timing import time_program

SOURCE = "benchmarks/vta_sim.py"


def _bench(name: str, rounds: int, requant: str = "host") -> dict:
    model = read_model(zoo.resolve(name if ":" in name else f"zoo:{name}"))
    rng = np.random.default_rng(0)
    x = [rng.integers(-128, 128, t.shape).astype(t.dtype) for t in model.input_tensors()]
    # the instruction-level simulator is what this measures (the delegate's default computes the
    # same bits with the compiled host kernels: "compiled ms" below)
    delegate = make_delegate("exact", overrides=[f"requant={requant}", "functional=simulate"])
    vta = Interpreter(model, delegate=delegate)
    fast = Interpreter(model, delegate=make_delegate("exact", overrides=[f"requant={requant}"]))
    ref = Interpreter(model).run(x)
    got, got_fast = vta.run(x), fast.run(x)
    if any(not (np.array_equal(got[k], ref[k]) and np.array_equal(got_fast[k], ref[k])) for k in ref):
        raise SystemExit(f"{name}: VTA outputs differ from the reference interpreter")
    cycles = sum(r.timing.cycles for r in delegate.reports)
    instrs = sum(r.instructions for r in delegate.reports)
    func, timing, compiled = [], [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fast.run(x)
        compiled.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        vta.run(x)
        func.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for low in delegate.lowered.values():
            time_program(delegate.hw, low.program.instrs)
        timing.append(time.perf_counter() - t0)
    f, t = statistics.median(func), statistics.median(timing)
    src = f"{SOURCE} on {platform.processor() or platform.machine()}, load {os.getloadavg()[0]:.1f}"
    return {
        "model": name, "delegated_ops": vta.delegated_ops, "instructions": instrs,
        "sim_cycles": Figure(cycles, "cycles", Tier.PROJECTED, "VTA timing model, preset vta-alkali"),
        "functional_s": Figure(f, "s", Tier.MEASURED, src),
        "timing_s": Figure(t, "s", Tier.MEASURED, src),
        "compiled_functional_s": Figure(statistics.median(compiled), "s", Tier.MEASURED,
                                        f"{src}; delegate default (functional=compiled)"),
        "functional_cycles_per_s": Figure(cycles / f, "cycles/s", Tier.DERIVED, "sim_cycles / functional_s"),
        "timing_cycles_per_s": Figure(cycles / t, "cycles/s", Tier.DERIVED, "sim_cycles / timing_s"),
        "timing_insns_per_s": Figure(instrs / t, "insn/s", Tier.DERIVED, "instructions / timing_s"),
    }


def main(argv: list[str] | None = None) -> int:
    print(machine_line(), file=sys.stderr)  # the CPU and kernel paths measured
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="resnet8-cifar10,zoo:digits")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--requant", choices=["host", "vta"], default="host",
                   help="exact delegate: TFLite's rescale on the host (default) or on the VTA ALU")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    rows = [_bench(m.strip(), args.rounds, args.requant) for m in args.models.split(",") if m.strip()]
    if args.json:
        ui.emit_json({"results": rows, "python": sys.version.split()[0]})
        return 0
    ui.table([[r["model"], r["delegated_ops"], r["instructions"], f"{r['sim_cycles'].value:.0f}",
               f"{r['functional_s'].value * 1e3:.1f}", f"{r['functional_cycles_per_s'].value / 1e6:.2f}",
               f"{r['timing_s'].value * 1e3:.1f}", f"{r['timing_cycles_per_s'].value / 1e6:.2f}",
               f"{r['compiled_functional_s'].value * 1e3:.2f}"]
              for r in rows],
             ["model", "VTA ops", "insns", "sim cycles", "func ms", "func Mcyc/s", "timing ms",
              "timing Mcyc/s", "compiled ms"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
