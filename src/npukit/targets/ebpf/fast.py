"""The fast path: a verified program translated once into one Python function, block by block.

Basic blocks become straight-line Python on local variables ``r0..r10``; a binary tree on ``pc``
selects the block (no per-instruction dispatch); a block that branches back to itself runs as an inner
``while`` loop. Loads and stores through r10 are checked inline against the stack, others inline
against the input buffer, and anything else goes through `Memory` (which faults exactly as the
interpreter does). Semantics are the interpreter's: the tricky operations call the same functions in
``semantics.py``. The budget is checked at block entry; when a block would cross it, the translated code
hands its state to the reference interpreter, which stops at the exact instruction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from npukit.targets.ebpf import isa
from npukit.targets.ebpf import semantics as S
from npukit.targets.ebpf.asm import branch_target
from npukit.targets.ebpf.errors import HelperFault
from npukit.targets.ebpf.isa import AluOp, Insn, JmpOp
from npukit.targets.ebpf.memory import PACK, UNPACK
from npukit.targets.ebpf.state import State, atomic

if TYPE_CHECKING:  # the VM hands its hot runs here; only its type is needed
    from npukit.targets.ebpf.vm import Machine

M64, M32, SB64, SB32 = S.M64, S.M32, 1 << 63, 1 << 31
_REGS = ", ".join(f"r{i}" for i in range(11))
_ALU_EXPR = {
    AluOp.ADD: "({d} + {s})",
    AluOp.SUB: "({d} - {s})",
    AluOp.MUL: "({d} * {s})",
    AluOp.OR: "({d} | {s})",
    AluOp.AND: "({d} & {s})",
    AluOp.XOR: "({d} ^ {s})",
}
_CMP = {
    JmpOp.JEQ: "==",
    JmpOp.JGT: ">",
    JmpOp.JGE: ">=",
    JmpOp.JNE: "!=",
    JmpOp.JSGT: ">",
    JmpOp.JSGE: ">=",
    JmpOp.JLT: "<",
    JmpOp.JLE: "<=",
    JmpOp.JSLT: "<",
    JmpOp.JSLE: "<=",
}
_SIGNED = (JmpOp.JSGT, JmpOp.JSGE, JmpOp.JSLT, JmpOp.JSLE)


def _leaders(m: Machine) -> list[int]:
    insns = m.program.insns
    leaders = {m.entry}
    for pc, insn in enumerate(insns):
        if insn is None:
            continue
        if insn.cls in (isa.JMP, isa.JMP32):
            t = branch_target(pc, insn)
            if t is not None:
                leaders.add(t)
            if pc + 1 < len(insns):
                leaders.add(pc + 1)
    return sorted(p for p in leaders if p < len(insns) and insns[p] is not None)


class _Gen:
    def __init__(self, m: Machine) -> None:
        self.m = m
        self.insns = m.program.insns
        self.consts: dict[str, object] = {}
        self.lines: list[str] = []

    def const(self, value: object) -> str:
        name = f"K{len(self.consts)}"
        self.consts[name] = value
        return name

    # -- single instructions ------------------------------------------------------------------------

    def alu(self, insn: Insn, pc: int) -> list[str]:
        code, wide = AluOp(insn.opcode >> 4), insn.cls == isa.ALU64
        mask = "M64" if wide else "M32"
        d = f"r{insn.dst}"
        if code == AluOp.END:
            return [f"{d} = {self.const(S.ENDIAN[insn.opcode])}({d}, {insn.imm})"]
        if code == AluOp.NEG:
            return [f"{d} = (-{d}) & {mask}"]
        if insn.opcode & isa.SRC_X:
            s = f"r{insn.src}" if wide else f"(r{insn.src} & M32)"
        else:
            s = str(insn.imm & (M64 if wide else M32))
        if code == AluOp.MOV:
            return [f"{d} = {self.const(S.sext)}({s}, {insn.off}) & {mask}" if insn.off else f"{d} = {s}"]
        if code in (AluOp.DIV, AluOp.MOD):
            return self.divide(insn, pc, d, s, wide)
        width = 63 if wide else 31
        is_imm = not insn.opcode & isa.SRC_X
        if code == AluOp.LSH:
            amount = str(int(s) & width) if is_imm else f"({s} & {width})"
            return [f"{d} = ({d} << {amount}) & {mask}"]
        if code == AluOp.RSH:
            src = d if wide else f"({d} & M32)"
            return [f"{d} = {src} >> {str(int(s) & width) if is_imm else f'({s} & {width})'}"]
        if code == AluOp.ARSH:
            return [f"{d} = {self.const(S.arsh64 if wide else S.arsh32)}({d}, {s})"]
        if wide and code in (AluOp.OR, AluOp.AND, AluOp.XOR):  # or/and/xor of two 64-bit values stay in range
            return [f"{d} = {_ALU_EXPR[code].format(d=d, s=s)}"]
        return [f"{d} = {_ALU_EXPR[code].format(d=d, s=s)} & {mask}"]

    def divide(self, insn: Insn, pc: int, d: str, s: str, wide: bool) -> list[str]:
        """Division and modulo: unsigned ones inline (RFC: x/0 = 0, x%0 = x), signed ones via semantics."""
        code = AluOp(insn.opcode >> 4)
        out = [f"if not {s}: raise m.divide_fault({pc})"] if self.m.div_by_zero == "fault" else []
        if insn.off:  # sdiv / smod
            fn = S.DIVISION[(insn.cls, code, 1)]
            return [*out, f"{d} = {self.const(fn)}({d}, {s})"]
        a = d if wide else f"({d} & M32)"
        op = "//" if code == AluOp.DIV else "%"
        zero = "0" if code == AluOp.DIV else a
        if s.isdigit():
            return [*out, f"{d} = {a} {op} {s}" if int(s) else f"{d} = {zero}"]
        return [*out, f"{d} = {a} {op} {s} if {s} else {zero}"]

    def address(self, reg: int, off: int) -> str:
        if reg == 10:  # r10 sits inside the stack region: no wrap-around possible
            return f"r10 - {-off}" if off < 0 else f"r10 + {off}"
        return f"(r{reg} + {off}) & M64" if off else f"r{reg}"

    def load(self, insn: Insn, pc: int) -> list[str]:
        size = isa.SIZE_BYTES[insn.opcode & isa.SIZE_MASK]
        region = "S" if insn.src == 10 else "I"
        unpack = self.const(UNPACK[size])
        d = f"r{insn.dst}"
        lines = [
            f"a = {self.address(insn.src, insn.off)}",
            f"if {region}L <= a <= {region}H{size}: {d} = {unpack}({region}D, a - {region}L)[0]",
        ]
        if region == "I":
            lines.append(f"elif OL <= a <= OH{size}: {d} = {unpack}(OD, a - OL)[0]")
        lines.append(f"else: {d} = mem.load(a, {size}, {pc})")
        if insn.opcode & isa.MODE_MASK == isa.MODE_MEMSX:
            bit = 1 << (size * 8 - 1)
            lines.append(f"{d} = (({d} ^ {bit}) - {bit}) & M64")
        return lines

    def store(self, insn: Insn, pc: int) -> list[str]:
        size = isa.SIZE_BYTES[insn.opcode & isa.SIZE_MASK]
        region = "S" if insn.dst == 10 else "I"
        pack = self.const(PACK[size])
        mask = (1 << (size * 8)) - 1
        if insn.cls == isa.STX:
            value = f"r{insn.src}" if size == 8 else f"r{insn.src} & {mask}"
        else:
            value = str(insn.imm & mask)
        lines = [
            f"a = {self.address(insn.dst, insn.off)}",
            f"if {region}L <= a <= {region}H{size}: {pack}({region}D, a - {region}L, {value})",
        ]
        if region == "I":
            lines.append(f"elif OL <= a <= OH{size}: {pack}(OD, a - OL, {value})")
        return [*lines, f"else: mem.store(a, {size}, {value}, {pc})"]

    def generic(self, insn: Insn, pc: int) -> list[str]:
        """Atomics: through the interpreter's code with registers synced."""
        size = isa.SIZE_BYTES[insn.opcode & isa.SIZE_MASK]
        return [
            f"R[:] = [{_REGS}]",
            f"{self.const(atomic)}({self.const(insn)}, state, {self.address(insn.dst, insn.off)}, "
            f"{size}, {pc})",
            f"{_REGS} = R",
        ]

    def condition(self, insn: Insn) -> str:
        code, wide = JmpOp(insn.opcode >> 4), insn.cls == isa.JMP
        d = f"r{insn.dst}" if wide else f"(r{insn.dst} & M32)"
        if insn.opcode & isa.SRC_X:
            s = f"r{insn.src}" if wide else f"(r{insn.src} & M32)"
        else:
            s = str(insn.imm & (M64 if wide else M32))
        if code == JmpOp.JSET:
            return f"{d} & {s}"
        if code in _SIGNED:
            bias = "SB64" if wide else "SB32"
            s = f"({s} ^ {bias})" if not s.isdigit() else str(int(s) ^ (SB64 if wide else SB32))
            d = f"({d} ^ {bias})"
        return f"{d} {_CMP[code]} {s}"

    # -- blocks -------------------------------------------------------------------------------------

    def block(self, start: int, end: int) -> list[str]:
        """Python lines for the block [start, end); ends with ``continue`` or ``return``."""
        body: list[str] = []
        count = 0
        pc = start
        term: list[str] | None = None
        self_loop_cond: str | None = None
        while pc < end:
            insn = self.insns[pc]
            assert insn is not None
            count += 1
            cls = insn.cls
            if cls in (isa.ALU, isa.ALU64):
                body += self.alu(insn, pc)
            elif insn.opcode == isa.LDDW:
                body.append(f"r{insn.dst} = {insn.imm}")
            elif cls == isa.LDX:
                body += self.load(insn, pc)
            elif cls == isa.ST or (cls == isa.STX and insn.opcode & isa.MODE_MASK == isa.MODE_MEM):
                body += self.store(insn, pc)
            elif cls == isa.STX:
                body += self.generic(insn, pc)
            else:
                term, self_loop_cond = self.terminator(insn, pc, start)
                pc += 1
                break
            pc += insn.slots
        if term is None:
            term = [f"pc = {pc}", "continue"]
        check = [f"if n > {self.m_budget_name} - {count}: pc = {start}; return", f"n += {count}"]
        if self_loop_cond is not None:
            loop = ["while True:"] + ["    " + x for x in check + body]
            loop += [f"    if not ({self_loop_cond}): break"]
            return loop + term
        return check + body + term

    m_budget_name = "budget"

    def terminator(self, insn: Insn, pc: int, start: int) -> tuple[list[str], str | None]:
        op = insn.opcode
        if op == isa.OP_EXIT:
            return [
                "if frames:",
                "    pc, r6, r7, r8, r9, r10 = frames.pop()",
                "    continue",
                "state.done = True",
                "return",
            ], None
        if op == isa.OP_JA or op == isa.OP_JA32:
            return [f"pc = {branch_target(pc, insn)}", "continue"], None
        if op == isa.OP_CALL and insn.src == isa.CALL_LOCAL:
            return [
                f"R[:] = [{_REGS}]",
                f"m.push_frame(state, {pc + 1}, {pc})",
                "r10 = R[10]",
                f"pc = {branch_target(pc, insn)}",
                "continue",
            ], None
        if op in (isa.OP_CALL, isa.OP_CALLX):
            index = str(insn.imm) if op == isa.OP_CALL else f"r{insn.dst}"
            lines = [f"R[:] = [{_REGS}]"]
            if op == isa.OP_CALLX:
                lines.append(
                    f"if m.helpers.get({index}) is None: raise {self.const(HelperFault)}({pc}, "
                    f"'callx at pc {pc}: r{insn.dst} = %d is not a registered helper' % {index})"
                )
            lines += [
                f"stop = m.call_helper(state, {index}, {pc})",
                "r0 = R[0]",
                f"if stop: pc = {pc}; state.done = True; return",
                f"pc = {pc + 1}",
                "continue",
            ]
            return lines, None
        target = branch_target(pc, insn)
        cond = self.condition(insn)
        if target == start:
            return [f"pc = {pc + 1}", "continue"], cond
        return [f"pc = {target} if {cond} else {pc + 1}", "continue"], None

    def tree(self, blocks: list[tuple[int, int]], indent: str) -> None:
        if len(blocks) == 1:
            for line in self.block(*blocks[0]):
                self.lines.append(indent + line)
            return
        mid = len(blocks) // 2
        self.lines.append(f"{indent}if pc < {blocks[mid][0]}:")
        self.tree(blocks[:mid], indent + "    ")
        self.lines.append(f"{indent}else:")
        self.tree(blocks[mid:], indent + "    ")

    def source(self) -> str:
        leaders = _leaders(self.m)
        ends = [*leaders[1:], len(self.insns)]
        blocks = list(zip(leaders, ends, strict=True))
        head = [
            "def run(state, budget):",
            "    R = state.regs; mem = state.mem; frames = state.frames",
            f"    {_REGS} = R",
            "    pc = state.pc; n = state.count",
            "    sreg = mem.region('stack'); ireg = mem.region('input')",
            "    SD = sreg.data; SL = sreg.base",
            "    ID = ireg.data if ireg is not None else bytearray()",
            "    IL = ireg.base if ireg is not None else 1",
            "    oreg = mem.region('output')",
            "    OD = oreg.data if oreg is not None else bytearray()",
            "    OL = oreg.base if oreg is not None else 1",
        ]
        for size in (1, 2, 4, 8):
            head.append(
                f"    SH{size} = SL + len(SD) - {size}; IH{size} = IL + len(ID) - {size}; "
                f"OH{size} = OL + len(OD) - {size}"
            )
        head += ["    try:", "        while True:"]
        self.lines = head
        self.tree(blocks, " " * 12)
        self.lines += [
            "    finally:",
            f"        R[:] = [{_REGS}]",
            "        state.pc = pc; state.count = n",
            "        state.frames = frames",
        ]
        return "\n".join(self.lines) + "\n"


def compile_program(m: Machine) -> Callable[[State, int], None]:
    """Translate ``m``'s program; the returned ``run(state, budget)`` leaves ``state.done`` set at exit."""
    gen = _Gen(m)
    src = gen.source()
    namespace: dict[str, object] = {"M64": M64, "M32": M32, "SB64": SB64, "SB32": SB32, "m": m, **gen.consts}
    exec(compile(src, "<ebpf-fast>", "exec"), namespace)
    run = namespace["run"]
    run.source = src  # type: ignore[attr-defined]
    return run  # type: ignore[return-value]
