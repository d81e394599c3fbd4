"""pccx ISA encodings against the RTL field table (isa_pkg.sv, typed in here), validation, asm round trips."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from npukit.errors import DecodeError, FormatError
from npukit.targets.pccx import asm, isa
from npukit.targets.pccx.isa import (
    AsmError,
    Cvo,
    CvoFlag,
    CvoFunc,
    DestCache,
    Device,
    Gemm,
    Gemv,
    GemvFlag,
    Limits,
    Memcpy,
    Memset,
)

# pccxai/pccx-v002 LLM/rtl/packages/isa/isa_pkg.sv @110cdae0: (field, msb, lsb) of the 60-bit body
RTL = {
    0x0: [("dest_reg", 59, 43), ("src_addr", 42, 26), ("flags", 25, 20), ("size_ptr_addr", 19, 14),
          ("shape_ptr_addr", 13, 8), ("parallel_lane", 7, 3)],
    0x2: [("from_device", 59, 59), ("to_device", 58, 58), ("dest_addr", 57, 41), ("src_addr", 40, 24),
          ("aux_addr", 23, 7), ("shape_ptr_addr", 6, 1), ("async", 0, 0)],
    0x3: [("dest_cache", 59, 58), ("dest_addr", 57, 52), ("a_value", 51, 36), ("b_value", 35, 20),
          ("c_value", 19, 4)],
    0x4: [("cvo_func", 59, 56), ("src_addr", 55, 39), ("dst_addr", 38, 22), ("length", 21, 6),
          ("flags", 5, 1), ("async", 0, 0)],
}
RTL[0x1] = RTL[0x0]
WIDE = Limits(l2_words=1 << 17, cc_entries=64, lanes=31)  # lets every field reach its bit maximum


def _word(opcode, values):
    w = opcode << 60
    for name, msb, lsb in RTL[opcode]:
        v = values.get(name, 0)
        assert 0 <= v < 1 << (msb - lsb + 1)
        w |= v << lsb
    return w


def _build(opcode, v):
    if opcode in (0, 1):
        cls = Gemv if opcode == 0 else Gemm
        return cls(v["dest_reg"], v["src_addr"], GemvFlag(v["flags"]), v["size_ptr_addr"],
                   v["shape_ptr_addr"], v["parallel_lane"])
    if opcode == 2:
        return Memcpy(Device(v["from_device"]), Device(v["to_device"]), v["dest_addr"], v["src_addr"],
                      v["aux_addr"], v["shape_ptr_addr"], bool(v["async"]))
    if opcode == 3:
        return Memset(DestCache(v["dest_cache"]), v["dest_addr"], v["a_value"], v["b_value"], v["c_value"])
    return Cvo(CvoFunc(v["cvo_func"]), v["src_addr"], v["dst_addr"], v["length"], CvoFlag(v["flags"]),
               bool(v["async"]))


BOUNDARY = [
    (0x0, {"dest_reg": 0x1FFFF, "src_addr": 0, "flags": 0b111000, "size_ptr_addr": 63,
           "shape_ptr_addr": 0, "parallel_lane": 31}),
    (0x0, {"dest_reg": 0, "src_addr": 0x1FFFF, "flags": 0b100000, "size_ptr_addr": 0,
           "shape_ptr_addr": 63, "parallel_lane": 0}),
    (0x1, {"dest_reg": 0x15555, "src_addr": 0x0AAAA, "flags": 0b001000, "size_ptr_addr": 42,
           "shape_ptr_addr": 21, "parallel_lane": 4}),
    (0x2, {"from_device": 1, "to_device": 0, "dest_addr": 0x1FFFF, "src_addr": 0, "aux_addr": 0x1FFFF,
           "shape_ptr_addr": 63, "async": 1}),
    (0x2, {"from_device": 0, "to_device": 1, "dest_addr": 0, "src_addr": 0x1FFFF, "aux_addr": 1,
           "shape_ptr_addr": 0, "async": 0}),
    (0x2, {"from_device": 0, "to_device": 0, "dest_addr": 1, "src_addr": 0x10000, "aux_addr": 0,
           "shape_ptr_addr": 1, "async": 1}),
    (0x3, {"dest_cache": 1, "dest_addr": 63, "a_value": 0xFFFF, "b_value": 0, "c_value": 0xFFFF}),
    (0x3, {"dest_cache": 0, "dest_addr": 0, "a_value": 1, "b_value": 0xFFFF, "c_value": 0}),
    (0x4, {"cvo_func": 0x7, "src_addr": 0x1FFFF - 8192, "dst_addr": 0x1FFFF - 8192, "length": 0xFFFF,
           "flags": 0b00100, "async": 1}),
    (0x4, {"cvo_func": 0x6, "src_addr": 0, "dst_addr": 1, "length": 1, "flags": 0b01100, "async": 0}),
    (0x4, {"cvo_func": 0x0, "src_addr": 3, "dst_addr": 0, "length": 8, "flags": 0b10000, "async": 0}),
]


@pytest.mark.parametrize(("opcode", "values"), BOUNDARY)
def test_encode_matches_rtl_layout(opcode, values):
    want = _word(opcode, values)
    ins = _build(opcode, values)
    assert isa.encode(ins, "strict", WIDE) == want
    assert isa.decode(want, "strict", WIDE) == ins


@given(st.data())
def test_random_fields_match_rtl_layout(data):
    opcode = data.draw(st.sampled_from([0, 1, 2, 3, 4]))
    v = {}
    for name, msb, lsb in RTL[opcode]:
        v[name] = data.draw(st.integers(0, (1 << (msb - lsb + 1)) - 1))
    # keep the word valid: reserved flag bits clear, legal enums/routes/functions
    if opcode in (0, 1):
        v["flags"] &= 0b111000
    if opcode == 2:
        if v["from_device"]:
            v["to_device"], v["src_addr"] = 0, 0
        if v["to_device"]:
            v["dest_addr"] = 0
        if not v["from_device"] and not v["to_device"]:
            v["aux_addr"] = 0
    if opcode == 3:
        v["dest_cache"] &= 1
    if opcode == 4:
        v["cvo_func"] &= 7
        v["length"] = max(1, v["length"])
        legal = [0, 0b00100] + ([0b10000, 0b10100] if v["cvo_func"] == 0 else [])
        legal += [0b01000, 0b01100] if v["cvo_func"] == 6 else []
        v["flags"] = data.draw(st.sampled_from(legal))
        room = (1 << 17) - isa.words_of(v["length"])
        v["src_addr"] = min(v["src_addr"], room)
        v["dst_addr"] = min(v["dst_addr"], room)
    assert isa.encode(_build(opcode, v), "strict", WIDE) == _word(opcode, v)


def test_extended_async_bit_positions():
    g = Gemv(dest_reg=1, async_=True)
    assert isa.encode(g) == (1 << 43) | 1
    assert isa.encode(Memset(DestCache.FMAP, 5, 1, 2, 3, async_=True)) == _word(
        3, {"dest_addr": 5, "a_value": 1, "b_value": 2, "c_value": 3}) | 1
    with pytest.raises(DecodeError, match="async bit is reserved"):
        isa.decode((1 << 43) | 1, "strict")
    assert isa.decode((1 << 43) | 1, "extended").async_


@pytest.mark.parametrize(("word", "profile", "needle"), [
    (0x5 << 60, "extended", "unknown opcode 0x5"),
    (0xF << 60, "strict", "unknown opcode 0xF"),
    (0b010, "extended", "reserved bits"),  # GEMV [2:1]
    (1 << 20, "extended", "reserved GEMV/GEMM flag bits"),
    ((3 << 60) | 0b1000, "extended", "reserved bits"),  # MEMSET [3:1]
    ((3 << 60) | (3 << 58), "extended", "dest_cache 3 is reserved"),
    ((3 << 60) | (2 << 58), "strict", "dest_cache 2 is reserved"),
    ((4 << 60) | (8 << 56) | (1 << 6), "strict", "cvo_func 0x8 is reserved"),
    ((4 << 60) | (1 << 6) | (1 << 1), "extended", "reserved CVO flag bits"),
    ((4 << 60), "extended", "length is 0"),
    ((4 << 60) | (0x1C000 << 39) | (1 << 6), "extended", "beyond L2"),
    ((4 << 60) | (0x1BFFF << 22) | (16 << 6), "extended", "runs past L2"),
    (0x1C000 << 43, "extended", "dest_reg 0x1C000 is beyond L2"),
    (5 << 3, "extended", "parallel_lane 5 exceeds"),
    (0xF << 3, "strict", "parallel_lane 15 exceeds"),  # the C API's 0x0F mask is not a count
    ((2 << 60) | (3 << 58), "extended", "host to host"),
    ((2 << 60) | (1 << 59) | (1 << 24), "extended", "src_addr must be 0"),
    ((4 << 60) | (1 << 56) | (1 << 6) | (CvoFlag.SUB_EMAX << 1), "extended", "sub_emax applies to EXP"),
    ((4 << 60) | (9 << 56) | (1 << 6) | (CvoFlag.ACCM << 1), "extended", "accm is not defined for MUL"),
])
def test_invalid_words_raise_decode_error(word, profile, needle):
    with pytest.raises(DecodeError, match=needle) as ei:
        isa.decode(word, profile)
    assert ei.value.word == word and "\n" not in str(ei.value)


def test_limits_follow_the_hardware_description():
    small = Limits(l2_words=256, cc_entries=16, lanes=2)
    with pytest.raises(DecodeError, match="beyond the constant cache"):
        isa.decode(16 << 8, "extended", small)
    with pytest.raises(DecodeError, match="beyond L2"):
        isa.decode(256 << 43, "extended", small)
    assert isa.decode(255 << 43, "extended", small).dest_reg == 255


def test_encode_rejects_overflow_and_non_instructions():
    with pytest.raises(AsmError, match="does not fit"):
        isa.encode(Gemv(dest_reg=1 << 17))
    with pytest.raises(AsmError):
        isa.encode("gemv")  # type: ignore[arg-type]
    with pytest.raises(DecodeError):
        isa.encode(Cvo(length=0))


# --- random valid programs round-trip through text -------------------------------------------------

_l2 = st.integers(0, 0x1BFFF)
_slot = st.integers(0, 63)


def _cvo_strategy():
    @st.composite
    def build(draw):
        fn = draw(st.sampled_from(list(CvoFunc)))
        flags = 0
        if fn == CvoFunc.EXP and draw(st.booleans()):
            flags |= CvoFlag.SUB_EMAX
        if fn == CvoFunc.SCALE and draw(st.booleans()):
            flags |= CvoFlag.RECIP_SCALE
        if fn not in isa.NO_ACCM and draw(st.booleans()):
            flags |= CvoFlag.ACCM
        length = draw(st.integers(1, 0xFFFF))
        room = 0x1C000 - isa.words_of(length)
        return Cvo(fn, draw(st.integers(0, room)), draw(st.integers(0, room)), length, CvoFlag(flags),
                   draw(st.booleans()))
    return build()


@st.composite
def _memcpy(draw):
    route = draw(st.sampled_from([(1, 0), (0, 1), (0, 0)]))
    return Memcpy(Device(route[0]), Device(route[1]), 0 if route[1] else draw(_l2),
                  0 if route[0] else draw(_l2), 0 if route == (0, 0) else draw(st.integers(0, 0x1FFFF)),
                  draw(_slot), draw(st.booleans()))


@st.composite
def _memset(draw):
    cache = draw(st.sampled_from(list(DestCache)))
    if cache == DestCache.SREG:
        return Memset(cache, draw(st.integers(0, 1)), draw(st.integers(0, 0xFFFF)), 0, 0, draw(st.booleans()))
    v16 = st.integers(0, 0xFFFF)
    return Memset(cache, draw(_slot), draw(v16), draw(v16), draw(v16), draw(st.booleans()))


_mat = st.builds(
    lambda cls, d, s, f, a, b, lane, asy: cls(d, s, GemvFlag(f), a, b, lane, asy),
    st.sampled_from([Gemv, Gemm]), _l2, _l2, st.sampled_from([0, 8, 16, 24, 32, 40, 48, 56]), _slot, _slot,
    st.integers(0, 4), st.booleans())
INSTR = st.one_of(_mat, _memcpy(), _memset(), _cvo_strategy())


@given(st.lists(INSTR, max_size=40))
def test_assemble_disassemble_round_trip(prog):
    words = asm.encode_program(prog)
    text = asm.disassemble(words)
    assert asm.assemble(text) == words
    assert [isa.decode(w) for w in words] == prog
    assert asm.from_bytes(asm.to_bytes(words)) == words
    assert asm.from_hex(asm.to_hex(words)) == words


@given(st.lists(st.integers(0, 2**64 - 1), max_size=30))
def test_disassembly_of_arbitrary_words_round_trips(words):
    assert asm.assemble(asm.disassemble(words, "strict")) == words


def test_assembler_syntax_and_errors():
    text = """
    ; a softmax tail
    gemv dest=0x100 src=0 flags=findemax|w_scale size=1 shape=2 lanes=0   # comment
    cvo.exp src=0x100 dst=0x200 len=300 flags=sub_emax async
    memcpy from=host to=npu dest=0x10 aux=0x20 shape=3
    memset cache=sreg slot=0 a=0x3F80
    .word 0x0000000000000000
    """
    words = asm.assemble(text)
    assert words[0] == (0x100 << 43) | (0b101000 << 20) | (1 << 14) | (2 << 8)
    assert words[1] == (4 << 60) | (0x100 << 39) | (0x200 << 22) | (300 << 6) | (0b10000 << 1) | 1
    assert words[2] == (2 << 60) | (1 << 59) | (0x10 << 41) | (0x20 << 7) | (3 << 1)
    assert words[3] == (3 << 60) | (2 << 58) | (0x3F80 << 36)
    for bad, needle in [("gemv dest=0x1C000", "line 1: dest_reg 0x1C000 is beyond L2"),
                        ("frob x=1", "unknown mnemonic"), ("cvo.nope len=1", "unknown CVO function"),
                        ("gemv bogus=1", "no operand 'bogus'"), ("gemv dest=zz", "not an integer"),
                        ("gemv lanes=99", "does not fit"), ("gemv dest=1 dest=2", "given twice"),
                        ("cvo.tanh len=4", None)]:
        if needle is None:
            with pytest.raises(AsmError, match="reserved in v002"):
                asm.assemble(bad, "strict")
            assert asm.assemble(bad, "extended")
        else:
            with pytest.raises(AsmError, match=needle):
                asm.assemble(bad)


def test_program_files(tmp_path):
    words = [0x0123456789ABCDEF, 0, 2**64 - 1]
    asm.write_program(tmp_path / "p.bin", words, "bin")
    raw = (tmp_path / "p.bin").read_bytes()
    assert raw[:8] == bytes([0xEF, 0xCD, 0xAB, 0x89, 0x67, 0x45, 0x23, 0x01])  # little-endian words
    assert asm.read_program(tmp_path / "p.bin") == words
    asm.write_program(tmp_path / "p.hex", words, "hex")
    assert (tmp_path / "p.hex").read_text().splitlines()[0] == "0123456789abcdef"
    assert asm.read_program(tmp_path / "p.hex") == words
    (tmp_path / "bad.bin").write_bytes(b"\x00" * 9)
    with pytest.raises(FormatError, match="not a whole number"):
        asm.read_program(tmp_path / "bad.bin")
    (tmp_path / "bad.hex").write_text("@10\n")
    with pytest.raises(FormatError, match="line 1"):
        asm.read_program(tmp_path / "bad.hex")


@pytest.mark.slow
def test_a_million_random_words_decode_or_raise_decode_error():
    rng = np.random.default_rng(7)
    words = rng.integers(0, 2**63, 1_000_000, dtype=np.uint64) * np.uint64(2) + rng.integers(
        0, 2, 1_000_000, dtype=np.uint64)
    # bias half the words towards the five real opcodes so decoding paths are exercised, not just rejects
    words[::2] &= np.uint64(0x4FFFFFFFFFFFFFFF)
    ok = 0
    for profile in ("strict", "extended"):
        for w in words[: 500_000].tolist() if profile == "strict" else words[500_000:].tolist():
            try:
                isa.decode(w, profile)
                ok += 1
            except DecodeError:
                pass
    assert 0 < ok < 1_000_000
