"""Bit-exactness against TFLite's reference kernels, run by LiteRT (BUILTIN_REF resolver) on int8
models built in the test: ADD over every input pair, random per-channel CONV_2D (double rounding)
and random FULLY_CONNECTED layers (pip LiteRT 2.3.0's reference FC int8 rounds once)."""

from __future__ import annotations

import numpy as np
import pytest
from _litert_models import add_model, conv1x1_per_channel_model, fully_connected_model, run_ref

from npukit.formats import fixedpoint as fp

ALL_PAIRS = tuple(v.ravel().astype(np.int8) for v in np.meshgrid(np.arange(-128, 128), np.arange(-128, 128)))


def _scale(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(np.float32(np.exp(rng.uniform(np.log(lo), np.log(hi)))))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_add_all_pairs_match_litert(seed):
    rng = np.random.default_rng(seed)
    s1, s2 = _scale(rng, 0.003, 0.2), _scale(rng, 0.003, 0.2)
    so = float(np.float32((s1 + s2) * rng.uniform(0.5, 1.5)))
    z1, z2, zo = (int(z) for z in rng.integers(-128, 128, 3))
    x, y = ALL_PAIRS
    expect = run_ref(add_model(x.size, s1, z1, s2, z2, so, zo), x, y)
    ours = fp.add_int8(x, y, fp.add_params(s1, z1, s2, z2, so, zo))
    assert np.array_equal(ours, expect)


def _fc_case(rng: np.random.Generator, big_multiplier: bool):
    b, k, n = 32, int(rng.integers(4, 40)), 64
    s_in, s_w = _scale(rng, 0.005, 0.1), _scale(rng, 0.001, 0.05)
    if big_multiplier:  # real multiplier > 1: positive shift, tiny weights keep outputs in range
        w = rng.integers(-2, 3, (n, k))
        real = rng.uniform(1.0, 6.0)
    else:
        w = rng.integers(-127, 128, (n, k))
        real = np.exp(rng.uniform(np.log(2e-5), np.log(3e-3)))
    s_out = float(np.float32(float(np.float32(s_in)) * float(np.float32(s_w)) / real))
    zp_in, zp_out = (int(z) for z in rng.integers(-128, 128, 2))
    bias = rng.integers(-20000, 20000, n)
    x = rng.integers(-128, 128, (b, k))
    return x, w, bias, s_in, zp_in, s_w, s_out, zp_out


def _requant(acc, m, shift, zp_out, rounding):
    out = fp.multiply_by_quantized_multiplier(acc, m, shift, rounding=rounding).astype(np.int64)
    return np.clip(out + zp_out, -128, 127)


def test_fully_connected_matches_litert():
    rng = np.random.default_rng(99)
    checked = double_mismatches = 0
    for case in range(30):
        x, w, bias, s_in, zp_in, s_w, s_out, zp_out = _fc_case(rng, big_multiplier=case % 5 == 0)
        model = fully_connected_model(x.shape, s_in, zp_in, w, s_w, bias, s_out, zp_out)
        expect = run_ref(model, x.astype(np.int8))
        acc = (x - zp_in) @ w.T + bias  # exact int64 accumulation, as the reference kernel
        real = float(np.float32(s_in)) * float(np.float32(s_w)) / float(np.float32(s_out))
        m, shift = fp.quantize_multiplier(real)
        ours = _requant(acc, m, shift, zp_out, "single")
        assert np.array_equal(ours, expect), f"case {case}: multiplier {m}, shift {shift}"
        double_mismatches += int((_requant(acc, m, shift, zp_out, "double") != expect).sum())
        checked += expect.size
    assert checked == 30 * 32 * 64
    assert double_mismatches > 0  # the two rounding modes are told apart by this oracle


def test_conv2d_per_channel_matches_litert():
    checked = single_mismatches = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        c, n = int(rng.integers(3, 40)), 24
        x = rng.integers(-128, 128, (1, 8, 8, c))
        w = rng.integers(-127, 128, (n, c))
        bias = rng.integers(-20000, 20000, n)
        s_in = _scale(rng, 0.005, 0.1)
        s_w = np.exp(rng.uniform(np.log(0.001), np.log(0.05), n)).astype(np.float32)
        real = np.exp(rng.uniform(np.log(2e-5), np.log(3e-3)))
        s_out = float(np.float32(s_in * float(np.median(s_w)) / real))
        zp_in, zp_out = (int(z) for z in rng.integers(-128, 128, 2))
        expect = run_ref(conv1x1_per_channel_model(x.shape, s_in, zp_in, w, s_w, bias, s_out, zp_out),
                         x.astype(np.int8))
        acc = ((x.reshape(-1, c) - zp_in) @ w.T + bias).reshape(expect.shape)
        # per channel: double(s_in) · double(s_w[c]) / double(s_out), as PopulateConvolutionQuantizationParams
        reals = float(np.float32(s_in)) * s_w.astype(np.float64) / float(np.float32(s_out))
        m, shift = fp.quantize_multipliers(reals)
        assert np.array_equal(_requant(acc, m, shift, zp_out, "double"), expect), f"seed {seed}"
        single_mismatches += int((_requant(acc, m, shift, zp_out, "single") != expect).sum())
        checked += expect.size
    assert checked == 20 * 64 * 24
    assert single_mismatches > 0
