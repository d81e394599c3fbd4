"""VTA timing on the shared core: fetch issues in program order into the load, compute and store
modules' command queues (``command_depth``); the modules synchronise through the four bounded
dependency-token FIFOs; DMA shares one DRAM port (``dram_bytes_per_cycle``). Costs per instruction
(cycles of the VTA clock):

* LOAD/STORE: ``dram_latency_cycles`` then bytes / bandwidth (padding is written on chip for free);
* GEMM: one uop iteration per ``gemm_cycles_per_uop`` plus the pipeline drain (reset: the same loop);
* ALU: ``alu_cycles_per_uop`` per iteration with an immediate, ``alu_tensor_cycles_per_uop`` with an
  accumulator operand, plus the drain; FINISH: nothing.

No on-chip address hazards are modelled: like the hardware, only the tokens order the modules.
"""

from __future__ import annotations

from npukit.evidence import Ledger, Tier
from npukit.sim.timing import Machine, Resource, TimingResult, TokenOp, TokenQueue
from npukit.sim.timing import simulate as simulate_timing
from npukit.targets.vta.hw import VtaHw
from npukit.targets.vta.isa import Mem, Opcode
from npukit.targets.vta.sim import Counters, module_of, tokens_of

QUEUE_NAMES = ("l2g", "g2l", "g2s", "s2g")


def machine(hw: VtaHw) -> Machine:
    t = hw.timing
    return Machine(engines=("load", "compute", "store"),
                   resources=(Resource("dram", t.dram_bytes_per_cycle),),
                   clock_hz=hw.clock_hz, issue_cycles=t.fetch_cycles_per_insn,
                   queues=tuple(TokenQueue(q, t.dep_queue_depth) for q in QUEUE_NAMES),
                   command_depth=t.command_depth)


def _mem_bytes(hw: VtaHw, ins) -> int:
    elem = {Mem.INP: hw.inp_elem_bytes, Mem.WGT: hw.wgt_elem_bytes, Mem.ACC: hw.acc_elem_bytes,
            Mem.UOP: 4, Mem.ACC_8BIT: hw.acc_elem_bytes // 4, Mem.OUT: hw.out_elem_bytes}[ins.memory_type]
    return ins.x_size * ins.y_size * elem


def op_of(hw: VtaHw, index: int, ins) -> TokenOp:
    """The timing model's operation for one instruction, by its opcode."""
    module = module_of(ins)
    pops, pushes = tokens_of(ins, module)
    return _OP_OF[Opcode(ins.opcode)](hw, index, ins, module, {"pop": pops, "push": pushes, "is_async": True})


def _memory_op(hw: VtaHw, index: int, ins, module: str, kw: dict) -> TokenOp:
    nbytes = _mem_bytes(hw, ins)
    kind = ins.memory_type.name if hasattr(ins.memory_type, "name") else ins.memory_type
    label = f"{Opcode(ins.opcode).name} {kind}"
    if nbytes == 0:
        return TokenOp(index, module, label + " (nop)", **kw)
    t = hw.timing
    return TokenOp(index, module, label, cycles=nbytes / t.dram_bytes_per_cycle,
                   latency=t.dram_latency_cycles, path=("dram",), xfer_bytes=float(nbytes),
                   args={"bytes": nbytes}, **kw)


def _uop_iters(ins) -> int:
    return ins.iter_out * ins.iter_in * (ins.uop_end - ins.uop_bgn)


def _gemm_op(hw: VtaHw, index: int, ins, module: str, kw: dict) -> TokenOp:
    t, iters = hw.timing, _uop_iters(ins)
    label = "GEMM reset" if ins.reset_reg else "GEMM"
    return TokenOp(index, module, label, cycles=iters * t.gemm_cycles_per_uop,
                   tail=t.gemm_pipeline_cycles if iters else 0.0, args={"uop_iters": iters}, **kw)


def _alu_op(hw: VtaHw, index: int, ins, module: str, kw: dict) -> TokenOp:
    t, iters = hw.timing, _uop_iters(ins)
    per = t.alu_cycles_per_uop if ins.use_imm else t.alu_tensor_cycles_per_uop
    label = f"ALU {ins.alu_opcode.name if hasattr(ins.alu_opcode, 'name') else ins.alu_opcode}"
    return TokenOp(index, module, label, cycles=iters * per,
                   tail=t.alu_pipeline_cycles if iters else 0.0, args={"uop_iters": iters}, **kw)


def _finish_op(hw: VtaHw, index: int, ins, module: str, kw: dict) -> TokenOp:
    return TokenOp(index, module, "FINISH", **kw)


_OP_OF = {Opcode.LOAD: _memory_op, Opcode.STORE: _memory_op, Opcode.GEMM: _gemm_op, Opcode.ALU: _alu_op,
          Opcode.FINISH: _finish_op}


def time_program(hw: VtaHw, instrs: list) -> TimingResult:
    return simulate_timing(machine(hw), [op_of(hw, i, ins) for i, ins in enumerate(instrs)])


def ledger(hw: VtaHw, result: TimingResult | None, counters: Counters, source: str = "") -> Ledger:
    """Cycles, time, utilisation and energy with tiers: counters are exact (derived from the program),
    timing and energy rest on the preset's projected figures."""
    t = hw.timing
    src = source or f"VTA timing model on preset {hw.name}"
    led = Ledger()
    macs = counters.gemm_counter * hw.batch * hw.block * hw.block
    led.add("gemm_macs", macs, "MAC", Tier.DERIVED, "uop iterations × block² (functional simulator)")
    led.add("alu_uop_iterations", counters.alu_counter, "iter", Tier.DERIVED, "functional simulator")
    dram = (counters.inp_load_nbytes + counters.wgt_load_nbytes + counters.acc_load_nbytes
            + counters.uop_load_nbytes + counters.out_store_nbytes)
    led.add("dram_bytes", dram, "B", Tier.DERIVED, "LOAD/STORE sizes (functional simulator)")
    energy_pj = (macs * t.pj_per_mac + counters.alu_counter * hw.batch * hw.block * t.pj_per_alu_lane
                 + dram * t.pj_per_dram_byte)
    led.add("energy", energy_pj * 1e-6, "uJ", Tier.weakest(Tier(t.energy_tier), Tier.DERIVED),
            t.energy_source or "preset energy figures")
    if result is not None:
        tier = Tier.weakest(Tier(t.tier), Tier.DERIVED)
        led.add("vta_cycles", result.cycles, "cycles", tier, src)
        led.add("vta_time", result.seconds * 1e6, "us", tier, f"{src} at {t.clock_mhz:g} MHz")
        busy = result.engines["compute"].busy if "compute" in result.engines else 0.0
        peak = result.cycles * hw.batch * hw.block * hw.block
        led.add("gemm_utilisation", 100.0 * macs / peak if peak else 0.0, "%", tier,
                "MACs / (cycles × MACs per cycle)")
        led.add("compute_busy", 100.0 * busy / result.cycles if result.cycles else 0.0, "%", tier, src)
    return led
