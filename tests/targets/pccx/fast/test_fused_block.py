"""Compiled fused runs (`_nbblock.block`) holding the attention's products: an FP16 score GEMV with
findemax, EXP of x − e_max, the softmax sum and scale, an FP16 K-major value GEMV, and the MEMSETs
that describe them, replayed as the span grows, against the reference simulator (the definition):
the whole observable state must agree bit for bit. Replays also move the key image to another host
region, zero the scores (an e_max the compiled loop leaves to the reference reduction), feed a NaN
(an EXP it leaves to NumPy), a non-finite weight and an empty shape (faults at the right index)."""

from __future__ import annotations

import numpy as np
import pytest

from npukit.targets.pccx import asm
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.fast import fastmat, kernels
from npukit.targets.pccx.fast.fastsim import FastSimulator
from npukit.targets.pccx.memory import W_KMAJOR, weight_entry, weight_image
from npukit.targets.pccx.sim import Simulator

from .test_fastsim import _assert_same, _bf16_bits, _state

pytestmark = pytest.mark.skipif(not kernels.HAVE_NUMBA, reason="compiled runs are a numba-backend path")

K_ADDR, V_ADDR, OTHER = 0x1000_0000, 0x1000_1000, 0x2000_0000
D, SPAN = 16, 24  # head dimension, rows the buffers hold


def _activation(rng, n: int, act: str, *, nan_at: int) -> np.ndarray:
    """BF16 bits: random ("x"), all +0 ("zero") or random with one NaN at ``nan_at`` ("nan")."""
    x = _bf16_bits(rng, n, special=0.0)
    if act == "zero":
        x[:] = 0
    elif act == "nan":
        x[nan_at] = 0x7FC0
    return x


def _program(m: int, k_addr: int) -> list[int]:
    fk, hk, lk = weight_entry("fp16", k_addr)
    fv, hv, lv = weight_entry("fp16", V_ADDR, W_KMAJOR)
    return asm.assemble("\n".join([
        f"memset cache=fmap slot=1 a={m} b=1 c={D}",
        f"memset cache=weight slot=9 a={fk} b={hk} c={lk}",
        "memset cache=sreg slot=1 a=0xFF80",
        "gemv dest=0x20 src=0x10 flags=findemax size=9 shape=1",
        f"cvo.exp src=0x20 dst=0x30 len={SPAN} flags=sub_emax",
        f"cvo.reduce_sum src=0x30 dst=0x40 len={SPAN} flags=0",
        f"cvo.scale src=0x30 dst=0x50 len={SPAN} flags=recip_scale",
        f"memset cache=fmap slot=2 a={D} b=1 c={m}",
        f"memset cache=weight slot=10 a={fv} b={hv} c={lv}",
        "gemv dest=0x60 src=0x50 flags=accm size=10 shape=2"]))


def _f16_bits(rng, shape, scale=0.25):
    return (rng.standard_normal(shape) * scale).astype(np.float16).view(np.uint16)


def test_block_exp_rows_equal_numpy_for_every_bf16_input():
    """EXP as the compiled loop computes it, over all 65 536 BF16 inputs (and less an e_max), against
    `numerics.cvo_exp` (NumPy's exp, one rounding); only NaN inputs are left to the single step."""
    from npukit.targets.pccx.fast import _nbblock

    x = np.arange(1 << 16, dtype=np.uint16)
    x = x[(x & 0x7F80) != 0x7F80]  # finite inputs
    f64, u16 = np.empty(3 << 16), np.empty(2 << 16, np.uint16)  # the block's row scratch
    for emax in (None, 0x4120):  # e_max = 10
        d = np.zeros_like(x)
        assert _nbblock._exp_row(x, d, emax is not None, emax or 0, f64, u16)
        e = None if emax is None else nx.from_bits(np.uint16(emax))
        want = nx.to_bits(nx.cvo_exp(nx.from_bits(x), e))
        assert np.array_equal(d, want)
    assert not _nbblock._exp_row(np.array([0x3F80, 0x7FC0], np.uint16), np.zeros(2, np.uint16), False, 0,
                                 f64, u16)


def test_attention_run_is_one_compiled_call_and_matches_reference(monkeypatch):
    binds = []
    real = fastmat.bind_mat
    monkeypatch.setattr(fastmat, "bind_mat", lambda *a: binds.append(a[1].idx) or real(*a))
    monkeypatch.setattr("npukit.targets.pccx.fast.faststeps.bind_mat", fastmat.bind_mat)
    rng = np.random.default_rng(3)
    keys, vals = _f16_bits(rng, (SPAN, D)), _f16_bits(rng, (SPAN, D))
    ref, fast = Simulator(), FastSimulator(backend="numba")
    for sim in (ref, fast):
        sim.host.map(K_ADDR, 0x1000)
        sim.host.map(V_ADDR, 0x1000)
        sim.host.map(OTHER, 0x1000)
        sim.host.write(K_ADDR, keys.view(np.uint8))
        sim.host.write(V_ADDR, vals.view(np.uint8))
        sim.host.write(OTHER, keys[::-1].copy().view(np.uint8))
    # (span, key image, activation, expected error index, compiled without single GEMV steps)
    cases = [(5, K_ADDR, "x", None, True), (6, K_ADDR, "x", None, True), (7, K_ADDR, "x", None, True),
             (8, OTHER, "x", None, False),  # the image moved to another region: the single step,
             (9, OTHER, "x", None, True),  # then the run is rebuilt for that region
             (10, OTHER, "x", None, True),
             (10, OTHER, "zero", None, True),  # scores all +0: e_max by the reference reduction
             (11, OTHER, "nan", None, False),  # NaN scores: EXP by NumPy, the rest step by step
             (0, OTHER, "x", 3, False),  # an empty shape: the reference's interrupt at the GEMV
             (12, K_ADDR, "x", None, True), (13, K_ADDR, "x", None, True)]
    for m, k_addr, act, err, compiled in cases:
        x = _activation(rng, D, act, nan_at=2)
        words = _program(m, k_addr)
        for sim in (ref, fast):
            sim.write_l2_bits(0x10, x)
            sim.load_program(words)
        binds.clear()
        assert fast._groups[0] is not None and fast._groups[0][0] == len(words)  # one fused run
        assert fast.run() == ref.run()
        _assert_same(_state(fast), _state(ref))
        assert (fast.error.index if fast.error else None) == err
        if compiled:
            assert not binds, f"span {m}: a GEMV ran as a single step"
        else:
            assert binds, f"span {m}: expected a single GEMV step"
    assert fast.fallbacks == ref_fallbacks(cases)


def ref_fallbacks(cases) -> int:
    """The reference steps the fast executor took: the empty shape's GEMV (it faults there)."""
    return sum(1 for c in cases if c[3] is not None)


def test_non_finite_key_weight_faults_at_the_gemv():
    rng = np.random.default_rng(4)
    keys = _f16_bits(rng, (SPAN, D))
    keys[3, 5] = 0x7C00  # +inf
    x = _bf16_bits(rng, D, special=0.0)
    ref, fast = Simulator(), FastSimulator(backend="numba")
    for sim in (ref, fast):
        for base in (K_ADDR, V_ADDR):
            sim.host.map(base, 0x1000)
        sim.host.write(K_ADDR, keys.view(np.uint8))
        sim.write_l2_bits(0x10, x)
    words = _program(8, K_ADDR)
    for _ in range(2):
        for sim in (ref, fast):
            sim.load_program(words)
        assert fast.run() == ref.run()
        _assert_same(_state(fast), _state(ref))
        assert fast.error is not None and fast.error.index == 3


W4_A, W4_B = 0x3000_0000, 0x3010_0000  # two INT4 images (the descriptors switch between them)


def _int4_run(m: int, k: int, flags: str) -> list[int]:
    """A fused run through a small INT4 GEMV (kind 10): its shape set in the run, its weight slot
    (9) set by the host beforehand, a reduction of its output after it."""
    return asm.assemble("\n".join([
        f"memset cache=fmap slot=1 a={m} b=1 c={k}",
        "memset cache=sreg slot=1 a=0xFF80",
        f"gemv dest=0x80 src=0x10 flags={flags} size=9 shape=1",
        f"cvo.reduce_sum src=0x80 dst=0xC0 len={m} flags=0"]))


@pytest.mark.parametrize("weights", ["packed", "int8"])  # kind 10 (image in place), 11 (cached codes)
def test_small_int4_gemv_runs_inside_the_compiled_run(monkeypatch, weights):
    """Small INT4 GEMVs (row scales, accm, findemax) inside a fused run equal the reference bit for
    bit: as compiled rows while the descriptors hold their binding key, as single steps (rebound)
    when the host points the weight slot at another image; weights and scales rewritten by the host
    between runs are what the next run reads (live, or codes dropped and made again); a NaN
    activation and all-zero outputs (e_max by the reference reduction) included."""
    binds = []
    real = fastmat.bind_mat
    monkeypatch.setattr(fastmat, "bind_mat", lambda *a: binds.append(a[1].idx) or real(*a))
    monkeypatch.setattr("npukit.targets.pccx.fast.faststeps.bind_mat", fastmat.bind_mat)
    rng = np.random.default_rng(5)
    m, k = 40, 201  # an odd K: the last packed byte holds one code
    ref, fast = Simulator(), FastSimulator(backend="numba", weights=weights)
    images = {}
    for addr in (W4_A, W4_B):
        images[addr] = (rng.integers(-8, 8, (m, k)), rng.standard_normal(m).astype(np.float32))
    for sim in (ref, fast):
        for addr, (w, s) in images.items():
            sim.host.map(addr, 0x10000)
            sim.host.write(addr, weight_image(w, "int4", s))
    # (flags, image, activation, new scales, compiled)
    cases = [("w_scale|findemax", W4_A, "x", False, True), ("w_scale|findemax", W4_A, "x", False, True),
             ("w_scale|findemax", W4_A, "x", True, True),  # the host rewrote the image
             ("w_scale|findemax", W4_B, "x", False, False),  # another image: the single step rebinds
             ("w_scale|findemax", W4_B, "x", False, True),  # and the run is rebuilt for it
             ("w_scale|findemax", W4_B, "nan", False, True), ("w_scale|findemax", W4_B, "zero", False, True),
             ("accm", W4_A, "x", False, True), ("accm|w_scale", W4_A, "x", False, True)]
    for flags, addr, act, rescale, compiled in cases:
        x = _activation(rng, k, act, nan_at=7)
        if rescale:  # new weights and scales for the image
            images[addr] = (rng.integers(-8, 8, (m, k)), rng.standard_normal(m).astype(np.float32))
        words = _int4_run(m, k, flags)
        for sim in (ref, fast):
            sim.write_l2_bits(0x10, x)
            sim.cc[1, 9] = weight_entry("int4", addr)
            if rescale:
                sim.host.write(addr, weight_image(*images[addr][:1], "int4", images[addr][1]))
            sim.load_program(words)
        binds.clear()
        assert fast._groups[0] is not None and fast._groups[0][0] == len(words)  # one fused run
        assert fast.run() == ref.run()
        _assert_same(_state(fast), _state(ref))
        assert fast.error is None
        assert (not binds) == compiled, (flags, addr, act)
    assert fast.fallbacks == 0


def test_tabled_cores_are_the_cores_on_any_slice():
    """`fastcvo.TLUT` holds each tabled core of every BF16 value as the core computes it on any slice
    (length, offset, the SIMD loop's tail or body): a table lookup is what the single step computes."""
    from npukit.targets.pccx.fast import fastcvo

    rng = np.random.default_rng(6)
    for core in fastcvo._TABLED:
        row = fastcvo.TLUT[fastcvo.tabled(core)]
        for n in (1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 100, 1000):
            for start in rng.integers(0, (1 << 16) - n, 4):
                with np.errstate(all="ignore"):
                    got = core(kernels.LUT64[start: start + n].copy())
                assert np.array_equal(got.view(np.uint64), row[start: start + n].view(np.uint64)), \
                    (core.__name__, n, start)


@pytest.mark.parametrize("func", ["gelu", "tanh", "sin", "cos"])
def test_tabled_transcendentals_run_compiled_on_every_bf16_input(func):
    """GELU / TANH / SIN / COS rows (kind 12), plain and accumulating, over all 2^16 BF16 inputs and
    an overlapping in-place pass, against the reference simulator bit for bit."""
    rng = np.random.default_rng(7)
    words = asm.assemble("\n".join([
        "memset cache=sreg slot=1 a=0xFF80",
        f"cvo.{func} src=0x0 dst=0x2000 len=32768 flags=0",
        f"cvo.{func} src=0x1000 dst=0x3000 len=32768 flags=accm",
        f"cvo.{func} src=0x2000 dst=0x2002 len=64 flags=0"]))  # source and destination overlap
    ref, fast = Simulator(), FastSimulator(backend="numba")
    every = np.arange(1 << 16, dtype=np.uint16)
    acc = _bf16_bits(rng, 1 << 15, special=0.05)
    for sim in (ref, fast):
        sim.write_l2_bits(0x0, every)
        sim.write_l2_bits(0x3000, acc)
        sim.load_program(words)
    assert fast._groups[0] is not None and fast._groups[0][0] == len(words)  # one fused run
    assert fast.run() == ref.run()
    _assert_same(_state(fast), _state(ref))
