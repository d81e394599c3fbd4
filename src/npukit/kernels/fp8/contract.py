"""The FP8-as-storage GEMM contract, as a NumPy reference (cuda-fp8-ampere v2 / v4).

Inputs: activations ``a`` [M, K] (int8 for v2, float16/bfloat16 for v3/v4), weight bytes
``b_codes`` [N, K] uint8 (FP8 bit patterns), per-column scales ``col_scales`` [N] float16.

1. decode: ``lut[b]`` = the format's value of byte b, held as float16 (exact for all three formats);
2. per column n: ``inv_n = fp16(1/s_n)`` computed in float32, 0 when ``|s_n| <= 1e-8`` (and for a
   NaN scale, whose comparison is false);
3. weight code ``w = sat_s8(rne(fp16(lut[b] · inv_n)))`` — an fp16 multiply then PTX
   ``cvt.rni.sat.s8.f16``: round half to even, clamp to [-128, 127], NaN -> 0 (so inf codes give
   ±127 / -128 and NaN codes 0);
4. activations: int8 as given (v2), or ``sat_s8(rne(fp16(fp16(a) · fp16(a_inv_scale))))`` (v3/v4;
   bfloat16 goes bf16 -> f32 -> f16; ``a_inv_scale`` is a host float, so f32 then f16);
5. int32 accumulation over K;
6. output ``fp16(f32(acc) · (f32(s_n) · f32(global_scale)))``, each step rounded to nearest even.
   The epilogue does not undo ``a_inv_scale``: fold ``1/a_inv_scale`` into ``global_scale``.

``out_layout="nm"`` returns [N, M] as the seed writes D; ``"mn"`` returns [M, N].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npukit.errors import FormatError
from npukit.formats import fp8

FORMATS = ("e4m3", "e4m3fn", "e5m2")  # e4m3 = the seed's IEEE-style E4M3 (max 240)
SCALE_EPS = np.float32(1e-8)
MAX_K = 65536  # keeps every int32 sum (and the VNNI offset trick) exact: 255·128·65536 < 2^31


def check_fmt(fmt: str) -> str:
    if fmt not in FORMATS:
        raise FormatError(f"unknown FP8 storage format {fmt!r}; known: {', '.join(FORMATS)}")
    return fmt


def lut_f16(fmt: str) -> np.ndarray:
    """256-entry float16 decode table (every FP8 value of these formats is exact in float16)."""
    return fp8.table(check_fmt(fmt)).astype(np.float16)


def inv_scales(col_scales: np.ndarray) -> np.ndarray:
    """Per-column fp16 reciprocal: f32 division, 0 for |s| <= 1e-8 (NaN too), then rounded to fp16."""
    s = np.asarray(col_scales, dtype=np.float16).astype(np.float32)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        inv = np.where(np.abs(s) > SCALE_EPS, np.float32(1.0) / s, np.float32(0.0)).astype(np.float32)
        return inv.astype(np.float16)


def sat_rni_s8(x: np.ndarray) -> np.ndarray:
    """PTX ``cvt.rni.sat.s8.f16``: round half to even, saturate to [-128, 127], NaN -> 0."""
    y = np.rint(np.asarray(x, dtype=np.float32))
    y = np.where(np.isnan(y), np.float32(0.0), y)
    return np.clip(y, -128, 127).astype(np.int8)


def fp16_mul(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """fp16 × fp16 rounded once to fp16 (``__hmul``): the float32 product of two fp16 is exact."""
    with np.errstate(over="ignore", invalid="ignore"):
        return (np.asarray(x, np.float16).astype(np.float32) * np.asarray(y, np.float16).astype(np.float32)
                ).astype(np.float16)


def weight_codes(b_codes: np.ndarray, col_scales: np.ndarray, fmt: str) -> np.ndarray:
    """The int8 weights [N, K] the GEMM multiplies (materialized here; the fast path never does)."""
    lut = lut_f16(fmt)
    return sat_rni_s8(fp16_mul(lut[b_codes], inv_scales(col_scales)[:, None]))


def a_inv_f16(a_inv_scale: float) -> np.float16:
    """The host float (f32) rounded to fp16, as ``__float2half`` does."""
    return np.float32(a_inv_scale).astype(np.float16)


def to_f16(a: np.ndarray) -> np.ndarray:
    """fp16 activations: float16 as is; bfloat16 / float32 rounded to fp16 (RN) via float32."""
    if a.dtype == np.float16:
        return a
    return a.astype(np.float32).astype(np.float16)


def quantize_activations(a: np.ndarray, a_inv_scale: float | None) -> np.ndarray:
    """int8 activation codes [M, K]: v2 passes int8 through; v3/v4 quantize with one scalar."""
    if a.dtype == np.int8:
        return a
    if a_inv_scale is None:
        raise FormatError("float activations need a_inv_scale (see kernels.fp8.activation_inv_scale)")
    return sat_rni_s8(fp16_mul(to_f16(a), a_inv_f16(a_inv_scale)))


def epilogue(acc: np.ndarray, col_scales: np.ndarray, global_scale: float) -> np.ndarray:
    """[M, N] int32 accumulators -> fp16 ``f32(acc) · (f32(s_n) · f32(global_scale))``."""
    scale = np.asarray(col_scales, np.float16).astype(np.float32) * np.float32(global_scale)
    with np.errstate(over="ignore", invalid="ignore"):
        return (acc.astype(np.float32) * scale[None, :]).astype(np.float16)


@dataclass(frozen=True)
class Operands:
    """Validated GEMM operands (shapes, dtypes and C-contiguity checked once)."""

    a: np.ndarray
    b_codes: np.ndarray
    col_scales: np.ndarray
    fmt: str
    global_scale: float
    a_inv_scale: float | None
    out_layout: str


def _is_float_act(dtype: np.dtype) -> bool:
    return dtype in (np.float16, np.float32) or dtype.name == "bfloat16"


def check_operands(a, b_codes, col_scales, fmt, global_scale, a_inv_scale, out_layout) -> Operands:
    check_fmt(fmt)
    a = np.asarray(a)
    b = np.asarray(b_codes)
    s = np.asarray(col_scales)
    if a.ndim != 2 or not (a.dtype == np.int8 or _is_float_act(a.dtype)):
        raise FormatError(f"a must be a 2-D int8 or float16/bfloat16 array, got {a.dtype}{list(a.shape)}")
    if b.ndim != 2 or b.dtype != np.uint8:
        raise FormatError(f"b_codes must be a 2-D uint8 array [N, K], got {b.dtype}{list(b.shape)}")
    if b.shape[1] != a.shape[1]:
        raise FormatError(f"K mismatch: a is {list(a.shape)}, b_codes is {list(b.shape)}")
    if not 1 <= a.shape[1] <= MAX_K:
        raise FormatError(f"K = {a.shape[1]} outside 1..{MAX_K}")
    if s.shape != (b.shape[0],) or s.dtype != np.float16:
        raise FormatError(f"col_scales must be float16 [{b.shape[0]}], got {s.dtype}{list(s.shape)}")
    if out_layout not in ("nm", "mn"):
        raise FormatError(f"out_layout must be 'nm' or 'mn', got {out_layout!r}")
    if a.dtype != np.int8 and a_inv_scale is None:
        raise FormatError("float activations need a_inv_scale (see kernels.fp8.activation_inv_scale)")
    return Operands(np.ascontiguousarray(a), np.ascontiguousarray(b), np.ascontiguousarray(s), fmt,
                    float(global_scale), None if a_inv_scale is None else float(a_inv_scale), out_layout)


def gemm_reference(a, b_codes, col_scales, *, fmt: str = "e4m3", global_scale: float = 1.0,
                   a_inv_scale: float | None = None, out_layout: str = "nm") -> np.ndarray:
    """The contract, step by step (materializes the int8 weights; for checking, not speed)."""
    op = check_operands(a, b_codes, col_scales, fmt, global_scale, a_inv_scale, out_layout)
    w8 = weight_codes(op.b_codes, op.col_scales, fmt)
    a8 = quantize_activations(op.a, op.a_inv_scale)
    # float64 sums of int8 products are exact (|sum| < 2^31 << 2^53), and BLAS makes them fast
    acc = (a8.astype(np.float64) @ w8.astype(np.float64).T).astype(np.int32)
    out = epilogue(acc, op.col_scales, op.global_scale)
    return np.ascontiguousarray(out.T) if out_layout == "nm" else out
