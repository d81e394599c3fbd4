"""The pccx functional simulator against per-instruction references written here (float64 math, Python
ints, ml_dtypes/grid BF16 rounding), plus device state, Work records and the error interrupt."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npukit.sim.work import Work
from npukit.targets.pccx import asm
from npukit.targets.pccx.hw import PccxHw
from npukit.targets.pccx.memory import DeviceFault, HostDDR
from npukit.targets.pccx.sim import STATUS_DONE, STATUS_ERROR, Simulator

from ._oracle import bf16_bits_from_f32, bf16_bits_from_f64, bits_equal, gemv_ref

W_ADDR = 0x2000_0000


def _bf16_vec(rng, n, lo=-8, hi=6):
    v = rng.choice([-1.0, 1.0], n) * (1 + rng.integers(0, 128, n) / 128.0) * np.exp2(rng.integers(lo, hi, n))
    v[rng.random(n) < 0.05] = 0.0
    return v.astype(np.float32)


def _to_bits(x32):
    return bf16_bits_from_f32(np.asarray(x32, np.float32))


def _int4_image(w, scales):
    """Host layout typed from docs/targets/pccx.md: rows of packed nibbles (even k low), then FP32 scales
    at the next 16-byte boundary."""
    m, k = w.shape
    rb = (k + 1) // 2
    body = bytearray(m * rb)
    for r in range(m):
        for c in range(k):
            nib = int(w[r, c]) & 0xF
            body[r * rb + c // 2] |= nib << (4 * (c % 2))
    if scales is not None:
        body += b"\0" * ((-len(body)) % 16) + np.asarray(scales, "<f4").tobytes()
    return bytes(body)


def _program(*lines):
    return asm.assemble("\n".join(lines))


def _sim_with_vectors(rng, k, n=1):
    sim = Simulator()
    xs = [_bf16_vec(rng, k, lo=int(rng.integers(-20, 0)), hi=int(rng.integers(1, 20))) for _ in range(n)]
    kw = -(-k // 8)
    for j, x in enumerate(xs):
        sim.write_l2_bits(0x100 + j * kw, _to_bits(x))
    return sim, xs


@settings(max_examples=40)
@given(st.integers(1, 70), st.integers(1, 90), st.integers(1, 3), st.booleans(), st.booleans(),
       st.integers(0, 2**32 - 1), st.sampled_from(["gemv", "gemm"]))
def test_gemv_gemm_int4_bit_exact(m, k, n, use_s, accm, seed, opname):
    rng = np.random.default_rng(seed)
    w = rng.integers(-8, 8, (m, k))
    s = rng.standard_normal(m).astype(np.float32) if use_s else None
    sim, xs = _sim_with_vectors(rng, k, n)
    sim.host.write(W_ADDR, _int4_image(w, s))
    mw = -(-m // 8)
    dests = [_bf16_vec(rng, m) for _ in range(n)]
    for j, d in enumerate(dests):
        sim.write_l2_bits(0x4000 + j * mw, _to_bits(d))
    unit = W_ADDR // 16
    flags = "|".join(f for f, on in (("w_scale", use_s), ("accm", accm), ("findemax", True)) if on)
    sim.load_program(_program(
        f"memset cache=fmap slot=2 a={m} b={n} c={k}",
        f"memset cache=weight slot=5 a=0 b={unit >> 16} c={unit & 0xFFFF}",
        f"{opname} dest=0x4000 src=0x100 flags={flags} size=5 shape=2 lanes=0"))
    works = sim.run()
    assert sim.status == STATUS_DONE and len(works) == 3
    outs = []
    for j in range(n):
        want = gemv_ref(w, xs[j], s, dests[j] if accm else None)
        got = sim.read_l2_bits(0x4000 + j * mw, m)
        assert bits_equal(got, want)
        outs.append(want)
    # findemax: e_max = max(-inf, every output) in BF16
    vals = np.concatenate(outs).view(np.uint16).astype(np.uint32) << 16
    assert sim.emax == np.max(vals.view(np.float32))
    wk = works[2]
    assert wk.engine == opname and wk.macs == m * n * k
    assert wk.weight_bytes == m * ((k + 1) // 2) + (4 * m if use_s else 0)
    assert wk.writes == ((0x4000, 0x4000 + n * mw),)
    assert wk.reads[0] == (0x100, 0x100 + n * -(-k // 8))


@settings(max_examples=25)
@given(st.integers(1, 20), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_gemv_int8_and_fp16_bit_exact(m, k, seed):
    rng = np.random.default_rng(seed)
    sim, (x,) = _sim_with_vectors(rng, k)
    w8 = rng.integers(-128, 128, (m, k))
    s = (rng.random(m) + 0.5).astype(np.float32)
    img8 = w8.astype(np.int8).tobytes()
    sim.host.write(W_ADDR, img8 + b"\0" * ((-len(img8)) % 16) + s.astype("<f4").tobytes())
    w16 = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-10, 3, (m, k)))).astype(np.float16)
    sim.host.write(W_ADDR + 0x100000, w16.astype("<f2").tobytes())
    unit = W_ADDR // 16
    sim.load_program(_program(
        f"memset cache=fmap slot=0 a={m} b=1 c={k}",
        f"memset cache=weight slot=1 a=1 b={unit >> 16} c={unit & 0xFFFF}",
        f"memset cache=weight slot=2 a=2 b={(unit + 0x10000) >> 16} c={(unit + 0x10000) & 0xFFFF}",
        "gemv dest=0x800 src=0x100 flags=w_scale size=1 shape=0",
        "gemv dest=0x900 src=0x100 flags=0 size=2 shape=0"))
    sim.run()
    assert sim.status == STATUS_DONE
    assert bits_equal(sim.read_l2_bits(0x800, m), gemv_ref(w8, x, s))
    wfix = np.array([[int(math.ldexp(float(v), 24)) for v in row] for row in w16], dtype=object)
    assert bits_equal(sim.read_l2_bits(0x900, m), gemv_ref(wfix, x, fixed_shift=24))


def test_gemv_ksplit_label_and_partial_word_preserved():
    rng = np.random.default_rng(3)
    sim, (x,) = _sim_with_vectors(rng, 5000)
    w = rng.integers(-8, 8, (3, 5000))
    sim.host.write(W_ADDR, _int4_image(w, None))
    sim.write_l2_bits(0x4000, np.arange(8, dtype=np.uint16) + 0x3F80)
    unit = W_ADDR // 16
    sim.load_program(_program("memset cache=fmap slot=0 a=3 b=1 c=5000",
                              f"memset cache=weight slot=0 a=0 b={unit >> 16} c={unit & 0xFFFF}",
                              "gemv dest=0x4000 src=0x100 shape=0 size=0 lanes=2 async"))
    works = sim.run()
    assert "ksplit=2" in works[-1].label and works[-1].is_async and works[-1].lanes == 2
    got = sim.read_l2_bits(0x4000, 8)
    assert bits_equal(got[:3], gemv_ref(w, x))
    assert got[3:].tolist() == [0x3F83, 0x3F84, 0x3F85, 0x3F86, 0x3F87]  # tail of the word untouched


# --- CVO ------------------------------------------------------------------------------------------

def _ref(fn, x, emax=None, s=None, d=None):
    xs = [float(v) for v in x]

    def one(v, i):
        if fn == "exp":
            return math.exp(v - emax) if emax is not None else math.exp(v)
        if fn == "sqrt":
            return math.sqrt(v) if v >= 0 else math.nan
        if fn == "gelu":  # NumPy's tanh (the contract, docs/numerics.md): for x < -5, 1 + tanh(.)
            # cancels, and libm's tanh (math.tanh) differs from NumPy's by an ulp there
            return 0.5 * v * (1 + float(np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v * v * v))))
        if fn == "sin":
            return math.sin(v)
        if fn == "cos":
            return math.cos(v)
        if fn == "recip":
            return 1.0 / v if v else math.copysign(math.inf, v)
        if fn == "tanh":
            return math.tanh(v)
        if fn == "rsqrt":
            return math.inf if v == 0 else (1.0 / math.sqrt(v) if v > 0 else math.nan)
        if fn == "square":
            return v * v
        if fn == "scale":
            return v * s
        if fn == "relu_bias":
            return max(v - s, 0.0)
        if fn == "mul":
            return v * float(d[i])
        if fn == "add":
            return v + float(d[i])
        raise AssertionError(fn)

    return np.array([one(v, i) for i, v in enumerate(xs)])


UNARY = ["exp", "sqrt", "gelu", "sin", "cos", "recip", "tanh", "rsqrt", "square", "scale", "relu_bias"]


@settings(max_examples=60)
@given(st.sampled_from([*UNARY, "mul", "add"]), st.integers(1, 40), st.booleans(), st.integers(0, 2**32 - 1))
def test_cvo_elementwise_bit_exact(fn, n, accm, seed):
    rng = np.random.default_rng(seed)
    sim = Simulator()
    x = _bf16_vec(rng, n, lo=-6, hi=4)
    d = _bf16_vec(rng, n)
    s = float(_bf16_vec(rng, 1)[0]) or 1.0
    sim.write_l2_bits(0x10, _to_bits(x))
    sim.write_l2_bits(0x20, _to_bits(d))
    accm = accm and fn not in ("mul", "add")
    lines = [f"memset cache=sreg slot=0 a=0x{int(_to_bits([s])[0]):X}"]
    lines.append(f"cvo.{fn} src=0x10 dst=0x20 len={n}{' flags=accm' if accm else ''}")
    sim.load_program(_program(*lines))
    works = sim.run()
    assert sim.status == STATUS_DONE
    want = _ref(fn, x, s=s, d=d)
    if accm:
        want = want + d.astype(np.float64)
    assert bits_equal(sim.read_l2_bits(0x20, n), bf16_bits_from_f64(want))
    wk = works[-1]
    assert wk.engine == "sfu" and wk.sfu_elems == n and wk.writes == ((0x20, 0x20 + -(-n // 8)),)


def test_softmax_sequence_and_scalar_sources():
    """GEMV(findemax) -> EXP(sub_emax) -> REDUCE_SUM (sets S) -> SCALE(recip_scale), as pccx documents."""
    rng = np.random.default_rng(11)
    m, k = 37, 24
    sim, (x,) = _sim_with_vectors(rng, k)
    w = rng.integers(-8, 8, (m, k))
    sim.host.write(W_ADDR, _int4_image(w, None))
    unit = W_ADDR // 16
    sim.load_program(_program(
        f"memset cache=fmap slot=0 a={m} b=1 c={k}",
        f"memset cache=weight slot=0 a=0 b={unit >> 16} c={unit & 0xFFFF}",
        "gemv dest=0x200 src=0x100 flags=findemax shape=0 size=0",
        f"cvo.exp src=0x200 dst=0x300 len={m} flags=sub_emax",
        f"cvo.reduce_sum src=0x300 dst=0x400 len={m}",
        f"cvo.scale src=0x300 dst=0x500 len={m} flags=recip_scale"))
    sim.run()
    assert sim.status == STATUS_DONE
    scores = gemv_ref(w, x)
    sv = (scores.astype(np.uint32) << 16).view(np.float32)
    e = bf16_bits_from_f64(np.exp(sv.astype(np.float64) - float(sv.max())))
    ev = (e.astype(np.uint32) << 16).view(np.float32)
    acc = np.float32(0.0)
    for v in ev:
        acc = np.float32(acc + v)
    total = _to_bits([acc])
    tv = float((total.astype(np.uint32) << 16).view(np.float32)[0])
    assert bits_equal(sim.read_l2_bits(0x300, m), e)
    assert sim.read_l2_bits(0x400, 8).tolist() == [int(total[0])] + [0] * 7
    assert bits_equal(sim.read_l2_bits(0x500, m), bf16_bits_from_f64(ev.astype(np.float64) / tv))
    assert sim.scalar == np.float32(tv)


def test_reduce_max_load_scalar_and_sreg_memset():
    sim = Simulator()
    x = np.array([1.5, -7.0, 3.25, 0.5], np.float32)
    sim.write_l2_bits(0x10, _to_bits(x))
    sim.load_program(_program("cvo.reduce_max src=0x10 dst=0x30 len=4", "cvo.load_scalar src=0x10 len=1",
                              "cvo.scale src=0x10 dst=0x40 len=4", "memset cache=sreg slot=1 a=0xFF80"))
    sim.run()
    assert float(sim.read_l2(0x30, 1)[0]) == 3.25
    assert sim.scalar == np.float32(1.5)
    assert sim.read_l2(0x40, 4).tolist() == [2.25, -10.5, 4.875, 0.75]
    assert sim.emax == -np.inf  # reset by the SFU-register MEMSET


# --- MEMCPY / MEMSET / host memory ---------------------------------------------------------------

def test_memcpy_routes_and_work():
    sim = Simulator()
    data = np.arange(64, dtype=np.uint8)
    sim.host.write(0x1000_0000, data)
    sim.host.map(0x3000_0000, 4096)
    base = 0x1000_0000 // 16
    sim.load_program(_program(
        f"memset cache=fmap slot=7 a=4 b={base >> 16} c={base & 0xFFFF}",
        "memcpy from=host to=npu dest=0x50 aux=0 shape=7",
        "memcpy from=npu to=npu dest=0x60 src=0x50 shape=7 async",
        f"memset cache=fmap slot=8 a=2 b={(0x3000_0000 // 16) >> 16} c=0",
        "memcpy from=npu to=host src=0x61 aux=3 shape=8"))
    works = sim.run()
    assert sim.status == STATUS_DONE
    assert sim.l2[0x50:0x54].reshape(-1).view(np.uint8).tolist() == list(range(64))
    assert np.array_equal(sim.l2[0x60:0x64], sim.l2[0x50:0x54])
    assert sim.host.read(0x3000_0000 + 48, 32).tolist() == list(range(16, 48))
    assert [w.engine for w in works] == ["ctrl", "dma", "dma", "ctrl", "dma"]
    assert works[1].ddr_read_bytes == 64 and works[1].writes == ((0x50, 0x54),)
    assert works[2].is_async and works[2].reads == ((0x50, 0x54),)
    assert works[4].ddr_write_bytes == 32 and works[4].reads == ((0x61, 0x63),)
    assert all(isinstance(w, Work) for w in works)


def test_host_ddr_regions_are_sparse_and_checked(tmp_path):
    ddr = HostDDR(1 << 32)
    mm = np.memmap(tmp_path / "w.bin", dtype=np.uint8, mode="w+", shape=(1 << 20,))
    ddr.map(0xC000_0000, mm)  # a file-backed region: nothing dense is allocated for the 4 GB space
    ddr.write(0xC000_0010, b"\x01\x02")
    assert mm[0x10] == 1 and ddr.read(0xC000_0010, 2).tolist() == [1, 2]
    with pytest.raises(DeviceFault, match="not mapped"):
        ddr.read(0x10, 4)
    with pytest.raises(DeviceFault, match="overlaps"):
        ddr.map(0xC00F_FFF0, 64)
    with pytest.raises(DeviceFault, match="outside host DDR"):
        ddr.write((1 << 32) - 1, b"\0\0")


# --- error interrupt -------------------------------------------------------------------------------

@pytest.mark.parametrize(("lines", "needle", "at"), [
    (["memset cache=fmap slot=0 a=1 b=2 c=3", ".word 0x5000000000000000", "memset cache=fmap slot=1 a=1"],
     "unknown opcode", 1),
    (["memset cache=fmap slot=0 a=200 b=1 c=8", "gemv dest=0x1BFF0 src=0 shape=0 size=0"], "run past L2", 1),
    (["memset cache=fmap slot=0 a=4 b=0 c=8", "gemv dest=0x10 src=0 shape=0 size=0"], "not mapped", 1),
    (["memset cache=fmap slot=0 a=4 b=0 c=8", "memset cache=weight slot=0 a=3",
      "gemv dest=0x10 src=0 shape=0 size=0"], "format 3", 2),
    (["memset cache=fmap slot=0 a=0 b=0 c=8", "gemv dest=0x10 src=0 shape=0 size=0"], "M=0", 1),
    (["memset cache=fmap slot=0 a=4 b=0 c=0", "memcpy from=host to=npu dest=0 shape=0"], "not mapped", 1),
    ([".word 0x0000000000000002"], "reserved bits", 0),
])
def test_error_interrupt_halts_and_logs(lines, needle, at):
    sim = Simulator()
    sim.load_program(asm.assemble("\n".join(lines)))
    works = sim.run()
    assert sim.status & STATUS_ERROR and not sim.status & STATUS_DONE
    assert len(works) == at and sim.error.index == at and needle in sim.error.reason
    assert needle in sim.log[-1] and "\n" not in sim.log[-1]
    assert sim.step() is None  # halted
    assert len(sim.trace) == at  # what ran before the fault stays done, nothing after it runs


def test_strict_profile_rejects_extended_work_at_runtime():
    sim = Simulator(PccxHw(), profile="strict")
    sim.load_program([asm.assemble_line("cvo.tanh src=0 dst=8 len=8")])
    sim.run()
    assert sim.status & STATUS_ERROR and "reserved in v002" in sim.error.reason


@settings(max_examples=40)
@given(st.integers(1, 300), st.booleans(), st.integers(0, 2**32 - 1))
def test_reductions_and_l2_copy_bit_exact(n, accm, seed):
    rng = np.random.default_rng(seed)
    sim = Simulator()
    x = _bf16_vec(rng, n, lo=-10, hi=10)
    old = _bf16_vec(rng, 1)
    sim.write_l2_bits(0x10, _to_bits(x))
    sim.write_l2_bits(0x800, _to_bits(old))
    words = -(-n // 8)
    sim.load_program(_program(f"cvo.reduce_sum src=0x10 dst=0x800 len={n}{' flags=accm' if accm else ''}",
                              f"cvo.reduce_max src=0x10 dst=0x900 len={n}",
                              f"memset cache=fmap slot=9 a={words}",
                              "memcpy from=npu to=npu dest=0x1000 src=0x10 shape=9"))
    sim.run()
    assert sim.status == STATUS_DONE
    acc = np.float32(0.0)
    for v in x:
        acc = np.float32(acc + v)
    want = bf16_bits_from_f64(float(acc) + float(old[0])) if accm else _to_bits([acc])
    assert sim.read_l2_bits(0x800, 8).tolist() == [int(want[0])] + [0] * 7
    assert float(sim.read_l2(0x900, 1)[0]) == float(np.max(x)) == float(sim.emax)
    assert np.array_equal(sim.read_l2_bits(0x1000, words * 8), sim.read_l2_bits(0x10, words * 8))
