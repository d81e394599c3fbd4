"""VTA's 128-bit instructions and 32-bit micro-ops as `npukit.isa` data, laid out as ``hw_spec.h``.

``hw_spec.h`` declares each instruction as a C struct of ``uint64_t`` bitfields, so fields pack LSB
first and a field that would straddle bit 64 starts the second 64-bit unit (``pack_unit=64``).
Field widths come from the hardware description: SRAM indices and loop factors are log2 buffer
depths, ``uop_end`` is one bit wider than ``uop_bgn``. Every instruction starts with the opcode and
the four dependency flags; which module's queue ``prev``/``next`` names depends on the module the
instruction runs on (see `npukit.targets.vta.sim`).
"""

from __future__ import annotations

from enum import IntEnum

from npukit.isa import Field, Format, KeyValueSyntax, Spec, listing, text


class Opcode(IntEnum):
    LOAD = 0
    STORE = 1
    GEMM = 2
    FINISH = 3
    ALU = 4


class Mem(IntEnum):
    UOP = 0
    WGT = 1
    INP = 2
    ACC = 3
    OUT = 4
    ACC_8BIT = 5


class AluOp(IntEnum):
    MIN = 0
    MAX = 1
    ADD = 2
    SHR = 3
    MUL = 4


def _header(code: int) -> tuple[Field, ...]:
    return (
        Field("opcode", 3, lo=0, const=code),
        Field("pop_prev", 1, enum=bool, doc="pop a token from the previous module's queue"),
        Field("pop_next", 1, enum=bool, doc="pop a token from the next module's queue"),
        Field("push_prev", 1, enum=bool, doc="push a token to the previous module"),
        Field("push_next", 1, enum=bool, doc="push a token to the next module"),
    )


def _mem_check(ins, hw) -> str | None:
    if ins.memory_type not in (Mem.UOP, Mem.WGT, Mem.INP, Mem.ACC, Mem.OUT, Mem.ACC_8BIT):
        return f"unknown memory_type {int(ins.memory_type)}"
    return None


def _mem(name: str, code: int) -> Format:
    return Format(name, (
        *_header(code),
        Field("memory_type", 3, enum=Mem, strict_enum=False, doc="which SRAM"),
        Field("sram_base", 16, fmt="hex", doc="SRAM element index"),
        Field("dram_base", 32, fmt="hex", doc="DRAM address in elements of the SRAM's element size"),
        Field("y_size", 16, doc="rows"),
        Field("x_size", 16, doc="elements per row"),
        Field("x_stride", 16, doc="DRAM row pitch in elements"),
        Field("y_pad_0", 4, doc="zero rows before"),
        Field("y_pad_1", 4, doc="zero rows after"),
        Field("x_pad_0", 4, doc="zero elements before each row"),
        Field("x_pad_1", 4, doc="zero elements after each row"),
    ), pack_unit=64, mnemonic_field="memory_type", check=_mem_check)


def _loop_header(code: int) -> tuple[Field, ...]:
    return (
        *_header(code),
        Field("reset_reg", 1, enum=bool, doc="GEMM: zero the accumulators instead of accumulating"),
        Field("uop_bgn", "log_uop_depth", doc="first uop"),
        Field("uop_end", lambda hw: hw.log_uop_depth + 1, doc="one past the last uop"),
        Field("iter_out", 14, doc="outer loop count"),
        Field("iter_in", 14, doc="inner loop count"),
        Field("dst_factor_out", "log_acc_depth", doc="acc index step per outer iteration"),
        Field("dst_factor_in", "log_acc_depth", doc="acc index step per inner iteration"),
    )


def _loop_check(ins, hw) -> str | None:
    if ins.uop_end < ins.uop_bgn:
        return f"uop_end {ins.uop_end} < uop_bgn {ins.uop_bgn}"
    if ins.uop_end > (1 << hw.log_uop_depth):
        return f"uop_end {ins.uop_end} beyond the uop buffer ({1 << hw.log_uop_depth})"
    return None


def _alu_check(ins, hw) -> str | None:
    if not isinstance(ins.alu_opcode, AluOp):
        return f"unknown alu_opcode {int(ins.alu_opcode)}"
    return _loop_check(ins, hw)


ISA = Spec("vta", 128, (
    _mem("LOAD", Opcode.LOAD),
    _mem("STORE", Opcode.STORE),
    Format("GEMM", (
        *_loop_header(Opcode.GEMM),
        Field("src_factor_out", "log_inp_depth", doc="inp index step per outer iteration"),
        Field("src_factor_in", "log_inp_depth", doc="inp index step per inner iteration"),
        Field("wgt_factor_out", "log_wgt_depth", doc="wgt index step per outer iteration"),
        Field("wgt_factor_in", "log_wgt_depth", doc="wgt index step per inner iteration"),
    ), pack_unit=64, check=_loop_check),
    Format("FINISH", _header(Opcode.FINISH), pack_unit=64),
    Format("ALU", (
        *_loop_header(Opcode.ALU),
        Field("src_factor_out", "log_acc_depth", doc="acc source step per outer iteration"),
        Field("src_factor_in", "log_acc_depth", doc="acc source step per inner iteration"),
        Field("alu_opcode", 3, enum=AluOp, strict_enum=False, doc="operation"),
        Field("use_imm", 1, enum=bool, doc="operand is imm instead of acc[src]"),
        Field("imm", 16, signed=True, doc="signed immediate"),
    ), pack_unit=64, mnemonic_field="alu_opcode", check=_alu_check),
))

UOP = Spec("vta-uop", 32, (
    Format("UOP", (
        Field("dst_idx", "log_acc_depth", lo=0, doc="acc index"),
        Field("src_idx", "log_src_depth", doc="inp index (GEMM) or acc index (ALU)"),
        Field("wgt_idx", "log_wgt_depth", doc="wgt index"),
    ), gaps="ignore"),
))

SYNTAX = KeyValueSyntax()


def bound(hw):
    return ISA.bind(hw)


def assemble(source: str, hw) -> list[int]:
    return text.assemble(ISA.bind(hw), SYNTAX, source)


def disassemble(words: list[int], hw) -> list[text.Row]:
    return listing(ISA.bind(hw), SYNTAX, words)
