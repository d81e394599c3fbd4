"""A cocotb testbench skeleton for a pccx RTL core, driven by `npukit vectors` output.

Run with cocotb's runner (cocotb >= 1.8) against your top level; set VECTORS to the directory
`npukit vectors PROGRAM -o DIR` wrote. The DUT signal names below (clk, rst_n, l2 backdoor, the
instruction-retire strobe) are placeholders: map them to your design.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from golden import Vectors

try:
    import cocotb
    from cocotb.clock import Clock
    from cocotb.triggers import RisingEdge
except ImportError:  # the skeleton is importable without cocotb (docs, linters)
    cocotb = None


def _vectors() -> Vectors:
    return Vectors(os.environ.get("VECTORS", "vectors"))


async def _load(dut, vec: Vectors) -> None:
    """Backdoor-load the instruction memory, L2 and host DDR model from the exported images."""
    words = [int(line, 16) for line in vec.program_hex.read_text().split() if not line.startswith("@")]
    for i, w in enumerate(words):
        dut.imem[i].value = w  # placeholder: your instruction memory
    for addr, row in enumerate(vec.l2("init")):
        if row.any():
            dut.l2[addr].value = int("".join(f"{int(b):04x}" for b in row[::-1]), 16)  # element 0 low
    for base, data in vec.ddr("init").items():
        dut.host_ddr.load(base, bytes(data))  # placeholder: your AXI slave memory model


if cocotb is not None:

    @cocotb.test()
    async def replay_matches_golden(dut):
        vec = _vectors()
        clock_mhz = vec.manifest["description"]["clocks"].get("core_mhz", 400)
        cocotb.start_soon(Clock(dut.clk, round(1000 / clock_mhz, 3), units="ns").start())
        dut.rst_n.value = 0
        await _load(dut, vec)
        await RisingEdge(dut.clk)
        dut.rst_n.value = 1
        retired = 0
        for cp in vec.checkpoints():
            while retired < cp.after:  # placeholder: one strobe per completed instruction
                await RisingEdge(dut.retire)
                retired += 1
            for addr in range(cp.l2.shape[0]):
                want = int("".join(f"{int(b):04x}" for b in cp.l2[addr][::-1]), 16)
                assert int(dut.l2[addr].value) == want, f"after {cp.after}: L2 word {addr:#x}"
            assert int(dut.sfu_s_reg.value) == cp.s_reg, f"after {cp.after}: S register"
