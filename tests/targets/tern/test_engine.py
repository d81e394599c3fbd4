"""The ternary engine: base-3 decode, multiply-free sign-select GEMV, tile accounting, sparse gather."""

from typing import ClassVar

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from npukit.errors import FormatError
from npukit.formats.ternary import pack_base3
from npukit.targets.tern.engine import (
    PackedMatrix,
    TernaryEngine,
    accumulate_tiles,
    decode_base3,
    sign_select_tiles,
)


def test_decode_all_bytes_against_hand_digits():
    data = np.arange(256, dtype=np.uint8)[:, None]
    codes = decode_base3(data, 5)
    for b in range(256):
        v, want = b, []
        for _ in range(5):  # lane 0 is the least significant base-3 digit
            want.append(v % 3)
            v //= 3
        assert codes[b].tolist() == want
    # 243 = 3^5 aliases to five zero lanes, as the RTL's %3 chain does (refs/ternary.md §1.2)
    assert codes[243].tolist() == [0, 0, 0, 0, 0]


def test_lane_codes_are_ternfpga_2bit_codes():
    # digit 1 -> +1 -> lane code 01, digit 2 -> -1 -> lane code 10 (refs/ternary.md §1.1)
    t = np.array([[1, -1, 0, 1, -1, 0, 0]], dtype=np.int8)
    codes = decode_base3(pack_base3(t), 7)
    assert codes.tolist() == [[0b01, 0b10, 0, 0b01, 0b10, 0, 0]]


def _random(rng, out, n_in, T=3, density=1.0):
    t = rng.integers(-1, 2, size=(out, n_in)).astype(np.int8)
    q = rng.integers(-128, 128, size=(T, n_in)).astype(np.int8)
    q[rng.random((T, n_in)) > density] = 0
    return t, q


@pytest.mark.parametrize(("out", "n_in", "K"),
                         [(16, 64, 8), (7, 13, 8), (33, 100, 16), (5, 3, 4), (9, 40, 1)])
def test_gemv_matches_integer_matmul(out, n_in, K):
    rng = np.random.default_rng(out * 1000 + n_in)
    t, q = _random(rng, out, n_in)
    eng = TernaryEngine(K)
    y = eng.gemv(PackedMatrix.from_trits(t), q)
    ref = q.astype(np.int64) @ t.T.astype(np.int64)
    assert y.dtype == np.int32 and np.array_equal(y, ref)
    # one tile per cycle: T tokens × out rows × ceil(in/K) tiles, base-3 bytes streamed per token
    assert eng.stats.tiles == q.shape[0] * out * -(-n_in // K)
    assert eng.stats.weight_bytes == q.shape[0] * out * -(-n_in // 5)


def test_extreme_activations_accumulate_exactly():
    t = np.full((2, 6912), -1, np.int8)
    t[1] = 1
    q = np.full((1, 6912), -128, np.int8)
    y = TernaryEngine(8).gemv(PackedMatrix.from_trits(t), q)
    assert y.tolist() == [[128 * 6912, -128 * 6912]]


class _NoMultiply(np.ndarray):
    """An array that records every ufunc and array function applied to it and refuses products."""

    log: ClassVar[set] = set()
    FORBIDDEN_UFUNCS: ClassVar[set] = {"multiply", "matmul", "divide", "true_divide", "floor_divide",
                                       "power", "square"}
    FORBIDDEN_FUNCS: ClassVar[set] = {"dot", "matmul", "einsum", "tensordot", "inner", "outer", "prod",
                                      "vdot", "kron"}

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        _NoMultiply.log.add(ufunc.__name__)
        if ufunc.__name__ in self.FORBIDDEN_UFUNCS:
            raise AssertionError(f"multiplier used: {ufunc.__name__}")
        args = [np.asarray(i) if isinstance(i, _NoMultiply) else i for i in inputs]
        out = getattr(ufunc, method)(*args, **kwargs)
        return out.view(_NoMultiply) if isinstance(out, np.ndarray) else out

    def __array_function__(self, func, types, args, kwargs):
        _NoMultiply.log.add(func.__name__)
        if func.__name__ in self.FORBIDDEN_FUNCS:
            raise AssertionError(f"multiplier used: {func.__name__}")
        plain = [np.asarray(a) if isinstance(a, _NoMultiply) else a for a in args]
        out = func(*plain, **kwargs)
        return out.view(_NoMultiply) if isinstance(out, np.ndarray) else out


def test_sign_select_kernel_has_no_multiplier():
    rng = np.random.default_rng(1)
    t, q = _random(rng, 12, 40, T=2)
    codes = decode_base3(pack_base3(t), 40).reshape(12, 5, 8)
    x = q.astype(np.int32).reshape(2, 5, 8)
    _NoMultiply.log = set()
    tiles = sign_select_tiles(codes.view(_NoMultiply)[None], x.view(_NoMultiply)[:, None])
    acc = accumulate_tiles(tiles)
    assert np.array_equal(np.asarray(acc), q.astype(np.int64) @ t.T.astype(np.int64))
    # only selects, bitwise ands, comparisons, add and subtract touched the data
    assert _NoMultiply.log <= {"where", "bitwise_and", "not_equal", "subtract", "add", "sum"}
    assert "subtract" in _NoMultiply.log and "where" in _NoMultiply.log


@pytest.mark.parametrize(("active", "tiles"), [(256, 384), (151, 240), (104, 168), (33, 72)])
def test_gather_tile_counts_match_ternfpga(active, tiles):
    # ternfpga bench/results/down_proj_gather.md (K=16, F=256, H=24): weight tiles fetched per density
    rng = np.random.default_rng(active)
    t = rng.integers(-1, 2, size=(24, 256)).astype(np.int8)
    q = np.zeros((1, 256), np.int8)
    idx = rng.choice(256, size=active, replace=False)
    q[0, idx] = rng.choice([-5, 3, 127, -128], size=active)
    eng = TernaryEngine(16)
    W = PackedMatrix.from_trits(t)
    y = eng.gather_gemv(W, q)
    assert np.array_equal(y, q.astype(np.int64) @ t.T.astype(np.int64))
    assert eng.stats.tiles == tiles and eng.stats.dense_tiles == 384
    assert eng.stats.weight_bytes == active * -(-24 // 5)  # only the nonzero columns were fetched


@given(st.integers(1, 40), st.integers(1, 70), st.integers(1, 16), st.floats(0, 1), st.integers(0, 2**31))
def test_gather_bit_exact_with_dense(out, n_in, K, density, seed):
    rng = np.random.default_rng(seed)
    t, q = _random(rng, out, n_in, T=2, density=density)
    W = PackedMatrix.from_trits(t)
    assert np.array_equal(TernaryEngine(K).gather_gemv(W, q), TernaryEngine(K).gemv(W, q))


def test_bad_inputs():
    W = PackedMatrix.from_trits(np.zeros((2, 10), np.int8))
    with pytest.raises(FormatError, match="int8"):
        TernaryEngine(8).gemv(W, np.zeros((1, 10), np.int16))
    with pytest.raises(FormatError, match="int8"):
        TernaryEngine(8).gemv(W, np.zeros((1, 9), np.int8))
    with pytest.raises(FormatError, match="uint8"):
        decode_base3(np.zeros(3, np.int32), 5)
