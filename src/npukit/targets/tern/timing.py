"""tern adapter for the shared timing core: `Work` records from `npukit.targets.tern.ops` →
`npukit.sim.timing` ops on a machine built from a tern hardware preset.

Machine: four in-order engines — ``engine`` (the ternary GEMV engine), ``attention`` and
``ffn_glue`` (the fabric units), ``host`` (the soft CPU) — and one bandwidth resource, ``ddr3``,
at the preset's measured read rate. Every op is synchronous (ternfpga's firmware waits for each
peripheral), so a token's cycles are the sum of its ops, which is how the ledger composes them.

Costs (the same arithmetic as `npukit.targets.tern.ledger`, per op instead of per layer):

* engine GEMV — ``tiles × cycles_per_tile`` cycles, its base-3 bytes crossing ``ddr3`` (the timing
  core stretches it when the bytes outrun the DDR3 rate);
* attention unit — its FSM, ``attention_cycles(S, D)``; FFN-glue unit — ``ffn_glue_cycles(F)``;
* host glue — the soft CPU's measured cycles scaled linearly to the op's size: a norm pass
  ``norm_cycles/2 · n/hidden``, RoPE ``rope_cycles · n/((heads+kv_heads)·head_dim)``, one attention
  head ``attention_cycles/heads · S·D/(context·head_dim)``, the FFN glue ``ffn_glue_cycles · F/F₀``.

Phases pick where attention and the FFN glue run (host or unit), as in the ledger; in
``engine-bound`` only the engine costs anything (norms and RoPE on fabric: not built).
"""

from __future__ import annotations

from collections.abc import Sequence

from npukit.errors import ConfigError
from npukit.sim.timing import Machine, Op, Resource, TimingResult, simulate
from npukit.sim.work import Work
from npukit.targets.tern.hw import TernHW
from npukit.targets.tern.ledger import PHASES
from npukit.targets.tern.units import attention_cycles, ffn_glue_cycles

ENGINES = ("engine", "attention", "ffn_glue", "host")
_ON_UNIT = {"host-split": (), "fabric-attention": ("attention",),
            "fabric-ffn-glue": ("attention", "ffn_glue"), "engine-bound": ()}


def machine(hw: TernHW) -> Machine:
    return Machine(engines=ENGINES, resources=(Resource("ddr3", hw.ddr.read_mbps * 1e6 / hw.clock_hz),),
                   clock_hz=hw.clock_hz)


def op_for(w: Work, hw: TernHW, phase: str, index: int) -> Op | None:
    """The timing op of one Work record in ``phase`` (None: costs nothing there)."""
    if phase not in PHASES:
        raise ConfigError(f"unknown tern phase {phase!r} (known: {', '.join(PHASES)})")
    h = hw.host
    args = {"kind": w.engine}
    if w.engine == "engine":
        tiles = w.macs // max(w.lanes, 1)
        return Op(index, "engine", w.label, cycles=tiles * hw.engine.cycles_per_tile, path=("ddr3",),
                  xfer_bytes=float(w.weight_bytes), args=args | {"tiles": tiles, "bytes": w.weight_bytes})
    if phase == "engine-bound":
        return None
    on_unit = w.engine in _ON_UNIT[phase]
    if w.engine == "attention":
        S = w.sfu_elems
        D = w.macs // (2 * S)
        if on_unit:
            cyc = float(attention_cycles(S, D, hw.attention.timing))
        else:
            cyc = h.attention_cycles / h.heads * (S * D) / (h.context * h.head_dim)
    elif w.engine == "ffn_glue":
        cyc = float(ffn_glue_cycles(w.sfu_elems, hw.ffn_glue.timing)) if on_unit else \
            h.ffn_glue_cycles * w.sfu_elems / h.intermediate
    elif w.engine == "norm":
        cyc = h.norm_cycles / 2 * w.sfu_elems / h.hidden
    elif w.engine == "rope":
        cyc = h.rope_cycles * w.sfu_elems / ((h.heads + h.kv_heads) * h.head_dim)
    else:
        raise ConfigError(f"tern timing: unknown work kind {w.engine!r}")
    return Op(index, w.engine if on_unit else "host", w.label, cycles=cyc, args=args)


def simulate_work(work: Sequence[Work], hw: TernHW, phase: str) -> TimingResult:
    ops = [o for i, w in enumerate(work) if (o := op_for(w, hw, phase, i)) is not None]
    return simulate(machine(hw), ops)
