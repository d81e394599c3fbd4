"""The FP8-as-storage GEMM: reference vs an independent oracle, fused kernels vs the reference.

Oracle: decode tables from ml_dtypes; every fp16 rounding done by torch's float16 (RNE) arithmetic
(``__hmul`` = torch half multiply, ``__float2half`` = ``.half()``); round-half-even with
``torch.round``; int64 NumPy matmul for the accumulation. None of it shares code with npukit.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")  # the hf extra: installed by `make test`

from npukit.errors import FormatError  # noqa: E402
from npukit.kernels import fp8 as K  # noqa: E402
from npukit.kernels.fp8 import contract as C  # noqa: E402

ML = {"e4m3": ml_dtypes.float8_e4m3, "e4m3fn": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


def oracle_table(fmt: str) -> torch.Tensor:
    return torch.from_numpy(np.arange(256, dtype=np.uint8).view(ML[fmt]).astype(np.float64)).half()


def oracle_gemm(a, codes, scales, fmt, global_scale=1.0, a_inv_scale=None) -> np.ndarray:
    """The seed's kernel semantics, written with torch fp16 ops; returns [M, N] fp16."""
    s32 = torch.from_numpy(scales.astype(np.float32))
    inv = torch.where(s32.abs() > 1e-8, 1.0 / s32, torch.zeros_like(s32)).half()
    prod = oracle_table(fmt)[torch.from_numpy(codes.astype(np.int64))] * inv[:, None]  # fp16 hmul

    def sat(x: torch.Tensor) -> np.ndarray:
        r = torch.round(x.float())  # half to even
        return torch.nan_to_num(r, nan=0.0).clamp(-128, 127).to(torch.int64).numpy()

    w = sat(prod)
    if a.dtype == np.int8:
        a8 = a.astype(np.int64)
    else:
        a16 = torch.from_numpy(a.astype(np.float32)).half()
        a8 = sat(a16 * torch.tensor(np.float32(a_inv_scale)).half())
    acc = a8 @ w.T  # int64, exact
    col = s32 * torch.tensor(np.float32(global_scale))
    return (torch.from_numpy(acc.astype(np.float32)) * col[None, :]).half().numpy()


def same(x: np.ndarray, y: np.ndarray) -> bool:
    """Bit-equal, or both NaN."""
    bx, by = x.view(np.uint16), y.view(np.uint16)
    return bool(np.all((bx == by) | (np.isnan(x) & np.isnan(y))))


def make_case(rng, m, n, k, act):
    codes = rng.integers(0, 256, (n, k), dtype=np.uint8)
    codes.flat[:256] = np.arange(256, dtype=np.uint8)  # every code present
    scales = (rng.standard_normal(n) * 2).astype(np.float16)
    special = np.array([0.0, 6e-8, 1e-5, -0.25, 3e-4, 1e4], np.float16)  # zero, fp16-subnormal, tiny
    scales[: min(n, special.size)] = special[: min(n, special.size)]
    if act == "int8":
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    else:
        a = (rng.standard_normal((m, k)) * 3).astype(np.float16)
        if act == "bf16":
            a = a.astype(np.float32).astype(ml_dtypes.bfloat16)
    return a, codes, scales


SHAPES = [(1, 7, 300), (3, 33, 257), (17, 70, 513), (6, 9, 64), (2, 5, 1)]


@pytest.mark.parametrize("fmt", C.FORMATS)
def test_decode_table_is_ml_dtypes(fmt):
    want = np.arange(256, dtype=np.uint8).view(ML[fmt]).astype(np.float64)
    got = C.lut_f16(fmt).astype(np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(got[~np.isnan(got)], want[~np.isnan(want)])


@pytest.mark.parametrize("fmt", C.FORMATS)
@pytest.mark.parametrize("act", ["int8", "f16", "bf16"])
def test_reference_matches_oracle(fmt, act):
    rng = np.random.default_rng(hash((fmt, act)) % 2**32)
    for m, n, k in SHAPES[:3]:
        a, codes, scales = make_case(rng, m, n, k, act)
        kw = {"a_inv_scale": 7.3} if act != "int8" else {}
        want = oracle_gemm(a, codes, scales, fmt, global_scale=0.37, **kw)
        got = K.gemm_reference(a, codes, scales, fmt=fmt, global_scale=0.37, out_layout="mn", **kw)
        assert same(got, want), (m, n, k)
        assert same(K.gemm_reference(a, codes, scales, fmt=fmt, global_scale=0.37, **kw), want.T)


def test_weight_code_special_values():
    """inf codes saturate (+inf -> 127, -inf -> -128), NaN codes give 0; a zero scale gives inv = 0,
    and inf · 0 is NaN, so every code then gives 0."""
    codes = np.array([[0x78, 0xF8, 0x79, 0x7F, 0x38]], np.uint8)  # e4m3: +inf, -inf, NaN, NaN, 1.0
    w = C.weight_codes(codes, np.array([1.0], np.float16), "e4m3")
    assert w.tolist() == [[127, -128, 0, 0, 1]]
    assert C.weight_codes(codes, np.array([0.0], np.float16), "e4m3").tolist() == [[0, 0, 0, 0, 0]]


@pytest.mark.parametrize("impl", ["fast", "portable"])
@pytest.mark.parametrize("fmt", C.FORMATS)
@pytest.mark.parametrize("act", ["int8", "f16", "bf16"])
def test_fused_equals_reference(impl, fmt, act):
    rng = np.random.default_rng(hash((impl, fmt, act)) % 2**32)
    for m, n, k in SHAPES:
        a, codes, scales = make_case(rng, m, n, k, act)
        kw = {"a_inv_scale": 11.0, "global_scale": 1.5, "fmt": fmt}
        if act == "int8":
            kw.pop("a_inv_scale")
        for layout in ("nm", "mn"):
            ref = K.gemm_reference(a, codes, scales, out_layout=layout, **kw)
            got = K.gemm(a, codes, scales, out_layout=layout, impl=impl, **kw)
            assert got.dtype == np.float16 and got.shape == ref.shape
            assert same(got, ref), (impl, fmt, act, m, n, k, layout)


def test_fused_wide_tiles_and_long_k():
    """M > 16 uses 64-column tiles; K = 4100 leaves a 4-byte tail after 64 full chunks."""
    rng = np.random.default_rng(5)
    a, codes, scales = make_case(rng, 37, 133, 4100, "f16")
    ref = K.gemm_reference(a, codes, scales, fmt="e4m3fn", a_inv_scale=9.0)
    assert same(K.gemm(a, codes, scales, fmt="e4m3fn", a_inv_scale=9.0), ref)


def test_bad_operands_are_typed_errors():
    a = np.zeros((2, 8), np.int8)
    codes = np.zeros((3, 8), np.uint8)
    s = np.ones(3, np.float16)
    with pytest.raises(FormatError):
        K.gemm(a, codes, s, fmt="e3m4")
    with pytest.raises(FormatError):
        K.gemm(a, codes[:, :7], s)
    with pytest.raises(FormatError):
        K.gemm(a, codes, s.astype(np.float32))
    with pytest.raises(FormatError):
        K.gemm(a.astype(np.float16), codes, s)  # float activations without a_inv_scale
    with pytest.raises(FormatError):
        K.gemm(a, codes, s, out_layout="km")


@pytest.mark.parametrize("impl", ["fast", "reference"])
def test_every_fp16_activation_quantizes_like_torch(impl):
    """All 65536 fp16 bit patterns (NaN, ±inf, subnormals, ±0, every ulp around x.5 and ±128) as
    activations with a_inv_scale = 1 and 0.75: the int8 codes seen through a one-hot weight row."""
    a = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).reshape(256, 256)
    for a_inv in (1.0, 0.75):
        prod = torch.from_numpy(a.astype(np.float32)).half() * torch.tensor(a_inv).half()
        want = torch.nan_to_num(torch.round(prod.float()), nan=0.0).clamp(-128, 127).numpy()
        codes = np.full((256, 256), 0x00, np.uint8)
        np.fill_diagonal(codes, 0x38)  # e4m3fn 1.0 on the diagonal: output column n reads a[:, n]
        got = K.gemm(a, codes, np.ones(256, np.float16), fmt="e4m3fn", a_inv_scale=a_inv,
                     out_layout="mn", impl=impl)
        assert np.array_equal(got.astype(np.float32), want)


def test_epilogue_rounding_across_the_fp16_range():
    """acc · scale spanning fp16 subnormals, normals, the 65504/65520 overflow edge and ties: the
    fused kernel's integer fp16 rounding equals torch's ``.half()`` of the float32 product."""
    acc_vals = np.arange(-128, 128, dtype=np.int8)
    a = acc_vals[:, None].copy()  # [256, 1]: acc = a · w with w = 1 (code 0x38 = 1.0, scale 1)
    gs_list = np.concatenate([np.logspace(-12, 3, 41), [65504 / 127, 65520 / 127, 65519.9 / 127, 2.0**-20]])
    for gs in gs_list:
        got = K.gemm(a, np.array([[0x38]], np.uint8), np.ones(1, np.float16), fmt="e4m3fn", global_scale=gs,
                     out_layout="mn")
        want = (torch.from_numpy(acc_vals.astype(np.float32)) * torch.tensor(np.float32(gs))).half().numpy()
        assert same(got[:, 0], want), gs


@settings(max_examples=40)
@given(m=st.integers(1, 9), n=st.integers(1, 40), k=st.integers(1, 300), fmt=st.sampled_from(C.FORMATS),
       act=st.sampled_from(["int8", "f16"]), seed=st.integers(0, 2**31 - 1),
       a_inv=st.floats(1e-3, 1e3), gs=st.floats(1e-6, 1e2))
def test_fused_equals_reference_random_shapes(m, n, k, fmt, act, seed, a_inv, gs):
    rng = np.random.default_rng(seed)
    a, codes, scales = make_case(rng, m, n, k, act)
    kw = {"fmt": fmt, "global_scale": gs, "a_inv_scale": None if act == "int8" else a_inv}
    ref = K.gemm_reference(a, codes, scales, **kw)
    assert same(K.gemm(a, codes, scales, impl="fast", **kw), ref)
    assert same(K.gemm(a, codes, scales, impl="portable", **kw), ref)
