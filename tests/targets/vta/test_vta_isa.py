"""VTA ISA against the C layout of TVM's ``hw_spec.h``: the structs are re-declared with ctypes
bitfields (``c_uint64`` members, which the platform C ABI packs LSB first without straddling a
64-bit unit), their widths written out from ``hw_spec_const.h`` for the default configuration
(uop depth 2^13, inp 2^11, wgt 2^10, acc 2^11), and every encoding is compared with the bytes
ctypes produces."""

import ctypes
import subprocess
import sys

import numpy as np
import pytest

from npukit.errors import ConfigError, DecodeError
from npukit.isa import text
from npukit.targets.vta.hw import VtaHw
from npukit.targets.vta.isa import ISA, UOP, AluOp, Mem

U, INP, WGT, ACC = 13, 11, 10, 11  # log2 depths from hw_spec_const.h for vta_config.json
HEAD = [("opcode", 3), ("pop_prev_dep", 1), ("pop_next_dep", 1), ("push_prev_dep", 1), ("push_next_dep", 1)]


def _struct(fields):
    class S(ctypes.LittleEndianStructure):
        _fields_ = [(n, ctypes.c_uint64, w) for n, w in fields]
    return S


MEM = _struct([*HEAD, ("memory_type", 3), ("sram_base", 16), ("dram_base", 32), ("y_size", 16),
               ("x_size", 16), ("x_stride", 16), ("y_pad_0", 4), ("y_pad_1", 4), ("x_pad_0", 4),
               ("x_pad_1", 4)])
LOOP = [*HEAD, ("reset_reg", 1), ("uop_bgn", U), ("uop_end", U + 1), ("iter_out", 14), ("iter_in", 14),
        ("dst_factor_out", ACC), ("dst_factor_in", ACC)]
GEM = _struct([*LOOP, ("src_factor_out", INP), ("src_factor_in", INP), ("wgt_factor_out", WGT),
               ("wgt_factor_in", WGT)])
ALU = _struct([*LOOP, ("src_factor_out", ACC), ("src_factor_in", ACC), ("alu_opcode", 3), ("use_imm", 1),
               ("imm", 16)])

OURS = {"pop_prev_dep": "pop_prev", "pop_next_dep": "pop_next", "push_prev_dep": "push_prev",
        "push_next_dep": "push_next"}


class UopC(ctypes.LittleEndianStructure):
    _fields_ = [("dst_idx", ctypes.c_uint32, ACC), ("src_idx", ctypes.c_uint32, max(ACC, INP)),
                ("wgt_idx", ctypes.c_uint32, WGT)]


def _c_word(cls, values) -> int:
    s = cls(**values)
    assert ctypes.sizeof(s) == 16
    return int.from_bytes(bytes(s), "little")


def _random_fields(rng, cls, opcode):
    vals = {}
    for name, _, width in cls._fields_:
        vals[name] = opcode if name == "opcode" else int(rng.integers(0, 1 << width))
    return vals


@pytest.mark.parametrize(("name", "cls", "opcode"), [("LOAD", MEM, 0), ("STORE", MEM, 1), ("GEMM", GEM, 2),
                                                     ("ALU", ALU, 4)])
def test_encoding_matches_the_c_bitfield_layout(name, cls, opcode):
    b = ISA.bind(VtaHw())
    rng = np.random.default_rng(opcode)
    for _ in range(200):
        v = _random_fields(rng, cls, opcode)
        if name in ("LOAD", "STORE"):
            v["memory_type"] = int(rng.integers(0, 6))
        if name in ("GEMM", "ALU"):
            v["uop_end"] = int(rng.integers(v["uop_bgn"], 1 << U))
        if name == "ALU":
            v["alu_opcode"] = int(rng.integers(0, 5))
        word = _c_word(cls, v)
        ins = b.decode(word)
        for cname, val in v.items():
            if cname == "opcode":
                continue
            got = getattr(ins, OURS.get(cname, cname))
            expect = val - (1 << 16) if cname == "imm" and val >= 1 << 15 else val
            assert int(got) == expect, (name, cname)
        assert b.encode(ins) == word


def test_finish_and_uop_layout():
    b = ISA.bind(VtaHw())
    fin = b.make("FINISH", push_prev=True)
    generic = _struct([*HEAD, ("pad_0", 64 - 3 - 4), ("pad_1", 64)])  # VTAGenericInsn
    assert b.encode(fin) == _c_word(generic, {"opcode": 3, "push_prev_dep": 1})
    u = UOP.bind(VtaHw())
    uop = u.make("UOP", dst_idx=2047, src_idx=5, wgt_idx=1000)
    assert u.encode(uop) == int.from_bytes(bytes(UopC(dst_idx=2047, src_idx=5, wgt_idx=1000)), "little")


def test_widths_follow_the_log2_parameters():
    # halving the inp, wgt and uop buffers takes one bit off their indices and factors
    b = ISA.bind(VtaHw(log_inp_buff_size=14, log_wgt_buff_size=17, log_uop_buff_size=14))
    assert b.format("GEMM").field("src_factor_in").width == INP - 1
    assert b.format("GEMM").field("wgt_factor_out").width == WGT - 1
    assert b.format("GEMM").field("uop_end").width == U  # still one more than uop_bgn
    assert b.format("ALU").field("src_factor_in").width == ACC  # ALU sources index acc
    assert UOP.bind(VtaHw(log_inp_buff_size=14)).formats[0].field("src_idx").width == max(ACC, INP - 1)
    # a bigger accumulator no longer fits the second 64-bit unit (GEMM: 2·(12+11+10) > 64)
    with pytest.raises(ConfigError, match="GEMM factors need 66 bits"):
        VtaHw(log_acc_buff_size=18)


@pytest.mark.parametrize(("word", "reason"), [
    (5, "unknown opcode 0x5"),  # opcode 5 does not exist
    (3 | (1 << 70), "unassigned bits [127:7] are nonzero"),  # FINISH with stray bits
    (4 | (7 << 108), "unknown alu_opcode 7"),
    (0 | (6 << 7), "unknown memory_type 6"),
    (2 | (5 << 8) | (4 << 21), "uop_end 4 < uop_bgn 5"),
])
def test_malformed_words_are_typed_errors(word, reason):
    with pytest.raises(DecodeError) as e:
        ISA.bind(VtaHw()).decode(word)
    assert reason in str(e.value)


def _npukit(*argv):
    return subprocess.run([sys.executable, "-m", "npukit", *argv], capture_output=True, text=True,
                          timeout=120)


PROGRAM = """
load.uop sram_base=0 dram_base=0x10 y_size=1 x_size=4 x_stride=4 push_next
load.inp pop_next sram_base=0x20 dram_base=0x40 y_size=3 x_size=2 x_stride=7 y_pad_0=1 x_pad_1=2 push_next
gemm pop_prev reset_reg uop_bgn=0 uop_end=4 iter_out=3 iter_in=2 dst_factor_out=16 dst_factor_in=1
alu.shr use_imm imm=-7 uop_end=2 iter_out=1 iter_in=1 push_next
store.out pop_prev sram_base=0 dram_base=0x100 y_size=1 x_size=2 x_stride=2 push_prev
finish
"""


@pytest.mark.slow  # CLI subprocesses
def test_asm_disasm_round_trip_through_the_cli(tmp_path):
    (tmp_path / "p.s").write_text(PROGRAM)
    out = _npukit("asm", "--target", "vta", str(tmp_path / "p.s"), "-o", str(tmp_path / "p.bin"))
    assert out.returncode == 0, out.stderr
    words = text.read_program(tmp_path / "p.bin", 128, None)
    # the ALU line against the C layout
    alu = {"opcode": 4, "push_next_dep": 1, "uop_end": 2, "iter_out": 1, "iter_in": 1, "alu_opcode": 3,
           "use_imm": 1, "imm": (-7) & 0xFFFF}
    assert words[3] == _c_word(ALU, alu)
    load = {"opcode": 0, "pop_next_dep": 1, "push_next_dep": 1, "memory_type": 2, "sram_base": 0x20,
            "dram_base": 0x40, "y_size": 3, "x_size": 2, "x_stride": 7, "y_pad_0": 1, "x_pad_1": 2}
    assert words[1] == _c_word(MEM, load)
    out = _npukit("disasm", "--target", "vta", str(tmp_path / "p.bin"))
    assert out.returncode == 0, out.stderr
    (tmp_path / "q.s").write_text(out.stdout)
    out = _npukit("asm", "--target", "vta", str(tmp_path / "q.s"), "-o", str(tmp_path / "q.bin"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "q.bin").read_bytes() == (tmp_path / "p.bin").read_bytes()
    bad = tmp_path / "bad.s"
    bad.write_text("alu.add imm=40000 use_imm\n")
    out = _npukit("asm", "--target", "vta", str(bad), "-o", str(tmp_path / "b.bin"))
    assert out.returncode == 2 and "line 1" in out.stderr and "imm" in out.stderr


@pytest.mark.slow  # CLI subprocess
def test_deadlocked_program_names_queue_and_instruction_exit_2(tmp_path):
    src = ("load.inp sram_base=0 dram_base=0 y_size=1 x_size=1 x_stride=1 push_next\n"
           "gemm pop_prev pop_next uop_end=0 iter_out=1 iter_in=1\n"  # s2g: the store never pushed
           "store.out pop_prev sram_base=0 dram_base=0 y_size=1 x_size=1 x_stride=1 push_prev\n"
           "finish\n")
    (tmp_path / "d.s").write_text(src)
    out = _npukit("asm", "--target", "vta", str(tmp_path / "d.s"), "-o", str(tmp_path / "d.bin"))
    assert out.returncode == 0, out.stderr
    out = _npukit("sim", "--target", "vta", str(tmp_path / "d.bin"))
    assert out.returncode == 2
    err = out.stderr.strip()
    assert err.startswith("npukit: error: dependency-queue deadlock") and "\n" not in err
    assert "instruction 1 (gemm" in err and "waits to pop 's2g'" in err
    assert "instruction 2 (store.out" in err and "'g2s'" in err


def test_memory_enums():
    assert [m.value for m in Mem] == [0, 1, 2, 3, 4, 5] and [a.value for a in AluOp] == [0, 1, 2, 3, 4]


def test_npukit_hw_shows_the_derived_shapes(capsys):
    """The default configuration's shapes as hw_spec_const.h derives them (refs: uop 2^13, inp 2^11,
    wgt 2^10, acc 2^11 elements; a uop of 11 + 11 + 10 = 32 bits)."""
    import json

    from npukit.cli.main import main

    assert main(["hw", "vta-alkali", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)["description"]
    assert d["log_block"] == 4 and d["log_acc_buff_size"] == 17
    derived = d["derived"]
    assert derived["uop_buffer"] == f"32768 B = {2**U} x 32-bit uops"
    assert derived["inp_buffer"] == f"32768 B = {2**INP} x 1x16 int8"
    assert derived["wgt_buffer"] == f"262144 B = {2**WGT} x 16x16 int8"
    assert derived["acc_buffer"] == f"131072 B = {2**ACC} x 1x16 int32"
    assert derived["uop_bits"] == "dst 11 + src 11 + wgt 10 = 32" and derived["macs_per_cycle"] == 256
    assert d["timing"]["tier"] == "projected" and d["timing"]["source"]
