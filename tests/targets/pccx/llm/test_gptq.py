"""GPTQ rounding against statements that do not use it: on a random layer its output error
``‖XWᵀ − XŴᵀ‖`` is below round-to-nearest's; with uncorrelated inputs it *is* round-to-nearest; on a
tiny problem every code it picks is the brute-force best given the codes before it (the optimal
continuous compensation of the later columns solved by least squares), and its total error lies
between the brute-force optimum over all codes and round-to-nearest's; and what it makes runs on the
pccx simulator bit-identically to the quant target's product."""

import itertools

import numpy as np

from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.llm.gptq import gptq_affine, output_error
from npukit.targets.pccx.llm.policy import affine_fit
from npukit.targets.pccx.llm.program import run_product
from npukit.targets.pccx.llm.w4a8 import GroupedMatrix, grouped_gemm


def _layer(seed: int, m: int = 48, k: int = 256, t: int = 768) -> tuple[np.ndarray, np.ndarray]:
    """Correlated inputs with a few large channels (as after an RMSNorm) and random weights."""
    rng = np.random.default_rng(seed)
    mix = rng.standard_normal((k, k)) * 0.3 + np.eye(k)
    x = (rng.standard_normal((t, k)) @ mix) * rng.uniform(0.2, 3.0, k)
    return x, rng.standard_normal((m, k)) * 0.05 + rng.uniform(-0.01, 0.01, (m, 1))


def _rtn(w: np.ndarray, group: int = 32) -> GroupedMatrix:
    m, k = w.shape
    c, s, o = affine_fit(w.reshape(m, k // group, group))
    return GroupedMatrix(c.reshape(m, k), s, group, "int4", o)


def _gptq(w: np.ndarray, h: np.ndarray, **kw) -> GroupedMatrix:
    c, s, o = gptq_affine(w, h, affine_fit, **kw)
    return GroupedMatrix(c, s, kw.get("group", 32), "int4", o)


def test_gptq_output_error_is_below_round_to_nearest() -> None:
    for seed in range(3):
        x, w = _layer(seed)
        g = _gptq(w, x.T @ x)
        assert g.codes.dtype == np.int8 and g.codes.min() >= -8 and g.codes.max() <= 7
        assert g.scale.dtype == np.float32 and g.offset is not None and g.offset.dtype == np.float16
        ours, rtn = output_error(x, w, g.dequantize()), output_error(x, w, _rtn(w).dequantize())
        assert ours < 0.85 * rtn, (seed, ours, rtn)


def test_uncorrelated_inputs_leave_nothing_to_compensate() -> None:
    """A diagonal Hessian (independent inputs) spreads no error: GPTQ equals round-to-nearest."""
    _x, w = _layer(5)
    h = np.diag(np.random.default_rng(6).uniform(0.5, 4.0, w.shape[1]))
    g, r = _gptq(w, h, damp=0.0), _rtn(w)
    assert np.array_equal(g.codes, r.codes) and np.array_equal(g.scale, r.scale)
    assert np.array_equal(g.offset, r.offset)


def _fixed_grid(scale: float, offset: float):
    def fit(groups: np.ndarray):
        m = groups.shape[0]
        return (np.zeros(groups.shape, np.int8), np.full((m, 1), scale, np.float32),
                np.full((m, 1), offset, np.float16))
    return fit


def _loss_given(x: np.ndarray, d_fixed: np.ndarray) -> float:
    """min over the later columns' real values of ‖X·d‖, the first columns' errors d_fixed given."""
    i = d_fixed.size
    rhs = -x[:, :i] @ d_fixed
    if i == x.shape[1]:
        return float(np.linalg.norm(rhs))
    sol = np.linalg.lstsq(x[:, i:], rhs, rcond=None)[0]
    return float(np.linalg.norm(x[:, i:] @ sol - rhs))


def test_each_code_is_the_brute_force_best_given_the_earlier_ones() -> None:
    rng = np.random.default_rng(3)
    k, scale, offset = 4, 0.25, 0.125
    grid = np.arange(-8, 8) * scale + offset
    for trial in range(6):
        x = rng.standard_normal((40, k)) @ (rng.standard_normal((k, k)) * 0.8 + np.eye(k))
        w = rng.uniform(grid[0], grid[-1], (1, k))
        codes = gptq_affine(w, x.T @ x, _fixed_grid(scale, offset), group=k, damp=0.0, block=k)[0][0]
        for i in range(k):
            before = w[0, :i] - grid[codes[:i] + 8]
            best = min(range(16), key=lambda c, i=i, b=before: _loss_given(x, np.r_[b, w[0, i] - grid[c]]))
            assert codes[i] + 8 == best, (trial, i)
        total = {c: _loss_given(x, w[0] - grid[np.array(c)]) for c in itertools.product(range(16), repeat=k)}
        ours = total[tuple(codes + 8)]
        rtn = total[tuple(np.clip(np.rint((w[0] - offset) / scale), -8, 7).astype(int) + 8)]
        assert min(total.values()) <= ours <= rtn + 1e-12


def test_gptq_matrix_runs_on_the_simulator_as_quant_computes_it() -> None:
    x_cal, w = _layer(7, m=40, k=128)
    g = _gptq(w.astype(np.float32), x_cal.T @ x_cal)
    x = nx.bf16(np.random.default_rng(8).standard_normal(128).astype(np.float32) * np.float32(3))
    y, timing = run_product(g, x)
    assert np.array_equal(y.view(np.uint32), grouped_gemm(x[None], g)[0].view(np.uint32))
    assert timing.cycles > 0


def test_act_order_keeps_round_to_nearest_grids_and_beats_its_error() -> None:
    """Act-order rounds the columns by decreasing H diagonal on the grids round-to-nearest fits to the
    original weights (the stored format is unchanged), and its output error stays well below RTN's."""
    for seed in range(3):
        x, w = _layer(seed)
        g, r = _gptq(w, x.T @ x, act_order=True), _rtn(w)
        assert np.array_equal(g.scale, r.scale) and np.array_equal(g.offset, r.offset)
        assert g.codes.dtype == np.int8 and g.codes.min() >= -8 and g.codes.max() <= 7
        assert not np.array_equal(g.codes, r.codes)
        ours, rtn = output_error(x, w, g.dequantize()), output_error(x, w, r.dequantize())
        assert ours < 0.85 * rtn, (seed, ours, rtn)


def test_act_order_with_independent_inputs_is_round_to_nearest() -> None:
    _x, w = _layer(5)
    h = np.diag(np.random.default_rng(6).uniform(0.5, 4.0, w.shape[1]))
    g, r = _gptq(w, h, damp=0.0, act_order=True), _rtn(w)
    assert np.array_equal(g.codes, r.codes)


def test_act_order_codes_are_brute_force_best_in_decreasing_diagonal_order() -> None:
    rng = np.random.default_rng(11)
    k, scale, offset = 4, 0.25, 0.125
    grid = np.arange(-8, 8) * scale + offset
    for trial in range(6):
        mix = rng.standard_normal((k, k)) * 0.8 + np.eye(k)
        x = (rng.standard_normal((40, k)) @ mix) * rng.uniform(0.3, 3, k)  # unequal diagonal
        w = rng.uniform(grid[0], grid[-1], (1, k))
        codes = gptq_affine(w, x.T @ x, _fixed_grid(scale, offset), group=k, damp=0.0, block=k,
                            act_order=True)[0][0]
        order = np.argsort(-(x * x).sum(0))
        xo, wo, co = x[:, order], w[0, order], codes[order]
        for i in range(k):
            before = wo[:i] - grid[co[:i] + 8]
            best = min(range(16), key=lambda c, i=i, b=before: _loss_given(xo, np.r_[b, wo[i] - grid[c]]))
            assert co[i] + 8 == best, (trial, i)
