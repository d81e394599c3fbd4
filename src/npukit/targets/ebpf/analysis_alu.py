"""The verifier's transfer function for ALU and ALU64 instructions (``analysis.py`` drives it).

Constants fold through the interpreter's own arithmetic (`semantics.alu_value`), so the verifier and
the engines agree bit for bit; other values go through the abstract operations of ``absval``. Pointer
arithmetic is limited to what keeps a pointer meaningful: pointer ± scalar (64-bit) and the difference
of two pointers into the same region; anything else on a pointer is a finding.
"""

from __future__ import annotations

from typing import Any

from npukit.targets.ebpf import absval as V
from npukit.targets.ebpf import isa
from npukit.targets.ebpf import semantics as S
from npukit.targets.ebpf.absstate import Pointer, State, Value
from npukit.targets.ebpf.absval import Scalar
from npukit.targets.ebpf.isa import AluOp, Insn


def alu_result(az: Any, st: State, insn: Insn, pc: int) -> Value:
    """The abstract value ``insn`` writes to its destination register (``az``: the analyzer)."""
    code, wide = AluOp(insn.opcode >> 4), insn.cls == isa.ALU64
    if code == AluOp.END:
        return _byte_swap(az, st, insn, pc)
    if code == AluOp.NEG:
        d = az.scalar(st, insn.dst, pc, "negation")
        if d.const is not None:
            return V.const(-d.const & (V.U64 if wide else V.U32))
        return V.unknown(64 if wide else 32)
    sv = az.read(st, insn.src, pc) if insn.opcode & isa.SRC_X else V.const(insn.imm)
    if code == AluOp.MOV:
        return _move(az, st, insn, pc, sv, wide)
    d = az.read(st, insn.dst, pc)
    if isinstance(d, Pointer) or isinstance(sv, Pointer):
        return _pointer_arithmetic(az, insn, pc, code, wide, d, sv)
    if code in (AluOp.DIV, AluOp.MOD) and az.opts.profile == "alkali-fork":
        divisor = sv if wide else V.truncate32(sv)
        if divisor.umin == 0:
            az.error(pc, f"division by a value that may be 0 ({divisor.describe()}): a fault on the fork")
    if d.const is not None and sv.const is not None:
        return V.const(S.alu_value(insn.cls, code, insn.off, d.const, sv.const))
    if wide:
        return scalar_op(code, insn.off, d, sv, 63)
    return V.truncate32(scalar_op(code, insn.off, V.truncate32(d), V.truncate32(sv), 31))


# the operations whose abstract result needs nothing but the two operands
_BINARY = {AluOp.ADD: V.add, AluOp.SUB: V.sub, AluOp.MUL: V.mul,
           AluOp.AND: V.bit_and, AluOp.OR: V.bit_or, AluOp.XOR: V.bit_xor}


def scalar_op(code: AluOp, off: int, a: Scalar, b: Scalar, width_mask: int) -> Scalar:
    """``a code b`` on values of 64 bits (``width_mask`` 63) or zero-extended 32 bits (31)."""
    exact = _BINARY.get(code)
    if exact is not None:
        return exact(a, b)
    shift = None if b.const is None else b.const & width_mask
    if code in (AluOp.DIV, AluOp.MOD):
        if off:  # signed
            return V.unknown(64 if width_mask == 63 else 32)
        return V.udiv(a, b) if code == AluOp.DIV else V.umod(a, b)
    if code == AluOp.LSH:
        return Scalar() if shift is None else V.lsh(a, shift)
    if code == AluOp.RSH:
        return V.with_bounds(Scalar(), umax=a.umax) or Scalar() if shift is None else V.rsh(a, shift)
    if code == AluOp.ARSH:
        if width_mask == 31:  # 32-bit arithmetic shift: exact only when bit 31 is known clear
            return V.rsh(a, shift) if shift is not None and a.umax < 1 << 31 else V.unknown(32)
        return Scalar() if shift is None else V.arsh(a, shift)
    raise AssertionError(code)


def _byte_swap(az: Any, st: State, insn: Insn, pc: int) -> Value:
    d = az.scalar(st, insn.dst, pc, "byte swap")
    if d.const is not None:
        return V.const(S.ENDIAN[insn.opcode](d.const, insn.imm))
    if insn.opcode == isa.OP_LE and d.umax < 1 << insn.imm:
        return d  # the value already fits: a no-op on this little-endian machine
    return V.unknown(insn.imm)


def _move(az: Any, st: State, insn: Insn, pc: int, sv: Value, wide: bool) -> Value:
    if insn.off:  # movsx
        s = sv if isinstance(sv, Scalar) else Scalar()
        if isinstance(sv, Pointer):
            az.error(pc, f"sign extension of r{insn.src}, a pointer to {sv.region}")
        mask = V.U64 if wide else V.U32
        if s.const is not None:
            return V.const(S.sext(s.const, insn.off) & mask)
        if s.umax < 1 << (insn.off - 1):
            return V.with_bounds(Scalar(), umin=s.umin, umax=s.umax) or Scalar()
        return V.unknown(insn.off, signed_load=True) if wide else V.unknown(32)
    if not wide:
        if isinstance(sv, Pointer):
            return V.unknown(32)  # the low half of an address is a plain number
        return V.truncate32(sv)  # type: ignore[arg-type]
    if not insn.opcode & isa.SRC_X:
        return sv
    return _linked_copy(az, st, insn.src, pc, sv)


def _linked_copy(az: Any, st: State, src: int, pc: int, sv: Value) -> Value:
    """A register copy: both registers get the same link, so a later compare on one refines both."""
    s = sv.off if isinstance(sv, Pointer) else sv
    if not isinstance(s, Scalar) or s.link is not None:
        return sv
    s = az.fresh(st, pc, s)
    linked = Pointer(sv.region, s, sv.frame) if isinstance(sv, Pointer) else s
    st.top.regs[src] = linked
    return linked


def _pointer_arithmetic(az: Any, insn: Insn, pc: int, code: AluOp, wide: bool, d: Value, s: Value) -> Value:
    name = code.name.lower()
    if not wide:
        az.error(pc, f"32-bit {name} on a pointer")
        return V.unknown(32)
    if code == AluOp.ADD:
        if isinstance(d, Pointer) and isinstance(s, Scalar):
            return Pointer(d.region, V.add(d.off, s), d.frame)
        if isinstance(s, Pointer) and isinstance(d, Scalar):
            return Pointer(s.region, V.add(s.off, d), s.frame)
        az.error(pc, "adds two pointers")
        return Scalar()
    if code == AluOp.SUB and isinstance(d, Pointer):
        if isinstance(s, Scalar):
            return Pointer(d.region, V.sub(d.off, s), d.frame)
        if isinstance(s, Pointer) and (s.region, s.frame) == (d.region, d.frame):
            return V.sub(d.off.unlinked(), s.off.unlinked())
        az.error(pc, "subtracts pointers into different regions")
        return Scalar()
    az.error(pc, f"{name} on a pointer (only add and sub keep a pointer)")
    return Scalar()
