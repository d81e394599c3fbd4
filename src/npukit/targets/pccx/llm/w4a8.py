"""W4A8 matrices for GGUF LLMs on pccx, and the grouped GEMV that consumes them.

A `GroupedMatrix` is what pccx stores for one weight: signed codes (INT4, or INT8 for a class kept at
8 bits) with one float32 scale per (output row, group of ``group`` inputs), and optionally one FP16
*offset* per (row, group) for affine sources (Q4_1, Q4_K) and affine re-quantisation. Its effective
weight is ``codes · scale + offset``. Which GGUF type becomes what is `npukit.targets.pccx.llm.policy`.

A grouped product is, in pccx instructions (`grouped_gemv_reference` spells it as calls to
`npukit.targets.pccx.numerics`):

1. one GEMV per group of K with the ``w_scale`` flag, the later ones with ``accm``: each group
   quantises its slice of the BF16 activation to INT8 with its own exponent (emax alignment) and adds
   its scaled, BF16-rounded partial to the previous one;
2. with offsets: one REDUCE_SUM per group (the group sums ``s_g`` of the BF16 activation, serial
   float32, BF16-rounded; each lands in element 0 of its own L2 word, the word's other 7 elements
   zero), then one FP16 GEMV with ``accm`` of the offsets on those G words (the image [M, 8·G] holds
   each offset followed by 7 zeros, which add exactly nothing) — since
   ``Σ_k (c_k·d_g + o_g)·x_k = d_g·Σ c_k x_k + o_g·s_g``. All of it is pccx v002 (no extension).

`grouped_gemm` is the same arithmetic vectorised over rows and tokens: INT4/INT8 × INT8 sums over one
group stay below 2**24, so the float32 matrix product is exact, and the FP16 offset product is exact in
int64 fixed point, as `numerics.gemv` computes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from npukit.errors import FormatError
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.isa import ELEMS_PER_WORD

F32 = np.float32
QMAX = {"int4": 7, "int8": 127}


def bf16_f32(x: np.ndarray) -> np.ndarray:
    """`numerics.bf16` for float32 input (RNE on the bit pattern), ~50x faster; same NaN (0x7FC0|sign)."""
    a = np.ascontiguousarray(x, F32)
    u = a.view(np.uint32)
    odd = (u >> np.uint32(16)) & np.uint32(1)  # ties go to the even BF16 pattern
    out = ((u + (np.uint32(0x7FFF) + odd)) & np.uint32(0xFFFF0000)).view(F32)
    nan = np.isnan(a)
    if nan.any():
        out = np.where(nan, np.copysign(F32(np.nan), a), out).astype(F32)
    return out


@dataclass
class GroupedMatrix:
    codes: np.ndarray  # int8 [M, K] (INT4 values in [-8, 7] when fmt is "int4")
    scale: np.ndarray  # float32 [M, K // group]
    group: int
    fmt: str = "int4"
    offset: np.ndarray | None = None  # float16 [M, K // group], or None (symmetric)
    source: str = ""  # how it was made (policy name), for the report
    # float32 [K // group, group, M]: the codes laid out as the product reads them
    _kmajor: np.ndarray | None = field(default=None, repr=False)

    @property
    def kmajor(self) -> np.ndarray:
        if self._kmajor is None:
            m, k = self.codes.shape
            self._kmajor = np.ascontiguousarray(
                self.codes.reshape(m, k // self.group, self.group).transpose(1, 2, 0).astype(F32))
        return self._kmajor

    @property
    def bits_per_weight(self) -> float:
        code = 4 if self.fmt == "int4" else 8
        return code + 32 / self.group + (16 / self.group if self.offset is not None else 0)

    def rows(self, index: np.ndarray) -> np.ndarray:
        """Effective float32 weights of some rows (the host's embedding lookup)."""
        c = self.codes[index].astype(F32)
        m, k = c.shape
        g = c.reshape(m, k // self.group, self.group) * self.scale[index][..., None]
        if self.offset is not None:
            g = g + self.offset[index].astype(F32)[..., None]
        return g.reshape(m, k)

    def dequantize(self) -> np.ndarray:
        return self.rows(np.arange(self.codes.shape[0]))


def _act_exponents(x: np.ndarray) -> np.ndarray:
    """`nx.act_exponent` of each row of x [T, K] (BF16 values): floor(log2(max|x|)), 0 for all-zero."""
    m = np.max(np.abs(x.astype(np.float64)), axis=-1)
    e = np.frexp(m)[1].astype(np.int64) - 1
    return np.where(m == 0.0, 0, e)


def _act_int8(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Emax alignment of each row of BF16 x [T, n] (`nx.quantize_act`): float32 codes and exponents."""
    e = _act_exponents(x)
    q = np.clip(np.rint(np.ldexp(x.astype(np.float64), (6 - e)[:, None])), -127, 127).astype(F32)
    return q, e


def group_sums(x: np.ndarray, group: int) -> np.ndarray:
    """`nx.reduce_sum` of every group of ``group`` columns of x [T, K]: serial float32 from +0.0, BF16."""
    t, k = x.shape
    parts = x.reshape(t, k // group, group)
    s = np.zeros((t, k // group), F32)
    for i in range(group):  # strictly in index order, one float32 rounding per addition
        s = (s + parts[:, :, i]).astype(F32)
    return bf16_f32(s)


def _offset_product(x: np.ndarray, w: GroupedMatrix, acc: np.ndarray) -> np.ndarray:
    """``acc + offsets @ group_sums(x)`` as pccx's FP16 GEMV with ``accm`` (`nx.gemv`, fmt fp16)."""
    assert w.offset is not None
    q, e = _act_int8(group_sums(x, w.group))
    fixed = nx.fp16_fixed(w.offset)  # int64 [M, G], exact
    exact = q.astype(np.int64) @ fixed.T  # |sum| < 2**40 · 127 · G: exact in int64
    a32 = np.ldexp(exact.astype(F32), -nx.FP16_FIX_SHIFT).astype(F32)
    t = np.ldexp(a32, (e - 6).astype(np.int32)[:, None]).astype(F32)
    return bf16_f32((acc + t).astype(F32))


def grouped_gemm(x: np.ndarray, w: GroupedMatrix) -> np.ndarray:
    """BF16 activations x [T, K] -> BF16 [T, M], bit-identical to `grouped_gemv_reference` per row."""
    xs = np.atleast_2d(np.asarray(x, F32))
    if not np.all(np.isfinite(xs)):
        raise FormatError("activation has a non-finite element")
    t_rows, k = xs.shape
    acc = None
    for j, lo in enumerate(range(0, k, w.group)):
        q, e = _act_int8(xs[:, lo:lo + w.group])
        a32 = q @ w.kmajor[j]  # exact: |sum| < 2**24
        t = (a32 * w.scale[:, j][None, :]).astype(F32)
        t = np.ldexp(t, (e - 6).astype(np.int32)[:, None]).astype(F32)
        if acc is not None:
            t = (acc + t).astype(F32)
        acc = bf16_f32(t)
    assert acc is not None
    if w.offset is not None:
        acc = _offset_product(xs, w, acc)
    return acc.reshape(t_rows, -1)


def grouped_gemv_reference(x: np.ndarray, w: GroupedMatrix) -> np.ndarray:
    """The same product as pccx instructions: one GEMV per group (``accm`` after the first); with
    offsets, one REDUCE_SUM per group and one FP16 GEMV of the offsets with ``accm``."""
    out = None
    for j, lo in enumerate(range(0, w.codes.shape[1], w.group)):
        out = nx.gemv(w.codes[:, lo:lo + w.group], x[lo:lo + w.group], w.scale[:, j], out, w.fmt)
    assert out is not None
    if w.offset is not None:
        # each REDUCE_SUM writes a whole L2 word: its sum in element 0, zeros after it, so the G sums
        # sit in G consecutive words and the FP16 image has each offset column followed by 7 zero ones
        sums = np.zeros((w.offset.shape[1], ELEMS_PER_WORD), F32)
        sums[:, 0] = [nx.reduce_sum(x[lo:lo + w.group]) for lo in range(0, len(x), w.group)]
        image = np.zeros((w.offset.shape[0], sums.size), np.float16)
        image[:, ::ELEMS_PER_WORD] = w.offset
        out = nx.gemv(image, sums.reshape(-1), None, out, "fp16")
    return out


def relative_error(w: np.ndarray, q: GroupedMatrix) -> float:
    """||W - deq(Q)|| / ||W|| (Frobenius)."""
    ref = np.asarray(w, np.float64)
    return float(np.linalg.norm(ref - q.dequantize()) / max(np.linalg.norm(ref), 1e-30))
