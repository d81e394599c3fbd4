"""The functional simulator against a plain-Python transcription of the semantics in TVM's
``hw_spec.h`` loop pseudocode and ``sim_driver.cc`` (element by element, C int32 wrap-around):
padded 2-D loads, GEMM over a two-level uop loop, every ALU opcode with immediates and with
accumulator operands (SHR by a negative amount shifts left), and the truncating store."""

import numpy as np
import pytest

from npukit.targets.vta.hw import VtaHw
from npukit.targets.vta.isa import ISA, UOP, AluOp, Mem
from npukit.targets.vta.program import run

HW = VtaHw()


def wrap32(v: int) -> int:
    return (v + 2**31) % 2**32 - 2**31


def c_alu(op: int, x: int, y: int) -> int:
    if op == AluOp.ADD:
        return wrap32(x + y)
    if op == AluOp.MUL:
        return wrap32(x * y)
    if op == AluOp.MIN:
        return min(x, y)
    if op == AluOp.MAX:
        return max(x, y)
    return x >> (y & 31) if y >= 0 else wrap32(x << ((-y) & 31))


def reference(dram: bytearray, prog) -> bytearray:
    """Element-by-element model: SRAMs as dicts of lists."""
    inp, wgt, acc, uop = {}, {}, {}, {}
    for ins in prog:
        kind = type(ins).__name__.upper()
        if kind == "LOAD" and ins.x_size:
            elem = {Mem.INP: 16, Mem.WGT: 256, Mem.ACC: 64, Mem.UOP: 4}[ins.memory_type]
            xt = ins.x_pad_0 + ins.x_size + ins.x_pad_1
            dst = {Mem.INP: inp, Mem.WGT: wgt, Mem.ACC: acc, Mem.UOP: uop}[ins.memory_type]
            for yy in range(ins.y_pad_0 + ins.y_size + ins.y_pad_1):
                for xx in range(xt):
                    idx = ins.sram_base + yy * xt + xx
                    ry, rx = yy - ins.y_pad_0, xx - ins.x_pad_0
                    if 0 <= ry < ins.y_size and 0 <= rx < ins.x_size:
                        a = (ins.dram_base + ry * ins.x_stride + rx) * elem
                        raw = bytes(dram[a:a + elem])
                        if ins.memory_type == Mem.UOP:
                            dst[idx] = int.from_bytes(raw, "little")
                        elif ins.memory_type == Mem.ACC:
                            dst[idx] = [int.from_bytes(raw[4 * i:4 * i + 4], "little", signed=True)
                                        for i in range(16)]
                        else:
                            dst[idx] = list(np.frombuffer(raw, np.int8).tolist())
                    else:
                        dst[idx] = 0 if ins.memory_type == Mem.UOP else [0] * (elem if elem < 64 else 16)
        elif kind in ("GEMM", "ALU"):
            for y in range(ins.iter_out):
                for x in range(ins.iter_in):
                    for k in range(ins.uop_bgn, ins.uop_end):
                        w = uop[k]
                        d = (w & 0x7FF) + y * ins.dst_factor_out + x * ins.dst_factor_in
                        s = ((w >> 11) & 0x7FF) + y * ins.src_factor_out + x * ins.src_factor_in
                        if kind == "GEMM":
                            g = (w >> 22) + y * ins.wgt_factor_out + x * ins.wgt_factor_in
                            if ins.reset_reg:
                                acc[d] = [0] * 16
                                continue
                            dots = [sum(inp[s][i] * wgt[g][j * 16 + i] for i in range(16)) for j in range(16)]
                            acc[d] = [wrap32(acc[d][j] + dots[j]) for j in range(16)]
                        else:
                            src = [ins.imm] * 16 if ins.use_imm else acc[s]
                            acc[d] = [c_alu(ins.alu_opcode, acc[d][j], src[j]) for j in range(16)]
        elif kind == "STORE" and ins.x_size:
            for yy in range(ins.y_size):
                for xx in range(ins.x_size):
                    a = (ins.dram_base + yy * ins.x_stride + xx) * 16
                    dram[a:a + 16] = bytes(v & 0xFF for v in acc[ins.sram_base + yy * ins.x_size + xx])
    return dram


def _program(rng, alu_ops):
    b = ISA.bind(HW)
    u = UOP.bind(HW)
    uops = [u.encode(u.make("UOP", dst_idx=int(rng.integers(0, 8)), src_idx=int(rng.integers(0, 6)),
                            wgt_idx=int(rng.integers(0, 4)))) for _ in range(3)]
    dram = bytearray(rng.integers(0, 256, 64 * 1024, dtype=np.uint8).tobytes())
    dram[0:12] = np.array(uops, np.uint32).tobytes()
    prog = [
        b.make("LOAD", memory_type=Mem.UOP, sram_base=0, dram_base=0, y_size=1, x_size=3, x_stride=3),
        b.make("LOAD", memory_type=Mem.ACC, sram_base=0, dram_base=16, y_size=6, x_size=4, x_stride=5,
               x_pad_1=1, y_pad_0=1),
        b.make("LOAD", memory_type=Mem.INP, sram_base=0, dram_base=200, y_size=3, x_size=4, x_stride=9,
               x_pad_0=2, y_pad_1=2),
        b.make("LOAD", memory_type=Mem.WGT, sram_base=0, dram_base=20, y_size=2, x_size=5, x_stride=5,
               push_next=True),
        b.make("GEMM", pop_prev=True, uop_bgn=0, uop_end=3, iter_out=3, iter_in=2, dst_factor_out=5,
               dst_factor_in=2, src_factor_out=7, src_factor_in=3, wgt_factor_out=1, wgt_factor_in=2),
    ]
    for op, imm, use_imm in alu_ops:
        prog.append(b.make("ALU", uop_bgn=0, uop_end=3, iter_out=2, iter_in=2, dst_factor_out=9,
                           dst_factor_in=1, src_factor_out=3, src_factor_in=12, alu_opcode=op,
                           use_imm=use_imm, imm=imm))
    prog.append(b.make("GEMM", reset_reg=True, uop_bgn=1, uop_end=2, iter_out=1, iter_in=1, push_next=True))
    prog.append(b.make("STORE", memory_type=Mem.OUT, pop_prev=True, sram_base=0, dram_base=1000, y_size=4,
                       x_size=6, x_stride=7))
    prog.append(b.make("FINISH"))
    return prog, dram


@pytest.mark.parametrize("seed", range(4))
def test_simulator_matches_the_element_by_element_model(seed):
    rng = np.random.default_rng(seed)
    ops = [(AluOp.ADD, 0, False), (AluOp.MUL, int(rng.integers(-300, 300)), True), (AluOp.SHR, -3, True),
           (AluOp.SHR, 5, True), (AluOp.MIN, int(rng.integers(-2**15, 2**15)), True), (AluOp.MAX, -7, True),
           (AluOp.MUL, 0, False), (AluOp.SHR, 0, False), (AluOp.MIN, 0, False), (AluOp.MAX, 0, False)]
    prog, dram = _program(rng, ops)
    ours = run(HW, prog, np.frombuffer(bytes(dram), np.uint8).copy(), timing=True)
    expect = reference(bytearray(dram), prog)
    assert bytes(ours.dram) == bytes(expect)
    assert ours.counters.gemm_counter == 3 * 2 * 3
    assert ours.counters.alu_counter == len(ops) * 2 * 2 * 3
    assert ours.timing.cycles > 0 and ours.finished == 1


@pytest.mark.parametrize("k", [1, 2, 17, 260, 2000])
def test_gemm_program_extremes_survive_the_byte_plane_export(k):
    """GEMM programs export only the byte planes their bound allows: the extreme accumulators
    (all inputs −128 against all weights ±127, biases at the edge) must still come back exact."""
    from npukit.targets.vta.delegate.gemm import GemmProgram

    rng = np.random.default_rng(k)
    w = np.where(rng.integers(0, 2, (k, 19)) == 1, 127, -127).astype(np.int8)
    w[:, 0] = -127  # channel 0: the most negative sum
    w[:, 1] = 127
    bias = rng.integers(-2**20, 2**20, 19).astype(np.int32)
    a = np.full((5, k), -128, np.int8)
    a[1] = 127
    a[2:] = rng.integers(-128, 128, (3, k))
    prog = GemmProgram(HW, 5, w, bias)
    expect = a.astype(np.int64) @ w.astype(np.int64) + bias
    np.testing.assert_array_equal(prog.run(a).astype(np.int64), expect)
    assert prog.planes == next(p for p in (1, 2, 3, 4) if p == 4 or 128 * 127 * k + 2**20 < 2 ** (8 * p - 1))
