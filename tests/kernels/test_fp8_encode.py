"""The FP8 weight encoder and load check, against ml_dtypes casts and a float64 GEMM."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from npukit.errors import FormatError
from npukit.kernels import fp8 as K
from npukit.kernels.fp8 import harness

ML = {"e4m3": ml_dtypes.float8_e4m3, "e4m3fn": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


def ml_cast(x: np.ndarray, fmt: str) -> np.ndarray:
    """Saturating cast = ml_dtypes' RNE cast of the clipped value (finite inputs)."""
    mx = float(ml_dtypes.finfo(ML[fmt]).max)
    return np.clip(x.astype(np.float32), -mx, mx).astype(ML[fmt])


@pytest.mark.parametrize("fmt", K.FORMATS)
@pytest.mark.parametrize("scaling", ["tensor", "column"])
def test_encode_matches_ml_dtypes(fmt, scaling):
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((24, 96)) * np.exp(rng.standard_normal(24))[:, None]).astype(np.float32)
    w[3] = 0.0  # an all-zero column
    enc = K.encode(w, fmt, scaling)
    mx = np.float32(ml_dtypes.finfo(ML[fmt]).max)
    amax = np.abs(w).max(axis=1, keepdims=True) if scaling == "column" else np.abs(w).max()
    t = np.where(amax > 0, amax / mx, np.float32(1)).astype(np.float32)
    want = ml_cast(w / t, fmt)
    assert np.array_equal(enc.codes, want.view(np.uint8))
    dec = np.abs(want.astype(np.float64))
    assert np.array_equal(enc.col_scales, (dec.max(axis=1) / 127).astype(np.float32).astype(np.float16))
    assert enc.col_scales[3] == 0
    np.testing.assert_allclose(enc.values(), want.astype(np.float32) * t, rtol=1e-6)
    assert enc.nbytes == w.size + 2 * w.shape[0] + (4 * w.shape[0] if scaling == "column" else 0)


@pytest.mark.parametrize("fmt", K.FORMATS)
def test_load_refuses_nonfinite_codes(fmt):
    codes = np.arange(256, dtype=np.uint8).reshape(4, 64)
    bad = int((~np.isfinite(codes.view(ML[fmt]).astype(np.float32))).sum())
    assert bad == {"e4m3": 16, "e4m3fn": 2, "e5m2": 8}[fmt]
    with pytest.raises(FormatError, match=f"{bad} stored"):
        K.from_codes(codes, np.ones(4, np.float16), fmt)
    assert K.from_codes(codes, np.ones(4, np.float16), fmt, allow_nonfinite=True).nonfinite == bad
    ok = np.full((4, 64), 0x38, np.uint8)
    assert K.from_codes(ok, np.ones(4, np.float16), fmt).nonfinite == 0


@pytest.mark.parametrize("fmt", K.FORMATS)
def test_linear_close_to_float64(fmt):
    x, w = harness.synthetic(6, 64, 300, seed=2)
    y0 = x @ w.T
    for scaling in ("tensor", "column"):
        y = K.encode(w, fmt, scaling).linear(x)
        cos = float((y.ravel() @ y0.ravel()) / (np.linalg.norm(y) * np.linalg.norm(y0)))
        assert cos > 0.99, (fmt, scaling, cos)
        assert np.all(np.isfinite(y))


def test_harness_stages_and_load_check():
    x, w = harness.synthetic(4, 32, 256, seed=3)
    errs = harness.stage_errors(x, w, "e4m3fn")
    assert [e.stage for e in errs] == list(harness.STAGES)
    assert all(0 < e.mean_rel < 0.2 and e.cosine > 0.99 for e in errs)
    # the kernel adds only the fp32 epilogue and fp16 rounding to the activation stage
    assert abs(errs[3].mean_rel - errs[2].mean_rel) < 2e-3
    lines = harness.load_check()
    assert len(lines) == 3 and all("refused at load" in s for s in lines)
