"""The fp16 arithmetic contract against independent scalar arithmetic and its tiling properties."""

from __future__ import annotations

import math

import numpy as np
import pytest

from npukit.targets.rk3588 import numerics as nx


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def test_seq_acc_is_the_scalar_fp32_loop(rng):
    a = nx.f16(rng.standard_normal((5, 97)) * 4)
    b = nx.f16(rng.standard_normal((97, 6)) * 0.1)
    got = nx.seq_acc(a, b)
    for i in range(5):
        for j in range(6):
            acc = np.float32(0)
            for k in range(97):  # independent: numpy scalar fp32, one rounding per add
                acc = np.float32(acc + np.float32(a[i, k]) * np.float32(b[k, j]))
            assert got[i, j] == acc


def test_numba_and_numpy_paths_give_the_same_bits(rng, monkeypatch):
    a = nx.f16(rng.standard_normal((33, 200)) * 8)
    b = nx.f16(rng.standard_normal((200, 48)))
    fast = nx.seq_acc(a, b)
    monkeypatch.setattr(nx, "USE_NUMBA", False)
    assert np.array_equal(fast.view(np.uint32), nx.seq_acc(a, b).view(np.uint32))


def test_any_k_split_with_fp32_partials_is_exact(rng):
    a = nx.f16(rng.standard_normal((16, 1536)) * 3)
    b = nx.f16(rng.standard_normal((1536, 40)) * 0.05)
    whole = nx.seq_acc(a, b)
    for cut in (32, 96, 768, 1000):
        acc = None
        for k0 in range(0, 1536, cut):
            acc = nx.seq_acc(a[:, k0:k0 + cut], b[k0:k0 + cut], acc)
        assert np.array_equal(acc.view(np.uint32), whole.view(np.uint32)), cut


def test_fp16_rounding_matches_torch(rng):
    import torch

    x = (rng.standard_normal(10000) * 1000).astype(np.float32)
    x[:3] = [65504.0, 65520.0, 1e6]  # max, the first value that rounds to inf, overflow
    ref = torch.from_numpy(x).half().numpy()
    assert np.array_equal(nx.f16(x).view(np.uint16), ref.view(np.uint16))
    assert np.isinf(nx.f16(np.float32(65520.0)))


@pytest.mark.parametrize("table,fn", [
    ("exp", math.exp),
    ("gelu", lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2)))),
    ("gelu_tanh", lambda v: 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))),
])
def test_lookup_tables_round_the_exact_function_once(table, fn):
    codes = np.arange(0, 65536, 97, dtype=np.uint16)
    x = codes.view(np.float16)
    x = x[np.isfinite(x) & (np.abs(x.astype(np.float64)) < 11)]
    got = nx.lut(table, x)
    want = np.array([fn(float(v)) for v in x.astype(np.float64)]).astype(np.float16)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


def test_layernorm_square_overflows_at_256():
    g = nx.f16(np.ones(8))
    b = nx.f16(np.zeros(8))
    ok = nx.f16(np.array([[255.0, -255.0, 1, -1, 2, -2, 0.5, -0.5]]))
    bad = nx.f16(np.array([[300.0, -300.0, 1, -1, 2, -2, 0.5, -0.5]]))
    y_ok = nx.layernorm(ok, g, b, 1e-12).astype(np.float64)
    ref = (ok - ok.astype(np.float64).mean()) / ok.astype(np.float64).std()
    assert np.allclose(y_ok, ref, atol=2e-3)
    y_bad = nx.layernorm(bad, g, b, 1e-12)
    assert np.all(y_bad == 0)  # inf variance: every output collapses to the bias
    # the sandwich: scale by 2^-1 and eps by 2^-2 gives the unscaled result back
    y_sw = nx.layernorm(nx.scale_pow2(bad, -1), g, b, 1e-12 / 4).astype(np.float64)
    ref_bad = (bad - bad.astype(np.float64).mean()) / bad.astype(np.float64).std()
    assert np.allclose(y_sw, ref_bad, atol=2e-3)


def test_power_of_two_scaling_is_undone_exactly(rng):
    x = nx.f16(rng.standard_normal(4096) * 300)
    back = nx.scale_pow2(nx.scale_pow2(x, -3), 3)
    assert np.array_equal(back.view(np.uint16), x.view(np.uint16))
