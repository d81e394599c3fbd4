"""W4A8 weights for GGUF LLMs on pccx, and the grouped GEMV that consumes them.

Policy, per GGUF tensor type (docs/models.md): every matrix becomes signed INT4 codes (|q| <= 7, the
`npukit.formats.int4` absmax rule) with one float32 scale per (output row, group of ``group`` inputs),
re-quantised from the exactly dequantised GGUF values. Of the files' types none maps losslessly: Q4_1
and Q4_K are affine (a per-block minimum), Q5_0/Q6_K/Q8_0 carry more than 4 bits, so all are
re-quantised; the error is reported per tensor class (`class_errors`). An ablation may keep one class
in INT8 (|q| <= 127, pccx's int8 weight format). 1-D tensors (norm weights) stay float.

A grouped product is pccx's GEMV with the ``accm`` flag, once per group of K: each group quantises its
slice of the BF16 activation with its own exponent (emax alignment) and adds its scaled, BF16-rounded
partial to the previous one (`grouped_gemv_reference` spells that as calls to
`npukit.targets.pccx.numerics.gemv`; `grouped_gemm` is the same arithmetic vectorised over rows and
tokens: INT4 x INT8 sums over one group stay below 2**24, so the float32 matrix product is exact).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from npukit.errors import FormatError
from npukit.formats.int4 import absmax_quantize
from npukit.targets.pccx import numerics as nx

F32 = np.float32
QMAX = {"int4": 7, "int8": 127}


@dataclass
class GroupedMatrix:
    codes: np.ndarray  # int8 [M, K]
    scale: np.ndarray  # float32 [M, K // group]
    group: int
    fmt: str = "int4"
    # float32 [K // group, group, M]: the codes laid out as the product reads them
    _kmajor: np.ndarray | None = field(default=None, repr=False)

    @property
    def kmajor(self) -> np.ndarray:
        if self._kmajor is None:
            m, k = self.codes.shape
            self._kmajor = np.ascontiguousarray(
                self.codes.reshape(m, k // self.group, self.group).transpose(1, 2, 0).astype(F32))
        return self._kmajor

    @classmethod
    def quantize(cls, w: np.ndarray, group: int, fmt: str = "int4") -> GroupedMatrix:
        m, k = w.shape
        if k % group:
            raise FormatError(f"K = {k} is not a multiple of the quantisation group {group}")
        q, s = absmax_quantize(np.asarray(w, F32).reshape(m, k // group, group), QMAX[fmt])
        return cls(q.reshape(m, k), s, group, fmt)

    def dequantize(self) -> np.ndarray:
        m, k = self.codes.shape
        g = self.codes.reshape(m, k // self.group, self.group).astype(F32) * self.scale[..., None]
        return g.reshape(m, k)


def _act_exponents(x: np.ndarray) -> np.ndarray:
    """`nx.act_exponent` of each row of x [T, K] (BF16 values): floor(log2(max|x|)), 0 for all-zero."""
    m = np.max(np.abs(x.astype(np.float64)), axis=-1)
    e = np.frexp(m)[1].astype(np.int64) - 1
    return np.where(m == 0.0, 0, e)


def grouped_gemm(x: np.ndarray, w: GroupedMatrix) -> np.ndarray:
    """BF16 activations x [T, K] -> BF16 [T, M], bit-identical to `grouped_gemv_reference` per row."""
    xs = np.atleast_2d(np.asarray(x, F32))
    if not np.all(np.isfinite(xs)):
        raise FormatError("activation has a non-finite element")
    t_rows, k = xs.shape
    acc = None
    for j, lo in enumerate(range(0, k, w.group)):
        part = xs[:, lo:lo + w.group]
        e = _act_exponents(part)
        q = np.clip(np.rint(np.ldexp(part.astype(np.float64), (6 - e)[:, None])), -127, 127).astype(F32)
        a32 = q @ w.kmajor[j]  # exact: |sum| < 2**24
        t = (a32 * w.scale[:, j][None, :]).astype(F32)
        t = np.ldexp(t, (e - 6).astype(np.int32)[:, None]).astype(F32)
        if acc is not None:
            t = (acc + t).astype(F32)
        acc = nx.bf16(t)
    assert acc is not None
    return acc.reshape(t_rows, -1)


def grouped_gemv_reference(x: np.ndarray, w: GroupedMatrix) -> np.ndarray:
    """The same product as one pccx GEMV instruction per group, the later ones with ``accm``."""
    out = None
    for j, lo in enumerate(range(0, w.codes.shape[1], w.group)):
        out = nx.gemv(w.codes[:, lo:lo + w.group], x[lo:lo + w.group], w.scale[:, j], out, w.fmt)
    assert out is not None
    return out


def relative_error(w: np.ndarray, q: GroupedMatrix) -> float:
    """||W - deq(Q)|| / ||W|| (Frobenius)."""
    ref = np.asarray(w, np.float64)
    return float(np.linalg.norm(ref - q.dequantize()) / max(np.linalg.norm(ref), 1e-30))
