"""Choosing what the seed leaves to the caller: the FP8 cast, its scale, and the int8 column scales.

``encode(w, fmt, scaling)`` turns float weights [N, K] into `Fp8Weights`:

1. FP8 cast with a scale ``t`` so that the largest magnitude lands on the format's max finite value:
   ``t = amax / fmt_max`` per tensor (``scaling="tensor"``) or per output column (``"column"``);
   codes = ``fp8.encode(w / t, fmt, saturate=True)`` (RNE from float32, never NaN/inf);
2. int8 column scales on the *decoded* values: ``s_n = fp16(max_k |v[n, k]| / 127)``, so the
   kernel's ``rne(v · fp16(1/s_n))`` spans the int8 grid (0 for an all-zero column).

`Fp8Weights.linear` runs a float layer through the contract (v4 mode): one dynamic per-tensor
activation scale ``a_inv = 127 / max|fp16(x)|``, ``global_scale = t / fp16(a_inv)`` folded in as the
contract requires. A per-column ``t_n`` cannot be folded into the kernel's single per-column scale
(it would move the int8 grid too), so ``"column"`` folds ``t_min = min_n t_n`` into
``global_scale`` (the fp16 output then cannot exceed the layer's natural range) and multiplies the
output by ``t_n / t_min`` afterwards in float32: an extension of the seed's contract, recorded as
``post_scales``.

`from_codes` is the load path for stored bytes: codes that decode to inf/NaN are counted and
refused unless explicitly allowed (the contract would silently clamp them to ±127/−128 and 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npukit.errors import FormatError
from npukit.formats import fp8
from npukit.kernels.fp8 import contract as C

SCALINGS = ("tensor", "column")


@dataclass
class Fp8Weights:
    codes: np.ndarray  # [N, K] uint8 FP8 bit patterns
    col_scales: np.ndarray  # [N] float16: the kernel's int8 step in FP8-value units
    fmt: str
    tensor_scale: float = 1.0  # real weight = FP8 value · tensor_scale (· post_scales[n])
    post_scales: np.ndarray | None = None  # [N] float32 per-column FP8 scales ("column" scaling)
    nonfinite: int = 0  # inf/NaN codes accepted at load (allow_nonfinite=True)

    @property
    def shape(self) -> tuple[int, int]:
        return self.codes.shape

    @property
    def nbytes(self) -> int:
        """Resident bytes: codes + fp16 column scales (+ fp32 post scales)."""
        extra = 0 if self.post_scales is None else self.post_scales.nbytes
        return int(self.codes.nbytes + self.col_scales.nbytes + extra)

    def values(self) -> np.ndarray:
        """The float32 weights these bytes stand for (FP8 value · scales); for error analysis only."""
        v = fp8.decode(self.codes, self.fmt) * np.float32(self.tensor_scale)
        return v if self.post_scales is None else v * self.post_scales[:, None]

    def linear(self, x: np.ndarray, act: str = "tensor", impl: str = "auto") -> np.ndarray:
        """y = x · Wᵀ through the FP8 GEMM; x [M, K] float, returns float32 [M, N].

        ``act="tensor"``: the seed's v4 mode, fp16 activations and one dynamic per-tensor
        ``a_inv_scale = 127 / max|x|``. ``act="token"``: one scale per row — the rows are quantized
        by the same rule (``sat_s8(rne(fp16(x) · fp16(a_inv_m)))``) and passed as int8 (v2), and the
        per-row ``1 / a_inv_m`` is applied to the output in float32.

        Inputs beyond the fp16 range are first scaled by a power of two (exact); an fp16 output
        overflow is retried with the output scaled down by 2^8; both factors go into
        ``global_scale`` and are undone in float32."""
        from npukit.kernels.fp8 import gemm

        if act not in ("tensor", "token"):
            raise FormatError(f"act must be 'tensor' or 'token', got {act!r}")
        x32 = np.ascontiguousarray(x, dtype=np.float32)
        amax = float(np.max(np.abs(x32), initial=0.0))
        shift = int(np.ceil(np.log2(amax / 2.0**14))) if np.isfinite(amax) and amax > 2.0**14 else 0
        x16 = C.to_f16(x32 * np.float32(2.0**-shift) if shift else x32)
        if act == "tensor":
            a_inv = activation_inv_scale(x16)
            a, kw = x16, {"a_inv_scale": a_inv}
            gs = self.tensor_scale * 2.0**shift / float(C.a_inv_f16(a_inv))
            row = None
        else:
            inv_rows = np.array([activation_inv_scale(r) for r in x16], np.float32).astype(np.float16)
            a, kw = C.sat_rni_s8(C.fp16_mul(x16, inv_rows[:, None])), {}
            gs = self.tensor_scale * 2.0**shift
            row = (1.0 / inv_rows.astype(np.float32))[:, None]
        for out_shift in (0, 8, 16):
            y16 = gemm(a, self.codes, self.col_scales, fmt=self.fmt, global_scale=gs * 2.0**-out_shift,
                       out_layout="mn", impl=impl, **kw)
            if np.all(np.isfinite(y16)):
                break
        y = y16.astype(np.float32) * np.float32(2.0**out_shift)
        if row is not None:
            y *= row
        return y if self.post_scales is None else y * self.post_scales[None, :]


def activation_inv_scale(x: np.ndarray) -> float:
    """Dynamic per-tensor ``a_inv_scale = 127 / max|x|`` (1.0 for an all-zero or non-finite x)."""
    amax = float(np.max(np.abs(np.asarray(x, np.float32)), initial=0.0))
    if not np.isfinite(amax) or amax == 0.0:
        return 1.0
    return 127.0 / amax


def int8_col_scales(codes: np.ndarray, fmt: str) -> np.ndarray:
    """``fp16(max_k |decoded[n, k]| / 127)`` per column (finite codes only)."""
    v = np.abs(fp8.decode(codes, fmt))
    v = np.where(np.isfinite(v), v, np.float32(0.0))
    return (v.max(axis=1, initial=0.0) / np.float32(127.0)).astype(np.float16)


def encode(w: np.ndarray, fmt: str = "e4m3fn", scaling: str = "column") -> Fp8Weights:
    """Float weights [N, K] -> FP8 storage with chosen scales (see the module docstring)."""
    C.check_fmt(fmt)
    if scaling not in SCALINGS:
        raise FormatError(f"scaling must be one of {', '.join(SCALINGS)}, got {scaling!r}")
    w32 = np.asarray(w, np.float32)
    if w32.ndim != 2:
        raise FormatError(f"weights must be 2-D [N, K], got shape {list(w32.shape)}")
    if not np.all(np.isfinite(w32)):
        raise FormatError("weights contain inf/NaN; refusing to encode them")
    fmax = np.float32(fp8.max_value(fmt))
    if scaling == "tensor":
        amax = np.float32(np.max(np.abs(w32), initial=0.0))
        t = amax / fmax if amax > 0 else np.float32(1.0)
        codes = fp8.encode(w32 / t, fmt, saturate=True)
        return Fp8Weights(codes, int8_col_scales(codes, fmt), fmt, tensor_scale=float(t))
    amax = np.max(np.abs(w32), axis=1, initial=0.0)
    t = np.where(amax > 0, amax / fmax, np.float32(1.0)).astype(np.float32)
    codes = fp8.encode(w32 / t[:, None], fmt, saturate=True)
    # the kernel's fp16 output must not overflow: fold the smallest column scale into global_scale
    # (outputs shrink by t_min / t_n <= 1) and multiply by t_n / t_min >= 1 afterwards
    t_min = np.float32(t[amax > 0].min()) if np.any(amax > 0) else np.float32(1.0)
    return Fp8Weights(codes, int8_col_scales(codes, fmt), fmt, tensor_scale=float(t_min),
                      post_scales=(t / t_min).astype(np.float32))


def nonfinite_codes(codes: np.ndarray, fmt: str) -> np.ndarray:
    """Boolean mask of the codes that decode to inf or NaN in ``fmt``."""
    return ~np.isfinite(C.lut_f16(fmt))[np.asarray(codes, np.uint8)]


def from_codes(codes: np.ndarray, col_scales: np.ndarray, fmt: str, *, tensor_scale: float = 1.0,
               allow_nonfinite: bool = False) -> Fp8Weights:
    """Load stored FP8 bytes; inf/NaN codes raise `FormatError` unless ``allow_nonfinite``."""
    C.check_fmt(fmt)
    c = np.ascontiguousarray(codes)
    s = np.ascontiguousarray(col_scales)
    if c.ndim != 2 or c.dtype != np.uint8:
        raise FormatError(f"codes must be 2-D uint8, got {c.dtype}{list(c.shape)}")
    if s.shape != (c.shape[0],) or s.dtype != np.float16:
        raise FormatError(f"col_scales must be float16 [{c.shape[0]}], got {s.dtype}{list(s.shape)}")
    bad = nonfinite_codes(c, fmt)
    count = int(bad.sum())
    if count and not allow_nonfinite:
        n, k = np.argwhere(bad)[0]
        raise FormatError(f"{count} stored {fmt} weight codes are inf/NaN (first 0x{int(c[n, k]):02X} at "
                          f"[{n}, {k}]); the GEMM would clamp them to ±127/-128 and 0 — pass "
                          f"allow_nonfinite=True to accept that")
    return Fp8Weights(c, s, fmt, tensor_scale=float(tensor_scale), nonfinite=count)
