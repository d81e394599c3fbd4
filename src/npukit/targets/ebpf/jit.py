"""The JIT: a program translated once to LLVM IR (llvmlite) and compiled for the host CPU.

One native function runs the program from a given pc over a register array, a control block (pc,
instruction count, budget, status, call frames) and a table of memory regions (host pointer, virtual
base, size, writable). Semantics are RFC 9669's as in ``semantics.py``: division by zero gives 0 /
keeps the dividend, shifts are masked, signed division by -1 never traps. Code is generic LLVM IR for
the host target machine: no target intrinsics.

Memory: an access the verifier proved (``analysis.Verdict``, program accepted, exactly one region at
that pc) is a plain load or store at host base + (address - virtual base); any other access checks
every region and, when none holds it, hands the run to the reference interpreter at that pc (which
reports the fault exactly). The same hand-off serves the budget (checked per block, the interpreter
stops at the exact instruction) and anything unusual (call depth, division by zero under the fork's
rules). Helper calls return to Python (status 2), which runs the helper and resumes at the next pc.
"""

from __future__ import annotations

import copy
import ctypes
import threading
from collections.abc import Callable
from typing import Any

from llvmlite import ir

from npukit.targets.ebpf import isa
from npukit.targets.ebpf.asm import block_leaders, branch_target
from npukit.targets.ebpf.isa import Insn, JmpOp
from npukit.targets.ebpf.jit_ops import (
    CTL_BUDGET,
    CTL_COUNT,
    CTL_DEPTH,
    CTL_FRAMES,
    CTL_PC,
    FRAME_WORDS,
    STATUS_DONE,
    STATUS_HANDOFF,
    Emitter,
)

STATUS_HELPER = 2
FIXED_REGIONS = ("stack", "input", "output")
I64 = ir.IntType(64)



class _Builder:
    """Builds the IR of one program (the per-instruction emitters live in ``jit_ops.Emitter``)."""

    def __init__(self, machine: Any, verdict: Any, regions: list[str]) -> None:
        self.m = machine
        self.insns = machine.program.insns
        self.regions = regions
        self.proven: dict[int, int] = {}
        if verdict is not None and verdict.accepted:
            for pc, names in verdict.regions.items():
                if len(names) == 1 and next(iter(names)) in regions:
                    self.proven[pc] = regions.index(next(iter(names)))

    def build(self, module: ir.Module | None = None, name: str = "run") -> ir.Module:
        """The program as function ``name`` of ``module`` (a new module when None)."""
        module = module or ir.Module(name="ebpf")
        ptr = I64.as_pointer()
        fnty = ir.FunctionType(I64, [ptr, ptr, ptr, ptr, ptr, ptr])
        fn = ir.Function(module, fnty, name=name)
        entry = fn.append_basic_block("entry")
        b = ir.IRBuilder(entry)
        em = Emitter(b, fn, self, fn.args)
        leaders = sorted(p for p in block_leaders(self.insns, self.m.entry)
                         if p < len(self.insns) and self.insns[p] is not None)
        ends = [*leaders[1:], len(self.insns)]
        blocks = {pc: fn.append_basic_block(f"pc{pc}") for pc in leaders}
        em.blocks = blocks
        em.prologue()
        resume = sorted({self.m.entry} | {p for p in leaders if self._after_call(p)})
        em.dispatch(em.load_ctl(CTL_PC), {p: blocks[p] for p in resume})
        for start, end in zip(leaders, ends, strict=True):
            b.position_at_end(blocks[start])
            self._block(em, start, end)
        return module

    def _after_call(self, pc: int) -> bool:
        prev = self.insns[pc - 1] if pc > 0 else None
        return prev is not None and prev.opcode in (isa.OP_CALL, isa.OP_CALLX)

    def _block(self, em: Emitter, start: int, end: int) -> None:
        pcs = [pc for pc in range(start, end) if self.insns[pc] is not None]
        stop = next((i for i, pc in enumerate(pcs) if self.insns[pc].cls in (isa.JMP, isa.JMP32)), None)
        pcs = pcs if stop is None else pcs[: stop + 1]
        em.budget_check(start, len(pcs))
        for i, pc in enumerate(pcs):
            em.position = (start, len(pcs), i)
            insn = self.insns[pc]
            cls = insn.cls
            if cls in (isa.ALU, isa.ALU64):
                em.alu(insn, pc)
            elif insn.opcode == isa.LDDW:
                em.set(insn.dst, ir.Constant(I64, insn.imm & ((1 << 64) - 1)))
            elif cls == isa.LDX:
                em.load(insn, pc, self.proven.get(pc))
            elif cls == isa.ST or (cls == isa.STX and insn.opcode & isa.MODE_MASK == isa.MODE_MEM):
                em.store(insn, pc, self.proven.get(pc))
            elif cls == isa.STX:
                em.atomic(insn, pc, self.proven.get(pc))
            else:
                self._terminator(em, insn, pc)
                return
        nxt = pcs[-1] + self.insns[pcs[-1]].slots
        em.goto(nxt)

    def _terminator(self, em: Emitter, insn: Insn, pc: int) -> None:
        op = insn.opcode
        if op == isa.OP_EXIT:
            em.exit(self._return_points())
        elif op in (isa.OP_JA, isa.OP_JA32):
            em.goto(branch_target(pc, insn))
        elif op == isa.OP_CALL and insn.src == isa.CALL_LOCAL:
            em.local_call(pc, branch_target(pc, insn), self.m.max_call_depth)
        elif op in (isa.OP_CALL, isa.OP_CALLX):
            em.leave(STATUS_HELPER, pc)
        else:
            em.branch(insn, pc, JmpOp(op >> 4), branch_target(pc, insn))

    def _return_points(self) -> list[int]:
        return [
            pc + 1
            for pc, i in enumerate(self.insns)
            if i is not None and i.opcode == isa.OP_CALL and i.src == isa.CALL_LOCAL
        ]


_INITIALISED: list[bool] = []


def _target_machine() -> Any:
    """A fresh target machine for the host CPU (an MCJIT engine takes ownership of the one it gets)."""
    import llvmlite.binding as llvm

    if not _INITIALISED:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _INITIALISED.append(True)
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3
    )


_COMPILE_LOCK = threading.Lock()


def compile_ir(text: str, names: tuple[str, ...] = ("run",)) -> tuple[Any, list[int]]:
    """Optimise and compile one module for the host; (engine to keep alive, addresses of ``names``).
    One compilation at a time: LLVM's global context is not safe across threads (the Alkali device
    starts firmware from several accelerator threads)."""
    with _COMPILE_LOCK:
        return _compile(text, names)


def _compile(text: str, names: tuple[str, ...]) -> tuple[Any, list[int]]:
    import llvmlite.binding as llvm

    mod = llvm.parse_assembly(text)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(_target_machine(), pto)
    pb.getModulePassManager().run(mod, pb)
    engine = llvm.create_mcjit_compiler(mod, _target_machine())
    engine.finalize_object()
    return engine, [engine.get_function_address(n) for n in names]


_FN = ctypes.CFUNCTYPE(ctypes.c_uint64, *[ctypes.c_void_p] * 6)


def regions_of(machine: Any) -> list[str]:
    return [*FIXED_REGIONS, *(s.name for s in machine.sections)]


def compile_many(pairs: list[tuple[Any, Any]]) -> list[JitProgram]:
    """JIT several (machine, verdict) pairs as one LLVM module: LLVM's fixed cost per module (pass
    pipeline, code generator) is paid once; the differential fuzzer compiles its programs this way."""
    module = ir.Module(name="ebpf")
    names = tuple(f"run{i}" for i in range(len(pairs)))
    for (machine, verdict), name in zip(pairs, names, strict=True):
        _Builder(machine, verdict, regions_of(machine)).build(module, name)
    engine, addresses = compile_ir(str(module), names)
    return [JitProgram(m, v, (engine, a)) for (m, v), a in zip(pairs, addresses, strict=True)]


class JitProgram:
    """A compiled program; ``run(state, budget)`` has the fast path's contract (``state.done`` at exit)."""

    def __init__(self, machine: Any, verdict: Any = None, compiled: tuple[Any, int] | None = None) -> None:
        self.m = machine
        self.regions = regions_of(machine)
        if compiled is None:
            self.ir = str(_Builder(machine, verdict, self.regions).build())
            engine, (address,) = compile_ir(self.ir)
            compiled = (engine, address)
        self._engine = compiled[0]
        self._fn: Callable[..., int] = _FN(compiled[1])
        self.proven = verdict is not None and verdict.accepted

    def bind(self, machine: Any) -> JitProgram:
        """The same native code for another `Machine` of the same program (its own helpers)."""
        bound = copy.copy(self)
        bound.m = machine
        return bound

    def _region_table(self, state: Any) -> tuple[Any, ...]:
        n = len(self.regions)
        hosts, bases = (ctypes.c_uint64 * n)(), (ctypes.c_uint64 * n)()
        sizes, writable = (ctypes.c_uint64 * n)(), (ctypes.c_uint64 * n)()
        keep = []
        for i, name in enumerate(self.regions):
            r = state.mem.region(name)
            if r is None or not len(r.data):
                bases[i] = 1 << 63  # nothing maps here: every check fails
                continue
            buf = (ctypes.c_char * len(r.data)).from_buffer(r.data)
            keep.append(buf)
            hosts[i], bases[i] = ctypes.addressof(buf), r.base
            sizes[i], writable[i] = len(r.data), int(r.writable)
        return hosts, bases, sizes, writable, keep

    def run(self, state: Any, budget: int) -> None:
        regs = (ctypes.c_uint64 * 11)(*state.regs)
        ctl = (ctypes.c_uint64 * (CTL_FRAMES + FRAME_WORDS * 16))()
        ctl[CTL_PC], ctl[CTL_COUNT], ctl[CTL_BUDGET] = state.pc, state.count, budget
        ctl[CTL_DEPTH] = len(state.frames)
        for i, frame in enumerate(state.frames):
            ctl[CTL_FRAMES + FRAME_WORDS * i : CTL_FRAMES + FRAME_WORDS * (i + 1)] = list(frame)
        # the ctypes views in ``views`` pin the region buffers while native code holds their addresses
        hosts, bases, sizes, writable, views = self._region_table(state)
        while True:
            status = self._fn(regs, ctl, hosts, bases, sizes, writable)
            state.regs[:] = list(regs)
            state.pc, state.count = int(ctl[CTL_PC]), int(ctl[CTL_COUNT])
            depth = int(ctl[CTL_DEPTH])
            state.frames = [
                tuple(int(x) for x in ctl[CTL_FRAMES + FRAME_WORDS * i : CTL_FRAMES + FRAME_WORDS * (i + 1)])
                for i in range(depth)
            ]
            if status == STATUS_DONE:
                state.done = True
                return
            if status == STATUS_HANDOFF:
                return
            if self._helper(state):
                return
            regs[0] = state.regs[0]
            ctl[CTL_PC] = state.pc
            assert views is not None

    def _helper(self, state: Any) -> bool:
        """Run the helper call at ``state.pc``; True when the run ended (the unwind helper returned 0)."""
        from npukit.targets.ebpf.errors import HelperFault

        pc = state.pc
        insn = self.m.program.insns[pc]
        index = state.regs[insn.dst] if insn.opcode == isa.OP_CALLX else insn.imm
        if insn.opcode == isa.OP_CALLX and self.m.helpers.get(index) is None:
            raise HelperFault(pc, f"callx at pc {pc}: r{insn.dst} = {index} is not a registered helper")
        if self.m.call_helper(state, index, pc):
            state.done = True
            return True
        state.pc = pc + 1
        return False

