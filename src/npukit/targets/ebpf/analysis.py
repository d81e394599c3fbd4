"""The static verifier: abstract interpretation of a program over its control-flow graph before it loads.

`analyze` runs every path from the entry with the abstract state of ``absstate`` (register types,
ranges and tnums, stack initialisation, facts relating values to the input length), joining states
where paths meet and widening at loop heads, so loops are analysed to a fixpoint instead of unrolled.
It proves, per instruction: no register or stack byte is read before it is written; every memory
access stays inside its region (stack frame, the input below the ABI's length register, the output
buffer, an ELF data section; no store into a read-only section); helper arguments have the types the
helper's signature asks, and memory arguments hold their size argument's bytes; r0 is set at exit; at
most 8 frames; division never faults under the profile's rules. Each failure is a `Finding` (pc and a
one-line message); the analysis goes on past it (the failing value becomes unknown), so a reject
lists every reason. ``Verdict.regions`` records which region each memory instruction reaches, which
the JIT uses to drop the run-time checks the proof made redundant.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from npukit.targets.ebpf import absval as V
from npukit.targets.ebpf import isa
from npukit.targets.ebpf import semantics as S
from npukit.targets.ebpf.absstate import UNINIT, Frame, Pointer, State, Value, compare, join, negate, widen
from npukit.targets.ebpf.absval import Scalar, replace
from npukit.targets.ebpf.analysis_alu import alu_result
from npukit.targets.ebpf.analysis_mem import check_access, helper_call
from npukit.targets.ebpf.asm import block_leaders, branch_target
from npukit.targets.ebpf.helpers import HelperRegistry
from npukit.targets.ebpf.isa import Insn, JmpOp, Program
from npukit.targets.ebpf.memory import Region
from npukit.targets.ebpf.verify import structural_findings

LENGTH_REGISTER = {"ubpf": 2, "alkali": 3}
MAX_INSTRUCTIONS = 65_536
MAX_FRAMES = 8
MAX_STEPS = 2_000_000
WIDEN_AFTER = 2
DEFAULT_MAX_INPUT = (1 << 32) - 1


@dataclass(frozen=True)
class Finding:
    pc: int
    message: str


@dataclass
class Verdict:
    errors: list[Finding]
    regions: dict[int, frozenset[str]] = field(default_factory=dict)
    abi: str = "ubpf"
    output_size: int = 0

    @property
    def accepted(self) -> bool:
        return not self.errors

    def to_json(self) -> dict:
        return {
            "verdict": "accept" if self.accepted else "reject",
            "errors": [{"pc": f.pc, "message": f.message} for f in self.errors],
        }


@dataclass(frozen=True)
class Options:
    abi: str = "ubpf"
    output_size: int = 0
    max_input: int = DEFAULT_MAX_INPUT
    profile: str = "rfc9669"
    entry: int = 0


def analyze(
    program: Program,
    helpers: HelperRegistry | None = None,
    sections: list[Region] | None = None,
    options: Options | None = None,
) -> Verdict:
    """Verify ``program``; never raises for a property of the program (the verdict says it)."""
    opts = options or Options()
    n = sum(1 for i in program.insns if i is not None)
    if n > MAX_INSTRUCTIONS:
        return Verdict([Finding(0, f"{n} instructions: more than the {MAX_INSTRUCTIONS:,} allowed")])
    found = structural_findings(program, helpers, opts.entry, opts.profile)
    if found:
        return Verdict([Finding(pc, msg) for pc, msg in found], abi=opts.abi)
    analyzer = _Analyzer(program, helpers, sections or [], opts)
    analyzer.run()
    analyzer.infinite_loops()
    errors = [Finding(pc, msg) for pc, msg in sorted(analyzer.errors.items())]
    regions = {pc: frozenset(r) for pc, r in analyzer.regions.items()}
    return Verdict(errors, regions, opts.abi, opts.output_size)



class _Analyzer:
    def __init__(self, program: Program, helpers: HelperRegistry | None, sections: list[Region],
                 opts: Options) -> None:
        self.insns = program.insns
        self.helpers = helpers
        self.sections = {r.name: r for r in sections if len(r.data)}
        self.opts = opts
        self.len_reg = LENGTH_REGISTER[opts.abi]
        self.leaders = block_leaders(program.insns, opts.entry)
        self.errors: dict[int, str] = {}
        self.regions: dict[int, set[str]] = {}
        self.states: dict[tuple, State] = {}
        self.visits: dict[tuple, int] = {}
        self.queue: list[tuple] = []
        self.edges: set[tuple[int, int]] = set()  # (pc, next pc) seen by the analysis; -1: the run may end

    # -- driver -------------------------------------------------------------------------------------

    def initial(self) -> State:
        length = V.Scalar(0, self.opts.max_input, 0, self.opts.max_input, 0, (1 << 32) - 1)
        length = V.normalize(length) or length
        regs: list[Value] = [UNINIT] * 11
        regs[1] = Pointer("input", V.const(0))
        if self.opts.abi == "alkali":
            regs[2] = Pointer("output", V.const(0)) if self.opts.output_size else V.const(0)
        regs[self.len_reg] = replace(length, len_off=0)
        regs[10] = Pointer("stack", V.const(0), 0)
        return State([Frame(regs)], length)

    def run(self) -> None:
        self.push(self.opts.entry, self.initial())
        steps = 0
        while self.queue:
            _, key = heapq.heappop(self.queue)
            st = self.states[key].copy()
            pc = key[0]
            while True:
                steps += 1
                if steps > MAX_STEPS:
                    self.error(pc, f"the program is too complex to verify ({MAX_STEPS:,} analysis steps)")
                    return
                succ = self.step(st, pc)
                self.edges.update((pc, nxt) for nxt, _ in succ)
                if not succ or self._may_end(pc):
                    self.edges.add((pc, -1))
                if len(succ) == 1 and succ[0][0] not in self.leaders:
                    pc, st = succ[0]
                    continue
                for nxt, nst in succ:
                    self.push(nxt, nst)
                break

    def _may_end(self, pc: int) -> bool:
        """A helper call that can end the run (the unwind helper) or a fault the proof tolerates."""
        insn = self.insns[pc]
        unwind = self.helpers.unwind_index if self.helpers is not None else None
        return insn is not None and insn.opcode in (isa.OP_CALL, isa.OP_CALLX) and (
            insn.opcode == isa.OP_CALLX or insn.imm == unwind)

    def infinite_loops(self) -> None:
        """Loops no analysed path leaves (no exit edge, no exit or unwind inside): the program would run
        until the budget stops it; one finding at the loop's first instruction."""
        from npukit.targets.ebpf.cfg import closed_cycles

        for head in closed_cycles(self.edges):
            self.error(head, "infinite loop: no path leaves the loop that starts here")

    def push(self, pc: int, st: State) -> None:
        key = (pc, tuple(f.return_pc for f in st.frames))
        old = self.states.get(key)
        if old is not None:
            merged = join(old, st)
            self.visits[key] = self.visits.get(key, 0) + 1
            if self.visits[key] > WIDEN_AFTER:
                merged = widen(old, merged)
            if merged == old:
                return
            st = merged
        self.states[key] = st
        heapq.heappush(self.queue, ((len(key[1]), pc), key))

    def error(self, pc: int, message: str) -> None:
        self.errors.setdefault(pc, message)

    # -- registers ----------------------------------------------------------------------------------

    def read(self, st: State, reg: int, pc: int) -> Value:
        v = st.top.regs[reg]
        if v is UNINIT:
            self.error(pc, f"r{reg} is read before it is written")
            return Scalar()
        return v

    def scalar(self, st: State, reg: int, pc: int, what: str) -> Scalar:
        v = self.read(st, reg, pc)
        if isinstance(v, Pointer):
            self.error(pc, f"{what} of r{reg}, a pointer to {v.region}")
            return Scalar()
        return v  # type: ignore[return-value]

    def fresh(self, st: State, pc: int, s: Scalar) -> Scalar:
        """``s`` as a new linked origin (id from its pc): copies made later stay related to it."""
        st.unlink(pc + 1)
        return replace(s, link=(pc + 1, 0))

    def assign(self, st: State, reg: int, v: Value) -> None:
        """Write a refined value and carry the refinement to every value linked to the same origin."""
        st.top.regs[reg] = v
        s = v.off if isinstance(v, Pointer) else v
        if not isinstance(s, Scalar):
            return
        if s.len_off is not None:
            lo, hi = s.umin - s.len_off, s.umax - s.len_off
            bounded = V.with_bounds(st.length, umin=max(st.length.umin, lo), umax=min(st.length.umax, hi))
            if bounded is not None:
                st.length = bounded
        if s.link is None:
            return
        origin, delta = s.link

        def refine(w: Value) -> Value:
            ws = w.off if isinstance(w, Pointer) else w
            if not isinstance(ws, Scalar) or ws.link is None or ws.link[0] != origin or ws is s:
                return w
            derived = V.shift_const(replace(s, link=None), ws.link[1] - delta)
            met = V.meet(ws, derived)
            if met is None:
                return w
            met = replace(met, link=ws.link)
            return replace(w, off=met) if isinstance(w, Pointer) else met

        st.map_values(refine)
        st.top.regs[reg] = v

    # -- one instruction ----------------------------------------------------------------------------

    def step(self, st: State, pc: int) -> list[tuple[int, State]]:
        insn = self.insns[pc]
        assert insn is not None
        cls = insn.cls
        if cls in (isa.ALU, isa.ALU64):
            self.alu(st, insn, pc)
        elif insn.opcode == isa.LDDW:
            st.top.regs[insn.dst] = self.lddw(insn.imm)
            return [(pc + 2, st)]
        elif cls == isa.LDX:
            self.load(st, insn, pc)
        elif cls in (isa.ST, isa.STX):
            self.store(st, insn, pc)
        else:
            return self.jump(st, insn, pc)
        return [(pc + 1, st)]

    def lddw(self, imm: int) -> Value:
        for r in self.sections.values():
            if r.base <= imm <= r.end:
                return Pointer(r.name, V.const(imm - r.base))
        return V.const(imm)

    def alu(self, st: State, insn: Insn, pc: int) -> None:
        st.top.regs[insn.dst] = alu_result(self, st, insn, pc)

    # -- memory -------------------------------------------------------------------------------------

    def access(self, st: State, pc: int, reg: int, off: int, size: int, kind: str,
               value: Value | None = None) -> Value:
        """Check one load or store through ``reg + off``; the loaded value (unknown scalar for stores)."""
        return check_access(self, st, pc, reg, off, size, kind, value)

    def load(self, st: State, insn: Insn, pc: int) -> None:
        size = isa.SIZE_BYTES[insn.opcode & isa.SIZE_MASK]
        v = self.access(st, pc, insn.src, insn.off, size, "load")
        if insn.opcode & isa.MODE_MASK == isa.MODE_MEMSX:
            signed = isinstance(v, Scalar) and v.const is not None
            v = V.const(S.sext(v.const, size * 8)) if signed else V.unknown(size * 8, signed_load=True)
        st.top.regs[insn.dst] = self.fresh(st, pc, v) if isinstance(v, Scalar) else v

    def store(self, st: State, insn: Insn, pc: int) -> None:
        size = isa.SIZE_BYTES[insn.opcode & isa.SIZE_MASK]
        if insn.cls == isa.ST:
            self.access(st, pc, insn.dst, insn.off, size, "store", V.const(insn.imm))
            return
        if insn.opcode & isa.MODE_MASK == isa.MODE_MEM:
            self.access(st, pc, insn.dst, insn.off, size, "store", self.read(st, insn.src, pc))
            return
        self.scalar(st, insn.src, pc, "atomic operand")
        if insn.imm == isa.AtomicOp.CMPXCHG:
            self.read(st, 0, pc)
        self.access(st, pc, insn.dst, insn.off, size, "load")
        self.access(st, pc, insn.dst, insn.off, size, "store", V.unknown(size * 8))
        if insn.imm == isa.AtomicOp.CMPXCHG:
            st.top.regs[0] = V.unknown(size * 8)
        elif insn.imm & isa.ATOMIC_FETCH:
            st.top.regs[insn.src] = V.unknown(size * 8)

    # -- control flow -------------------------------------------------------------------------------

    def jump(self, st: State, insn: Insn, pc: int) -> list[tuple[int, State]]:
        op = insn.opcode
        if op == isa.OP_EXIT:
            return self.exit(st, pc)
        if op in (isa.OP_JA, isa.OP_JA32):
            return [(branch_target(pc, insn), st)]  # type: ignore[list-item]
        if op == isa.OP_CALL and insn.src == isa.CALL_LOCAL:
            return self.local_call(st, insn, pc)
        if op in (isa.OP_CALL, isa.OP_CALLX):
            helper_call(self, st, insn, pc)
            return [(pc + 1, st)]
        return self.branch(st, insn, pc)

    def exit(self, st: State, pc: int) -> list[tuple[int, State]]:
        r0 = st.top.regs[0]
        if r0 is UNINIT:
            self.error(pc, "r0 is not set before exit")
            r0 = Scalar()
        if len(st.frames) == 1:
            return []
        callee = st.frames.pop()
        if isinstance(r0, Pointer) and r0.region == "stack" and r0.frame == len(st.frames):
            self.error(pc, "a function returns a pointer into its own stack frame")
            r0 = Scalar()
        regs = st.top.regs
        regs[0] = r0
        for r in range(1, 6):
            regs[r] = UNINIT
        return [(callee.return_pc, st)]

    def local_call(self, st: State, insn: Insn, pc: int) -> list[tuple[int, State]]:
        if len(st.frames) >= MAX_FRAMES:
            self.error(pc, f"BPF-to-BPF call depth exceeds {MAX_FRAMES} frames")
            st.top.regs[0] = Scalar()
            return [(pc + 1, st)]
        caller = st.top.regs
        regs: list[Value] = [UNINIT] * 11
        regs[1:6] = caller[1:6]
        regs[10] = Pointer("stack", V.const(0), len(st.frames))
        st.frames.append(Frame(regs, return_pc=pc + 1))
        return [(branch_target(pc, insn), st)]  # type: ignore[list-item]

    def branch(self, st: State, insn: Insn, pc: int) -> list[tuple[int, State]]:
        wide = insn.cls == isa.JMP
        op = JmpOp(insn.opcode >> 4)
        a = self.read(st, insn.dst, pc)
        if insn.opcode & isa.SRC_X:
            b = self.read(st, insn.src, pc)
        else:
            b = V.const(insn.imm if wide else insn.imm & V.U32)
        target = branch_target(pc, insn)
        out = []
        for dest, cond in ((target, op), (pc + 1, negate(op))):
            nst = st.copy() if dest == target else st
            if cond is None or self.refine(nst, insn, cond, a, b, wide):
                out.append((dest, nst))
        return out  # type: ignore[return-value]

    def refine(self, st: State, insn: Insn, op: JmpOp, a: Value, b: Value, wide: bool) -> bool:
        """Narrow the operands under ``a op b``; False when the branch cannot be taken."""
        if isinstance(a, Scalar) and isinstance(b, Scalar):
            r = compare(op, a, b, wide, st)
            if r is None:
                return False
            self.assign(st, insn.dst, r[0])
            if insn.opcode & isa.SRC_X and insn.src != insn.dst:
                self.assign(st, insn.src, r[1])
            return True
        same = isinstance(a, Pointer) and isinstance(b, Pointer) and (a.region, a.frame) == (
            b.region, b.frame)
        if same and wide and op not in (JmpOp.JSGT, JmpOp.JSGE, JmpOp.JSLT, JmpOp.JSLE, JmpOp.JSET):
            r = compare(op, a.off, b.off, True, st)  # type: ignore[union-attr]
            if r is None:
                return False
            self.assign(st, insn.dst, replace(a, off=r[0]))  # type: ignore[arg-type]
            if insn.src != insn.dst:
                self.assign(st, insn.src, replace(b, off=r[1]))  # type: ignore[arg-type]
        return True
