"""The numerical harness the seed asked for: what each stage of FP8-as-storage costs in accuracy.

Against the float64 GEMM of the original (pre-FP8) weights, y0 = x · Wᵀ, four cumulative stages:

1. ``fp8``    — weights stored in FP8 (decoded value × FP8 scale), everything else float64;
2. ``int8``   — + the kernel's int8 re-quantization of the decoded weights (``w8 · s_n``);
3. ``act``    — + the v4 activation quantization (fp16, then int8 with one per-tensor scale);
4. ``kernel`` — the fused GEMM's actual fp16 output (adds the fp32 epilogue and fp16 rounding).

Per stage: ``max_rel = max|y − y0| / max|y0|``, ``mean_rel = mean|y − y0| / mean|y0|`` and the
cosine of the flattened outputs. Weights: Gaussian with a log-normal spread of column scales and
0.1 % outliers at 8σ (the shape of trained projection weights); activations Gaussian with a few
outlier channels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npukit.kernels.fp8 import contract as C
from npukit.kernels.fp8.encode import Fp8Weights, activation_inv_scale, encode

STAGES = ("fp8", "int8", "act", "kernel")


@dataclass(frozen=True)
class StageError:
    stage: str
    max_rel: float
    mean_rel: float
    cosine: float


def errors(y: np.ndarray, y0: np.ndarray, stage: str) -> StageError:
    d = np.abs(y.astype(np.float64) - y0)
    y = y.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        cos = float(np.dot(y.ravel(), y0.ravel()) / (np.linalg.norm(y) * np.linalg.norm(y0) or 1.0))
    return StageError(stage, float(d.max() / (np.abs(y0).max() or 1.0)),
                      float(d.mean() / (np.abs(y0).mean() or 1.0)), cos)


def synthetic(m: int, n: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(x [M, K], W [N, K]) float64 with trained-weight-like structure (see module docstring)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k)) * np.exp(0.5 * rng.standard_normal(n))[:, None] * 0.02
    out = rng.random((n, k)) < 1e-3
    w[out] *= 8.0
    x = rng.standard_normal((m, k))
    x[:, rng.choice(k, max(1, k // 256), replace=False)] *= 10.0
    return x, w


def int8_weights(weights: Fp8Weights) -> np.ndarray:
    """float64 weights the int8 GEMM effectively multiplies: w8 · s_n · t (· post scale)."""
    w8 = C.weight_codes(weights.codes, weights.col_scales, weights.fmt).astype(np.float64)
    w = w8 * weights.col_scales.astype(np.float64)[:, None] * weights.tensor_scale
    return w if weights.post_scales is None else w * weights.post_scales.astype(np.float64)[:, None]


def stage_errors(x: np.ndarray, w: np.ndarray, fmt: str, scaling: str = "column",
                 impl: str = "auto") -> list[StageError]:
    y0 = x @ w.T
    weights = encode(w, fmt, scaling)
    w_fp8 = weights.values().astype(np.float64)
    w_i8 = int8_weights(weights)
    x16 = C.to_f16(x.astype(np.float32))
    a_inv = activation_inv_scale(x16)
    xq = C.quantize_activations(x16, a_inv).astype(np.float64) / float(C.a_inv_f16(a_inv))
    return [errors(x @ w_fp8.T, y0, "fp8"), errors(x @ w_i8.T, y0, "int8"), errors(xq @ w_i8.T, y0, "act"),
            errors(weights.linear(x, impl=impl), y0, "kernel")]


def default_shapes(quick: bool = False) -> list[tuple[str, int, int, int]]:
    shapes = [("llama3-8b q_proj", 16, 4096, 4096), ("gemma3n-e4b down_proj", 16, 2048, 16384),
              ("llama3-8b k_proj", 16, 1024, 4096), ("seed 4096³ (M=64 rows)", 64, 4096, 4096)]
    return [("small", 8, 256, 512), ("medium", 16, 1024, 2048)] if quick else shapes


def run(shapes, fmts=C.FORMATS, scaling: str = "column") -> list[tuple[str, int, int, int, str, list]]:
    rows = []
    for label, m, n, k in shapes:
        x, w = synthetic(m, n, k)
        for fmt in fmts:
            rows.append((label, m, n, k, fmt, stage_errors(x, w, fmt, scaling)))
    return rows


def table(rows) -> list[str]:
    lines = ["| shape | M×N×K | fmt | " + " | ".join(f"{s} max / mean rel, cos" for s in STAGES) + " |",
             "|" + "---|" * (3 + len(STAGES))]
    for label, m, n, k, fmt, errs in rows:
        cells = [label, f"{m}×{n}×{k}", fmt]
        cells += [f"{e.max_rel:.2e} / {e.mean_rel:.2e}, {e.cosine:.6f}" for e in errs]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def load_check(fmts=C.FORMATS, seed: int = 0) -> list[str]:
    """The seed's benchmark weights (uniform random bytes) through the load path: flagged counts."""
    from npukit.errors import FormatError
    from npukit.kernels.fp8.encode import from_codes, nonfinite_codes

    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 256, (256, 256), dtype=np.uint8)
    lines = []
    for fmt in fmts:
        bad = int(nonfinite_codes(codes, fmt).sum())
        try:
            from_codes(codes, np.ones(256, np.float16), fmt)
            verdict = "accepted"
        except FormatError:
            verdict = "refused at load"
        lines.append(f"{fmt}: {bad} of {codes.size} random bytes ({100 * bad / codes.size:.2f} %) are "
                     f"inf/NaN codes -> {verdict} (allow_nonfinite=True maps them to ±127/-128 and 0)")
    return lines
