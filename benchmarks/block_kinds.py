"""Where a pccx decode step's compiled fused-block time goes, per table row kind.

A diagnostic build: the fused runs' calls (`_nbblock.block`) go to a second build of the same row
loop (`_nbblock._block`) whose per-row hooks (`_row_clock`, `_row_done`: nothing in the plain build)
read the CPU's cycle counter (``llvm.readcyclecounter``: generic LLVM, ``rdtsc`` on x86-64) before
and after each row and add the difference to the row's kind. The rows run inside whole-table calls as
in a plain run (the same kernels in the same order, the scratch and caches as they are there), so a
row's figure is the row's own time plus the two counter reads (~25 cycles), not a call per row. (Until
2026-11-27 each row was a call of `block` on a one-row table, which added ~0.3 µs, the call and its
scratch, to every row: ~0.8 ms per step at hidden 1024.) Only the parallel INT4 twin's choice is left
to the executor's chooser as in a plain run (``--serial``: the serial twin always, so that CPU time
and wall time agree). The build is compiled per run (~40 s; not cached: the tallies' addresses are
constants in it).

The model (a Gemma 3n checkpoint directory, e.g. one `benchmarks/gemma3n_cli.py` writes) runs on the
pccx backend as the CLI does (``kv="fp16"``, timing off): a 4-token prompt, ``--warm`` decode steps,
then ``--steps`` timed decode steps (greedy). Reported per kind: ms per step, rows per step, µs per row; and
the step's wall ms, the ms inside fused-block calls. Every figure is tier ``measured`` on this machine.
Usage: ``python benchmarks/block_kinds.py MODEL_DIR [--steps 32] [--warm 30] [--serial] [--json]``.
"""

from __future__ import annotations

import argparse
import sys
import time

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from npukit.cli import ui
from npukit.evidence import Ledger, Tier
from npukit.sim.cpu import INT4_FAMILIES, njit_variant
from npukit.sim.cpu import describe as machine_line
from npukit.targets.pccx.fast import _nbblock

KIND_NAMES = {0: "CVO arithmetic", 1: "REDUCE_SUM", 2: "LOAD_SCALAR", 3: "MEMSET S/e_max", 4: "MEMCPY L2",
              5: "MEMCPY host", 6: "MEMSET descriptor", 7: "FP16 GEMV", 8: "EXP", 9: "FP16 GEMV K-major",
              10: "INT4 GEMV packed", 11: "INT4 GEMV int8 codes", 12: "CVO tabled", 13: "yield",
              14: "INT4 GEMV K-major"}
_ARITH = {0: "square", 1: "scale", 2: "div S", 3: "zero", 4: "recip", 5: "rsqrt", 6: "sqrt", 7: "relu",
          8: "mul", 9: "add", 10: "copy", -1: "scale by S", -2: "div by S", -3: "relu S"}
PROMPT = [2, 651, 7, 9]
_SLOTS = 32  # keys per kind: the sub-kind (op + 8, or an INT4 row's size class)


@intrinsic
def _cycles(typingctx):  # pragma: no cover - numba
    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(64), [])
        fn = builder.module.declare_intrinsic("llvm.readcyclecounter", fnty=fnty)
        return builder.call(fn, [])

    return types.int64(), codegen


@nb.njit(nogil=True)
def _now():
    return _cycles()


_i64_at = _nbblock.pointer_at("_i64_at", types.int64)  # a host address as an int64 pointer


def timed_block(cyc: np.ndarray, rows: np.ndarray):
    """`_nbblock.block` built with per-row hooks that add each finished row's cycles and count to
    ``cyc`` / ``rows`` at its key (kind · 32 + sub-kind); the arrays must outlive the build."""
    c_at, r_at, size = cyc.ctypes.data, rows.ctypes.data, cyc.shape[0]

    @nb.njit(nogil=True, inline="always")
    def clock():  # pragma: no cover - numba
        return _cycles()

    @nb.njit(nogil=True, inline="always")
    def done(tab, r, t0):  # pragma: no cover - numba
        t1 = _cycles()
        kind = tab[r, 0]
        key = kind * _SLOTS
        if kind == 0 or kind == 8 or kind == 12:
            key += tab[r, 1] + 8
        elif kind == 10 or kind == 11:
            key += 1 if tab[r, 5] & _nbblock.LARGE else 0
        nb.carray(_i64_at(c_at), (size,))[key] += t1 - t0
        nb.carray(_i64_at(r_at), (size,))[key] += 1

    return njit_variant(_nbblock._block, "cvo_block_timed", {"error_model": "numpy", "nogil": True},
                        _row_clock=clock, _row_done=done, _int4_row_nb=_nbblock._int4_row_nb)


def _key_name(key: int) -> str:
    kind, sub = divmod(key, _SLOTS)
    name = KIND_NAMES[kind]
    if kind == 0:
        return f"{name}: {_ARITH.get(sub - 8, sub - 8)}"
    if kind in (8, 12):
        return f"{name} op {sub - 8}"
    if kind in (10, 11):
        return f"{name} ({'large' if sub else 'small'})"
    return name


def measure(model_dir: str, steps: int, warm: int, serial: bool) -> dict:
    from npukit.api.models import Model
    from npukit.cli.cmd_generate import resolve_model
    from npukit.runtime import backends
    from npukit.runtime.generate import long_lived_frozen

    cyc = np.zeros((max(KIND_NAMES) + 1) * _SLOTS, np.int64)
    rows = np.zeros_like(cyc)
    build = timed_block(cyc, rows)
    in_block = [0.0, 0.0, 0.0]  # seconds in block calls; from a yield to the next call; when it yielded

    def timed(*args):
        t0 = time.perf_counter()
        if in_block[2]:
            in_block[1] += t0 - in_block[2]  # the yielded step (a GEMV the block does not cover) and back
        args = (*args[:-1], 0) if serial else args
        got = build(*args)
        t1 = time.perf_counter()
        in_block[0] += t1 - t0
        in_block[2] = t1 if got <= -2 else 0.0
        return got

    with long_lived_frozen():
        backend = backends.create_backend(Model(resolve_model(model_dir)).loaded, "pccx", kv="fp16")
        backend.drv.timing = False
        sim = backend.drv.dev
        backend.reset()
        tokens = [int(np.argmax(backend.prefill(PROMPT)))]
        sim._k["cvo_block"] = timed
        for _ in ui.track(range(warm), label="warm decode steps"):
            tokens.append(int(np.argmax(backend.step(tokens[-1]))))
        cyc[:], rows[:], in_block[:] = 0, 0, [0.0, 0.0, 0.0]
        c0, t0 = _now(), time.perf_counter()
        for _ in ui.track(range(steps), label="timed decode steps"):
            tokens.append(int(np.argmax(backend.step(tokens[-1]))))
        wall = time.perf_counter() - t0
        hz = (_now() - c0) / wall
    kinds = sorted(((_key_name(int(k)), cyc[k] / hz / steps * 1e3, int(rows[k]) // steps,
                     cyc[k] / hz / rows[k] * 1e6) for k in np.flatnonzero(rows)), key=lambda x: -x[1])
    return {"step_ms": wall / steps * 1e3, "in_block_ms": in_block[0] / steps * 1e3,
            "yielded_ms": in_block[1] / steps * 1e3, "kinds": kinds, "tokens": tokens,
            "counter_ghz": hz / 1e9, "twins": sim.twins.report()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--steps", type=ui.positive(), default=32)
    ap.add_argument("--warm", type=ui.positive(), default=30)
    ap.add_argument("--serial", action="store_true", help="large INT4 rows on the serial twin always")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    print(machine_line(*INT4_FAMILIES), file=sys.stderr)
    got = measure(args.model, args.steps, args.warm, args.serial)
    src = f"benchmarks/block_kinds.py, {args.steps} decode steps after {args.warm}; {machine_line()}"
    led = Ledger()
    led.add("decode step, timing off (diagnostic build)", got["step_ms"], "ms", Tier.MEASURED, src)
    led.add("inside fused-block calls", got["in_block_ms"], "ms", Tier.MEASURED, src)
    led.add("yielded steps (a yield to the next call)", got["yielded_ms"], "ms", Tier.MEASURED, src)
    for name, ms, _n, _us in got["kinds"]:
        led.add(f"block rows: {name}", ms, "ms", Tier.MEASURED, src)
    if args.json:
        ui.emit_json({**got, "ledger": led})
        return
    ui.table([[name, f"{ms:.3f}", n, f"{us:.2f}"] for name, ms, n, us in got["kinds"]],
             ["row kind", "ms/step", "rows/step", "µs/row"])
    print(f"step {got['step_ms']:.2f} ms, in fused-block calls {got['in_block_ms']:.2f} ms, yielded steps "
          f"{got['yielded_ms']:.2f} ms, rows "
          f"{sum(k[1] for k in got['kinds']):.2f} ms (measured; cycle counter {got['counter_ghz']:.2f} GHz); "
          f"twins {got['twins']}; {machine_line()}")


if __name__ == "__main__":
    main()
