"""The ISA toolkit against independent layouts: C bitfields (ctypes) for a 128-bit VTA GEMM word whose
widths come from log2 parameters, `struct` packing for eBPF's two-slot ``lddw`` (RFC 9669)."""

import ctypes
import struct
from dataclasses import dataclass
from enum import IntEnum, IntFlag

import pytest
from hypothesis import given
from hypothesis import strategies as st

from npukit.errors import ConfigError, DecodeError
from npukit.isa import AsmError, Field, Format, Spec, bits, const, markdown_table

# --- 128 bits, widths from a hardware description (TVM hw_spec.h VTAGemInsn) ------------------------


@dataclass(frozen=True)
class VtaLike:
    log_batch: int = 0
    log_block: int = 4
    log_inp_width: int = 3
    log_wgt_width: int = 3
    log_acc_width: int = 5
    log_uop_buff_size: int = 15
    log_inp_buff_size: int = 15
    log_wgt_buff_size: int = 18
    log_acc_buff_size: int = 17

    # buffer depths in elements, as TVM's pkg_config derives them
    @property
    def log_uop_depth(self) -> int:
        return self.log_uop_buff_size - 2

    @property
    def log_inp_depth(self) -> int:
        return self.log_inp_buff_size - self.log_batch - self.log_block - self.log_inp_width + 3

    @property
    def log_wgt_depth(self) -> int:
        return self.log_wgt_buff_size - 2 * self.log_block - self.log_wgt_width + 3

    @property
    def log_acc_depth(self) -> int:
        return self.log_acc_buff_size - self.log_batch - self.log_block - self.log_acc_width + 3


GEMM_FIELDS = [
    Field("opcode", 3, const=2),
    *(Field(n, 1, enum=bool) for n in ("pop_prev_dep", "pop_next_dep", "push_prev_dep", "push_next_dep")),
    Field("reset_reg", 1, enum=bool),
    Field("uop_bgn", "log_uop_depth"),
    Field("uop_end", lambda hw: hw.log_uop_depth + 1),
    Field("iter_out", 14),
    Field("iter_in", 14),
    Field("dst_factor_out", "log_acc_depth"),
    Field("dst_factor_in", "log_acc_depth"),
    Field("src_factor_out", "log_inp_depth"),
    Field("src_factor_in", "log_inp_depth"),
    Field("wgt_factor_out", "log_wgt_depth"),
    Field("wgt_factor_in", "log_wgt_depth"),
]
VTA = Spec("vta-like", 128, (Format("GEMM", tuple(GEMM_FIELDS), pack_unit=64, gaps="ignore"),
                             Format("FINISH", (Field("opcode", 3, const=3),), gaps="ignore")))


def _ctypes_gemm(hw: VtaLike) -> type:
    """The C struct of hw_spec.h with these widths; the compiler's bitfield layout is the oracle."""
    widths = {"opcode": 3, "pop_prev_dep": 1, "pop_next_dep": 1, "push_prev_dep": 1, "push_next_dep": 1,
              "reset_reg": 1, "uop_bgn": hw.log_uop_depth, "uop_end": hw.log_uop_depth + 1, "iter_out": 14,
              "iter_in": 14, "dst_factor_out": hw.log_acc_depth, "dst_factor_in": hw.log_acc_depth,
              "src_factor_out": hw.log_inp_depth, "src_factor_in": hw.log_inp_depth,
              "wgt_factor_out": hw.log_wgt_depth, "wgt_factor_in": hw.log_wgt_depth}

    class GemInsn(ctypes.LittleEndianStructure):
        _fields_ = [(n, ctypes.c_uint64, w) for n, w in widths.items()]

    assert ctypes.sizeof(GemInsn) == 16
    return GemInsn


@pytest.mark.parametrize("hw", [VtaLike(), VtaLike(log_uop_buff_size=14, log_acc_buff_size=16,
                                                   log_inp_buff_size=16)])
@given(data=st.data())
def test_128_bit_word_matches_c_bitfields(hw, data):
    spec = VTA.bind(hw)
    assert spec is VTA.bind(hw)  # derived once per description
    fmt = spec.format("GEMM")
    values = {bf.name: data.draw(st.integers(0, bf.mask)) for bf in fmt.values}
    c = _ctypes_gemm(hw)(opcode=2, **values)
    want = int.from_bytes(bytes(c), "little")
    word = spec.encode(spec.make("GEMM", **values))
    assert word == want
    back = c.__class__.from_buffer_copy(word.to_bytes(16, "little"))
    got = spec.decode(word)
    assert {n: int(getattr(got, n)) for n in values} == {n: getattr(back, n) for n in values}


def test_widths_follow_the_description():
    small, big = VTA.bind(VtaLike()), VTA.bind(VtaLike(log_acc_buff_size=18, log_inp_buff_size=14))
    assert small.format("GEMM").field("dst_factor_out").width == 11
    assert big.format("GEMM").field("dst_factor_out").width == 12
    with pytest.raises(AsmError, match="dst_factor_out=2048 does not fit in 11 bits"):
        small.encode(small.make("GEMM", dst_factor_out=2048))
    assert big.decode(big.encode(big.make("GEMM", dst_factor_out=2048))).dst_factor_out == 2048
    with pytest.raises(ConfigError, match="cannot derive"):
        VTA.bind(object())
    with pytest.raises(DecodeError, match="unknown opcode 0x5") as ei:
        small.decode(5)
    assert ei.value.bits == 128 and f"0x{5:032X}" in str(ei.value)


# --- two slots: eBPF lddw (RFC 9669 §5.4) ------------------------------------------------------------

EBPF_FIELDS = (bits("dst", 11, 8), bits("src", 15, 12), bits("offset", 31, 16, signed=True))
EBPF = Spec("ebpf-like", 64, (
    Format("MOV_IMM", (const("opcode", 7, 0, 0xB7), *EBPF_FIELDS, bits("imm", 63, 32, signed=True))),
    Format("LDDW", (const("opcode", 7, 0, 0x18), *EBPF_FIELDS[:2], bits("offset", 31, 16, reserved=True),
                    Field("imm", 64, pieces=((32, 32), (96, 32))), bits("next", 95, 64, reserved=True)),
           words=2),
))


def _slot(opcode, dst, src, off, imm):
    """struct bpf_insn, little-endian: u8 code, u8 dst:4 src:4, s16 off, s32 imm."""
    return int.from_bytes(struct.pack("<BBhi", opcode, dst | src << 4, off, imm), "little")


@given(st.integers(0, 10), st.integers(0, 10), st.integers(0, 2**64 - 1))
def test_two_slot_instruction_matches_the_rfc_layout(dst, src, imm):
    spec = EBPF.bind()
    lo, hi = imm & 0xFFFFFFFF, imm >> 32
    want = [_slot(0x18, dst, src, 0, struct.unpack("<i", struct.pack("<I", lo))[0]),
            _slot(0, 0, 0, 0, struct.unpack("<i", struct.pack("<I", hi))[0])]
    ins = spec.make("LDDW", dst=dst, src=src, imm=imm)
    assert spec.encode_words(ins) == want
    assert spec.decode_at([*want, 0], 0) == (ins, 2)
    assert spec.decode_program(spec.encode_program([ins, spec.make("MOV_IMM", dst=1, imm=-1)])) == [
        ins, spec.make("MOV_IMM", dst=1, imm=-1)]


@given(st.integers(-(2**15), 2**15 - 1), st.integers(-(2**31), 2**31 - 1))
def test_signed_fields_are_twos_complement(off, imm):
    spec = EBPF.bind()
    word = spec.encode(spec.make("MOV_IMM", dst=3, offset=off, imm=imm))
    assert word == _slot(0xB7, 3, 0, off, imm)
    got = spec.decode(word)
    assert (got.offset, got.imm) == (off, imm)


def test_two_slot_errors():
    spec = EBPF.bind()
    first = _slot(0x18, 1, 0, 0, 7)
    with pytest.raises(DecodeError, match="takes 2 words; the program ends"):
        spec.decode_at([first], 0)
    with pytest.raises(DecodeError, match=r"reserved bits w1\[31:0\] are nonzero") as ei:
        spec.decode_at([first, 0x1B7], 0)
    assert ei.value.bits == 128
    with pytest.raises(DecodeError, match="LDDW takes 2 words"):
        spec.decode(first)
    with pytest.raises(AsmError, match=r"imm=2147483648 does not fit in 32 bits \(signed\)"):
        spec.encode(spec.make("MOV_IMM", imm=2**31))
    with pytest.raises(DecodeError, match="unknown opcode 0x0"):
        spec.decode(0)


# --- decode reasons, enums, layout checks ----------------------------------------------------------


class Kind(IntEnum):
    A = 1
    B = 2


class Flags(IntFlag):
    X = 1
    Y = 4


TOY = Spec("toy", 16, (
    Format("OP", (Field("k", 2, enum=Kind), Field("f", 3, enum=Flags), bits("r", 6, 5, reserved=True),
                  bits("n", 11, 8), const("opc", 15, 12, 1))),
    Format("RAW", (Field("k", 2, enum=Kind, strict_enum=False), const("opc", 15, 12, 2))),
))


@pytest.mark.parametrize(("word", "needle"), [
    (0x1000, "k 0x0 is not a known Kind"),
    (0x1001 | 2 << 2, "f 0x2 is not a known Flags"),
    (0x1001 | 1 << 5, r"reserved bits \[6:5\] are nonzero"),
    (0x1001 | 1 << 7, r"unassigned bits \[7\] are nonzero"),
    (0x3000, "unknown opc 0x3"),
])
def test_decode_reasons(word, needle):
    with pytest.raises(DecodeError, match=needle) as ei:
        TOY.bind().decode(word)
    assert "\n" not in str(ei.value) and ei.value.word == word and f"0x{word:04X}" in str(ei.value)


def test_typed_values_and_lenient_enums():
    spec = TOY.bind()
    ins = spec.decode(0x1000 | 3 << 8 | 5 << 2 | 2)
    assert ins.k is Kind.B and ins.f == Flags.X | Flags.Y and isinstance(ins.f, Flags) and ins.n == 3
    assert spec.decode(0x2003).k == 3  # strict_enum=False keeps the raw value for a check to judge
    with pytest.raises(AsmError, match="not a toy instruction"):
        spec.encode(ins.__class__.__mro__[1]())
    with pytest.raises(AsmError, match="OP field n=16 does not fit in 4 bits"):
        spec.encode(spec.make("OP", k=Kind.A, n=16))
    assert spec.validate(spec.make("OP", k=Kind.A)) is None
    assert "not a known Kind" in spec.validate(spec.make("OP"))


def test_limits_from_the_description_bound_values():
    spec = Spec("lim", 16, (Format("LD", (Field("idx", 8, limit="depth"), const("op", 15, 8, 1))),))
    small = spec.bind(type("Hw", (), {"depth": 100})())
    assert small.decode(0x0163).idx == 99
    with pytest.raises(DecodeError, match=r"idx 100 is out of range \(max 99\)"):
        small.decode(0x0164)
    with pytest.raises(DecodeError, match="out of range"):
        small.encode(small.make("LD", idx=200))


def test_bad_layouts_are_config_errors():
    with pytest.raises(ConfigError, match="overlaps"):
        Spec("s", 8, (Format("A", (bits("a", 3, 0), bits("b", 4, 3))),)).bind()
    with pytest.raises(ConfigError, match="exceed the 8-bit"):
        Spec("s", 8, (Format("A", (bits("a", 8, 0),)),)).bind()
    with pytest.raises(ConfigError, match="same match bits"):
        Spec("s", 8, (Format("A", (const("o", 1, 0, 1),)), Format("B", (const("o", 1, 0, 1),)))).bind()


def test_markdown_table_lists_every_field():
    table = markdown_table(EBPF.bind())
    assert table.splitlines()[0] == "| format | field | bits | width | asm | meaning |"
    assert "| `LDDW` | `imm` | w1[63:32], w0[63:32] | 64 | `imm` |  |" in table
    assert "| `MOV_IMM` | `opcode` | [7:0] | 8 |  | = 0xB7 |" in table
    assert sum(len(f.fields) for f in EBPF.bind().formats) == len(table.splitlines()) - 2
