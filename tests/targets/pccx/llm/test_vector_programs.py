"""SiLU as a pccx program of existing instructions: the simulator's result equals the numerics
sequence bit for bit and float64 SiLU within BF16 rounding; the (1 + w) and query-scale folds are exact
constant folds."""

import numpy as np

from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.asm import assemble
from npukit.targets.pccx.llm.vector_programs import fold_one_plus, silu_reference, silu_source
from npukit.targets.pccx.sim import Simulator


def test_silu_program_on_the_simulator() -> None:
    rng = np.random.default_rng(2)
    n = 200
    x = nx.bf16(np.concatenate([rng.standard_normal(n - 6) * 6, [0.0, -0.0, 30.0, -30.0, 1e-3, -95.0]]))
    sim = Simulator()
    sim.write_l2(0, x)
    sim.write_l2(0x100, np.ones(n))
    sim.load_program(assemble(silu_source(n, 0, 0x80, 0x100, 0x100)))
    sim.run()
    assert sim.error is None
    y = sim.read_l2(0x100, n)
    assert np.array_equal(y.view(np.uint32), silu_reference(x).view(np.uint32))
    exact = x.astype(np.float64) / (1.0 + np.exp(-x.astype(np.float64)))
    # four BF16 roundings: within 4 BF16 ulps of the exact value
    assert np.all(np.abs(y - exact) <= 4 * 2.0 ** -8 * np.abs(exact) + 1e-30)


def test_folds_are_exact_for_powers_of_two() -> None:
    w = nx.bf16(np.random.default_rng(3).standard_normal(64))
    g = fold_one_plus(w)
    assert np.array_equal(fold_one_plus(w, 2.0 ** -4), g * np.float32(2.0 ** -4))
    assert np.array_equal(g, nx.bf16(np.float64(1.0) + w.astype(np.float64)))
