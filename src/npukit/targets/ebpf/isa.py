"""The BPF instruction set of RFC 9669: opcode constants and table, `Insn`/`Program`, encode and decode.

An instruction slot is 64 bits, little-endian: ``opcode:8 | dst:4 src:4 | offset:s16 | imm:s32``.
``lddw`` (opcode 0x18) takes two slots; the second carries the upper 32 bits of the immediate and
must otherwise be zero. The field layout is the toolkit spec in ``spec.py``, through which `decode`
and `encode_insn` go; the per-opcode rules are `check_fields` here (the spec's format check).
`decode` turns bytes into `Insn` records and rejects every encoding RFC 9669 does not define
(unknown opcode, non-zero unused fields, bad byte-swap width, bad register) with a typed
`EncodingError` naming the slot. Control-flow checks (jump targets, fall-through, r10 writes)
live in ``verify.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any, ClassVar, NamedTuple

from npukit.errors import DecodeError
from npukit.isa import Field, Format, Spec, bits, const
from npukit.isa.spec import AsmError as ToolkitAsmError
from npukit.targets.ebpf.errors import EncodingError

# instruction classes
LD, LDX, ST, STX, ALU, JMP, JMP32, ALU64 = range(8)
CLASS_NAMES = ("LD", "LDX", "ST", "STX", "ALU", "JMP", "JMP32", "ALU64")
# source bit (ALU/JMP)
SRC_K, SRC_X = 0x00, 0x08

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


class LdMode(IntEnum):
    """Modes of the LD class (the legacy packet accesses ABS/IND are not part of this VM)."""

    IMM = 0
    ABS = 1
    IND = 2


# the size (opcode bits 4:3) and mode (bits 7:5) fields in place, derived from the enums above:
# one table of values, the formats' enums; these are the shifted views the interpreters mask with
SIZE_W, SIZE_H, SIZE_B, SIZE_DW = (int(s) << 3 for s in Size)
SIZE_BYTES = {int(s) << 3: n for s, n in zip(Size, (4, 2, 1, 8), strict=True)}
SIZE_SUFFIX = {int(s) << 3: s.name.lower() for s in Size}
MODE_IMM, MODE_ABS, MODE_IND = (int(m) << 5 for m in LdMode)
MODE_MEM, MODE_MEMSX, MODE_ATOMIC = LoadMode.MEM << 5, LoadMode.MEMSX << 5, StoreMode.ATOMIC << 5


class AtomicOp(IntEnum):
    """The imm field of STX|ATOMIC; FETCH is or-ed into add/or/and/xor (xchg and cmpxchg always fetch)."""

    ADD = 0x00
    OR = 0x40
    AND = 0x50
    XOR = 0xA0
    XCHG = 0xE1
    CMPXCHG = 0xF1


ALU_OPS = {op.name.lower(): int(op) for op in AluOp}
ALU_NAMES = {v: k for k, v in ALU_OPS.items()}
JMP_OPS = {op.name.lower(): int(op) for op in JmpOp}
JMP_NAMES = {v: k for k, v in JMP_OPS.items()}
CONDITIONAL_JUMPS = frozenset(v for k, v in JMP_OPS.items() if k not in ("ja", "call", "exit"))
# atomic operations (imm field of STX|ATOMIC); FETCH is or-ed in
ATOMIC_FETCH = 0x01
ATOMIC_OPS = {int(op): op.name.lower() for op in AtomicOp}
# the ALU operation an atomic read-modify-write applies
ATOMIC_ALU = {
    AtomicOp.ADD: AluOp.ADD,
    AtomicOp.OR: AluOp.OR,
    AtomicOp.AND: AluOp.AND,
    AtomicOp.XOR: AluOp.XOR,
}
ATOMIC_VALID_IMMS = frozenset({int(op) for op in AtomicOp} | {op | ATOMIC_FETCH for op in ATOMIC_ALU})

LDDW = LD | MODE_IMM | SIZE_DW  # 0x18
OP_CALL = JMP | JmpOp.CALL << 4  # 0x85
OP_CALLX = JMP | JmpOp.CALL << 4 | SRC_X  # 0x8d
OP_EXIT = JMP | JmpOp.EXIT << 4  # 0x95
OP_JA = JMP | JmpOp.JA << 4  # 0x05
OP_JA32 = JMP32 | JmpOp.JA << 4  # 0x06 (gotol: offset in imm)
# byte swaps: ALU|END with the source bit picking the target order; ALU64|END swaps unconditionally
OP_LE = ALU | AluOp.END << 4 | SRC_K  # 0xd4
OP_BE = ALU | AluOp.END << 4 | SRC_X  # 0xdc
OP_BSWAP = ALU64 | AluOp.END << 4  # 0xd7
CLASS_MASK, MODE_MASK, SIZE_MASK = 0x07, 0xE0, 0x18
CALL_HELPER, CALL_LOCAL, CALL_BTF = 0, 1, 2
MOVSX_OFFSETS = {ALU: (8, 16), ALU64: (8, 16, 32)}
NUM_REGS = 11


class Insn(NamedTuple):
    """One decoded instruction. ``imm`` is signed 32-bit, except for ``lddw``: the 64-bit value."""

    opcode: int
    dst: int
    src: int
    off: int
    imm: int

    @property
    def cls(self) -> int:
        return self.opcode & CLASS_MASK

    @property
    def slots(self) -> int:
        return 2 if self.opcode == LDDW else 1


@dataclass(frozen=True)
class Program:
    """Decoded instructions indexed by slot: ``insns[pc]`` is None on the second slot of an lddw."""

    insns: tuple[Insn | None, ...]

    def __len__(self) -> int:
        return len(self.insns)

    def encode(self) -> bytes:
        return encode([i for i in self.insns if i is not None])


def _values(insn: Insn) -> tuple[str, dict[str, int]]:
    """The toolkit format and field values of an instruction."""
    op = insn.opcode & 0xFF
    values = {"dst": insn.dst, "src": insn.src, "off": insn.off, "imm": insn.imm}
    if op == LDDW:
        return "lddw", {**values, "imm": insn.imm & 0xFFFFFFFFFFFFFFFF if insn.imm < 0 else insn.imm}
    names = FORMAT_OF_CLASS.get(op & CLASS_MASK)
    if names is None:
        raise EncodingError(f"opcode 0x{op:02x} has no instruction format")
    if len(names) == 2:
        return names[(op >> 3) & 1], {**values, "op": op >> 4}
    return names[0], {**values, "size": (op >> 3) & 3, "mode": op >> 5}


def encode_insn(insn: Insn) -> bytes:
    """The slot bytes of one instruction (two slots for lddw), packed by the toolkit spec."""
    name, values = _values(insn)
    if name != "lddw" and insn.imm >= (1 << 31):
        values["imm"] = insn.imm - (1 << 32)  # accept the unsigned spelling of a 32-bit immediate
    try:
        wide = BOUND.pack(name, values)
    except ToolkitAsmError as exc:
        raise EncodingError(f"cannot encode {insn}: {exc}") from None
    return wide.to_bytes(16 if name == "lddw" else 8, "little")


def encode(insns: list[Insn]) -> bytes:
    return b"".join(encode_insn(i) for i in insns)


def words_to_bytes(words: list[int]) -> bytes:
    return b"".join((w & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little") for w in words)


def bytes_to_words(data: bytes) -> list[int]:
    if len(data) % 8:
        raise EncodingError(f"program of {len(data)} bytes is not a whole number of 8-byte slots")
    return [int.from_bytes(data[i : i + 8], "little") for i in range(0, len(data), 8)]


def decode(data: bytes) -> Program:
    """Decode and validate a program through the toolkit spec; `EncodingError` names the first bad slot."""
    if len(data) % 8:
        raise EncodingError(f"program of {len(data)} bytes is not a whole number of 8-byte slots")
    if not data:
        raise EncodingError("empty program")
    words = bytes_to_words(data)
    out: list[Insn | None] = []
    pc = 0
    while pc < len(words):
        try:
            slot, n = BOUND.decode_at(words, pc)
        except DecodeError as exc:
            raise EncodingError(
                f"pc {pc}: {_reason(words[pc], exc.reason)} (slot 0x{words[pc]:016x})"
            ) from None
        out.append(Insn(slot.opcode_byte, slot.dst, slot.src, slot.off, slot.imm))
        out.extend([None] * (n - 1))
        pc += n
    return Program(tuple(out))


def _reason(word: int, toolkit_reason: str) -> str:
    """The most specific one-line reason for a slot the spec rejected."""
    if word & 0xFF == LDDW:
        if "program ends" in toolkit_reason:
            return "lddw is missing its second slot"
        if "reserved" in toolkit_reason:
            return "second slot of lddw must have opcode, registers and offset 0"
    imm = (word >> 32) & 0xFFFFFFFF
    raw = Insn(
        word & 0xFF,
        (word >> 8) & 0xF,
        (word >> 12) & 0xF,
        ((word >> 16) & 0xFFFF) - (0x10000 if word & (1 << 31) else 0),
        imm - (1 << 32) if imm >> 31 else imm,
    )
    return check_fields(raw) or toolkit_reason


def _zero(insn: Insn, *fields: str) -> str | None:
    for name in fields:
        if getattr(insn, name):
            return f"unused field {name} must be 0 in {describe_opcode(insn.opcode)}"
    return None


def _check_reg(reg: int, what: str) -> str | None:
    return None if reg < NUM_REGS else f"invalid {what} register r{reg}"


def check_fields(insn: Insn) -> str | None:
    """Why ``insn`` is not a valid RFC 9669 encoding, or None."""
    cls = insn.cls
    checker = _CHECKERS[cls]
    reason = checker(insn)
    if reason:
        return reason
    return _check_reg(insn.dst, "destination") or _check_reg(insn.src, "source")


def _check_alu(insn: Insn) -> str | None:
    code, source = insn.opcode >> 4, insn.opcode & SRC_X
    if code not in ALU_NAMES:
        return f"unknown ALU operation 0x{code:x}"
    if code == ALU_OPS["end"]:
        if insn.cls == ALU64 and source:
            return "byte swap with source bit set"
        if insn.imm not in (16, 32, 64):
            return f"byte-swap width {insn.imm} (must be 16, 32 or 64)"
        return _zero(insn, "src", "off")
    if code == ALU_OPS["neg"]:
        return "neg with source bit set" if source else _zero(insn, "src", "off", "imm")
    allowed_offsets: tuple[int, ...] = (0,)
    if code in (ALU_OPS["div"], ALU_OPS["mod"]):
        allowed_offsets = (0, 1)
    elif code == ALU_OPS["mov"] and source:
        allowed_offsets = (0, *MOVSX_OFFSETS[insn.cls])
    if insn.off not in allowed_offsets:
        return f"offset {insn.off} not allowed for {ALU_NAMES[code]}"
    return _zero(insn, "imm") if source else _zero(insn, "src")


def _check_jmp(insn: Insn) -> str | None:
    code, source = insn.opcode >> 4, insn.opcode & SRC_X
    if code not in JMP_NAMES:
        return f"unknown jump operation 0x{code:x}"
    if insn.cls == JMP32 and code in (JMP_OPS["call"], JMP_OPS["exit"]):
        return f"{JMP_NAMES[code]} is not defined in class JMP32"
    if code == JMP_OPS["ja"]:
        if source:
            return "ja with source bit set"
        return _zero(insn, "dst", "src", "off") if insn.cls == JMP32 else _zero(insn, "dst", "src", "imm")
    if code == JMP_OPS["exit"]:
        return "exit with source bit set" if source else _zero(insn, "dst", "src", "off", "imm")
    if code == JMP_OPS["call"]:
        if source:  # callx: helper index in dst
            return _zero(insn, "src", "off", "imm")
        if insn.src not in (CALL_HELPER, CALL_LOCAL, CALL_BTF):
            return f"call with unknown source type {insn.src}"
        return _zero(insn, "dst", "off")
    return _zero(insn, "imm") if source else _zero(insn, "src")


def _check_ld(insn: Insn) -> str | None:
    if insn.opcode != LDDW:
        mode = insn.opcode & MODE_MASK
        if mode in (MODE_ABS, MODE_IND):
            return "legacy packet access (ABS/IND) is not supported"
        return f"unknown load opcode 0x{insn.opcode:02x}"
    if insn.src != 0:
        return f"lddw pseudo source {insn.src} (maps, BTF variables) is not supported"
    return _zero(insn, "off")


def _check_ldx(insn: Insn) -> str | None:
    mode, size = insn.opcode & MODE_MASK, insn.opcode & SIZE_MASK
    if mode == MODE_MEMSX and size == SIZE_DW:
        return "sign-extending load of a double word is not defined"
    if mode not in (MODE_MEM, MODE_MEMSX):
        return f"unknown load mode 0x{mode:02x}"
    return _zero(insn, "imm")


def _check_st(insn: Insn) -> str | None:
    if insn.opcode & MODE_MASK != MODE_MEM:
        return f"unknown store mode 0x{insn.opcode & MODE_MASK:02x}"
    return _zero(insn, "src")


def _check_stx(insn: Insn) -> str | None:
    mode, size = insn.opcode & MODE_MASK, insn.opcode & SIZE_MASK
    if mode == MODE_MEM:
        return _zero(insn, "imm")
    if mode != MODE_ATOMIC:
        return f"unknown store mode 0x{mode:02x}"
    if size not in (SIZE_W, SIZE_DW):
        return "atomic operations need size w or dw"
    if insn.imm not in ATOMIC_VALID_IMMS:
        return f"unknown atomic operation 0x{insn.imm & 0xFFFFFFFF:x}"
    return None


_CHECKERS = {
    LD: _check_ld,
    LDX: _check_ldx,
    ST: _check_st,
    STX: _check_stx,
    ALU: _check_alu,
    ALU64: _check_alu,
    JMP: _check_jmp,
    JMP32: _check_jmp,
}


def describe_opcode(opcode: int) -> str:
    return f"opcode 0x{opcode:02x} ({CLASS_NAMES[opcode & 7]})"


def opcode_table() -> list[tuple[int, str, str]]:
    """Every valid opcode byte: (opcode, mnemonic, meaning) — the docs table."""
    rows: list[tuple[int, str, str]] = []
    for cls, suffix in ((ALU64, ""), (ALU, "32")):
        width = "64" if cls == ALU64 else "32"
        for name, code in ALU_OPS.items():
            if name == "end":
                continue
            for source, operand in ((SRC_K, "imm"), (SRC_X, "src")):
                if name == "neg" and source:
                    continue
                rows.append(
                    (
                        cls | code << 4 | source,
                        f"{name}{suffix}",
                        f"{width}-bit dst = dst {name} {operand}"
                        if name != "neg"
                        else f"{width}-bit dst = -dst",
                    )
                )
    for opcode, name in ((OP_LE, "le16/32/64"), (OP_BE, "be16/32/64"), (OP_BSWAP, "bswap16/32/64")):
        rows.append((opcode, name, "byte swap, width in imm; le/be zero-extend"))
    rows.append((LDDW, "lddw", "dst = 64-bit imm (two slots)"))
    for size, suf in SIZE_SUFFIX.items():
        rows.append((LDX | MODE_MEM | size, f"ldx{suf}", f"dst = *(u{SIZE_BYTES[size] * 8} *)(src + off)"))
        if size != SIZE_DW:
            rows.append(
                (LDX | MODE_MEMSX | size, f"ldxs{suf}", f"dst = *(s{SIZE_BYTES[size] * 8} *)(src + off)")
            )
        rows.append((ST | MODE_MEM | size, f"st{suf}", "*(dst + off) = imm"))
        rows.append((STX | MODE_MEM | size, f"stx{suf}", "*(dst + off) = src"))
    rows.append(
        (STX | MODE_ATOMIC | SIZE_W, "lock ...32", "32-bit atomic add/or/and/xor [fetch], xchg, cmpxchg")
    )
    rows.append(
        (STX | MODE_ATOMIC | SIZE_DW, "lock ...", "64-bit atomic add/or/and/xor [fetch], xchg, cmpxchg")
    )
    for cls, suffix in ((JMP, ""), (JMP32, "32")):
        for name, code in JMP_OPS.items():
            if code in CONDITIONAL_JUMPS:
                for source, operand in ((SRC_K, "imm"), (SRC_X, "src")):
                    rows.append(
                        (
                            cls | code << 4 | source,
                            f"{name}{suffix}",
                            f"if dst {name[1:]} {operand}: pc += off",
                        )
                    )
    rows += [
        (OP_JA, "ja", "pc += off"),
        (OP_JA32, "ja32", "pc += imm"),
        (OP_CALL, "call", "src 0: helper imm; src 1: local function at pc + imm"),
        (OP_CALLX, "callx", "helper whose index is in dst"),
        (OP_EXIT, "exit", "return r0 / return from call"),
    ]
    return sorted(rows)


# --------------------------------------------------------------------------- toolkit formats

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


def _memory(name: str, cls_bits: int, mode: type, mode_doc: str, doc: str) -> Format:
    """A load or store class: size and mode fields above the class bits."""
    return Format(
        name,
        (const("cls_bits", 2, 0, cls_bits, doc=name.upper()), _SIZE,
         bits("mode", 7, 5, enum=mode, doc=mode_doc), *_REGS, _IMM),
        cls=_slot_class(name, cls_bits),
        check=_check,
        doc=doc,
    )


FORMATS = (
    _alu_jmp("alu32_imm", ALU, 0, AluOp, "ALU: 32-bit, result zero-extended"),
    _alu_jmp("alu32_reg", ALU, 1, AluOp, "ALU: 32-bit, result zero-extended"),
    _alu_jmp("alu64_imm", ALU64, 0, AluOp, "ALU64: 64-bit (imm sign-extended)"),
    _alu_jmp("alu64_reg", ALU64, 1, AluOp, "ALU64: 64-bit"),
    _alu_jmp("jmp_imm", JMP, 0, JmpOp, "JMP: 64-bit compares, call, exit"),
    _alu_jmp("jmp_reg", JMP, 1, JmpOp, "JMP: 64-bit compares, callx"),
    _alu_jmp("jmp32_imm", JMP32, 0, JmpOp, "JMP32: 32-bit compares, ja32 (offset in imm)"),
    _alu_jmp("jmp32_reg", JMP32, 1, JmpOp, "JMP32: 32-bit compares"),
    _memory("ldx", LDX, LoadMode, "MEM zero-extends, MEMSX sign-extends", "dst = *(size *)(src + off)"),
    _memory("st", ST, StoreMode, "MEM", "*(size *)(dst + off) = imm"),
    _memory("stx", STX, StoreMode, "MEM store, or ATOMIC (kind in imm)",
            "*(size *)(dst + off) = src, or an atomic operation"),
    Format(
        "lddw",
        (
            const("opcode", 7, 0, LDDW, doc="LD | IMM | DW"),
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
        cls=_slot_class("lddw", LDDW),
        check=_check,
        doc="dst = imm64 (two slots)",
    ),
)

SPEC = Spec("ebpf", 64, FORMATS)
BOUND = SPEC.bind(None)
FORMAT_OF_CLASS = {
    ALU: ("alu32_imm", "alu32_reg"),
    ALU64: ("alu64_imm", "alu64_reg"),
    JMP: ("jmp_imm", "jmp_reg"),
    JMP32: ("jmp32_imm", "jmp32_reg"),
    LDX: ("ldx",),
    ST: ("st",),
    STX: ("stx",),
}


def docs_tables() -> str:
    """The two tables of ``docs/targets/ebpf.md``: formats and fields (toolkit), then every opcode."""
    from npukit.isa import markdown_table

    rows = ["| opcode | mnemonic | meaning |", "|---|---|---|"]
    rows += [f"| `0x{op:02x}` | `{name}` | {meaning} |" for op, name, meaning in opcode_table()]
    return markdown_table(BOUND) + "\n" + "\n".join(rows) + "\n"
