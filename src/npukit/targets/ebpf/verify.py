"""The static check at load time: what must hold before a single instruction runs.

Encodings were validated by `isa.decode`; here: every jump and local call lands on an instruction
(inside the program, not on the second slot of an ``lddw``), the last instruction cannot fall through
off the end, nothing writes r10 (the read-only frame pointer), helper calls name registered helpers,
and call types the VM does not implement (BTF-id calls) are refused.
"""

from __future__ import annotations

from npukit.targets.ebpf import isa
from npukit.targets.ebpf.asm import branch_target, format_insn
from npukit.targets.ebpf.errors import VerifyError
from npukit.targets.ebpf.helpers import HelperRegistry
from npukit.targets.ebpf.isa import Insn, Program

FP = 10


def writes_register(insn: Insn) -> tuple[int, ...]:
    """Registers an instruction writes (helper calls clobber r0 only in this VM)."""
    cls = insn.cls
    if cls in (isa.ALU, isa.ALU64, isa.LDX) or insn.opcode == isa.LDDW:
        return (insn.dst,)
    if cls == isa.STX and insn.opcode & isa.MODE_MASK == isa.MODE_ATOMIC:
        if insn.imm == isa.AtomicOp.CMPXCHG:
            return (0,)
        return (insn.src,) if insn.imm & isa.ATOMIC_FETCH else ()
    if insn.opcode in (isa.OP_CALL, isa.OP_CALLX):
        return (0,)
    return ()


def falls_through(insn: Insn) -> bool:
    return insn.opcode not in (isa.OP_EXIT, isa.OP_JA, isa.OP_JA32)


def fork_gap(insn: Insn) -> str | None:
    """What the Alkali uBPF fork (antmicro/ubpf@61725ce) cannot run in ``insn``, or None."""
    cls, op = insn.cls, insn.opcode
    if cls == isa.JMP32:
        return "JMP32 instructions (clang -mcpu=v3)"
    if op == isa.OP_CALL and insn.src == isa.CALL_LOCAL:
        return "BPF-to-BPF calls"
    if op == isa.OP_CALLX:
        return "callx"
    if cls == isa.STX and op & isa.MODE_MASK == isa.MODE_ATOMIC:
        return "atomic operations"
    if cls == isa.LDX and op & isa.MODE_MASK == isa.MODE_MEMSX:
        return "sign-extending loads (v4)"
    if cls in (isa.ALU, isa.ALU64) and insn.off:
        return "signed division/modulo and movsx (v4)"
    if op == isa.OP_BSWAP:
        return "bswap (v4)"
    return None


def structural_findings(
    program: Program, helpers: HelperRegistry | None = None, entry: int = 0, profile: str = "rfc9669"
) -> list[tuple[int, str]]:
    """Every (pc, reason) for which the program may not run, before any path is analysed. ``profile``
    ``alkali-fork`` also refuses what the Alkali firmware's uBPF fork does not implement."""
    insns = program.insns
    n = len(insns)
    if not 0 <= entry < n or insns[entry] is None:
        return [(max(entry, 0), f"entry point {entry} is not an instruction")]
    out: list[tuple[int, str]] = []
    last_pc = max(pc for pc, i in enumerate(insns) if i is not None)
    for pc, insn in enumerate(insns):
        if insn is None:
            continue
        where = f"pc {pc} ({format_insn(insn)})"
        target = branch_target(pc, insn)
        if target is not None and not (0 <= target < n and insns[target] is not None):
            out.append((pc, f"{where}: jump target {target} is outside the program or inside an lddw"))
        if FP in writes_register(insn):
            out.append((pc, f"{where}: writes r10, the read-only frame pointer"))
        if insn.opcode == isa.OP_CALL:
            if insn.src == isa.CALL_BTF:
                out.append((pc, f"{where}: calls by BTF id are not supported"))
            if insn.src == isa.CALL_HELPER and helpers is not None and helpers.get(insn.imm) is None:
                known = ", ".join(f"{i} {name}" for i, name in helpers.names().items()) or "none"
                out.append((pc, f"{where}: unknown helper {insn.imm} (registered: {known})"))
        if profile == "alkali-fork" and (gap := fork_gap(insn)):
            out.append((pc, f"{where}: the Alkali uBPF fork does not implement {gap}"))
        if pc == last_pc and falls_through(insn):
            out.append((pc, f"{where}: the last instruction falls through off the end of the program"))
    return out


def verify(
    program: Program, helpers: HelperRegistry | None = None, entry: int = 0, profile: str = "rfc9669"
) -> None:
    """Raise `VerifyError` with the first structural reason the program may not run (the load check
    every engine applies; ``analysis.analyze`` is the full proof)."""
    found = structural_findings(program, helpers, entry, profile)
    if found:
        raise VerifyError(found[0][1])
