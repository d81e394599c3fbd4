"""LLVM IR for single eBPF instructions (the JIT's emitter; ``jit.py`` lays out blocks and runs it).

Registers live in stack slots (``alloca``) that LLVM's optimiser promotes to SSA values. Every
operation is written in plain IR so it is exact on any host: 32-bit operations truncate, operate and
zero-extend; shift amounts are masked; divisors are replaced by 1 where RFC 9669 defines the result
(x/0 = 0, x%0 = x, INT_MIN/-1 = INT_MIN) so no LLVM division is ever undefined; byte swaps are shifts.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from npukit.targets.ebpf import isa
from npukit.targets.ebpf.isa import AluOp, AtomicOp, Insn, JmpOp
from npukit.targets.ebpf.memory import FRAME_SIZE

I64, I32, I8 = ir.IntType(64), ir.IntType(32), ir.IntType(8)
STATUS_DONE, STATUS_HANDOFF = 0, 1
CTL_PC, CTL_COUNT, CTL_BUDGET, CTL_DEPTH, CTL_FRAMES = 0, 1, 2, 3, 4
FRAME_WORDS = 6
_PREDICATE = {
    JmpOp.JEQ: ("==", False), JmpOp.JNE: ("!=", False),
    JmpOp.JGT: (">", False), JmpOp.JGE: (">=", False), JmpOp.JLT: ("<", False), JmpOp.JLE: ("<=", False),
    JmpOp.JSGT: (">", True), JmpOp.JSGE: (">=", True), JmpOp.JSLT: ("<", True), JmpOp.JSLE: ("<=", True),
}


def _k(ty: ir.IntType, value: int) -> ir.Constant:
    return ir.Constant(ty, value & ((1 << ty.width) - 1))


class Emitter:
    def __init__(self, b: ir.IRBuilder, fn: ir.Function, owner: Any, args: Any) -> None:
        self.b, self.fn, self.owner = b, fn, owner
        self.regs_ptr, self.ctl, self.hosts, self.bases, self.sizes, self.writable = args
        self.blocks: dict[int, ir.Block] = {}
        self.position = (0, 0, 0)  # block start, block length, index of the current instruction
        self.m = owner.m

    # -- state ----------------------------------------------------------------------------------------

    def prologue(self) -> None:
        b = self.b
        self.r = [b.alloca(I64, name=f"r{i}") for i in range(11)]
        self.cnt, self.depth = b.alloca(I64, name="count"), b.alloca(I64, name="depth")
        for i in range(11):
            b.store(b.load(b.gep(self.regs_ptr, [_k(I32, i)])), self.r[i])
        b.store(self.load_ctl(CTL_COUNT), self.cnt)
        b.store(self.load_ctl(CTL_DEPTH), self.depth)
        self.budget = self.load_ctl(CTL_BUDGET)
        self.region = []
        for i in range(len(self.owner.regions)):
            arrays = (self.hosts, self.bases, self.sizes, self.writable)
            self.region.append([b.load(b.gep(arr, [_k(I32, i)])) for arr in arrays])
        self._exit_block()

    def load_ctl(self, index: int, dynamic: ir.Value | None = None) -> ir.Value:
        idx = _k(I64, index) if dynamic is None else self.b.add(dynamic, _k(I64, index))
        return self.b.load(self.b.gep(self.ctl, [idx]))

    def store_ctl(self, index: int, value: ir.Value, dynamic: ir.Value | None = None) -> None:
        idx = _k(I64, index) if dynamic is None else self.b.add(dynamic, _k(I64, index))
        self.b.store(value, self.b.gep(self.ctl, [idx]))

    def get(self, reg: int) -> ir.Value:
        return self.b.load(self.r[reg])

    def set(self, reg: int, value: ir.Value) -> None:
        self.b.store(value, self.r[reg])

    def dispatch(self, pc: ir.Value, targets: dict[int, ir.Block]) -> None:
        bad = self.fn.append_basic_block("bad_pc")
        sw = self.b.switch(pc, bad)
        for p, block in targets.items():
            sw.add_case(_k(I64, p), block)
        self.b.position_at_end(bad)
        self.b.ret(_k(I64, STATUS_HANDOFF))

    def _exit_block(self) -> None:
        """One shared epilogue: every way out branches here with (status, pc, count)."""
        b = self.b
        here = b.block
        self.exit_at = self.fn.append_basic_block("leave")
        b.position_at_end(self.exit_at)
        self.exit_status, self.exit_pc, self.exit_count = b.phi(I64), b.phi(I64), b.phi(I64)
        for i in range(11):
            b.store(self.get(i), b.gep(self.regs_ptr, [_k(I32, i)]))
        self.store_ctl(CTL_PC, self.exit_pc)
        self.store_ctl(CTL_COUNT, self.exit_count)
        self.store_ctl(CTL_DEPTH, b.load(self.depth))
        b.ret(self.exit_status)
        b.position_at_end(here)

    def leave(self, status: int, pc: int | ir.Value, count: ir.Value | None = None) -> None:
        """Leave with registers, pc, count and depth written back; return ``status``."""
        b = self.b
        self.exit_status.add_incoming(_k(I64, status), b.block)
        self.exit_pc.add_incoming(_k(I64, pc) if isinstance(pc, int) else pc, b.block)
        self.exit_count.add_incoming(count if count is not None else b.load(self.cnt), b.block)
        b.branch(self.exit_at)

    def guard(self, ok: ir.Value, pc: int) -> None:
        """Continue when ``ok``; else hand off to the interpreter before the instruction at ``pc``."""
        _, n, i = self.position
        fail = self.fn.append_basic_block(f"handoff{pc}")
        cont = self.fn.append_basic_block(f"cont{pc}")
        self.b.cbranch(ok, cont, fail)
        self.b.position_at_end(fail)
        self.leave(STATUS_HANDOFF, pc, self.b.sub(self.b.load(self.cnt), _k(I64, n - i)))
        self.b.position_at_end(cont)

    def budget_check(self, start: int, n: int) -> None:
        b = self.b
        before = b.load(self.cnt)
        after = b.add(before, _k(I64, n))
        fail = self.fn.append_basic_block(f"budget{start}")
        cont = self.fn.append_basic_block(f"run{start}")
        b.cbranch(b.icmp_unsigned(">", after, self.budget), fail, cont)
        b.position_at_end(fail)
        self.leave(STATUS_HANDOFF, start, before)
        b.position_at_end(cont)
        b.store(after, self.cnt)

    def goto(self, pc: int) -> None:
        self.b.branch(self.blocks[pc])

    # -- ALU ------------------------------------------------------------------------------------------

    def alu(self, insn: Insn, pc: int) -> None:
        b = self.b
        code, wide = AluOp(insn.opcode >> 4), insn.cls == isa.ALU64
        ty = I64 if wide else I32
        d = self.get(insn.dst)
        if code == AluOp.END:
            self.set(insn.dst, self._byte_swap(insn, d))
            return
        a = d if wide else b.trunc(d, I32)
        if insn.opcode & isa.SRC_X:
            s = self.get(insn.src) if wide else b.trunc(self.get(insn.src), I32)
        else:
            s = _k(ty, insn.imm)
        r = self._binary(code, insn, pc, ty, a, s)
        self.set(insn.dst, r if wide else b.zext(r, I64))

    def _binary(self, code: AluOp, insn: Insn, pc: int, ty: ir.IntType, a: ir.Value, s: ir.Value) -> ir.Value:
        b, w = self.b, ty.width
        simple = {AluOp.ADD: b.add, AluOp.SUB: b.sub, AluOp.MUL: b.mul, AluOp.OR: b.or_, AluOp.AND: b.and_,
                  AluOp.XOR: b.xor}
        if code in simple:
            return simple[code](a, s)
        if code == AluOp.NEG:
            return b.sub(_k(ty, 0), a)
        if code == AluOp.MOV:
            if insn.off:
                return b.sext(b.trunc(s, ir.IntType(insn.off)), ty)
            return s
        if code in (AluOp.LSH, AluOp.RSH, AluOp.ARSH):
            amount = b.and_(s, _k(ty, w - 1))
            return {AluOp.LSH: b.shl, AluOp.RSH: b.lshr, AluOp.ARSH: b.ashr}[code](a, amount)
        return self._divide(code, insn, pc, ty, a, s)

    def _divide(self, code: AluOp, insn: Insn, pc: int, ty: ir.IntType, a: ir.Value, s: ir.Value) -> ir.Value:
        b = self.b
        zero = b.icmp_unsigned("==", s, _k(ty, 0))
        if self.m.div_by_zero == "fault":
            self.guard(b.not_(zero), pc)
        if insn.off:  # signed: INT_MIN / -1 would trap, and x / 1 gives the RFC's answer there
            overflow = b.and_(
                b.icmp_unsigned("==", a, _k(ty, 1 << (ty.width - 1))), b.icmp_unsigned("==", s, _k(ty, -1))
            )
            safe = b.select(b.or_(zero, overflow), _k(ty, 1), s)
            q = b.sdiv(a, safe) if code == AluOp.DIV else b.srem(a, safe)
        else:
            safe = b.select(zero, _k(ty, 1), s)
            q = b.udiv(a, safe) if code == AluOp.DIV else b.urem(a, safe)
        return b.select(zero, _k(ty, 0) if code == AluOp.DIV else a, q)

    def _byte_swap(self, insn: Insn, d: ir.Value) -> ir.Value:
        b, width = self.b, insn.imm
        if insn.opcode == isa.OP_LE:
            return d if width == 64 else b.and_(d, _k(I64, (1 << width) - 1))
        out = _k(I64, 0)
        for k in range(width // 8):
            byte = b.and_(b.lshr(d, _k(I64, 8 * k)), _k(I64, 0xFF))
            out = b.or_(out, b.shl(byte, _k(I64, 8 * (width // 8 - 1 - k))))
        return out

    # -- memory ---------------------------------------------------------------------------------------

    def _address(self, reg: int, off: int, size: int, pc: int, proven: int | None, store: bool) -> ir.Value:
        """The host pointer of ``reg + off``; checked against every region unless the verifier proved it."""
        b = self.b
        addr = b.add(self.get(reg), _k(I64, off))
        if proven is not None:
            host, base, _, _ = self.region[proven]
            return b.add(host, b.sub(addr, base))
        found = b.call(self._translate(), [addr, _k(I64, size), _k(I64, int(store)), self.hosts, self.bases,
                                           self.sizes, self.writable, _k(I64, len(self.region))])
        self.guard(b.icmp_unsigned("!=", found, _k(I64, 0)), pc)
        return found

    def _translate(self) -> ir.Function:
        """``translate(addr, size, store, hosts, bases, sizes, writable, n)``: the host address of a
        checked access, 0 when no region holds it. One out-of-line function per module keeps the code
        of unproven accesses small (and LLVM's compile time with it)."""
        module = self.fn.module
        if "translate" in module.globals:
            return module.globals["translate"]
        ptr = I64.as_pointer()
        fn = ir.Function(module, ir.FunctionType(I64, [I64, I64, I64, ptr, ptr, ptr, ptr, I64]), "translate")
        fn.attributes.add("noinline")
        fn.linkage = "internal"
        addr, size, store, hosts, bases, sizes, writable, n = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        names = ("head", "body", "found", "next", "miss")
        head, body, found, nxt, miss = (fn.append_basic_block(x) for x in names)
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64)
        i.add_incoming(_k(I64, 0), fn.entry_basic_block)
        b.cbranch(b.icmp_unsigned("<", i, n), body, miss)
        b.position_at_end(body)
        rsize, base = b.load(b.gep(sizes, [i])), b.load(b.gep(bases, [i]))
        rel = b.sub(addr, base)
        ok = b.and_(b.icmp_unsigned(">=", rsize, size), b.icmp_unsigned("<=", rel, b.sub(rsize, size)))
        ok = b.and_(ok, b.or_(b.icmp_unsigned("==", store, _k(I64, 0)),
                              b.icmp_unsigned("!=", b.load(b.gep(writable, [i])), _k(I64, 0))))
        b.cbranch(ok, found, nxt)
        b.position_at_end(found)
        b.ret(b.add(b.load(b.gep(hosts, [i])), rel))
        b.position_at_end(nxt)
        i.add_incoming(b.add(i, _k(I64, 1)), nxt)
        b.branch(head)
        b.position_at_end(miss)
        b.ret(_k(I64, 0))
        return fn

    def _pointer(self, host: ir.Value, size: int) -> ir.Value:
        return self.b.inttoptr(host, ir.IntType(size * 8).as_pointer())

    def load(self, insn: Insn, pc: int, proven: int | None) -> None:
        size = isa.SIZE_BYTES[insn.opcode & isa.SIZE_MASK]
        p = self._pointer(self._address(insn.src, insn.off, size, pc, proven, False), size)
        v = self.b.load(p, align=1)
        if size == 8:
            self.set(insn.dst, v)
        elif insn.opcode & isa.MODE_MASK == isa.MODE_MEMSX:
            self.set(insn.dst, self.b.sext(v, I64))
        else:
            self.set(insn.dst, self.b.zext(v, I64))

    def store(self, insn: Insn, pc: int, proven: int | None) -> None:
        size = isa.SIZE_BYTES[insn.opcode & isa.SIZE_MASK]
        ty = ir.IntType(size * 8)
        if insn.cls == isa.ST:
            value = _k(ty, insn.imm)
        else:
            value = self.get(insn.src) if size == 8 else self.b.trunc(self.get(insn.src), ty)
        p = self._pointer(self._address(insn.dst, insn.off, size, pc, proven, True), size)
        self.b.store(value, p, align=1)

    def atomic(self, insn: Insn, pc: int, proven: int | None) -> None:
        b = self.b
        size = isa.SIZE_BYTES[insn.opcode & isa.SIZE_MASK]
        ty = ir.IntType(size * 8)
        p = self._pointer(self._address(insn.dst, insn.off, size, pc, proven, True), size)
        old = b.load(p, align=1)
        src = self.get(insn.src) if size == 8 else b.trunc(self.get(insn.src), ty)
        kind = insn.imm
        if kind == AtomicOp.CMPXCHG:
            r0 = self.get(0) if size == 8 else b.trunc(self.get(0), ty)
            b.store(b.select(b.icmp_unsigned("==", old, r0), src, old), p, align=1)
            self.set(0, old if size == 8 else b.zext(old, I64))
            return
        alu = isa.ATOMIC_ALU.get(AtomicOp(kind & ~isa.ATOMIC_FETCH)) if kind != AtomicOp.XCHG else None
        ops = {AluOp.ADD: b.add, AluOp.OR: b.or_, AluOp.AND: b.and_, AluOp.XOR: b.xor}
        new = src if alu is None else ops[alu](old, src)
        b.store(new, p, align=1)
        if kind & isa.ATOMIC_FETCH:
            self.set(insn.src, old if size == 8 else b.zext(old, I64))

    # -- control flow ---------------------------------------------------------------------------------

    def branch(self, insn: Insn, pc: int, op: JmpOp, target: int) -> None:
        b = self.b
        wide = insn.cls == isa.JMP
        a = self.get(insn.dst)
        s = self.get(insn.src) if insn.opcode & isa.SRC_X else _k(I64, insn.imm)
        if not wide:
            a, s = b.trunc(a, I32), b.trunc(s, I32)
        if op == JmpOp.JSET:
            cond = b.icmp_unsigned("!=", b.and_(a, s), _k(a.type, 0))
        else:
            pred, signed = _PREDICATE[op]
            cond = (b.icmp_signed if signed else b.icmp_unsigned)(pred, a, s)
        b.cbranch(cond, self.blocks[target], self.blocks[pc + 1])

    def local_call(self, pc: int, target: int, max_depth: int) -> None:
        b = self.b
        depth = b.load(self.depth)
        self.guard(b.icmp_unsigned("<", b.add(depth, _k(I64, 1)), _k(I64, max_depth)), pc)
        base = b.mul(depth, _k(I64, FRAME_WORDS))
        values = [_k(I64, pc + 1), *(self.get(r) for r in (6, 7, 8, 9, 10))]
        for k, v in enumerate(values):
            self.store_ctl(CTL_FRAMES + k, v, base)
        b.store(b.add(depth, _k(I64, 1)), self.depth)
        self.set(10, b.sub(self.get(10), _k(I64, FRAME_SIZE)))
        self.goto(target)

    def exit(self, return_points: list[int]) -> None:
        b = self.b
        depth = b.load(self.depth)
        done = self.fn.append_basic_block("done")
        pop = self.fn.append_basic_block("pop")
        b.cbranch(b.icmp_unsigned("==", depth, _k(I64, 0)), done, pop)
        b.position_at_end(done)
        self.leave(STATUS_DONE, self.position[0])
        b.position_at_end(pop)
        depth = b.sub(depth, _k(I64, 1))
        b.store(depth, self.depth)
        base = b.mul(depth, _k(I64, FRAME_WORDS))
        ret = self.load_ctl(CTL_FRAMES, base)
        for k, r in enumerate((6, 7, 8, 9, 10), start=1):
            self.set(r, self.load_ctl(CTL_FRAMES + k, base))
        self.dispatch(ret, {p: self.blocks[p] for p in return_points if p in self.blocks})
