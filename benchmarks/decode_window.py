"""The outside check's window, step by step: where a fresh process's first decode tokens spend their time.

The outside check of issue 29 runs ``npukit generate --target pccx`` as a fresh process, a 4-token
prompt, and takes the marginal over 32 new tokens: decode positions 4-35. Wall time on a shared host
swings with the other processes, so this script reports, per decode step, the main thread's CPU time
(``time.thread_time``) beside the wall and the process's CPU (all threads: the timing thread and the
OpenMP workers too), split by what the driver spends it on (main-thread CPU of each part):

* ``run``: the executor's programs (`FastSimulator.run`, the compiled blocks and the steps between);
* ``timer``: `TokenTimer.time` (a new program length's columns and job, or the changed rows' patch);
* ``ahead``: `PccxDriver._prepare_ahead` (the next span bucket's program built in slices);
* ``other``: the rest of the step (inputs staged, programs loaded, the host KV steps, logits).

The steps are summed over ranges of positions: the first decode token (4), the window (4-35) and the
32 positions after it (36-67: the CLI's "decode loop" figure at N = 32), then further ranges up to
``--last``. The model runs as the CLI runs it (``kv="fp16"``, timing on, the GC frozen per step as
`runtime.generate` does), greedy from the prompt. Each run is one fresh process: run it a few times,
alternating with what it is compared against. Every figure is tier ``measured`` on this machine.
Usage: ``python benchmarks/decode_window.py MODEL_DIR [--last 68] [--json]``.
"""

from __future__ import annotations

import argparse
import gc
import resource
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from npukit.cli import ui
from npukit.evidence import Ledger, Tier
from npukit.sim.cpu import describe as machine_line

PROMPT = [2, 651, 7, 9]
PARTS = ("run", "timer", "ahead")
WINDOW = (4, 35)  # the outside check's decode positions (32 new tokens after a 4-token prompt)


def _timed(owner: Any, name: str, part: str, spent: dict[str, float]) -> None:
    """Wrap ``owner.name`` (an instance attribute, so only this backend is touched): its main-thread
    CPU seconds go to ``spent[part]``."""
    call = getattr(owner, name)

    def timed(*args: Any, **kw: Any) -> Any:
        c0 = time.thread_time()
        try:
            return call(*args, **kw)
        finally:
            spent[part] += time.thread_time() - c0

    setattr(owner, name, timed)


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def measure(model_dir: str, last: int = 68) -> dict[str, Any]:
    """Prefill the prompt, then decode greedily up to position ``last``: per step its figures (ms)."""
    from npukit.api.models import Model
    from npukit.cli.cmd_generate import resolve_model
    from npukit.runtime import backends
    from npukit.runtime.generate import YOUNG_THRESHOLD, long_lived_frozen

    with long_lived_frozen(YOUNG_THRESHOLD):
        backend = backends.create_backend(Model(resolve_model(model_dir)).loaded, "pccx", kv="fp16")
        backend.reset()
        drv = backend.drv
        t0, c0 = time.perf_counter(), time.process_time()
        tokens = [int(np.argmax(backend.prefill(PROMPT)))]
        prefill = {"wall_ms": (time.perf_counter() - t0) * 1e3, "cpu_ms": (time.process_time() - c0) * 1e3}
        spent: dict[str, float] = defaultdict(float)
        for owner, name, part in ((drv.dev, "run", "run"), (drv.timer, "time", "timer"),
                                  (drv, "_prepare_ahead", "ahead")):
            _timed(owner, name, part, spent)
        steps = []
        while drv.position < last:
            spent.clear()
            pos, f0 = drv.position, _faults()
            t0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
            tokens.append(int(np.argmax(backend.step(tokens[-1]))))
            thread = time.thread_time() - c0
            gc.freeze()  # (as the CLI's loop does after each step)
            row = {"pos": pos, "wall": (time.perf_counter() - t0) * 1e3, "thread": thread * 1e3,
                   "process": (time.process_time() - p0) * 1e3, "faults": _faults() - f0}
            row |= {p: spent[p] * 1e3 for p in PARTS}
            row["other"] = row["thread"] - sum(row[p] for p in PARTS)
            steps.append(row)
        twins = drv.dev.twins.report() if hasattr(drv.dev, "twins") else {}
        drv.timer.close()
    return {"prefill": prefill, "steps": steps, "tokens": tokens, "twins": twins}


def ranges(last: int) -> list[tuple[int, int]]:
    """The first decode token, the window, then 32-position ranges up to ``last`` (inclusive ends)."""
    out = [(4, 4), WINDOW]
    lo = WINDOW[1] + 1
    while lo + 31 < last:
        out.append((lo, lo + 31))
        lo += 32
    return out


def summarise(steps: list[dict[str, Any]], last: int) -> list[dict[str, Any]]:
    """Per range: the sum of each figure over its steps (ms), and the median step's wall and thread."""
    keys = ("wall", "thread", "process", *PARTS, "other", "faults")
    out = []
    for lo, hi in ranges(last):
        got = [s for s in steps if lo <= s["pos"] <= hi]
        if not got:
            continue
        row: dict[str, Any] = {"range": f"{lo}-{hi}", "steps": len(got)}
        row |= {k: float(sum(s[k] for s in got)) for k in keys}
        row |= {f"median_{k}": float(np.median([s[k] for s in got])) for k in ("wall", "thread")}
        out.append(row)
    return out


def _ledger(rows: list[dict[str, Any]], src: str) -> Ledger:
    led = Ledger()
    for r in rows:
        for k in ("wall", "thread", "process", *PARTS, "other"):
            led.add(f"positions {r['range']}: {k}", r[k], "ms", Tier.MEASURED, src)
    return led


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--last", type=ui.positive(), default=68, help="decode up to this position")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    got = measure(args.model, args.last)
    rows = summarise(got["steps"], args.last)
    src = f"benchmarks/decode_window.py, one fresh process, 4-token prompt; {machine_line()}"
    if args.json:
        ui.emit_json({**got, "ranges": rows, "ledger": _ledger(rows, src)})
        return
    fmt: Callable[[float], str] = "{:.1f}".format
    ui.table([[r["range"], r["steps"], *(fmt(r[k]) for k in ("wall", "thread", "process", *PARTS, "other")),
               int(r["faults"]), fmt(r["median_wall"]), fmt(r["median_thread"])] for r in rows],
             ["positions", "steps", "wall ms", "main-thread CPU", "process CPU", *PARTS, "other",
              "minor faults", "median wall", "median thread"])
    print(f"prefill {got['prefill']['wall_ms']:.0f} ms wall, {got['prefill']['cpu_ms']:.0f} ms CPU; twins "
          f"{got['twins']}; sums over each range (measured); {machine_line()}")


if __name__ == "__main__":
    main()
