"""Simulator: the extended weight-descriptor layouts and LOAD_SCALAR's element index.

Oracles: `numerics.gemv` on the dense row-major matrix (written independently of the layout code),
`numerics.cvo_mul` for the activation scales, plain indexing for LOAD_SCALAR.
"""

import numpy as np
import pytest

from npukit.targets.pccx import asm
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.memory import W_ACT_SCALE, W_KMAJOR, W_SPLIT_SCALES, scale_entry, weight_entry
from npukit.targets.pccx.sim import STATUS_ERROR, Simulator

W_ADDR, S_ADDR = 0x10_0000, 0x20_0000


def _setup(sim, m, k, image, entry, scales_at=None, scales=None, x=None):
    sim.host.write(W_ADDR, image)
    if scales_at is not None:
        sim.host.write(scales_at, np.asarray(scales, "<f4").tobytes())
    sim.set_cc(0, 0, m, 1, k)
    sim.set_cc(1, 0, *entry)
    if scales_at is not None:
        sim.set_cc(1, 1, *scale_entry(scales_at))
    sim.write_l2(0, x)


def _run(sim, flags="w_scale"):
    sim.load_program(asm.assemble(f"gemv dest=0x100 src=0 shape=0 size=0 flags={flags}"))
    works = sim.run()
    assert sim.error is None, sim.error
    return works[0]


@pytest.mark.parametrize("m,k", [(24, 40), (7, 33)])
def test_kmajor_skips_zero_rows_and_equals_dense(m, k):
    rng = np.random.default_rng(0)
    w = rng.integers(-8, 8, (m, k)).astype(np.int8)
    s = rng.uniform(0.01, 0.1, m).astype(np.float32)
    x = np.zeros(k, np.float32)
    live = rng.choice(k, 5, replace=False)
    x[live] = nx.bf16(rng.normal(size=5))
    x[(live[0] + 1) % k] = 1e-6  # nonzero but quantizes to 0: skipped too
    img = nx.pack_int4(w.T).tobytes()
    pad = (-len(img)) % 16
    sim = Simulator()
    image = img + b"\0" * pad + s.astype("<f4").tobytes()
    _setup(sim, m, k, image, weight_entry("int4", W_ADDR, W_KMAJOR), x=x)
    work = _run(sim)
    want = nx.gemv(w, x, s)
    assert np.array_equal(nx.to_bits(sim.read_l2(0x100, m)), nx.to_bits(want))
    rb = (m + 1) // 2
    q, _ = nx.quantize_act(x)
    nnz = int(np.count_nonzero(q))
    assert nnz == 5 and work.macs == m * nnz and work.weight_bytes == nnz * rb + 4 * m


def test_split_scales_and_byte_offset():
    rng = np.random.default_rng(1)
    m, k = 6, 16
    w = rng.integers(-127, 128, (m + 1, k)).astype(np.int8)  # one leading row: the image starts at +16 B
    s = rng.uniform(0.5, 2, m + 1).astype(np.float32)
    x = nx.bf16(rng.normal(size=k))
    sim = Simulator()
    _setup(sim, m, k, w.tobytes(), weight_entry("int8", W_ADDR + k, W_SPLIT_SCALES), scales_at=S_ADDR,
           scales=s, x=x)
    sim.set_cc(1, 1, *scale_entry(S_ADDR + 4))  # scales of rows 1.. (byte offset 4)
    _run(sim)
    assert np.array_equal(nx.to_bits(sim.read_l2(0x100, m)), nx.to_bits(nx.gemv(w[1:], x, s[1:], fmt="int8")))


def test_activation_scales_are_the_reference_mul():
    rng = np.random.default_rng(2)
    d, n = 16, 12  # V: n tokens of d values, K-major; p scaled by per-token FP32 scales first
    v = rng.integers(-127, 128, (n, d)).astype(np.int8)
    vs = rng.uniform(0.001, 0.02, n).astype(np.float32)
    p = nx.bf16(rng.uniform(0, 1, n))
    sim = Simulator()
    _setup(sim, d, n, v.tobytes(), weight_entry("int8", W_ADDR, W_KMAJOR | W_ACT_SCALE), scales_at=S_ADDR,
           scales=vs, x=p)
    _run(sim, flags="0")
    want = nx.gemv(np.ascontiguousarray(v.T), nx.cvo_mul(p, vs), fmt="int8")
    assert np.array_equal(nx.to_bits(sim.read_l2(0x100, d)), nx.to_bits(want))


def test_layout_bits_need_the_extended_profile():
    sim = Simulator(profile="strict")
    _setup(sim, 8, 8, bytes(64), weight_entry("int4", W_ADDR, W_KMAJOR), x=np.ones(8))
    sim.load_program(asm.assemble("gemv dest=0x100 src=0 shape=0 size=0", "strict"))
    sim.run()
    assert sim.status & STATUS_ERROR and "extended" in sim.error.reason


def test_load_scalar_takes_element_len_minus_one():
    sim = Simulator()
    sim.write_l2(0x10, [1.0, 2.5, -3.0, 4.0, 5.0])
    for n, want in ((1, 1.0), (3, -3.0), (5, 5.0)):
        sim.load_program(asm.assemble(f"cvo.load_scalar src=0x10 len={n}"))
        sim.run()
        assert sim.scalar == np.float32(want)
