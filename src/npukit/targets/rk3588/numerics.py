"""The rk3588 NPU arithmetic contract (fp16 mode), one function per primitive.

Storage: every tensor between ops is IEEE fp16 (round to nearest even; overflow gives ±inf, as a
float16 store does). Weights and biases are stored fp16.

* **CNA matmul** (``seq_acc``): products of two fp16 values are exact in fp32; they are accumulated in
  fp32 one input channel at a time in ascending channel order. A pass covers at most
  ``max_input_channels`` (768) channels; between passes the partial sums stay fp32 (the opennpu
  runtime adds partials on the host — we keep them in fp32 so the split does not change results).
  Because the order is fixed by channel index, *any* split along K (and any split along M or N)
  gives the same bits: tiling is exact by construction. The bias is added in fp32 after the last
  pass and the result rounded to fp16 once.
* **Attention** per head, two-pass softmax: scores ``s = fp16(fp32 dot(q, k) * fp32(1/sqrt(d)))``;
  row max ``m`` (exact under any key split); ``e = EXP[fp16(s - m)]`` from a 65536-entry fp16 table;
  the row sum and ``Σ e·v`` accumulate in fp32 in ascending key order; output ``fp16(o / l)``.
  Query and key blocking therefore give the same bits.
* **Vector unit** (32 KB scratchpad): LayerNorm ``mu = fp16(fp32 Σx / n)``, ``d = fp16(x - mu)``,
  ``sq = fp16(d·d)`` — **the square is stored fp16**, the overflow site: |d| ≥ 256 gives ``inf``
  (see docs/targets/rk3588.md: the only fp16 intermediate that overflows at the seed's ~300 spikes
  and not at ~30 after its ×0.1 sandwich) — ``var = fp32 Σsq / n``, ``y = fp16((d·r)·g + b)`` with
  ``r = 1/sqrt(var + eps)`` in fp32. GELU is a 65536-entry fp16→fp16 table (the DPU's LUT).
  Add is one rounding of the exact sum; a sandwich scale multiplies by a power of two (exact).
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np

F16_MAX = float(np.finfo(np.float16).max)  # 65504


def f16(x: np.ndarray | float) -> np.ndarray:
    """Round to fp16 (RNE); overflow to ±inf like a float16 store."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x).astype(np.float16)


def seq_acc(a: np.ndarray, b: np.ndarray, acc: np.ndarray | None = None) -> np.ndarray:
    """fp32 accumulation of ``a @ b`` (fp16 operands [..., M, K] x [..., K, N]) in ascending K order.

    ``acc`` (fp32 [..., M, N]) continues a previous pass; returns the new accumulator.
    """
    a32 = a.astype(np.float32)
    b32 = b.astype(np.float32)
    shape = (*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])
    out = np.zeros(shape, np.float32) if acc is None else acc.astype(np.float32, copy=True)
    kernels = _kernels()
    if kernels is not None and USE_NUMBA and a.ndim == b.ndim == out.ndim and a.ndim in (2, 3):
        a3, b3, o3 = (v if v.ndim == 3 else v[None] for v in (a32, b32, out))
        for i in range(o3.shape[0]):
            ai, bi = a3[i % a3.shape[0]], b3[i % b3.shape[0]]
            kernels[0](np.ascontiguousarray(ai), np.ascontiguousarray(bi), o3[i])
        return out
    tmp = np.empty(shape, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(a.shape[-1]):
            np.multiply(a32[..., :, k:k + 1], b32[..., k:k + 1, :], out=tmp)  # exact: fp16 x fp16
            np.add(out, tmp, out=out)
    return out


USE_NUMBA = True  # tests flip it to compare the two implementations


@cache
def _kernels() -> tuple | None:
    try:
        from npukit.targets.rk3588._nbacc import row_sum_2d, seq_acc_2d
    except ImportError:
        return None
    return seq_acc_2d, row_sum_2d


def bias_out(acc: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """Bias added in fp32 after the last pass, one rounding to fp16."""
    with np.errstate(over="ignore", invalid="ignore"):
        if bias is not None:
            acc = acc + bias.astype(np.float32)
        return f16(acc)


@cache
def _table(name: str) -> np.ndarray:
    """fp16 -> fp16 lookup table over all 65536 codes, built in float64 and rounded once."""
    x = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if name == "exp":
            y = np.exp(x)
        elif name == "gelu":
            erf = np.frompyfunc(math.erf, 1, 1)
            y = 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)).astype(np.float64))
        elif name == "gelu_tanh":
            y = 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
        else:
            raise ValueError(name)
        y = np.where(np.isnan(x), np.nan, y)
        if name != "exp":  # gelu(-inf) = -0, gelu(+inf) = +inf
            y = np.where(np.isinf(x), np.where(x > 0, np.inf, -0.0), y)
    return f16(y)


def lut(name: str, x16: np.ndarray) -> np.ndarray:
    return _table(name)[np.ascontiguousarray(x16, dtype=np.float16).view(np.uint16)]


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """fp16 + fp16 with one rounding (the float64 sum of two fp16 values is exact)."""
    return f16(a.astype(np.float64) + b.astype(np.float64))


def scale_pow2(x: np.ndarray, exp: int) -> np.ndarray:
    """Multiply by 2**exp (exact while the result stays in fp16's normal range)."""
    return f16(np.ldexp(x.astype(np.float64), exp))


def row_sum(x: np.ndarray, acc: np.ndarray | None = None) -> np.ndarray:
    """fp32 sum over the last axis in ascending order (the vector unit's accumulator), continuing
    ``acc`` when given."""
    acc = np.zeros(x.shape[:-1], np.float32) if acc is None else acc.astype(np.float32, copy=True)
    x32 = x.astype(np.float32)
    kernels = _kernels()
    if kernels is not None and USE_NUMBA and x.ndim >= 1:
        flat = acc.reshape(-1)
        kernels[1](np.ascontiguousarray(x32.reshape(-1, x.shape[-1])), flat)
        return flat.reshape(acc.shape)
    with np.errstate(over="ignore", invalid="ignore"):
        for j in range(x.shape[-1]):
            np.add(acc, x32[..., j], out=acc)
    return acc


def layernorm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm over the last axis with the contract above (rows independent)."""
    n = np.float32(x.shape[-1])
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        mu = f16(row_sum(x) / n)
        d = f16(x.astype(np.float64) - mu[..., None].astype(np.float64))  # exact difference, one rounding
        sq = f16(d.astype(np.float32) * d.astype(np.float32))  # the fp16 square: overflows at |d| >= 256
        var = row_sum(sq) / n
        r = np.float32(1.0) / np.sqrt(var + np.float32(eps))
        y = (d.astype(np.float32) * r[..., None]) * g.astype(np.float32) + b.astype(np.float32)
    return f16(y)


def quantize_act(x16: np.ndarray, scale: float) -> np.ndarray:
    """w8a8 activations: ``int8(clip(rint(fp32(x) * fp32(1/scale))))`` — per tensor, static."""
    with np.errstate(over="ignore", invalid="ignore"):
        q = np.rint(x16.astype(np.float32) * np.float32(1.0 / scale))
    return np.clip(np.nan_to_num(q), -128, 127).astype(np.int8)


def int8_acc(xq: np.ndarray, wq: np.ndarray, acc: np.ndarray | None = None) -> np.ndarray:
    """Exact int8 x int8 dot products (int32 on the NPU). float64 BLAS is exact here: every product
    and partial sum is an integer below 2^53 (|acc| <= 127 * 128 * K), so any order gives the same."""
    out = xq.astype(np.float64) @ wq.astype(np.float64)
    return out if acc is None else acc + out


def int8_out(acc: np.ndarray, act_scale: float, w_scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """``fp16(fp32(acc) * (fp32(sa) * sw[n]) + fp32(b))``."""
    with np.errstate(over="ignore", invalid="ignore"):
        s = np.float32(act_scale) * w_scale.astype(np.float32)
        return f16(acc.astype(np.int32).astype(np.float32) * s + bias.astype(np.float32))


def attention_scores(q: np.ndarray, k: np.ndarray, scale: float) -> np.ndarray:
    """fp16 scores [..., Tq, Tk] from q [..., Tq, d] and k [..., Tk, d]."""
    with np.errstate(over="ignore", invalid="ignore"):
        return f16(seq_acc(q, np.swapaxes(k, -1, -2)) * np.float32(scale))


def softmax_exp(s: np.ndarray, m: np.ndarray) -> np.ndarray:
    """e = EXP[fp16(s - m)] with the row max ``m`` (fp16 [..., Tq])."""
    with np.errstate(over="ignore", invalid="ignore"):
        return lut("exp", f16(s.astype(np.float64) - m[..., None].astype(np.float64)))


def attention_finish(o: np.ndarray, l: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return f16(o / l[..., None])
