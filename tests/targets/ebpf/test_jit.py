"""The LLVM JIT against the reference interpreter and the fast path, and the verifier against runs.

Differential fuzzing: random instruction streams (``fuzzgen``) that load are run by all three engines
on the same input; registers, output buffer, instruction count and any error must be identical. A
program the verifier accepts must never stop on a memory, call-depth or division fault.
"""

from __future__ import annotations

import random
import re

import pytest

from npukit.errors import NpukitError
from npukit.targets.ebpf import isa
from npukit.targets.ebpf.asm import assemble_bytes
from npukit.targets.ebpf.errors import CallDepthExceeded, DivisionFault, MemoryFault
from npukit.targets.ebpf.helpers import alkali_helpers, conformance_helpers
from npukit.targets.ebpf.jit import compile_many
from npukit.targets.ebpf.vm import Machine

from .fuzzgen import stream, structured

PROVEN_ABSENT_NAMES = {c.__name__ for c in (MemoryFault, CallDepthExceeded, DivisionFault)}


def _outcome(m: Machine, engine: str, data: bytes, abi: str) -> tuple:
    try:
        res = m.run(data, 64, abi, budget=3000, engine=engine)
        return ("ok", res.r0, res.output, res.instructions, tuple(res.registers))
    except NpukitError as exc:
        return (type(exc).__name__, str(exc))


def _inside_a_helper(m: Machine, outcome: tuple) -> bool:
    """A fault at a helper call: helpers check what their signature cannot say (a string's NUL) at
    run time, which the verifier documents as not proven."""
    found = re.search(r"at pc (\d+)", outcome[1]) if outcome[0] != "ok" else None
    insn = m.program.insns[int(found.group(1))] if found else None
    return insn is not None and insn.opcode in (isa.OP_CALL, isa.OP_CALLX)


def _case(rng: random.Random) -> tuple[Machine, str] | None:
    """A random program that loads: half raw instruction streams (Alkali ABI), half firmware-shaped
    assembler (uBPF ABI, about half of them safe)."""
    try:
        if rng.random() < 0.5:
            return Machine(isa.decode(stream(rng, rng.randrange(1, 12))), alkali_helpers()), "alkali"
        return Machine(isa.decode(assemble_bytes(structured(rng))), conformance_helpers()), "ubpf"
    except NpukitError:
        return None


def fuzz(count: int, seed: int, batch: int = 64) -> dict[str, int]:
    """Run ``count`` random programs on every engine and several inputs; assert they agree and that no
    verified program faults; return counts (loaded, accepted, runs)."""
    rng = random.Random(seed)
    stats = {"loaded": 0, "accepted": 0, "runs": 0}
    done = 0
    while done < count:
        n = min(batch, count - done)
        done += n
        cases = [c for c in (_case(rng) for _ in range(n)) if c is not None]
        verdicts = [m.verdict(abi, 64) for m, abi in cases]
        programs = compile_many([(m, v) for (m, _), v in zip(cases, verdicts, strict=True)])
        for (m, abi), program in zip(cases, programs, strict=True):
            m.jit(abi, 64, compiled=program)
        for (m, abi), verdict in zip(cases, verdicts, strict=True):
            stats["loaded"] += 1
            stats["accepted"] += verdict.accepted
            for size in (0, 3, 16, 64):
                data = rng.randbytes(size)
                want = _outcome(m, "interp", data, abi)
                assert _outcome(m, "fast", data, abi) == want, m.program.encode().hex()
                assert _outcome(m, "jit", data, abi) == want, m.program.encode().hex()
                if verdict.accepted and not _inside_a_helper(m, want):
                    assert want[0] not in PROVEN_ABSENT_NAMES, (m.program.encode().hex(), want)
                stats["runs"] += 1
    return stats


@pytest.mark.slow
def test_random_programs_agree_on_every_engine_and_verified_ones_never_fault() -> None:
    stats = fuzz(1000, seed=11)
    assert stats["loaded"] > 600 and stats["accepted"] > 60


def test_jit_uses_the_proof_only_for_accepted_programs() -> None:
    checked = Machine(isa.decode(assemble_bytes("ldxw %r0, [%r1+4]\nexit")), conformance_helpers())
    with pytest.raises(MemoryFault, match="pc 0"):
        checked.run(b"\x01\x02", engine="jit")  # unproven access: checked, and the fault is exact
    assert not checked.jit("ubpf", 0).proven
    loop = "mov %r0, 0\nmov %r4, 0\nl:\njge %r4, %r2, d\nmov %r5, %r1\nadd %r5, %r4\nldxb %r6, [%r5]\n" \
           "add %r0, %r6\nadd %r4, 1\nja l\nd:\nexit"
    proven = Machine(isa.decode(assemble_bytes(loop)), conformance_helpers())
    assert proven.run(bytes(range(100)), engine="jit").r0 == sum(range(100))
    assert proven.jit("ubpf", 0).proven


def test_jit_budget_stops_at_the_exact_instruction() -> None:
    m = Machine(isa.decode(assemble_bytes("mov %r0, 0\nl:\nadd %r0, 1\nja l\nexit")), conformance_helpers())
    outcomes = {_outcome(m, e, b"", "ubpf") for e in ("jit", "fast", "interp")}
    assert len(outcomes) == 1 and "budget" in next(iter(outcomes))[1]
