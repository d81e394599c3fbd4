"""Element-wise ADD on the VTA ALU.

Both operands arrive as int32 accumulator rows (LOAD ACC on the compute module), the ALU adds them,
then either the int32 sum is exported as byte planes (exact mode: the host finishes TFLite's
rescale) or the whole Alkali requantization runs on the ALU with 16-bit immediates (alkali mode:
MUL by the multiplier, SHR by ``15 − shift``, ADD the output zero point, MIN/MAX clamp) and STORE's
truncation gives the int8 result.
"""

from __future__ import annotations

import numpy as np

from npukit.targets.vta.delegate.program_builder import Emitter, export_int32, planes_for, read_int32
from npukit.targets.vta.delegate.requant import CONSTS, N_REGS, Requant, emit_requant
from npukit.targets.vta.hw import VtaHw
from npukit.targets.vta.isa import AluOp, Mem
from npukit.targets.vta.program import Dram, RunResult, run


class AddProgram:
    """``n`` elements; ``requant = (multiplier, shift, offset, lo, hi)`` selects the on-VTA
    requantization (alkali) instead of the int32 export (exact); ``bound`` limits ``|a + b|``."""

    def __init__(self, hw: VtaHw, n: int, requant: tuple[int, int, int, int, int] | None = None,
                 bound: int = 2**31, exact_requant: Requant | None = None) -> None:
        if exact_requant is not None and not exact_requant.feasible(bound):
            exact_requant = None
        self.hw, self.n, self.requant, self.exact_requant = hw, n, requant, exact_requant
        b = hw.block
        self.rows = rows = -(-n // b)
        dram = Dram()
        self.a_addr = dram.reserve(rows * hw.acc_elem_bytes)
        self.b_addr = dram.reserve(rows * hw.acc_elem_bytes)
        nplanes = 1 if requant or exact_requant else planes_for(bound)  # |a + b| ≤ bound
        self.out_addrs = [dram.reserve(rows * b) for _ in range(nplanes)]
        slot = hw.acc_depth // 2
        regions, fixed = (N_REGS, len(CONSTS)) if exact_requant else (nplanes + 1, 0)
        tile = max(1, min((slot - fixed) // regions, (1 << 14) - 1, (1 << 16) - 1))
        if exact_requant:  # per-tensor constants, one row each
            const_addr = dram.put(exact_requant.constants(b))
        e = Emitter(hw, dram)
        e.prologue()
        for i, r0 in enumerate(range(0, rows, tile)):
            rt = min(tile, rows - r0)
            base = (i % 2) * slot
            other = base + (1 if exact_requant else nplanes) * rt  # operand B after the result planes
            for addr, dst, pop in ((self.a_addr, base, True), (self.b_addr, other, False)):
                e.emit("LOAD", memory_type=Mem.ACC, sram_base=dst, dram_base=addr // hw.acc_elem_bytes + r0,
                       y_size=1, x_size=rt, x_stride=rt, pop_next=pop)
            e.uops(("add", base, other), np.array([[base, other, 0]]))
            loop = {"uop_bgn": 0, "uop_end": 1, "iter_out": rt, "iter_in": 1, "dst_factor_out": 1}
            last = e.emit("ALU", alu_opcode=AluOp.ADD, src_factor_out=1, **loop)
            if exact_requant is not None:
                const_base = base + N_REGS * rt
                e.emit("LOAD", memory_type=Mem.ACC, sram_base=const_base,
                       dram_base=const_addr // hw.acc_elem_bytes, y_size=len(CONSTS), x_size=1, x_stride=1)
                last, result = emit_requant(e, base, rt, 1, const_base, exact_requant)
                e.set_flag(last, "push_next")
                e.emit("STORE", memory_type=Mem.OUT, sram_base=result, dram_base=self.out_addrs[0] // b + r0,
                       y_size=1, x_size=rt, x_stride=rt, pop_prev=True, push_prev=True)
                continue
            if requant is None:
                export_int32(e, base, rt, self.out_addrs, (r0, 1, rt, rt))
                continue
            mult, shift, offset, lo, hi = requant
            for op, imm in ((AluOp.MUL, mult), (AluOp.SHR, 15 - shift), (AluOp.ADD, offset),
                            (AluOp.MIN, hi), (AluOp.MAX, lo)):
                last = e.emit("ALU", alu_opcode=op, use_imm=True, imm=imm, **loop)
            e.set_flag(last, "push_next")
            e.emit("STORE", memory_type=Mem.OUT, sram_base=base, dram_base=self.out_addrs[0] // b + r0,
                   y_size=1, x_size=rt, x_stride=rt, pop_prev=True, push_prev=True)
        e.emit("FINISH")
        self.instrs = e.instrs
        self.words = e.words()
        self.image = dram.image()
        self.result: RunResult | None = None

    def run(self, a: np.ndarray, b: np.ndarray, timing: bool = False) -> np.ndarray:
        """int32 operands (n,) → int32 sums (exact, host rescale) or int8 results (alkali, or exact
        with the rescale on VTA)."""
        image = self.image.copy()
        size = self.rows * self.hw.block
        for addr, v in ((self.a_addr, a), (self.b_addr, b)):
            padded = np.zeros(size, np.int32)
            padded[: self.n] = v
            image[addr:addr + padded.nbytes] = padded.view(np.uint8)
        self.result = run(self.hw, self.instrs, image, timing=timing)
        if self.requant is None and self.exact_requant is None:
            return read_int32(self.result.dram, self.out_addrs, size)[: self.n]
        return self.result.dram[self.out_addrs[0]:self.out_addrs[0] + size].view(np.int8)[: self.n].copy()
