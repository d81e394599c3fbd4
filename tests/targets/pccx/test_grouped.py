"""The grouped GEMV (extended layout bits W_GROUPED / W_GROUP_OFFSETS): one instruction per matrix
slice must compute bit for bit what pccx v002's per-group sequence computes (one MEMSET + GEMV per
group of 32, REDUCE_SUMs and an FP16 GEMV of the offsets) on the readable simulator; the fast
executor's compiled kernel must equal the readable simulator; strict programs may not use it; its
cycles come from the timing model."""

import numpy as np
import pytest

from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.asm import assemble
from npukit.targets.pccx.fast import _nbgroup, fastgroup
from npukit.targets.pccx.fast.fastsim import FastSimulator
from npukit.targets.pccx.llm.policy import requantize
from npukit.targets.pccx.llm.program import grouped_product_program, product_program
from npukit.targets.pccx.sim import Simulator
from npukit.targets.pccx.timing import simulate_works

X_WORD, SUMS_WORD, Y_WORD = 0, 200, 400


def _matrix(fmt: str, affine: bool, m: int = 70, k: int = 192, seed: int = 5):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((m, k)).astype(np.float32) * np.float32(0.3) + np.float32(0.05)
    w[:, 32:64] *= np.float32(40.0)  # groups of very different ranges
    return requantize(w, fmt, "F32", affine=affine)


def _activation(k: int = 192, seed: int = 9) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(k).astype(np.float32) * np.float32(3.0)
    x[64:96] = 0.0  # an all-zero group: exponent 0, sum 0
    x[96:128] *= np.float32(1e-3)
    x[5] = np.float32(7e4)  # a group dominated by one element
    return nx.bf16(x)


def _run(sim, prog, x: np.ndarray, dest: np.ndarray | None, m: int, profile: str):
    for at, image in prog.images:
        sim.host.write(at, np.frombuffer(image, np.uint8))
    sim.write_l2(X_WORD, x)
    if dest is not None:
        sim.write_l2(Y_WORD, dest)
    sim.load_program(assemble(prog.source, profile, sim.hw))
    works = sim.run()
    assert sim.error is None, sim.error
    return sim.read_l2_bits(Y_WORD, m), works


def _per_group(w, accm: bool):
    """v002's sequence; with accm the first group's GEMV adds the destination too."""
    prog = product_program(w, X_WORD, Y_WORD, SUMS_WORD)
    if accm:
        prog.source = prog.source.replace("flags=w_scale size", "flags=w_scale|accm size", 1)
    return prog


@pytest.mark.parametrize(("fmt", "affine"), [("int4", True), ("int4", False), ("int8", False)])
@pytest.mark.parametrize("accm", [False, True])
def test_one_grouped_gemv_equals_the_v002_per_group_sequence(fmt: str, affine: bool, accm: bool) -> None:
    w = _matrix(fmt, affine)
    m = w.codes.shape[0]
    x = _activation()
    dest = nx.bf16(np.linspace(-50, 50, m).astype(np.float32)) if accm else None
    old, old_works = _run(Simulator(None, "strict"), _per_group(w, accm), x, dest, m, "strict")
    grouped = grouped_product_program(w, X_WORD, Y_WORD)
    if accm:
        grouped.source = grouped.source.replace("flags=w_scale ", "flags=w_scale|accm ")
    new, new_works = _run(Simulator(None, "extended"), grouped, x, dest, m, "extended")
    assert np.array_equal(old, new)
    assert len(old_works) > 3 * len(new_works)  # the point: one GEMV instead of one per group
    fast_sim = FastSimulator(None, "extended", weights="auto")
    fast, fast_works = _run(fast_sim, grouped, x, dest, m, "extended")
    assert fast_sim.fallbacks == 0  # the compiled kernel ran, not the reference step
    assert np.array_equal(fast, new)
    assert [(a.label, a.macs, a.sfu_elems, a.weight_bytes) for a in fast_works] == \
        [(a.label, a.macs, a.sfu_elems, a.weight_bytes) for a in new_works]


def test_fast_executor_follows_the_readable_one_over_many_activations_and_a_rewritten_image() -> None:
    w = _matrix("int4", True, m=40, k=96, seed=2)
    prog = grouped_product_program(w, X_WORD, Y_WORD)
    ref, fast = Simulator(None, "extended"), FastSimulator(None, "extended", weights="auto")
    rng = np.random.default_rng(3)
    for step in range(6):
        x = nx.bf16(rng.standard_normal(96).astype(np.float32) * np.float32(10.0 ** rng.integers(-3, 4)))
        if step == 4:  # new weights at the same host address: the cached codes must not survive
            w = _matrix("int4", True, m=40, k=96, seed=8)
            prog = grouped_product_program(w, X_WORD, Y_WORD)
        a, _ = _run(ref, prog, x, None, 40, "extended")
        b, _ = _run(fast, prog, x, None, 40, "extended")
        assert np.array_equal(a, b)
    assert fast.fallbacks == 0


def test_a_non_finite_activation_makes_every_output_nan_as_the_sequence_does() -> None:
    w = _matrix("int4", True, m=16, k=64)
    x = _activation(64)
    x[40] = np.inf
    old, _ = _run(Simulator(None, "strict"), _per_group(w, False), x, None, 16, "strict")
    grouped = grouped_product_program(w, X_WORD, Y_WORD)
    new, _ = _run(Simulator(None, "extended"), grouped, x, None, 16, "extended")
    fast, _ = _run(FastSimulator(None, "extended", weights="auto"), grouped, x, None, 16, "extended")
    assert np.all(old == 0x7FC0) and np.array_equal(old, new) and np.array_equal(new, fast)


def test_strict_profile_rejects_grouped_weights() -> None:
    w = _matrix("int8", False, m=8, k=64)
    prog = grouped_product_program(w, X_WORD, Y_WORD)
    sim = Simulator(None, "strict")
    for at, image in prog.images:
        sim.host.write(at, np.frombuffer(image, np.uint8))
    sim.load_program(assemble(prog.source, "strict", sim.hw))
    sim.run()
    assert sim.error is not None and "extended" in str(sim.error)


def test_grouped_cycles_cover_the_macs_and_drop_the_per_group_overheads() -> None:
    w = _matrix("int4", True, m=512, k=640)
    x = _activation(640)
    _, old = _run(Simulator(None, "strict"), _per_group(w, False), x, None, 512, "strict")
    _, new = _run(Simulator(None, "extended"), grouped_product_program(w, X_WORD, Y_WORD), x, None, 512,
                  "extended")
    sim = Simulator(None, "extended")
    old_cycles = simulate_works(sim.hw, old).cycles
    new_cycles = simulate_works(sim.hw, new).cycles
    gemv = [wk for wk in new if wk.engine == "gemv"]
    assert len(gemv) == 1 and gemv[0].macs == 512 * 640 + 512 * 20 and gemv[0].sfu_elems == 640
    # the weight stream (codes + scale table + offsets) bounds it from below on the KV260 preset
    floor = gemv[0].weight_bytes / (sim.hw.ddr.bytes_per_s / sim.hw.clocks.core_hz)
    assert floor <= new_cycles < old_cycles


@pytest.mark.parametrize(("fmt", "affine"), [("int4", True), ("int8", False)])
def test_thread_parallel_build_equals_the_readable_simulator(fmt: str, affine: bool) -> None:
    """Over 2^20 weights the fast executor takes the parallel build (rows in blocks of 256; 2100 rows
    leave a partial last block)."""
    w = _matrix(fmt, affine, m=2100, k=512, seed=4)
    x = _activation(512, seed=6)
    grouped = grouped_product_program(w, X_WORD, 300)
    ref_sim, fast_sim = Simulator(None, "extended"), FastSimulator(None, "extended", weights="auto")
    for sim in (ref_sim, fast_sim):
        for at, image in grouped.images:
            sim.host.write(at, np.frombuffer(image, np.uint8))
        sim.write_l2(X_WORD, x)
        sim.load_program(assemble(grouped.source, "extended", sim.hw))
        sim.run()
        assert sim.error is None
    assert fast_sim.fallbacks == 0
    assert np.array_equal(ref_sim.read_l2_bits(300, 2100), fast_sim.read_l2_bits(300, 2100))
    assert fastgroup.ROWS == _nbgroup.ROWS  # the binder lays operands out in the kernel's blocks


def test_findemax_after_a_grouped_gemv_matches_between_simulators() -> None:
    w = _matrix("int4", True, m=48, k=96, seed=12)
    grouped = grouped_product_program(w, X_WORD, Y_WORD)
    grouped.source = grouped.source.replace("flags=w_scale ", "flags=w_scale|findemax ")
    x = _activation(96, seed=13)
    ref, fast = Simulator(None, "extended"), FastSimulator(None, "extended", weights="auto")
    a, _ = _run(ref, grouped, x, None, 48, "extended")
    b, _ = _run(fast, grouped, x, None, 48, "extended")
    assert np.array_equal(a, b) and fast.fallbacks == 0
    assert ref.emax == fast.emax == np.max(nx.from_bits(a))
