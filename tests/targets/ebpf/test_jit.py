"""The LLVM JIT against the reference interpreter and the fast path, and the verifier against runs.

Differential fuzzing: random instruction streams (``fuzzgen``) that load are run by all three engines
on the same input; registers, output buffer, instruction count and any error must be identical. A
program the verifier accepts must never stop on a memory, call-depth or division fault.
"""

from __future__ import annotations

import random

import pytest

from npukit.errors import NpukitError
from npukit.targets.ebpf import isa
from npukit.targets.ebpf.analysis import Options, analyze
from npukit.targets.ebpf.asm import assemble_bytes
from npukit.targets.ebpf.errors import CallDepthExceeded, DivisionFault, MemoryFault
from npukit.targets.ebpf.helpers import alkali_helpers, conformance_helpers
from npukit.targets.ebpf.vm import Machine

from .fuzzgen import stream

PROVEN_ABSENT = (MemoryFault, CallDepthExceeded, DivisionFault)


def _outcome(m: Machine, engine: str, data: bytes) -> tuple:
    try:
        res = m.run(data, 64, "alkali", budget=300, engine=engine)
        return ("ok", res.r0, res.output, res.instructions, tuple(res.registers))
    except NpukitError as exc:
        return (type(exc).__name__, str(exc))


def fuzz(count: int, seed: int) -> dict[str, int]:
    """Run ``count`` random streams; assert agreement; return how many loaded / were accepted."""
    rng = random.Random(seed)
    stats = {"loaded": 0, "accepted": 0}
    for _ in range(count):
        raw = stream(rng, rng.randrange(1, 12))
        data = rng.randbytes(rng.choice((0, 8, 64)))
        try:
            m = Machine(isa.decode(raw), alkali_helpers())
        except NpukitError:
            continue
        stats["loaded"] += 1
        want = _outcome(m, "interp", data)
        assert _outcome(m, "fast", data) == want, raw.hex()
        assert _outcome(m, "jit", data) == want, raw.hex()
        verdict = analyze(m.program, m.helpers, options=Options(abi="alkali", output_size=64))
        if verdict.accepted:
            stats["accepted"] += 1
            assert want[0] not in {c.__name__ for c in PROVEN_ABSENT}, (raw.hex(), want)
    return stats


@pytest.mark.slow
def test_random_streams_agree_on_every_engine() -> None:
    stats = fuzz(1000, seed=11)
    assert stats["loaded"] > 300 and stats["accepted"] >= 2


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
    outcomes = {_outcome(m, e, b"") for e in ("jit", "fast", "interp")}
    assert len(outcomes) == 1 and "budget" in next(iter(outcomes))[1]
