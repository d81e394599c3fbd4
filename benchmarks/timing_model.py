"""Cost of the pccx timing model per decoded token, against the fast executor's replay of that token.

The embedded default model (``npukit/assets/gemma3n-tiny``) runs through the real driver,
``PccxDriver(executor="fast", timing=True)``, INT4 weights (`Int4Store`), FP16 KV ring. For each of
``--tokens`` decode tokens (after ``--warmup`` tokens that compile the programs), the driver records
the fast executor's replay time of the token's program segments (`TokenRecord.run_s`: the peer,
functional simulation only). Two costs of the timing model are measured on the same tokens:

* **per token in the driver** — what `PccxDriver.step` itself spends timing the token
  (`TokenTimer.time`: the rows of the Works that changed since the previous token, the FIFO links,
  the compiled event loop; the token's cycles), clocked around that call as the driver makes it, plus
  the seconds the timing thread then takes on it (the rows' patch, the FIFO links, the tables, the
  loop: `TimedRun.background_s`; the driver lets it run beside the next token, here it is waited for);
* **the same in CPU time** — this thread's CPU seconds in `TokenTimer.time` plus the timing thread's on
  the token (`TimedRun.background_cpu_s`), against the process CPU seconds of the executor's
  part of the token (program loads, runs, host KV steps): on a loaded machine the wall figures carry
  the time slices other processes took (a token's timing is ~1 ms, a slice several), these do not;
* **full schedule from scratch** — ``simulate_works(drv.hw, works)`` on the token's Work list
  (`PccxDriver.last_works`): every op converted again and the whole `TimingResult` built (trace,
  stalls, usage), best of ``--repeats``; what asking for a token's schedule costs.

Reported: seconds per token of each (median over the tokens) and their ratios to the executor's.
With ``--prompt P`` (default 20) the same for one GEMM prefill chunk of P prompt tokens, per chunk.

Timings are tier ``measured`` on this machine, the ratio ``derived`` from them.
Usage: ``python benchmarks/timing_model.py [--tokens 5] [--warmup 2] [--repeats 3] [--prompt 20] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from typing import Any

from npukit.cli import ui
from npukit.evidence import Ledger, Tier
from npukit.models.embedded import default_model_dir
from npukit.models.gemma3n import Gemma3nConfig, Gemma3nWeights
from npukit.models.safetensors import open_checkpoint
from npukit.sim.cpu import INT4_FAMILIES
from npukit.sim.cpu import describe as machine_line
from npukit.targets.pccx.driver import PccxDriver
from npukit.targets.pccx.gemma3n_quant import Int4Store
from npukit.targets.pccx.timing import simulate_works


def _best(fn: Any, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def driver() -> PccxDriver:
    d = default_model_dir()
    cfg = Gemma3nConfig.from_hf(json.loads((d / "config.json").read_text()))
    store = Int4Store(Gemma3nWeights(cfg, open_checkpoint(d), str(d)))
    drv = PccxDriver(executor="fast", timing=True).open().load(store).kv_init("fp16")
    drv.start()
    return drv


def clock_timer(drv: PccxDriver) -> tuple[list[float], list[float]]:
    """Clock every `TokenTimer.time` call the driver makes: the wall seconds of each, and the CPU
    seconds (this thread's in the call, the timing thread's on the token), in the lists returned."""
    spent: list[float] = []
    cpu: list[float] = []
    drv.timer.settle()  # a run timed before (not clocked) is not waited for inside a clocked call
    timer_time = drv.timer.time

    def clocked(works: Any) -> Any:
        t0, c0 = time.perf_counter(), time.thread_time()
        out = timer_time(works)
        in_line, in_line_cpu = time.perf_counter() - t0, time.thread_time() - c0
        _ = out.cycles  # the schedule, from the timing thread: its seconds there count too
        spent.append(in_line + out.background_s)
        cpu.append(in_line_cpu + out.background_cpu_s)
        return out

    drv.timer.time = clocked  # type: ignore[method-assign]
    return spent, cpu


def clock_executor(drv: PccxDriver) -> list[float]:
    """The process CPU seconds of the executor's part of each token (program loads, runs, host KV
    steps), appended per token by `decode` (the timing thread is idle then: `clock_timer` waits for it)."""
    spent = [0.0]
    dev = drv.dev

    def clocked(fn: Any) -> Any:
        def call(*a: Any, **k: Any) -> Any:
            c0 = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                spent[-1] += time.process_time() - c0
        return call

    dev.load_program, dev.run = clocked(dev.load_program), clocked(dev.run)  # type: ignore[method-assign]
    drv._host_step = clocked(drv._host_step)  # type: ignore[method-assign]
    return spent


def decode(drv: PccxDriver, args: Any) -> dict[str, Any]:
    drv.reset()
    for _ in range(args.warmup):
        drv.step(2)
    spent, cpu = clock_timer(drv)
    exec_cpu = clock_executor(drv)
    model_s, exec_s, n_works, cycles = [], [], 0, 0.0
    for _ in range(args.tokens):
        exec_cpu.append(0.0)
        drv.step(2)
        rec, works = drv.records[-1], list(drv.last_works)
        exec_s.append(rec.run_s)
        model_s.append(_best(lambda w=works: simulate_works(drv.hw, w), args.repeats))
        n_works, cycles = len(works), float(rec.cycles or 0.0)
        drv.dev.trace.clear()
    return {"model_s": statistics.median(model_s), "timer_s": statistics.median(spent),
            "exec_s": statistics.median(exec_s), "timer_cpu_s": statistics.median(cpu),
            "exec_cpu_s": statistics.median(exec_cpu[1:]), "works": n_works, "cycles": cycles}


def prefill(drv: PccxDriver, args: Any) -> dict[str, Any]:
    ids = list(range(5, 5 + args.prompt))
    drv.reset()
    drv.prefill(ids)  # compiles the chunk program
    drv.reset()
    spent, cpu = clock_timer(drv)
    drv.prefill(ids)
    rec, works = drv.records[-1], list(drv.last_works)
    drv.dev.trace.clear()
    model = _best(lambda: simulate_works(drv.hw, works), max(1, args.repeats // 2))
    return {"model_s": model, "timer_s": spent[-1], "exec_s": rec.run_s, "timer_cpu_s": cpu[-1],
            "exec_cpu_s": None, "works": len(works), "tokens": rec.tokens, "cycles": float(rec.cycles or 0.0)}


def main(argv: list[str] | None = None) -> int:
    # the CPU and kernel paths measured (both INT4 families: VNNI and AVX2)
    print(machine_line(*INT4_FAMILIES), file=sys.stderr)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=20, help="prefill chunk of P prompt tokens (0: skip)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    drv = driver()
    dec = decode(drv, args)
    pre = prefill(drv, args) if args.prompt else None
    src = (f"benchmarks/timing_model.py embedded model, PccxDriver fast, {args.tokens} tokens after "
           f"{args.warmup}, simulate_works best of {args.repeats}; {machine_line()}; "
           f"{platform.python_implementation()} {platform.python_version()}")
    led = Ledger()
    rows = [_report(led, "decode", "token", dec, src)]
    if pre is not None:
        rows.append(_report(led, "prefill", "chunk", pre,
                            src + f"; prefill chunk of {pre['tokens']} tokens, {pre['works']} Works"))
    if args.json:
        ui.emit_json({"decode": dec, "prefill": pre, "ledger": led})
        return 0
    ui.table(rows, ["run", "Works", "fast executor ms", "timing in the driver ms", "driver / executor",
                    "timing CPU ms", "CPU / executor CPU", "full schedule ms", "full / executor"],
             align="lrrrrrrrr")
    print(f"\ntier: measured (ratios derived); source: {src}")
    return 0


def _report(led: Ledger, phase: str, unit: str, m: dict[str, Any], src: str) -> list[Any]:
    """The ledger lines and the table row of one phase's measurements ``m``."""
    led.add(f"{phase}: fast executor s/{unit} (peer)", m["exec_s"], "s", Tier.MEASURED,
            src + "; TokenRecord.run_s (segments replayed, functional only)")
    led.add(f"{phase}: timing in the driver s/{unit}", m["timer_s"], "s", Tier.MEASURED,
            src + "; TokenTimer.time as PccxDriver.step calls it (changed rows, compiled loop, cycles)")
    led.add(f"{phase}: timing in the driver / fast executor", m["timer_s"] / m["exec_s"], "x", Tier.DERIVED,
            src)
    led.add(f"{phase}: timing in the driver, CPU s/{unit}", m["timer_cpu_s"], "s", Tier.MEASURED,
            src + "; thread CPU time of TokenTimer.time and of its compiled loop on the timing thread")
    cpu_ratio = "n/a"
    if m["exec_cpu_s"]:
        led.add(f"{phase}: fast executor, CPU s/{unit}", m["exec_cpu_s"], "s", Tier.MEASURED,
                src + "; process CPU time of the program loads, runs and host KV steps")
        led.add(f"{phase}: timing CPU / executor CPU", m["timer_cpu_s"] / m["exec_cpu_s"], "x", Tier.DERIVED,
                src)
        cpu_ratio = f"{m['timer_cpu_s'] / m['exec_cpu_s']:.2f}x"
    led.add(f"{phase}: full schedule s/{unit}", m["model_s"], "s", Tier.MEASURED,
            src + f"; simulate_works on the {m['works']} Works (every op, the whole TimingResult)")
    led.add(f"{phase}: full schedule / fast executor", m["model_s"] / m["exec_s"], "x", Tier.DERIVED, src)
    name = "decode token" if phase == "decode" else f"prefill chunk ({m['tokens']} tok)"
    return [name, m["works"], f"{m['exec_s'] * 1e3:.1f}", f"{m['timer_s'] * 1e3:.2f}",
            f"{m['timer_s'] / m['exec_s']:.2f}x", f"{m['timer_cpu_s'] * 1e3:.2f}", cpu_ratio,
            f"{m['model_s'] * 1e3:.1f}", f"{m['model_s'] / m['exec_s']:.1f}x"]


if __name__ == "__main__":
    raise SystemExit(main())
