"""Memory safety, budgets, call depth, the static check and robustness on random instruction streams."""

from __future__ import annotations

import random

import pytest

from npukit.errors import NpukitError
from npukit.targets.ebpf import isa
from npukit.targets.ebpf.asm import assemble_bytes
from npukit.targets.ebpf.errors import (
    BudgetExceeded,
    CallDepthExceeded,
    DivisionFault,
    EncodingError,
    HelperFault,
    MemoryFault,
    VerifyError,
)
from npukit.targets.ebpf.helpers import HelperRegistry, alkali_helpers, conformance_helpers
from npukit.targets.ebpf.memory import INPUT_BASE
from npukit.targets.ebpf.vm import Machine

from .fuzzgen import stream

ENGINES = ("jit", "fast", "interp")


def run(text: str, data: bytes = b"", engine: str = "fast", helpers: HelperRegistry | None = None, **kw):
    m = Machine(
        isa.decode(assemble_bytes(text)),
        helpers or conformance_helpers(),
        div_by_zero=kw.pop("div_by_zero", "rfc"),
    )
    return m.run(data, engine=engine, **kw)


@pytest.mark.parametrize("engine", ENGINES)
def test_out_of_bounds_load_names_everything(engine: str) -> None:
    with pytest.raises(MemoryFault) as info:
        run("mov %r0, 0\nldxdw %r0, [%r1+4]\nexit", bytes(8), engine)
    f = info.value
    assert (f.pc, f.address, f.size, f.kind) == (1, INPUT_BASE + 4, 8, "load")
    assert "ldxdw %r0, [%r1+4]" in str(f) and "region input" in str(f)


@pytest.mark.parametrize("engine", ENGINES)
def test_store_below_the_stack_and_into_nowhere(engine: str) -> None:
    with pytest.raises(MemoryFault, match="store of 4 bytes"):
        run("stw [%r10-4100], 1\nexit", engine=engine)
    with pytest.raises(MemoryFault, match="outside every mapped region"):
        run("mov %r2, 0\nstxb [%r2+0], %r2\nexit", engine=engine)


def test_rodata_is_read_only() -> None:
    from npukit.targets.ebpf.memory import SECTION_BASE, Region

    m = Machine(
        isa.decode(assemble_bytes(f"lddw %r1, {SECTION_BASE}\nstb [%r1+0], 1\nexit")),
        conformance_helpers(),
        [Region(".rodata", SECTION_BASE, bytearray(b"abc"), writable=False)],
    )
    with pytest.raises(MemoryFault, match=r"read-only region \.rodata"):
        m.run()


@pytest.mark.parametrize("engine", ENGINES)
def test_runaway_loop_stops_exactly_at_the_budget(engine: str) -> None:
    with pytest.raises(BudgetExceeded) as info:
        run("l:\nadd %r0, 1\nadd %r1, 1\nja l", engine=engine, budget=1001)
    assert info.value.pc == 2 and info.value.budget == 1001  # 1001 = 333 loops + 2 instructions


@pytest.mark.parametrize("engine", ENGINES)
def test_call_depth_limit(engine: str) -> None:
    with pytest.raises(CallDepthExceeded):
        run("f:\ncall local f\nexit", engine=engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_division_by_zero_faults_under_the_forks_rules(engine: str) -> None:
    assert run("mov %r0, 9\nmov %r1, 0\ndiv %r0, %r1\nexit", engine=engine).r0 == 0
    with pytest.raises(DivisionFault, match="pc 2"):
        run("mov %r0, 9\nmov %r1, 0\ndiv %r0, %r1\nexit", engine=engine, div_by_zero="fault")
    with pytest.raises(DivisionFault):
        run("mov %r0, 9\nmod32 %r0, 0\nexit", engine=engine, div_by_zero="fault")


@pytest.mark.parametrize(
    "text, phrase",
    [
        ("mov %r10, 1\nexit", "r10"),
        ("ldxw %r10, [%r1]\nexit", "r10"),
        ("ja +5\nexit", "jump target"),
        ("jeq %r0, 0, -3\nexit", "jump target"),
        ("mov %r0, 0\nja +1\nlddw %r1, 5\nexit", "inside an lddw"),
        ("call 77\nexit", "unknown helper 77"),
        ("exit\nmov %r0, 1", "falls through"),
    ],
)
def test_static_check(text: str, phrase: str) -> None:
    with pytest.raises(VerifyError, match=phrase):
        run(text)


@pytest.mark.parametrize(
    "raw, phrase",
    [
        (bytes([0x95, 0, 0, 0, 1, 0, 0, 0]), "unused field imm"),
        (bytes([0xD4, 1, 0, 0, 12, 0, 0, 0]), "byte-swap width 12"),
        (bytes([0x18, 1, 0, 0, 0, 0, 0, 0]), "second slot"),
        (bytes([0x20, 0, 0, 0, 0, 0, 0, 0]) + bytes([0x95] + [0] * 7), "legacy packet access"),
        (bytes([0xB7, 0x0B, 0, 0, 0, 0, 0, 0]) + bytes([0x95] + [0] * 7), "register r11"),
        (bytes([0xCB, 0x21, 0, 0, 0, 0, 0, 0]) + bytes([0x95] + [0] * 7), "atomic operations need"),
        (bytes([0x99, 0x21, 0, 0, 0, 0, 0, 0]) + bytes([0x95] + [0] * 7), "double word"),
        (bytes(7), "whole number"),
    ],
)
def test_invalid_encodings_are_typed(raw: bytes, phrase: str) -> None:
    with pytest.raises(EncodingError, match=phrase):
        isa.decode(raw)


def test_callx_to_unregistered_helper() -> None:
    with pytest.raises(HelperFault, match="r1 = 99"):
        run("mov %r1, 99\ncall %r1\nexit")


def test_print_helper_reads_only_mapped_strings() -> None:
    with pytest.raises(MemoryFault):
        run("mov %r1, 12\ncall 1\nexit", helpers=alkali_helpers())


def _outcome(m: Machine, engine: str, data: bytes):
    try:
        res = m.run(data, 64, "alkali", budget=300, engine=engine)
        return ("ok", res.r0, res.output, res.instructions, tuple(res.registers))
    except NpukitError as exc:
        return (type(exc).__name__, str(exc))


def _fuzz(count: int, seed: int, cross_check_every: int) -> tuple[int, int]:
    rng = random.Random(seed)
    data = rng.randbytes(64)
    loaded = compared = 0
    for i in range(count):
        raw = stream(rng, rng.randrange(1, 12))
        try:
            m = Machine(isa.decode(raw), alkali_helpers())
        except NpukitError:
            continue
        loaded += 1
        interp = _outcome(m, "interp", data)
        if i % cross_check_every == 0:
            assert _outcome(m, "fast", data) == interp, raw.hex()
            compared += 1
    return loaded, compared


def test_random_streams_fast_matches_interpreter() -> None:
    loaded, compared = _fuzz(1000, seed=1, cross_check_every=1)
    assert loaded > 200 and compared == loaded


@pytest.mark.slow
def test_100k_random_streams_raise_only_typed_errors() -> None:
    loaded, compared = _fuzz(100_000, seed=2, cross_check_every=50)
    assert loaded > 10_000 and compared > 100


def test_fork_profile_faults_on_division_by_zero() -> None:
    m = Machine(
        isa.decode(assemble_bytes("mov %r0, 1\nmov %r1, 0\nmod %r0, %r1\nexit")),
        conformance_helpers(),
        profile="alkali-fork",
    )
    with pytest.raises(DivisionFault):
        m.run()


def test_a_failing_injected_helper_is_a_typed_fault() -> None:
    def broken(model: bytes, inputs: bytes, delegate: str) -> bytes:
        raise RuntimeError("engine crashed")

    with pytest.raises(HelperFault, match=r"tflite_apu.*RuntimeError: engine crashed"):
        run(
            "mov %r3, 4\nmov %r4, 4\nmov %r5, 0\ncall 2\nexit",
            bytes(4),
            helpers=alkali_helpers(tflite=broken),
            abi="alkali",
            output_size=4,
        )
