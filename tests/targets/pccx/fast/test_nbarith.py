"""The fused block's arithmetic rows (`_nbarith.arith_row`) and float64 -> BF16 rounding
(`_nbround.round64`) against the reference: NumPy's float64 arithmetic on the widened BF16 inputs,
rounded once by `numerics.to_bits` (the spec's rounding, written with frexp/rint, no bit tricks).

Inputs mix random patterns with the cases the float32 shortcuts must hand back: subnormal and
overflowing products, NaNs and infinities, values a hair off BF16 rounding midpoints."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.fast import _nbarith, _nbround

_OPS = range(11)  # `kernels` op codes: SQUARE .. ADD, 10 a copy


def _ref64(op: int, a: np.ndarray, b: np.ndarray, s: float) -> np.ndarray:
    with np.errstate(all="ignore"):
        return [a * a, a * s, a / s, np.zeros_like(a), 1.0 / a, 1.0 / np.sqrt(a), np.sqrt(a),
                np.where(np.isnan(a - s), a - s, np.maximum(a - s, 0.0)), a * b, a + b, a][op]


def _widen(bits: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return nx.from_bits(bits).astype(np.float64)


def _patterns(rng: np.random.Generator, n: int) -> np.ndarray:
    """BF16 patterns: every class, weighted to tiny and huge exponents where the shortcuts stop."""
    u = rng.integers(0, 1 << 16, n, dtype=np.uint16)
    extreme = rng.integers(0, 4, n)
    u[extreme == 0] &= 0x80FF  # exponent 0..1: subnormals and the smallest normals
    u[extreme == 1] |= 0x7F00  # the largest exponents, infinities and NaNs
    return u


def test_round64_equals_the_spec_rounding_on_edge_and_random_values():
    rng = np.random.default_rng(7)
    rand = rng.integers(0, 1 << 64, 400_000, dtype=np.uint64).view(np.float64)
    mids = ((rng.integers(0, 1 << 16, 100_000, dtype=np.uint32) << 16) | 0x8000).view(np.float32)
    with np.errstate(invalid="ignore"):
        mids = mids.astype(np.float64)
    near = np.concatenate([mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf),
                           mids + 2.0**-30 * mids, mids - 2.0**-30 * mids])
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e300, -1e300, 5e-324, 2.0**-149,
                      2.0**-150, 3 * 2.0**-134, 2.0**-133, 2.0**128, 2.0**128 - 2.0**119,
                      np.nextafter(2.0**128 - 2.0**119, 0.0), 2.0**-126, np.nextafter(2.0**-126, 0.0)])
    y = np.concatenate([rand, near, edges])
    with np.errstate(all="ignore"):
        y = np.concatenate([y, -y, y * 2.0**-128, y * 2.0**120])
        ref = nx.to_bits(y)
    out = np.empty(y.shape[0], np.uint16)
    _nbround.round64(y, out)
    assert np.array_equal(out, ref)


@pytest.mark.parametrize("accm", [False, True])
@pytest.mark.parametrize("op", _OPS)
def test_arith_row_equals_numpy_then_one_rounding(op, accm):
    rng = np.random.default_rng(100 + op)
    n = 1500
    y, u = np.empty(2048), np.empty(2048, np.uint32)
    for trial in range(6):
        x = _patterns(rng, n) if trial % 2 else rng.integers(0x3000, 0x4800, n).astype(np.uint16)
        d = _patterns(rng, n)
        s_bits = np.uint16(rng.integers(0, 1 << 16)) if trial > 2 else np.uint16(0x3F81)
        s = float(_widen(np.array([s_bits]))[0])
        with np.errstate(all="ignore"):
            want = _ref64(op, _widen(x), _widen(d), s)
            two_nans = np.isnan(want) & np.isnan(_widen(d)) & accm
            want = nx.to_bits(_widen(d) + want if accm else want)
        for n_row in (n, 1, 7):  # long rows, and the one-element rows most scalar ops run on
            flat = np.concatenate([x, d])
            _nbarith.arith_row(op, flat, 0, n, n_row, s, accm, y, u)
            out = flat[n:]
            got = out[:n_row].copy()
            # two NaN operands (accm's add): which NaN's sign survives is the hardware's choice of
            # operand, as in NumPy; any quiet NaN is right there
            both = two_nans[:n_row] & ((got & 0x7FFF) == 0x7FC0)
            got[both] = want[:n_row][both]
            assert np.array_equal(got, want[:n_row]), (trial, n_row)
            assert np.array_equal(out[n_row:], d[n_row:])  # nothing written past the row


@pytest.mark.parametrize("accm", [False, True])
@pytest.mark.parametrize("op", [0, 1, 2, 8, 9])
@pytest.mark.parametrize("shift", [-5, 3])
def test_arith_row_reads_every_input_before_writing_an_overlapping_output(op, shift, accm):
    rng = np.random.default_rng(5)
    flat = rng.integers(0x3000, 0x4800, 300).astype(np.uint16)
    s0, d0, n = 100, 100 + shift, 64
    x, d = flat[s0: s0 + n].copy(), flat[d0: d0 + n].copy()
    with np.errstate(all="ignore"):
        y = _ref64(op, _widen(x), _widen(d), 1.5)
        want = nx.to_bits(_widen(d) + y if accm else y)
    _nbarith.arith_row(op, flat, s0, d0, n, 1.5, accm, np.empty(n), np.empty(n, np.uint32))
    assert np.array_equal(flat[d0: d0 + n], want)


@pytest.mark.parametrize("n", [1, 3, 64, 1024])
def test_sum_bits_is_the_serial_float32_sum_rounded_once(n):
    rng = np.random.default_rng(n)
    flat = np.concatenate([_patterns(rng, 50), rng.integers(0x3000, 0x4800, n).astype(np.uint16)])
    for s0 in (0, 50):  # the random classes (NaNs, infinities, subnormals), then plain values
        x = nx.from_bits(flat[s0: s0 + n])
        with np.errstate(all="ignore"):
            want = np.add.accumulate(np.concatenate([[np.float32(0.0)], x]), dtype=np.float32)[-1]
        assert _nbarith.sum_bits(flat, s0, n) == nx.to_bits(np.float32(want))[()] or (
            np.isnan(want) and _nbarith.sum_bits(flat, s0, n) & 0x7FFF == 0x7FC0)


@pytest.mark.parametrize("shift", [-40, -1, 0, 1, 40])
def test_copy_words_reads_the_whole_source_before_writing(shift):
    flat = np.arange(400, dtype=np.uint16)
    want = flat[100:200].copy()
    _nbarith.copy_words(flat, 100, flat, 100 + shift, 100, np.empty(100, np.uint16))
    assert np.array_equal(flat[100 + shift: 200 + shift], want)
    host = np.arange(1000, 1100, dtype=np.uint16)
    _nbarith.copy_apart(host, 10, flat, 5, 50)
    assert np.array_equal(flat[5:55], host[10:60])


def _tie_rows(rng: np.random.Generator, op: int, accm: bool, s: float) -> tuple[np.ndarray, np.ndarray]:
    """Operands (x, d) of near exponents whose float32 results are BF16 rounding midpoints (found among
    2^20 random pairs; a quotient of two BF16 values never is one: it would need 9 significant bits)."""
    x = rng.integers(0x3F00, 0x4080, 1 << 20).astype(np.uint16) | (rng.integers(0, 2, 1 << 20) << 15).astype(
        np.uint16)
    d = rng.integers(0x3F00, 0x4080, 1 << 20).astype(np.uint16)
    with np.errstate(all="ignore"):
        y = _ref64(op, _widen(x), _widen(d), s)
        r = (_widen(d) + y if accm else y).astype(np.float32)
    tie = (r.view(np.uint32) & 0xFFFF) == 0x8000
    return x[tie], d[tie]


@pytest.mark.parametrize(("op", "accm"), [(9, False), (2, False), (0, True), (1, True), (8, True)])
def test_float32_routes_round_ties_cancellations_and_overflow_as_the_reference(op, accm):
    """ADD, DIVS (no accm) and the accm products (d + p) are formed in float32 and rounded on the pattern
    (`_nbarith._rounded32`): on rows of BF16 midpoint results (exact ties: the route must keep them,
    else it is never taken on real rows), sums across exponent gaps of 15..30 with either sign,
    cancelling overflowed products and infinities, every element equals NumPy's float64 then one
    rounding."""
    rng = np.random.default_rng(11 + op)
    s = float(_widen(np.array([0x3FB4], np.uint16))[0])  # 1.40625: 8 significant bits
    tx, td = _tie_rows(rng, op, accm, s)
    assert tx.size > 1000 or op == 2
    gaps = 2.0 ** -np.arange(15, 31)
    big = np.array([1.0, -1.0, 1.5, -1.5, 2.0, -2.0, 1.9921875])
    edge = [3.3e38, -3.3e38, np.inf, -np.inf, 1e-39]  # (x, d): overflow that cancels, inf - inf, subnormal
    ex = nx.to_bits(np.concatenate([np.outer(big, gaps).ravel(), edge]))
    ed = nx.to_bits(np.concatenate([np.repeat(big, gaps.size), [-v for v in edge[:4]] + [1e-39]]))
    x, d = np.concatenate([tx, ex, ed]), np.concatenate([td, ed, ex])
    n = x.size
    with np.errstate(all="ignore"):
        y = _ref64(op, _widen(x), _widen(d), s)
        want = nx.to_bits(_widen(d) + y if accm else y)
    flat = np.concatenate([x, d])
    _nbarith.arith_row(op, flat, 0, n, n, s, accm, np.empty(n), np.empty(n, np.uint32))
    assert np.array_equal(flat[n:], want)
    for i in range(tx.size, n):  # each edge alone (a row falls back whole: a neighbour could hide one)
        flat = np.array([x[i], d[i]])
        _nbarith.arith_row(op, flat, 0, 1, 1, s, accm, np.empty(1), np.empty(1, np.uint32))
        assert flat[1] == want[i], (i, hex(x[i]), hex(d[i]))
    if tx.size:  # the midpoint rows alone stay on the float32 route
        flat, k = np.concatenate([tx, td]), tx.size
        assert _nbarith._rounded32(op, flat, np.uint64(0), np.uint64(k), np.uint64(k), np.float32(s),
                                   np.empty(k, np.uint32))
