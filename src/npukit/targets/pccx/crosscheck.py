"""Analytic roofline vs the event-driven pccx timing model on the same compiled program.

`layer_program` takes one decoder layer's GEMVs from the op table, writes INT4 weight images (with
FP32 row scales) into the functional simulator's host DDR, and assembles MEMSET (weight and shape
slots) + GEMV instructions with the pccx assembler. The functional simulator executes the program
and emits `Work` records; `npukit.targets.pccx.timing` turns them into cycles per instruction. The
analytic side prices the same ops with `npukit.perf.roofline` on the pccx Machine at the
*effective* bandwidth basis (the timing model streams weights at min(DDR effective, HP ports)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from npukit.errors import ConfigError
from npukit.perf.machine import machine_from_hw
from npukit.perf.ops import OpTable
from npukit.perf.roofline import evaluate, points_for

OUT_WORD = 0x4000  # L2 word of GEMV results; inputs at word 0 (16384 BF16 fit below it)


@dataclass(frozen=True)
class OpCheck:
    name: str
    rows: int
    cols: int
    analytic_cycles: float
    simulated_cycles: float

    @property
    def error(self) -> float:
        return (self.analytic_cycles - self.simulated_cycles) / self.simulated_cycles


def layer_gemvs(table: OpTable, layer: int) -> list[tuple[str, int, int]]:
    """(name, rows M, cols K) of every GEMV of one decoder layer, in program order."""
    out = []
    for i, name in enumerate(table.names):
        if table.layers[i] == layer and table.kinds[i] == "gemv":
            m = int(table.w_rows[i])
            out.append((name, m, int(table.w_elems[i]) // m))
    if not out:
        raise ConfigError(f"layer {layer} has no GEMVs in {table.model}")
    return out


def layer_program(hw: Any, gemvs: list[tuple[str, int, int]], seed: int = 0) -> tuple[Any, list[int]]:
    """A functional simulator loaded with weights and the assembled program for ``gemvs``."""
    from npukit.targets.pccx import sim as psim
    from npukit.targets.pccx.asm import assemble
    from npukit.targets.pccx.memory import weight_entry, weight_image

    s = psim.Simulator(hw)
    rng = np.random.default_rng(seed)
    lines, addr = [], 0
    for slot, (name, m, k) in enumerate(gemvs):
        if k > OUT_WORD * psim.ELEMS_PER_WORD:
            raise ConfigError(f"{name}: K={k} does not fit below the result area")
        img = weight_image(rng.integers(-8, 8, (m, k)), "int4", np.ones(m, np.float32))
        s.host.write(addr, np.frombuffer(img, np.uint8))
        code, hi, lo = weight_entry("int4", addr)
        addr += -(-len(img) // 16) * 16
        lines += [f"memset cache=weight slot={slot} a={code} b={hi} c={lo}  ; {name}",
                  f"memset cache=fmap slot={slot} a={m} b=1 c={k}"]
    for slot, (name, _m, _k) in enumerate(gemvs):
        lines.append(f"gemv dest=0x{OUT_WORD:X} src=0x0 flags=w_scale size={slot} shape={slot} lanes=0"
                     f"  ; {name}")
    s.write_l2(0, rng.standard_normal(max(k for _, _, k in gemvs)))
    words = assemble("\n".join(lines))
    s.load_program(words)
    return s, words


def crosscheck_layer(hw: Any, table: OpTable, layer: int, context: int = 512) -> list[OpCheck]:
    """Per-GEMV cycles: analytic roofline vs functional simulator + event-driven timing."""
    from npukit.targets.pccx.timing import simulate_works

    gemvs = layer_gemvs(table, layer)
    s, _ = layer_program(hw, gemvs)
    works = s.run()
    if s.error is not None:
        raise ConfigError(f"crosscheck program faulted: {s.error}")
    sim = [o for o in simulate_works(hw, works).ops if o.engine == "gemv"]
    m = machine_from_hw(hw)
    res = evaluate(table, points_for(m, weights="int4", kv="int4", context=context, basis="effective"),
                   per_op=True)
    t_main = res["op_main_seconds"][0]
    out = []
    for (name, rows, cols), o in zip(gemvs, sim, strict=True):
        i = table.names.index(name)
        out.append(OpCheck(name, rows, cols, float(t_main[i] * m.clock_hz), float(o.cycles)))
    return out
