"""FastSimulator vs the reference simulator on the extended weight layouts the compiler emits (K-major with
zero-row skipping, split row scales, activation scales, byte offsets; INT4/INT8/FP16) and LOAD_SCALAR:
same result bits, e_max, S and Work record (live_k, bytes), no reference fallback. Random operands and
layouts (hypothesis); the replay also runs after the host rewrites the weights and the descriptors."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from npukit.targets.pccx import asm
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.fast import kernels
from npukit.targets.pccx.fast.fastsim import FastSimulator
from npukit.targets.pccx.memory import (
    W_ACT_SCALE,
    W_KMAJOR,
    W_SPLIT_SCALES,
    row_bytes,
    scale_entry,
    weight_entry,
)
from npukit.targets.pccx.sim import Simulator

W_ADDR, S_ADDR = 0x10_0000, 0x20_0000


def _image(rng, fmt: str, rows: int, cols: int) -> bytes:
    if fmt == "int4":
        return nx.pack_int4(rng.integers(-8, 8, (rows, cols)).astype(np.int8)).tobytes()
    if fmt == "int8":
        return rng.integers(-127, 128, (rows, cols)).astype(np.int8).tobytes()
    return rng.normal(0, 0.5, (rows, cols)).astype("<f2").tobytes()


def _program(sim, layout: dict, rng, x_bits: np.ndarray) -> None:
    fmt, m, k, off = layout["fmt"], layout["m"], layout["k"], layout["off"]
    kmajor, mode = layout["kmajor"], layout["mode"]
    rows, cols = (k, m) if kmajor else (m, k)
    body = _image(rng, fmt, rows, cols)
    assert len(body) == rows * row_bytes(fmt, cols)
    scales = rng.uniform(0.01, 0.2, max(m, k)).astype("<f4")
    ext = (W_KMAJOR if kmajor else 0) | {"none": 0, "split": W_SPLIT_SCALES, "act": W_ACT_SCALE}[mode]
    if not ext:
        off = 0  # a byte offset is itself an extended layout bit
    img = b"\0" * off + body
    if mode != "split":  # row scales at the next 16 bytes after the image (counted from its start)
        img += b"\0" * ((-len(body)) % 16) + scales[:m].tobytes()
    sim.host.write(W_ADDR, img)
    if mode != "none":
        sim.host.write(S_ADDR, b"\0" * 4 + scales.tobytes())
        sim.set_cc(1, 1, *scale_entry(S_ADDR + 4))
    n = layout.get("n", 1)
    sim.set_cc(0, 0, m, n, k)
    sim.set_cc(1, 0, *weight_entry(fmt, W_ADDR + off, ext))
    kw, mw = -(-k // 8), -(-m // 8)
    for j in range(n):  # vector j at word j * kw (a GEMM's activation rows)
        sim.write_l2_bits(j * kw, np.roll(x_bits, 3 * j))
    sim.write_l2_bits(0x200, rng.integers(0, 1 << 16, n * mw * 8).astype(np.uint16))  # accm operand


def _run(sim, flags: str, n: int = 1):
    sim.load_program(asm.assemble(
        "memset cache=sreg slot=1 a=0xFF80\n"
        f"{'gemm' if n > 1 else 'gemv'} dest=0x200 src=0 shape=0 size=0 flags={flags}\n"
        "cvo.load_scalar src=0x200 dst=0 len=3"))
    return sim.run()


layouts = st.fixed_dictionaries({
    "fmt": st.sampled_from(["int4", "int8", "fp16"]),
    "m": st.integers(1, 40), "k": st.integers(1, 70), "off": st.sampled_from([0, 4, 8, 12]),
    "kmajor": st.booleans(), "mode": st.sampled_from(["none", "split", "act"]),
    "flags": st.sampled_from(["w_scale", "w_scale|findemax", "0", "w_scale|accm", "findemax"]),
    "sparse": st.floats(0.0, 0.95), "seed": st.integers(0, 2**31), "n": st.sampled_from([1, 1, 2, 4])})


@settings(max_examples=150)
@given(layouts, st.sampled_from(kernels.BACKENDS))
def test_extended_layouts_match_reference(layout, backend):
    if layout["mode"] == "act" and not layout["kmajor"]:
        layout["kmajor"] = True  # the compiler emits activation scales on K-major images only
    if layout["mode"] == "split":
        layout["flags"] = layout["flags"] if "w_scale" in layout["flags"] else "w_scale"
    if layout["fmt"] == "fp16" and backend == "numpy":
        backend = kernels.BACKENDS[0]
    rng = np.random.default_rng(layout["seed"])
    k = layout["k"]
    x = rng.normal(0, 1, k) * (rng.random(k) > layout["sparse"])
    x[rng.random(k) < 0.1] *= 1e-6  # nonzero values whose INT8 code is 0 (skipped rows)
    bits = nx.to_bits(x)
    ref, fast = Simulator(), FastSimulator(backend=backend)
    for sim in (ref, fast):
        _program(sim, layout, np.random.default_rng(layout["seed"]), bits)
    for rnd in range(2):  # replay after the host rewrites weights, scales and activations
        wr, wf = _run(ref, layout["flags"], layout["n"]), _run(fast, layout["flags"], layout["n"])
        assert ref.error is None and fast.error is None, (ref.error, fast.error)
        assert np.array_equal(ref.l2, fast.l2)
        assert (ref.e_max, ref.s_reg) == (fast.e_max, fast.s_reg)
        assert wr == wf
        seed = layout["seed"] + 1 + rnd
        for sim in (ref, fast):
            _program(sim, layout, np.random.default_rng(seed), np.flip(bits).copy())
    # GEMM (N > 1) has fast steps on plain and K-major (prefill's sparse W_down) INT4/INT8 images
    plain = not layout["kmajor"] and layout["mode"] == "none"
    fast_path = layout["n"] == 1 or (layout["fmt"] != "fp16" and (layout["kmajor"] or plain))
    assert (fast.fallbacks == 0) == fast_path


@settings(max_examples=60)
@given(st.integers(0, 2**31), st.sampled_from([-150, -133, -126, -30, 0, 60, 127, 128]))
def test_float64_rounding_kernels_equal_numerics(seed, exp):
    """The SFU kernels' float64 -> BF16 rounding (numba: branch-free) equals `numerics.to_bits` across
    the range: normal, subnormal grid, halfway ties, overflow to infinity, NaN, signed zeros."""
    rng = np.random.default_rng(seed)
    y = rng.choice([-1.0, 1.0], 512) * (1 + rng.random(512)) * np.exp2(rng.integers(exp - 3, exp + 4, 512))
    ties = (1 + rng.integers(0, 256, 64) / 128 + 1 / 256) * np.exp2(rng.integers(exp - 2, exp + 2, 64))
    y = np.concatenate([y, ties, -ties, [0.0, -0.0, np.inf, -np.inf, np.nan, 2.0**-134, 3.4e38, 3.3961e38]])
    want = nx.to_bits(y)
    for backend in kernels.BACKENDS:
        out = np.zeros(y.size, np.uint16)
        if backend == "numba":
            kernels._numba_kernels()["round_store"](y, out, out, False, kernels.LUT64)
        else:
            out[:] = kernels.np_f64_bits(y)
        nan = np.isnan(y)
        assert np.array_equal(out[~nan], want[~nan]), backend
        assert np.all((out[nan] & 0x7FFF) == 0x7FC0)
