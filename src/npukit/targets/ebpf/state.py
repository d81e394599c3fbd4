"""A run's machine state and the atomic read-modify-write, shared by the reference interpreter (`vm`)
and the translated fast path (`fast`): both continue the same `State`, so it lives below both."""

from __future__ import annotations

from dataclasses import dataclass, field

from npukit.targets.ebpf import isa
from npukit.targets.ebpf import semantics as S
from npukit.targets.ebpf.helpers import HelperContext
from npukit.targets.ebpf.isa import AtomicOp, Insn
from npukit.targets.ebpf.memory import Memory

M64, M32 = S.M64, S.M32


@dataclass
class State:
    """Everything an engine needs to continue a run (the fast path hands it to the interpreter)."""

    regs: list[int]
    pc: int
    mem: Memory
    ctx: HelperContext
    frames: list[tuple[int, int, int, int, int, int]] = field(default_factory=list)  # ret, r6-r9, r10
    count: int = 0
    done: bool = False


def atomic(insn: Insn, state: State, addr: int, size: int, pc: int) -> None:
    regs, mem = state.regs, state.mem
    mask = M64 if size == 8 else M32
    old = mem.load(addr, size, pc)
    src = regs[insn.src] & mask
    kind = insn.imm
    if kind == AtomicOp.CMPXCHG:  # compare with r0, r0 gets the old value
        if old == regs[0] & mask:
            mem.store(addr, size, src, pc)
        regs[0] = old
        return
    if kind == AtomicOp.XCHG:
        new = src
    else:
        new = S.BINARY64[isa.ATOMIC_ALU[AtomicOp(kind & ~isa.ATOMIC_FETCH)]](old, src) & mask
    mem.store(addr, size, new, pc)
    if kind & isa.ATOMIC_FETCH:
        regs[insn.src] = old
