"""VTA timing on the shared core: a small program's schedule against the cost rules worked out by
hand (fetch 1 cycle per instruction, DMA = latency + bytes / bandwidth, GEMM/ALU = uop iterations
+ pipeline drain, tokens between modules), and a deadlock that only bounded queues cause."""

import numpy as np
import pytest

from npukit.hw import load_hw
from npukit.sim.timing import TokenDeadlock
from npukit.targets.vta.isa import ISA, AluOp, Mem
from npukit.targets.vta.program import run
from npukit.targets.vta.timing import time_program


def test_schedule_follows_the_cost_rules():
    hw = load_hw("vta-alkali")
    b = ISA.bind(hw)
    prog = [
        b.make("LOAD", memory_type=Mem.UOP, y_size=1, x_size=4, x_stride=4),  # compute
        b.make("LOAD", memory_type=Mem.INP, y_size=8, x_size=4, x_stride=4, push_next=True),  # load
        b.make("LOAD", memory_type=Mem.WGT, y_size=1, x_size=4, x_stride=4, push_next=True),
        b.make("GEMM", pop_prev=True, uop_end=4, iter_out=8, iter_in=1, dst_factor_out=1, src_factor_out=4),
        b.make("GEMM", pop_prev=True, uop_end=4, iter_out=8, iter_in=1, dst_factor_out=1, src_factor_out=4,
               push_next=True),
        b.make("ALU", alu_opcode=AluOp.SHR, use_imm=True, imm=-2, uop_end=1, iter_out=8, iter_in=1,
               dst_factor_out=1),
        b.make("STORE", memory_type=Mem.OUT, pop_prev=True, sram_base=0, dram_base=0x100, y_size=1, x_size=8,
               x_stride=8),
        b.make("FINISH"),
    ]
    t = hw.timing
    lat, bw = t.dram_latency_cycles, t.dram_bytes_per_cycle
    res = run(hw, prog, np.zeros(1 << 16, np.uint8)).timing
    ops = {o.index: o for o in res.ops}
    uop_end = lat + 16 / bw  # issued at 0
    inp_end = 1 + lat + 8 * 4 * 16 / bw  # issued at cycle 1 (one instruction per fetch cycle)
    wgt_end = inp_end + lat + 4 * 256 / bw  # the load module runs its queue in order
    gemm1_end = inp_end + 32 * t.gemm_cycles_per_uop + t.gemm_pipeline_cycles  # waits for the INP token
    gemm2_end = max(gemm1_end, wgt_end) + 32 * t.gemm_cycles_per_uop + t.gemm_pipeline_cycles
    alu_end = gemm2_end + 8 * t.alu_cycles_per_uop + t.alu_pipeline_cycles
    store_end = gemm2_end + lat + 8 * 16 / bw  # the g2s token comes with the second GEMM
    assert ops[0].end == pytest.approx(uop_end)
    assert ops[1].end == pytest.approx(inp_end) and ops[2].end == pytest.approx(wgt_end)
    assert ops[3].end == pytest.approx(gemm1_end) and ops[4].end == pytest.approx(gemm2_end)
    assert ops[5].end == pytest.approx(alu_end) and ops[6].end == pytest.approx(store_end)
    assert res.cycles == pytest.approx(max(alu_end, store_end))
    assert ops[3].stalls.get("pop_l2g", 0) > 0


def test_bounded_queues_and_command_fifos_can_deadlock_what_the_functional_order_runs():
    """Compute pushes three tokens to store before the store instruction is fetched: with two token
    slots and a two-deep compute command queue, fetch stalls before reaching the store."""
    hw = load_hw("vta-alkali", ["timing.dep_queue_depth=2", "timing.command_depth=2"])
    b = ISA.bind(hw)
    alu = {"alu_opcode": AluOp.ADD, "use_imm": True, "imm": 1, "uop_end": 1, "iter_out": 1, "iter_in": 1}
    prog = [b.make("ALU", push_next=True, **alu) for _ in range(3)] + [b.make("ALU", **alu) for _ in range(4)]
    prog += [b.make("STORE", memory_type=Mem.OUT, pop_prev=True, y_size=1, x_size=1, x_stride=1)
             for _ in range(3)]
    run(hw, prog, np.zeros(1 << 12, np.uint8), timing=False)  # fsim's unbounded order completes
    with pytest.raises(TokenDeadlock) as e:
        time_program(hw, prog)
    assert e.value.queues == ("g2s",)
    assert "op 2 (ALU ADD) on compute waits to push 'g2s' (full, 2/2)" in str(e.value)
    time_program(load_hw("vta-alkali"), prog)  # the preset's deeper queues run it


@pytest.mark.parametrize("overrides", [[], ["timing.dep_queue_depth=2", "timing.command_depth=1"]])
def test_compiled_gemm_programs_are_the_reference_model(overrides):
    """A delegate GEMM program (77 instructions: dense and all-zero weight blocks, double-buffered loads,
    int32 export) on the preset and with shallow token and command queues: `time_program` returns what
    the plain reference model (`npukit.sim.timing_ref`) states, every figure, stall and trace event."""
    import json

    from npukit.sim.timing_ref import simulate_reference
    from npukit.sim.trace import to_trace
    from npukit.targets.vta.delegate.gemm import GemmProgram
    from npukit.targets.vta.timing import machine, op_of

    hw = load_hw("vta-alkali", overrides)
    rng = np.random.default_rng(5)
    w = rng.integers(-3, 4, (512, 256), dtype=np.int8)
    w[:16, :16] = 0  # an all-zero block: a sparse GEMM
    prog = GemmProgram(hw, 96, w, rng.integers(-50, 50, 256).astype(np.int32))
    ops = [op_of(hw, i, ins) for i, ins in enumerate(prog.instrs)]
    got, want = time_program(hw, prog.instrs), simulate_reference(machine(hw), ops)
    assert json.dumps(got.to_json()) == json.dumps(want.to_json())
    assert [list(o.stalls) for o in got.ops] == [list(o.stalls) for o in want.ops]
    assert json.dumps(to_trace(got)) == json.dumps(to_trace(want))
    assert any(k.startswith("pop_") for o in want.ops for k in o.stalls)  # tokens at work
    assert "bandwidth" in want.engines["load"].stalls  # loads and stores share the DRAM port


def test_a_deadlocked_program_is_worded_as_the_reference_words_it():
    from npukit.sim.timing_ref import simulate_reference
    from npukit.targets.vta.timing import machine, op_of

    hw = load_hw("vta-alkali", ["timing.dep_queue_depth=2", "timing.command_depth=2"])
    b = ISA.bind(hw)
    alu = {"alu_opcode": AluOp.ADD, "use_imm": True, "imm": 1, "uop_end": 1, "iter_out": 1, "iter_in": 1}
    prog = [b.make("ALU", push_next=True, **alu) for _ in range(3)] + [b.make("ALU", **alu) for _ in range(4)]
    prog += [b.make("STORE", memory_type=Mem.OUT, pop_prev=True, y_size=1, x_size=1, x_stride=1)
             for _ in range(3)]
    with pytest.raises(TokenDeadlock) as got:
        time_program(hw, prog)
    with pytest.raises(TokenDeadlock) as want:
        simulate_reference(machine(hw), [op_of(hw, i, ins) for i, ins in enumerate(prog)])
    assert str(got.value) == str(want.value) and got.value.queues == want.value.queues == ("g2s",)
