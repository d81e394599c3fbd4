"""Assembler/disassembler against clang-built bytes and the corpus syntax; encodings from RFC 9669."""

from __future__ import annotations

import pytest

from npukit.targets.ebpf import isa
from npukit.targets.ebpf.asm import assemble, assemble_bytes, disassemble
from npukit.targets.ebpf.elf import load_elf
from npukit.targets.ebpf.errors import AsmError

from .conftest import EXAMPLES


@pytest.mark.parametrize("obj", sorted(p.name for p in EXAMPLES.glob("*.o")))
def test_clang_objects_round_trip_through_text(obj: str) -> None:
    """clang's bytes -> decode -> our text -> assemble -> the same bytes (also without labels)."""
    code = load_elf((EXAMPLES / obj).read_bytes(), helper_names={"print": 1}).program.encode()
    program = isa.decode(code)
    assert program.encode() == code
    assert assemble_bytes(disassemble(program)) == code
    assert assemble_bytes(disassemble(program, labels=False)) == code


@pytest.mark.parametrize(
    "text, slot",
    [
        # (uBPF / conformance syntax, RFC 9669 encoding as opcode dst|src<<4 off imm)
        ("mov %r0, 1", (0xB7, 0x00, 0, 1)),
        ("mov32 %r1, %r2", (0xBC, 0x21, 0, 0)),
        ("ldxb %r0, [%r1+0x2]", (0x71, 0x10, 2, 0)),
        ("ldxsh %r3, [%r10-4]", (0x89, 0xA3, -4, 0)),
        ("stdw [%r10-8], -1", (0x7A, 0x0A, -8, -1)),
        ("sdiv32 %r1, 3", (0x34, 0x01, 1, 3)),
        ("smod %r1, %r2", (0x9F, 0x21, 1, 0)),
        ("movsx1664 %r1, %r2", (0xBF, 0x21, 16, 0)),
        ("be16 %r3", (0xDC, 0x03, 0, 16)),
        ("bswap64 %r3", (0xD7, 0x03, 0, 64)),
        ("lock fetch xor32 [%r1+4], %r2", (0xC3, 0x21, 4, 0xA1)),
        ("lock cmpxchg [%r1+0], %r2", (0xDB, 0x21, 0, 0xF1)),
        ("jsgt32 %r1, -5, +2", (0x66, 0x01, 2, -5)),
        ("ja32 -1", (0x06, 0x00, 0, -1)),
        ("call 3", (0x85, 0x00, 0, 3)),
        ("call %r4", (0x8D, 0x04, 0, 0)),
        ("call local +4", (0x85, 0x10, 0, 4)),
        ("exit", (0x95, 0x00, 0, 0)),
    ],
)
def test_encodings_follow_the_rfc(text: str, slot: tuple[int, int, int, int]) -> None:
    import struct

    want = struct.pack("<BBhi", *slot)
    assert assemble_bytes(text + ("\nexit" if text != "exit" else "")).startswith(want)


def test_lddw_two_slots_and_labels() -> None:
    code = assemble_bytes("lddw %r0, 0x1122334455667788\nja out\nmov %r0, 0\nout:\nexit")
    assert code[:16] == bytes.fromhex("18000000887766550000000044332211")
    assert code[16:24] == bytes.fromhex("0500010000000000")  # ja +1 skips one slot


@pytest.mark.parametrize(
    "text, phrase",
    [
        ("mov %r11, 1", "invalid register"),
        ("mov %r0, 0x100000000", "out of 32-bit range"),
        ("ja nowhere", "undefined label"),
        ("frob %r0", "unknown mnemonic"),
        ("ldxb %r0, %r1", "invalid memory operand"),
        ("l:\nl:\nexit", "duplicate label"),
        ("add %r0", "takes 2 operand"),
    ],
)
def test_assembler_errors_are_typed(text: str, phrase: str) -> None:
    with pytest.raises(AsmError, match=phrase):
        assemble(text)


def test_random_valid_programs_round_trip_through_text() -> None:
    import random

    from npukit.targets.ebpf.errors import EncodingError

    from .fuzzgen import stream

    rng = random.Random(9)
    checked = 0
    for _ in range(1500):
        raw = stream(rng, rng.randrange(1, 10))
        try:
            program = isa.decode(raw)
        except EncodingError:
            continue
        assert assemble_bytes(disassemble(program)) == raw
        assert assemble_bytes(disassemble(program, labels=False)) == raw
        checked += 1
    assert checked > 300
