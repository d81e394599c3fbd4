"""The eBPF virtual machine: entry ABIs, stack and call frames, and the reference interpreter.

`Machine` holds a verified program, its helper registry and the data regions of an ELF object;
`Machine.run` maps the entry buffers, sets up registers for the chosen ABI and executes with the
reference interpreter (`interpret`, one instruction at a time, readable) or the translated fast
path (``fast.py``, same semantics). ABIs: ``ubpf`` — r1 = input, r2 = input length; ``alkali`` (the
antmicro fork) — r1 = input, r2 = output, r3 = input length. r10 is the top of a 512-byte frame; each
BPF-to-BPF call gets a fresh frame (r6-r9 and r10 restored on return), up to ``max_call_depth``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from npukit.errors import ConfigError
from npukit.targets.ebpf import isa
from npukit.targets.ebpf import semantics as S
from npukit.targets.ebpf.asm import format_insn
from npukit.targets.ebpf.errors import BudgetExceeded, CallDepthExceeded, DivisionFault, HelperFault
from npukit.targets.ebpf.helpers import HelperContext, HelperRegistry
from npukit.targets.ebpf.isa import AluOp, Insn, JmpOp, Program
from npukit.targets.ebpf.memory import FRAME_SIZE, INPUT_BASE, OUTPUT_BASE, STACK_BASE, Memory, Region
from npukit.targets.ebpf.state import State, atomic
from npukit.targets.ebpf.verify import verify

M64, M32 = S.M64, S.M32
ABIS = ("ubpf", "alkali")
PROFILES = ("rfc9669", "alkali-fork")
DEFAULT_BUDGET = 50_000_000
DEFAULT_CALL_DEPTH = 8
ENGINES = ("jit", "fast", "interp")


def default_engine() -> str:
    """``jit`` where llvmlite loads, else ``fast``."""
    import importlib.util

    return "jit" if importlib.util.find_spec("llvmlite") is not None else "fast"


@dataclass
class RunResult:
    r0: int
    output: bytes
    printed: list[str]
    instructions: int
    registers: list[int]
    calls: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "r0": self.r0,
            "output": self.output.hex(),
            "printed": self.printed,
            "instructions": self.instructions,
        }


class Machine:
    def __init__(
        self,
        program: Program,
        helpers: HelperRegistry,
        sections: list[Region] | None = None,
        *,
        entry: int = 0,
        max_call_depth: int = DEFAULT_CALL_DEPTH,
        div_by_zero: str | None = None,
        profile: str = "rfc9669",
    ) -> None:
        if profile not in PROFILES:
            raise ConfigError(f"unknown profile {profile!r} (known: {', '.join(PROFILES)})")
        div_by_zero = div_by_zero or ("fault" if profile == "alkali-fork" else "rfc")
        if div_by_zero not in ("rfc", "fault"):
            raise ConfigError(f"div_by_zero must be 'rfc' or 'fault', not {div_by_zero!r}")
        verify(program, helpers, entry, profile)
        self.program, self.helpers, self.entry = program, helpers, entry
        self.sections = list(sections or [])
        self.max_call_depth = max_call_depth
        self.div_by_zero = div_by_zero
        self.profile = profile
        self._fast = None
        self._jits: dict[tuple[str, int], object] = {}

    def describe(self, pc: int) -> str:
        insns = self.program.insns
        return format_insn(insns[pc]) if 0 <= pc < len(insns) and insns[pc] is not None else "?"

    def start(self, input: bytes = b"", output_size: int = 0, abi: str = "ubpf") -> State:
        if abi not in ABIS:
            raise ConfigError(f"unknown ABI {abi!r} (known: {', '.join(ABIS)})")
        stack = Region("stack", STACK_BASE, bytearray(FRAME_SIZE * self.max_call_depth))
        regions = [
            stack,
            Region("input", INPUT_BASE, bytearray(input)),
            Region("output", OUTPUT_BASE, bytearray(output_size)),
        ]
        regions += [Region(s.name, s.base, bytearray(s.data), s.writable) for s in self.sections]
        mem = Memory(regions)
        mem.describe_pc = self.describe
        regs = [0] * 11
        regs[1] = INPUT_BASE if input else 0
        if abi == "ubpf":
            regs[2] = len(input)
        else:
            regs[2] = OUTPUT_BASE if output_size else 0
            regs[3] = len(input)
        regs[10] = stack.end
        return State(regs, self.entry, mem, HelperContext(mem))

    def run(
        self,
        input: bytes = b"",
        output_size: int = 0,
        abi: str = "ubpf",
        *,
        budget: int = DEFAULT_BUDGET,
        engine: str = "fast",
    ) -> RunResult:
        state = self.start(input, output_size, abi)
        if engine == "fast":
            if self._fast is None:
                from npukit.targets.ebpf.fast import compile_program

                self._fast = compile_program(self)
            self._fast(state, budget)
        elif engine == "jit":
            self.jit(abi, output_size).run(state, budget)
        elif engine != "interp":
            raise ConfigError(f"unknown engine {engine!r} ({', '.join(ENGINES)})")
        if not state.done:
            interpret(self, state, budget)
        out = state.mem.region("output")
        return RunResult(
            state.regs[0],
            bytes(out.data) if out else b"",
            state.ctx.printed,
            state.count,
            list(state.regs),
            state.ctx.calls,
        )

    def verdict(self, abi: str, output_size: int):
        """The static verifier's verdict for this ABI and output size."""
        from npukit.targets.ebpf.analysis import Options, analyze

        options = Options(abi=abi, output_size=output_size, profile=self.profile, entry=self.entry)
        return analyze(self.program, self.helpers, self.sections, options)

    def jit(self, abi: str, output_size: int, compiled=None):
        """The JIT-compiled program for this ABI and output size (the verifier's proof depends on both);
        ``compiled`` installs one built elsewhere (`jit.compile_many`)."""
        key = (abi, output_size)
        if compiled is not None:
            self._jits[key] = compiled
        if key not in self._jits:
            from npukit.targets.ebpf.jit import JitProgram

            self._jits[key] = JitProgram(self, self.verdict(abi, output_size))
        return self._jits[key]

    # -- pieces shared with the fast path ------------------------------------------------------------

    def call_helper(self, state: State, index: int, pc: int) -> bool:
        """Run helper ``index``; True if it was the unwind helper returning 0 (the program ends)."""
        state.ctx.pc = pc
        r = state.regs
        r[0] = self.helpers.call(state.ctx, index, (r[1], r[2], r[3], r[4], r[5]))
        return index == self.helpers.unwind_index and r[0] == 0

    def push_frame(self, state: State, return_pc: int, pc: int) -> None:
        if len(state.frames) + 1 >= self.max_call_depth:
            raise CallDepthExceeded(pc, f"call depth limit {self.max_call_depth} exceeded at pc {pc}")
        r = state.regs
        state.frames.append((return_pc, r[6], r[7], r[8], r[9], r[10]))
        r[10] -= FRAME_SIZE

    def pop_frame(self, state: State) -> int:
        r = state.regs
        ret, r[6], r[7], r[8], r[9], r[10] = state.frames.pop()
        return ret

    def divide_fault(self, pc: int) -> DivisionFault:
        return DivisionFault(
            pc, f"division by zero at pc {pc} ({self.describe(pc)}) under the Alkali fork's rules"
        )


# --------------------------------------------------------------------------- reference interpreter

def alu(m: Machine, insn: Insn, regs: list[int], pc: int) -> None:
    code, wide = AluOp(insn.opcode >> 4), insn.cls == isa.ALU64
    dst = regs[insn.dst]
    if code == AluOp.END:
        regs[insn.dst] = S.ENDIAN[insn.opcode](dst, insn.imm)
        return
    if code == AluOp.NEG:
        regs[insn.dst] = (-dst) & (M64 if wide else M32)
        return
    src = regs[insn.src] if insn.opcode & isa.SRC_X else insn.imm
    if code in (AluOp.DIV, AluOp.MOD) and m.div_by_zero == "fault" and not src & (M64 if wide else M32):
        raise m.divide_fault(pc)
    regs[insn.dst] = S.alu_value(insn.cls, code, insn.off, dst, src)


def memory_op(m: Machine, insn: Insn, state: State, pc: int) -> None:
    regs, mem, op, cls = state.regs, state.mem, insn.opcode, insn.cls
    size = isa.SIZE_BYTES[op & isa.SIZE_MASK]
    if cls == isa.LDX:
        value = mem.load((regs[insn.src] + insn.off) & M64, size, pc)
        regs[insn.dst] = S.sext(value, size * 8) if op & isa.MODE_MASK == isa.MODE_MEMSX else value
        return
    addr = (regs[insn.dst] + insn.off) & M64
    if cls == isa.ST:
        mem.store(addr, size, insn.imm & M64, pc)
    elif op & isa.MODE_MASK == isa.MODE_MEM:
        mem.store(addr, size, regs[insn.src], pc)
    else:
        atomic(insn, state, addr, size, pc)


def jump(m: Machine, insn: Insn, state: State, pc: int) -> int | None:
    """The next pc after a JMP/JMP32 instruction; None when the program ends."""
    regs, op = state.regs, insn.opcode
    if op == isa.OP_EXIT:
        if not state.frames:
            return None
        return m.pop_frame(state)
    if op == isa.OP_CALL or op == isa.OP_CALLX:
        if op == isa.OP_CALL and insn.src == isa.CALL_LOCAL:
            m.push_frame(state, pc + 1, pc)
            return pc + 1 + insn.imm
        index = regs[insn.dst] if op == isa.OP_CALLX else insn.imm
        if op == isa.OP_CALLX and m.helpers.get(index) is None:
            raise HelperFault(pc, f"callx at pc {pc}: r{insn.dst} = {index} is not a registered helper")
        return None if m.call_helper(state, index, pc) else pc + 1
    if op == isa.OP_JA:
        return pc + 1 + insn.off
    if op == isa.OP_JA32:
        return pc + 1 + insn.imm
    wide = insn.cls == isa.JMP
    a = regs[insn.dst] if wide else regs[insn.dst] & M32
    if op & isa.SRC_X:
        b = regs[insn.src] if wide else regs[insn.src] & M32
    else:
        b = insn.imm & (M64 if wide else M32)
    taken = S.COMPARE[JmpOp(op >> 4)](a, b, S.s64 if wide else S.s32)
    return pc + 1 + insn.off if taken else pc + 1


def interpret(m: Machine, state: State, budget: int) -> None:
    """Run from ``state.pc`` until the program exits; raises a `RuntimeFault` subclass on faults."""
    insns = m.program.insns
    regs = state.regs
    while True:
        pc = state.pc
        if state.count >= budget:
            raise BudgetExceeded(pc, budget)
        insn = insns[pc]
        state.count += 1
        cls = insn.cls
        if cls == isa.ALU or cls == isa.ALU64:
            alu(m, insn, regs, pc)
            state.pc = pc + 1
        elif insn.opcode == isa.LDDW:
            regs[insn.dst] = insn.imm
            state.pc = pc + 2
        elif cls == isa.JMP or cls == isa.JMP32:
            nxt = jump(m, insn, state, pc)
            if nxt is None:
                state.done = True
                return
            state.pc = nxt
        else:
            memory_op(m, insn, state, pc)
            state.pc = pc + 1
