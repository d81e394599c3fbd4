"""Assembler and disassembler for the text syntax of uBPF and the bpf_conformance corpus.

Syntax (one instruction per line; ``#``, ``//`` and ``;`` start comments; ``name:`` defines a label)::

    mov %r0, 1            add32 %r1, %r2        sdiv %r3, -7          movsx832 %r2, %r1
    neg %r0               be16 %r0              bswap64 %r1           le32 %r2
    ldxb %r0, [%r1+0x2]   ldxsh %r0, [%r1-4]    stw [%r10-8], 5       stxdw [%r10-8], %r1
    lddw %r0, 0x1122334455667788
    lock add [%r10-8], %r1    lock fetch xor32 [%r1+4], %r2    lock xchg ...    lock cmpxchg ...
    jeq %r1, 5, +3        jne32 %r1, %r2, label   ja -2   ja32 label
    call 1                call local func1      call %r2 (callx)      exit

Jump targets are ``+N``/``-N`` slot offsets or label names; as in the corpus's assembler, ``exit`` names
the first ``exit`` instruction unless a label of that name exists. `disassemble` writes the same syntax
(labels ``L<pc>`` at jump targets), so its output assembles back to the same bytes.
"""

from __future__ import annotations

import re

from npukit.targets.ebpf import isa
from npukit.targets.ebpf.errors import AsmError
from npukit.targets.ebpf.isa import Insn

_COMMENT = re.compile(r"(#|//|;).*$")
_MEMREF = re.compile(r"^\[\s*(%?r\d+)\s*(?:([+-])\s*([0-9a-fA-Fx]+))?\s*\]$")
_ALU_BINARY = (
    "add",
    "sub",
    "mul",
    "div",
    "sdiv",
    "or",
    "and",
    "lsh",
    "rsh",
    "mod",
    "smod",
    "xor",
    "mov",
    "arsh",
)
_ENDIAN = {"le": isa.OP_LE, "be": isa.OP_BE, "bswap": isa.OP_BSWAP, "swap": isa.OP_BSWAP}
_ATOMIC = {op.name.lower(): int(op) for op in isa.AtomicOp}
_ALWAYS_FETCH = (isa.AtomicOp.XCHG, isa.AtomicOp.CMPXCHG)
MOVSX_OPCODE = isa.AluOp.MOV << 4 | isa.SRC_X


def _reg(text: str) -> int:
    m = re.fullmatch(r"%?r(\d+)", text.strip())
    if not m or int(m.group(1)) > 10:
        raise AsmError(f"invalid register {text.strip()!r}")
    return int(m.group(1))


def _int(text: str, what: str) -> int:
    try:
        return int(text.strip(), 0) if not re.fullmatch(r"[+-]?0\d+", text.strip()) else int(text.strip(), 10)
    except ValueError:
        raise AsmError(f"invalid {what} {text.strip()!r}") from None


def _imm32(text: str) -> int:
    value = _int(text, "immediate")
    if not -(1 << 31) <= value < (1 << 32):
        raise AsmError(f"immediate {text.strip()} out of 32-bit range")
    return value - (1 << 32) if value >= (1 << 31) else value


def _imm64(text: str) -> int:
    value = _int(text, "immediate")
    if not -(1 << 63) <= value < (1 << 64):
        raise AsmError(f"immediate {text.strip()} out of 64-bit range")
    return value & 0xFFFFFFFFFFFFFFFF


def _memref(text: str) -> tuple[int, int]:
    m = _MEMREF.match(text.strip())
    if not m:
        raise AsmError(f"invalid memory operand {text.strip()!r} (expected [%rN+off])")
    off = 0
    if m.group(2):
        off = _int(m.group(3), "offset") * (-1 if m.group(2) == "-" else 1)
    if not -(1 << 15) <= off < (1 << 15):
        raise AsmError(f"offset {off} out of 16-bit range")
    return _reg(m.group(1)), off


class _Line:
    """One parsed instruction and, where it jumps, the unresolved target (label or offset)."""

    def __init__(self, insn: Insn, target: str | None = None, field: str = "off") -> None:
        self.insn, self.target, self.field = insn, target, field


def _expect(ops: list[str], n: int, mnemonic: str) -> None:
    if len(ops) != n:
        raise AsmError(f"{mnemonic} takes {n} operand(s), got {len(ops)}")


def _alu(mnemonic: str, ops: list[str]) -> _Line:
    base, cls = mnemonic, isa.ALU64
    if base.endswith("32") and not base.startswith("movsx"):
        base, cls = base[:-2], isa.ALU
    elif base.endswith("64") and not base.startswith("movsx"):
        base = base[:-2]
    if base.startswith("movsx"):
        m = re.fullmatch(r"movsx(8|16|32)(32|64)", base)
        if not m:
            raise AsmError(f"unknown mnemonic {mnemonic!r}")
        _expect(ops, 2, mnemonic)
        cls = isa.ALU if m.group(2) == "32" else isa.ALU64
        return _Line(Insn(cls | MOVSX_OPCODE, _reg(ops[0]), _reg(ops[1]), int(m.group(1)), 0))
    if base == "neg":
        _expect(ops, 1, mnemonic)
        return _Line(Insn(cls | isa.AluOp.NEG << 4, _reg(ops[0]), 0, 0, 0))
    _expect(ops, 2, mnemonic)
    signed = base in ("sdiv", "smod")
    code = isa.ALU_OPS[base[1:] if signed else base]
    dst = _reg(ops[0])
    if ops[1].strip().lstrip("%").startswith("r") and re.fullmatch(r"%?r\d+", ops[1].strip()):
        return _Line(Insn(cls | code << 4 | isa.SRC_X, dst, _reg(ops[1]), int(signed), 0))
    return _Line(Insn(cls | code << 4, dst, 0, int(signed), _imm32(ops[1])))


def _endian(mnemonic: str, ops: list[str]) -> _Line:
    m = re.fullmatch(r"(le|be|bswap|swap)(16|32|64)", mnemonic)
    assert m
    _expect(ops, 1, mnemonic)
    return _Line(Insn(_ENDIAN[m.group(1)], _reg(ops[0]), 0, 0, int(m.group(2))))


def _mem(mnemonic: str, ops: list[str]) -> _Line:
    _expect(ops, 2, mnemonic)
    if mnemonic == "lddw":
        return _Line(Insn(isa.LDDW, _reg(ops[0]), 0, 0, _imm64(ops[1])))
    m = re.fullmatch(r"(ldxs|ldx|stx|st)(b|h|w|dw)", mnemonic)
    assert m
    kind, size = m.group(1), {v: k for k, v in isa.SIZE_SUFFIX.items()}[m.group(2)]
    if kind == "ldxs" and size == isa.SIZE_DW:
        raise AsmError("ldxsdw does not exist (sign-extending loads are b, h, w)")
    if kind in ("ldx", "ldxs"):
        src, off = _memref(ops[1])
        mode = isa.MODE_MEMSX if kind == "ldxs" else isa.MODE_MEM
        return _Line(Insn(isa.LDX | mode | size, _reg(ops[0]), src, off, 0))
    dst, off = _memref(ops[0])
    if kind == "st":
        return _Line(Insn(isa.ST | isa.MODE_MEM | size, dst, 0, off, _imm32(ops[1])))
    return _Line(Insn(isa.STX | isa.MODE_MEM | size, dst, _reg(ops[1]), off, 0))


def _lock(rest: str) -> _Line:
    words = rest.split(None, 2)
    fetch = bool(words) and words[0] == "fetch"
    if fetch:
        words = words[1:]
    if len(words) < 2:
        raise AsmError(f"invalid atomic instruction 'lock {rest}'")
    op = words[0]
    size = isa.SIZE_DW
    if op.endswith("32"):
        op, size = op[:-2], isa.SIZE_W
    elif op.endswith("64"):
        op = op[:-2]
    if op not in _ATOMIC or (fetch and op in ("xchg", "cmpxchg")):
        raise AsmError(f"unknown atomic operation {words[0]!r}")
    ops = [s for s in " ".join(words[1:]).split(",")]
    _expect(ops, 2, "lock " + words[0])
    dst, off = _memref(ops[0])
    return _Line(
        Insn(
            isa.STX | isa.MODE_ATOMIC | size,
            dst,
            _reg(ops[1]),
            off,
            _ATOMIC[op] | (isa.ATOMIC_FETCH if fetch else 0),
        )
    )


def _jump(mnemonic: str, ops: list[str], rest: str) -> _Line:
    if mnemonic == "exit":
        _expect(ops, 0, mnemonic)
        return _Line(Insn(isa.OP_EXIT, 0, 0, 0, 0))
    if mnemonic in ("ja", "ja32"):
        _expect(ops, 1, mnemonic)
        return _Line(
            Insn(isa.OP_JA if mnemonic == "ja" else isa.OP_JA32, 0, 0, 0, 0),
            ops[0].strip(),
            "off" if mnemonic == "ja" else "imm",
        )
    if mnemonic == "call":
        words = rest.split()
        if len(words) == 2 and words[0] == "local":
            return _Line(Insn(isa.OP_CALL, 0, isa.CALL_LOCAL, 0, 0), words[1], "imm")
        if len(words) == 2 and words[0] == "helper":
            words = words[1:]
        if len(words) != 1:
            raise AsmError(f"invalid call operands {rest!r}")
        if re.fullmatch(r"%?r\d+", words[0]):
            return _Line(Insn(isa.OP_CALLX, _reg(words[0]), 0, 0, 0))
        return _Line(Insn(isa.OP_CALL, 0, isa.CALL_HELPER, 0, _imm32(words[0])))
    base, cls = (mnemonic[:-2], isa.JMP32) if mnemonic.endswith("32") else (mnemonic, isa.JMP)
    code = isa.JMP_OPS.get(base)
    if code not in isa.CONDITIONAL_JUMPS:
        raise AsmError(f"unknown mnemonic {mnemonic!r}")
    _expect(ops, 3, mnemonic)
    dst = _reg(ops[0])
    if re.fullmatch(r"%?r\d+", ops[1].strip()):
        return _Line(Insn(cls | code << 4 | isa.SRC_X, dst, _reg(ops[1]), 0, 0), ops[2].strip())
    return _Line(Insn(cls | code << 4, dst, 0, 0, _imm32(ops[1])), ops[2].strip())


def _parse_instruction(text: str) -> _Line:
    parts = text.split(None, 1)
    mnemonic, rest = parts[0].lower(), (parts[1] if len(parts) > 1 else "")
    ops = [s for s in rest.split(",")] if rest.strip() else []
    if mnemonic == "lock":
        return _lock(rest)
    if re.fullmatch(r"(le|be|bswap|swap)(16|32|64)", mnemonic):
        return _endian(mnemonic, ops)
    if mnemonic == "lddw" or re.fullmatch(r"(ldxs|ldx|stx|st)(b|h|w|dw)", mnemonic):
        return _mem(mnemonic, ops)
    if mnemonic in ("exit", "ja", "ja32", "call") or re.fullmatch(r"j[a-z]+(32)?", mnemonic):
        return _jump(mnemonic, ops, rest)
    stem = re.sub(r"(32|64)$", "", mnemonic)
    if stem in _ALU_BINARY or stem == "neg" or mnemonic.startswith("movsx"):
        return _alu(mnemonic, ops)
    raise AsmError(f"unknown mnemonic {mnemonic!r}")


def assemble(text: str) -> list[Insn]:
    """Assemble source text into instructions (labels resolved); `AsmError` names the line."""
    lines: list[tuple[int, _Line]] = []
    labels: dict[str, int] = {}
    first_exit: int | None = None
    pc = 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = _COMMENT.sub("", raw).strip()
        while line:
            m = re.match(r"^([A-Za-z_.$][\w.$]*)\s*:(.*)$", line)
            if not m:
                break
            if m.group(1) in labels:
                raise AsmError(f"line {lineno}: duplicate label {m.group(1)!r}")
            labels[m.group(1)] = pc
            line = m.group(2).strip()
        if not line:
            continue
        try:
            parsed = _parse_instruction(line)
        except AsmError as exc:
            raise AsmError(f"line {lineno}: {exc}") from None
        if parsed.insn.opcode == isa.OP_EXIT and first_exit is None:
            first_exit = pc
        lines.append((lineno, parsed))
        pc += parsed.insn.slots
    if first_exit is not None:
        labels.setdefault("exit", first_exit)
    out: list[Insn] = []
    pc = 0
    for lineno, parsed in lines:
        insn = parsed.insn
        if parsed.target is not None:
            insn = insn._replace(**{parsed.field: _resolve(parsed.target, pc, labels, lineno, parsed.field)})
        out.append(insn)
        pc += insn.slots
    if not out:
        raise AsmError("no instructions")
    return out


def _resolve(target: str, pc: int, labels: dict[str, int], lineno: int, field: str) -> int:
    if re.fullmatch(r"[+-]?(0x[0-9a-fA-F]+|\d+)", target):
        value = _int(target, "jump offset")
    elif target in labels:
        value = labels[target] - pc - 1
    else:
        raise AsmError(f"line {lineno}: undefined label {target!r}")
    limit = 15 if field == "off" else 31
    if not -(1 << limit) <= value < (1 << limit):
        raise AsmError(f"line {lineno}: jump offset {value} out of range")
    return value


def assemble_bytes(text: str) -> bytes:
    return isa.encode(assemble(text))


# --------------------------------------------------------------------------- disassembler


def _imm_text(value: int) -> str:
    return str(value) if -4096 <= value <= 4096 else (hex(value) if value >= 0 else str(value))


def _mem_text(reg: int, off: int) -> str:
    return f"[%r{reg}{'+' if off >= 0 else '-'}{abs(off)}]"


def format_insn(insn: Insn, target_label: str | None = None) -> str:
    """One instruction as text; ``target_label`` replaces the numeric jump/call target."""
    op, cls = insn.opcode, insn.cls
    if cls in (isa.ALU, isa.ALU64):
        return _format_alu(insn)
    if op == isa.LDDW:
        return f"lddw %r{insn.dst}, 0x{insn.imm & 0xFFFFFFFFFFFFFFFF:x}"
    size = isa.SIZE_SUFFIX[op & isa.SIZE_MASK]
    if cls == isa.LDX:
        signed = "s" if op & isa.MODE_MASK == isa.MODE_MEMSX else ""
        return f"ldx{signed}{size} %r{insn.dst}, {_mem_text(insn.src, insn.off)}"
    if cls == isa.ST:
        return f"st{size} {_mem_text(insn.dst, insn.off)}, {_imm_text(insn.imm)}"
    if cls == isa.STX and op & isa.MODE_MASK == isa.MODE_ATOMIC:
        kind = insn.imm & ~isa.ATOMIC_FETCH if insn.imm not in _ALWAYS_FETCH else insn.imm
        fetch = "fetch " if insn.imm & isa.ATOMIC_FETCH and insn.imm not in _ALWAYS_FETCH else ""
        suffix = "32" if op & isa.SIZE_MASK == isa.SIZE_W else ""
        return f"lock {fetch}{isa.ATOMIC_OPS[kind]}{suffix} {_mem_text(insn.dst, insn.off)}, %r{insn.src}"
    if cls == isa.STX:
        return f"stx{size} {_mem_text(insn.dst, insn.off)}, %r{insn.src}"
    return _format_jmp(insn, target_label)


def _format_alu(insn: Insn) -> str:
    code, cls, suffix = insn.opcode >> 4, insn.cls, "32" if insn.cls == isa.ALU else ""
    name = isa.ALU_NAMES[code]
    if name == "end":
        kind = {isa.OP_LE: "le", isa.OP_BE: "be", isa.OP_BSWAP: "bswap"}[insn.opcode]
        return f"{kind}{insn.imm} %r{insn.dst}"
    if name == "neg":
        return f"neg{suffix} %r{insn.dst}"
    if name == "mov" and insn.off:
        return f"movsx{insn.off}{'32' if cls == isa.ALU else '64'} %r{insn.dst}, %r{insn.src}"
    if insn.off == 1:
        name = "s" + name
    operand = f"%r{insn.src}" if insn.opcode & isa.SRC_X else _imm_text(insn.imm)
    return f"{name}{suffix} %r{insn.dst}, {operand}"


def _format_jmp(insn: Insn, target_label: str | None) -> str:
    code = insn.opcode >> 4
    name = isa.JMP_NAMES[code]
    if insn.opcode == isa.OP_EXIT:
        return "exit"
    if insn.opcode == isa.OP_CALLX:
        return f"call %r{insn.dst}"
    if insn.opcode == isa.OP_CALL:
        if insn.src == isa.CALL_LOCAL:
            return f"call local {target_label or _signed(insn.imm)}"
        return f"call {insn.imm}"
    if name == "ja":
        if insn.cls == isa.JMP32:
            return f"ja32 {target_label or _signed(insn.imm)}"
        return f"ja {target_label or _signed(insn.off)}"
    suffix = "32" if insn.cls == isa.JMP32 else ""
    operand = f"%r{insn.src}" if insn.opcode & isa.SRC_X else _imm_text(insn.imm)
    return f"{name}{suffix} %r{insn.dst}, {operand}, {target_label or _signed(insn.off)}"


def _signed(value: int) -> str:
    return f"+{value}" if value >= 0 else str(value)


def branch_target(pc: int, insn: Insn) -> int | None:
    """The slot a jump or local call at ``pc`` transfers to (None for other instructions)."""
    if insn.cls not in (isa.JMP, isa.JMP32) or insn.opcode in (isa.OP_EXIT, isa.OP_CALLX):
        return None
    if insn.opcode == isa.OP_CALL:
        return pc + 1 + insn.imm if insn.src == isa.CALL_LOCAL else None
    if insn.opcode == isa.OP_JA32:
        return pc + 1 + insn.imm
    return pc + 1 + insn.off


def block_leaders(insns: tuple[Insn | None, ...], entry: int) -> set[int]:
    """The slots that start a basic block: the entry, every jump or local-call target and the slot
    after every jump-class instruction (may include slots past the end or inside an lddw)."""
    out = {entry}
    for pc, insn in enumerate(insns):
        if insn is None or insn.cls not in (isa.JMP, isa.JMP32):
            continue
        target = branch_target(pc, insn)
        if target is not None:
            out.add(target)
        out.add(pc + 1)
    return out


def disassemble(program: isa.Program, labels: bool = True, notes: dict[int, str] | None = None) -> str:
    """Text that `assemble` turns back into the same bytes; ``notes`` (slot -> text) become ``#``
    comments on their instructions' lines (e.g. the names of an ELF object's helper calls)."""
    targets: dict[int, str] = {}
    if labels:
        for pc, insn in enumerate(program.insns):
            t = insn is not None and branch_target(pc, insn)
            if t is not None and t is not False and 0 <= t < len(program) and program.insns[t] is not None:
                targets[t] = f"L{t}"
    lines = []
    for pc, insn in enumerate(program.insns):
        if insn is None:
            continue
        if pc in targets:
            lines.append(f"{targets[pc]}:")
        t = branch_target(pc, insn)
        line = "    " + format_insn(insn, targets.get(t) if t is not None else None)
        lines.append(f"{line}  # {notes[pc]}" if notes and pc in notes else line)
    return "\n".join(lines) + "\n"
