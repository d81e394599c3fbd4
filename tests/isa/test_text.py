"""Text from a spec: the key=value syntax, a plugged-in syntax, multi-word text and program files of
any word width (numpy's little-endian layout as the oracle)."""

from enum import IntEnum

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from npukit.errors import FormatError
from npukit.isa import AsmError, Field, Format, KeyValueSyntax, Spec, bits, const
from npukit.isa import text as T


class Fn(IntEnum):
    ADD = 0
    MUL = 1
    NEG = 2


SPEC = Spec("demo", 32, (
    Format("ALU", (const("op", 31, 28, 1), bits("fn", 27, 26, enum=Fn), bits("dst", 25, 16, fmt="hex"),
                   bits("imm", 15, 1, signed=True), bits("go", 0, 0, enum=bool, asm="go")),
           mnemonic_field="fn"),
    Format("LONG", (const("op", 31, 28, 2), bits("r", 27, 24), Field("value", 48, pieces=((0, 24), (32, 24))),
                    bits("z", 63, 56, reserved=True)), words=2),
    Format("NOP", (const("op", 31, 28, 0),)),
))
KV = KeyValueSyntax()


def test_key_value_text():
    spec = SPEC.bind()
    words = T.assemble(spec, KV, """
        alu.mul dst=0x3ff imm=-5 go   ; a comment
        long r=3 value=0x123456789ABC # another
        nop
        .word 0xF0000000
    """)
    assert words[0] == (1 << 28) | (1 << 26) | (0x3FF << 16) | ((-5 & 0x7FFF) << 1) | 1
    assert words[1:3] == [(2 << 28) | (3 << 24) | 0x789ABC, 0x123456]
    text = T.disassemble(spec, KV, words)
    assert text.splitlines() == ["alu.mul dst=0x3FF imm=-5 go", "long r=3 value=20015998343868", "nop",
                                 ".word 0xF0000000  ; invalid: unknown op 0xF"]
    assert T.assemble(spec, KV, text) == words


@pytest.mark.parametrize(("line", "needle"), [
    ("alu dst=1", "unknown mnemonic 'alu'"),
    ("alu.div", "unknown ALU function 'div'"),
    ("alu.add imm=99999", "imm=99999 does not fit in 15 bits"),
    ("alu.add dst=1 dst=2", "given twice"),
    ("alu.add bogus=1", "no operand 'bogus' (known: dst, imm, go)"),
    ("alu.add dst", "needs a value"),
    ("long z=1", "no operand 'z'"),
    (".word 0x100000000", "does not fit in 32 bits"),
])
def test_key_value_errors_name_the_line(line, needle):
    with pytest.raises(AsmError, match="^line 1: .*" + needle.replace("(", r"\(").replace(")", r"\)")):
        T.assemble(SPEC.bind(), KV, line)


@given(st.lists(st.integers(0, 2**32 - 1), max_size=40))
def test_any_words_round_trip_through_text(words):
    spec = SPEC.bind()
    assert T.assemble(spec, KV, T.disassemble(spec, KV, words)) == words


class Infix:
    """A plugged-in syntax, uBPF style: ``alu.add %r5, -3``."""

    def format(self, spec, ins):
        fmt = spec.format_of(ins)
        if fmt.name != "ALU":
            return KV.format(spec, ins)
        return f"alu.{ins.fn.name.lower()} %r{ins.dst}, {ins.imm}"

    def parse(self, spec, text, where):
        head, _, rest = text.partition(" ")
        if not head.startswith("alu."):
            return KV.parse(spec, text, where)
        reg, imm = (s.strip() for s in rest.split(","))
        return spec.format("ALU"), {"fn": int(Fn[head[4:].upper()]), "dst": int(reg[2:]),
                                    "imm": T.parse_int(imm, where)}


def test_a_plugged_in_syntax_reuses_the_drivers():
    spec = SPEC.bind()
    words = T.assemble(spec, Infix(), "alu.neg %r7, -3\nnop")
    assert words == [(1 << 28) | (2 << 26) | (7 << 16) | ((-3 & 0x7FFF) << 1), 0]
    assert T.disassemble(spec, Infix(), words, addresses=True) == "alu.neg %r7, -3  ; 0000\nnop  ; 0001\n"
    with pytest.raises(AsmError, match="line 1: imm=16384 does not fit"):
        T.assemble(spec, Infix(), "alu.add %r1, 0x4000")


@pytest.mark.parametrize("word_bits", [32, 64, 128])
def test_program_files_any_width(tmp_path, word_bits):
    rng = np.random.default_rng(word_bits)
    halves = rng.integers(0, 2**63, (5, word_bits // 32), dtype=np.uint64) & np.uint64(0xFFFFFFFF)
    words = [sum(int(h) << (32 * i) for i, h in enumerate(row)) for row in halves]
    T.write_program(tmp_path / "p.bin", words, word_bits)
    raw = (tmp_path / "p.bin").read_bytes()
    assert raw == halves.astype("<u4").tobytes()  # little-endian words, little-endian halves inside
    assert T.read_program(tmp_path / "p.bin", word_bits) == words
    T.write_program(tmp_path / "p.hex", words, word_bits, "hex")
    lines = (tmp_path / "p.hex").read_text().splitlines()
    assert all(len(s) == word_bits // 4 for s in lines) and [int(s, 16) for s in lines] == words
    assert T.read_program(tmp_path / "p.hex", word_bits) == words
    with pytest.raises(FormatError, match=f"not a whole number of {word_bits}-bit words"):
        T.from_bytes(raw[:-1], word_bits)
    with pytest.raises(FormatError, match=f"line 1: expected one {word_bits}-bit hex word"):
        T.from_hex("1" * (word_bits // 4 + 1), word_bits)
