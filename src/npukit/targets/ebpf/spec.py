"""The eBPF instruction formats on the shared ISA toolkit (`npukit.isa`): fields as data.

One 64-bit word per slot, LSB first: ``opcode`` [7:0] (``class`` [2:0], ``source``/``size`` and
``op``/``mode`` above it), ``dst`` [11:8], ``src`` [15:12], ``off`` [31:16] signed, ``imm`` [63:32]
signed; ``lddw`` is two words whose immediate is split over bits [63:32] and [127:96]. Formats are
selected by the class bits (and the source bit for ALU/JMP); each format's ``check`` applies RFC
9669's per-opcode rules (`isa.check_fields`: unused fields zero, byte-swap widths, atomic kinds,
signed-division and sign-extension offsets, registers r0-r10). `isa.decode`/`isa.encode_insn` go
through this spec; ``docs/targets/ebpf.md`` shows its field table.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any, ClassVar

from npukit.isa import Field, Format, Spec, bits, const


class AluOp(IntEnum):
    ADD = 0x0
    SUB = 0x1
    MUL = 0x2
    DIV = 0x3
    OR = 0x4
    AND = 0x5
    LSH = 0x6
    RSH = 0x7
    NEG = 0x8
    MOD = 0x9
    XOR = 0xA
    MOV = 0xB
    ARSH = 0xC
    END = 0xD


class JmpOp(IntEnum):
    JA = 0x0
    JEQ = 0x1
    JGT = 0x2
    JGE = 0x3
    JSET = 0x4
    JNE = 0x5
    JSGT = 0x6
    JSGE = 0x7
    CALL = 0x8
    EXIT = 0x9
    JLT = 0xA
    JLE = 0xB
    JSLT = 0xC
    JSLE = 0xD


class Size(IntEnum):
    W = 0
    H = 1
    B = 2
    DW = 3


class LoadMode(IntEnum):
    MEM = 3
    MEMSX = 4


class StoreMode(IntEnum):
    MEM = 3
    ATOMIC = 6


@dataclass(frozen=True)
class Slot:
    """A decoded instruction as the toolkit builds it (field values by name)."""

    op: int = 0
    size: int = 0
    mode: int = 0
    dst: int = 0
    src: int = 0
    off: int = 0
    imm: int = 0

    base: ClassVar[int] = 0  # the format's constant opcode bits

    @property
    def opcode_byte(self) -> int:
        return self.base | int(self.op) << 4 | int(self.size) << 3 | int(self.mode) << 5


def _slot_class(name: str, base: int) -> type:
    return type(f"Slot_{name}", (Slot,), {"base": base, "__slots__": ()})


_REGS = (
    bits("dst", 11, 8, doc="destination register r0-r10"),
    bits("src", 15, 12, doc="source register r0-r10 (0 where unused)"),
    bits("off", 31, 16, signed=True, doc="signed offset: jump slots, memory displacement, div/movsx variant"),
)
_IMM = bits("imm", 63, 32, signed=True, doc="signed immediate (0 where unused)")


def _check(slot: Any, hw: Any) -> str | None:
    from npukit.targets.ebpf.isa import Insn, check_fields

    return check_fields(Insn(slot.opcode_byte, slot.dst, slot.src, slot.off, slot.imm))


def _alu_jmp(name: str, cls_bits: int, source: int, op: type, doc: str) -> Format:
    return Format(
        name,
        (
            const("cls_bits", 2, 0, cls_bits, doc=doc),
            const("source", 3, 3, source, doc="operand: imm" if source == 0 else "operand: src register"),
            bits("op", 7, 4, enum=op, doc="operation"),
            *_REGS,
            _IMM,
        ),
        cls=_slot_class(name, cls_bits | source << 3),
        check=_check,
        doc=doc,
    )


_SIZE = bits("size", 4, 3, enum=Size, doc="access size")

FORMATS = (
    _alu_jmp("alu32_imm", 0x4, 0, AluOp, "ALU: 32-bit, result zero-extended"),
    _alu_jmp("alu32_reg", 0x4, 1, AluOp, "ALU: 32-bit, result zero-extended"),
    _alu_jmp("alu64_imm", 0x7, 0, AluOp, "ALU64: 64-bit (imm sign-extended)"),
    _alu_jmp("alu64_reg", 0x7, 1, AluOp, "ALU64: 64-bit"),
    _alu_jmp("jmp_imm", 0x5, 0, JmpOp, "JMP: 64-bit compares, call, exit"),
    _alu_jmp("jmp_reg", 0x5, 1, JmpOp, "JMP: 64-bit compares, callx"),
    _alu_jmp("jmp32_imm", 0x6, 0, JmpOp, "JMP32: 32-bit compares, ja32 (offset in imm)"),
    _alu_jmp("jmp32_reg", 0x6, 1, JmpOp, "JMP32: 32-bit compares"),
    Format(
        "ldx",
        (
            const("cls_bits", 2, 0, 0x1, doc="LDX"),
            _SIZE,
            bits("mode", 7, 5, enum=LoadMode, doc="MEM zero-extends, MEMSX sign-extends"),
            *_REGS,
            _IMM,
        ),
        cls=_slot_class("ldx", 0x1),
        check=_check,
        doc="dst = *(size *)(src + off)",
    ),
    Format(
        "st",
        (
            const("cls_bits", 2, 0, 0x2, doc="ST"),
            _SIZE,
            bits("mode", 7, 5, enum=StoreMode, doc="MEM"),
            *_REGS,
            _IMM,
        ),
        cls=_slot_class("st", 0x2),
        check=_check,
        doc="*(size *)(dst + off) = imm",
    ),
    Format(
        "stx",
        (
            const("cls_bits", 2, 0, 0x3, doc="STX"),
            _SIZE,
            bits("mode", 7, 5, enum=StoreMode, doc="MEM store, or ATOMIC (kind in imm)"),
            *_REGS,
            _IMM,
        ),
        cls=_slot_class("stx", 0x3),
        check=_check,
        doc="*(size *)(dst + off) = src, or an atomic operation",
    ),
    Format(
        "lddw",
        (
            const("opcode", 7, 0, 0x18, doc="LD | IMM | DW"),
            *_REGS,
            Field(
                "imm",
                64,
                pieces=((32, 32), (96, 32)),
                doc="64-bit immediate: low half in word 0, high half in word 1",
            ),
            bits("next_opcode", 71, 64, reserved=True),
            bits("next_regs", 79, 72, reserved=True),
            bits("next_off", 95, 80, reserved=True),
        ),
        words=2,
        cls=_slot_class("lddw", 0x18),
        check=_check,
        doc="dst = imm64 (two slots)",
    ),
)

SPEC = Spec("ebpf", 64, FORMATS)
BOUND = SPEC.bind(None)
FORMAT_OF_CLASS = {
    0x4: ("alu32_imm", "alu32_reg"),
    0x7: ("alu64_imm", "alu64_reg"),
    0x5: ("jmp_imm", "jmp_reg"),
    0x6: ("jmp32_imm", "jmp32_reg"),
    0x1: ("ldx",),
    0x2: ("st",),
    0x3: ("stx",),
}


def docs_tables() -> str:
    """The two tables of ``docs/targets/ebpf.md``: formats and fields (toolkit), then every opcode."""
    from npukit.isa import markdown_table
    from npukit.targets.ebpf.isa import opcode_table

    rows = ["| opcode | mnemonic | meaning |", "|---|---|---|"]
    rows += [f"| `0x{op:02x}` | `{name}` | {meaning} |" for op, name, meaning in opcode_table()]
    return markdown_table(BOUND) + "\n" + "\n".join(rows) + "\n"
