"""The weight policy: each GGUF tensor type -> a pccx `GroupedMatrix` (docs/models.md, "weight policy").

pccx's GEMV multiplies INT4 or INT8 codes by a float32 scale per row and instruction; one instruction
per group of 32 inputs gives a scale per (row, group), and an FP16 GEMV on the group sums of the
activation adds an offset per (row, group) (`npukit.targets.pccx.llm.w4a8`). So:

* **Q4_0** (``d·(q−8)``, blocks of 32): INT4 codes ``q−8``, scale ``d`` — lossless.
* **Q4_1** (``d·q + m``) and **Q4_K** (``(d·sc)·q − dmin·m``, sub-blocks of 32): INT4 codes ``q−8``,
  scale ``d`` (``d·sc``, the float32 product the reference rounds), offset ``m + 8·d`` rounded to FP16
  — lossless but for that one FP16 rounding per 32 weights.
* kept at 8 bits (a class in ``keep8``): **Q8_0** (``d·q``) INT8 codes ``q``, scale ``d``; **Q5_0**
  (``d·(q−16)``) INT8 codes ``q−16``, scale ``d``; **Q5_1** the same plus the FP16 offset ``m + 16·d``
  — lossless (Q5_1 but for the offset's rounding).
* everything else (Q5_0/Q5_1/Q5_K/Q6_K/Q8_0 at 4 bits, Q2_K/Q3_K, floats): re-quantised to INT4 per
  group of 32, affine: start from the group's min/max, then alternate rounding the codes with a
  least-squares fit of (scale, offset) (`affine_fit`), the offset rounded to FP16 before the last
  rounding; kept at 8 bits (Q4_*, K-quants, floats): INT8 absmax per group. Under policy "gptq"
  (`LlmW4A8`'s default) the block matrices among them take GPTQ's error-compensated codes instead
  (`npukit.targets.pccx.llm.calibration`; same format, same instructions).
"""

from __future__ import annotations

import numpy as np

from npukit.formats.int4 import absmax_quantize
from npukit.models.gguf.quants import _f16, _k_scale_min, _low5, _nibbles
from npukit.targets.pccx.llm.w4a8 import QMAX, GroupedMatrix

F32 = np.float32
GROUP = 32
LOSSLESS_INT4 = ("Q4_0", "Q4_1", "Q4_K")
LOSSLESS_INT8 = ("Q8_0", "Q5_0", "Q5_1")
FIT_ROUNDS = 4
POLICIES = ("gptq", "gguf", "absmax")  # gptq: as gguf, re-quantised blocks by `calibration`
ROW_SLICE = 1 << 21  # weights re-quantised at a time (float64 temporaries stay ~100 MB)


def _blocks(raw: np.ndarray, nbytes: int) -> np.ndarray:
    return np.asarray(raw, np.uint8).reshape(-1, nbytes)


def _q4_fields(kind: str, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Unsigned 4-bit codes [n, 32], float32 step [n] and minimum term [n] (None for Q4_0) per
    32-weight (sub-)block, exactly as the dequantiser computes them: value = step·q + low."""
    if kind == "Q4_0":
        b = _blocks(raw, 18)
        return _nibbles(b[:, 2:], 16), _f16(b, 0)[:, 0], None
    if kind == "Q4_1":
        b = _blocks(raw, 20)
        return _nibbles(b[:, 4:], 16), _f16(b, 0)[:, 0], _f16(b, 2)[:, 0]
    b = _blocks(raw, 144)  # Q4_K: 8 sub-blocks of 32
    sc, mn = _k_scale_min(b[:, 4:16])
    step = (_f16(b, 0) * sc.astype(F32)).reshape(-1)
    low = -(_f16(b, 2) * mn.astype(F32)).reshape(-1)
    return _nibbles(b[:, 16:144], 32).reshape(-1, 32), step, low


def from_q4(kind: str, raw: np.ndarray, shape: tuple[int, int]) -> GroupedMatrix:
    """Q4_0 / Q4_1 / Q4_K bytes -> INT4 codes ``q − 8`` with the source's own scales (and offsets)."""
    m, k = shape
    q, step, low = _q4_fields(kind, raw)
    codes = (q.astype(np.int8) - np.int8(8)).reshape(m, k)
    scale = step.reshape(m, k // GROUP).astype(F32)
    offset = None
    if low is not None:  # d·q + low = d·(q − 8) + (low + 8·d)
        offset = (low.astype(np.float64) + 8.0 * step.astype(np.float64)).astype(np.float16)
        offset = offset.reshape(m, k // GROUP)
    return GroupedMatrix(codes, scale, GROUP, "int4", offset, f"{kind} lossless")


def from_8bit_source(kind: str, raw: np.ndarray, shape: tuple[int, int]) -> GroupedMatrix:
    """Q8_0 (``d·q``), Q5_0 (``d·(q−16)``) and Q5_1 (``d·q + m``) bytes -> INT8 codes with the source's
    scales (Q5_1: codes ``q − 16`` and the FP16 offset ``m + 16·d``)."""
    m, k = shape
    offset = None
    if kind == "Q8_0":
        b = _blocks(raw, 34)
        codes, step = np.ascontiguousarray(b[:, 2:]).view(np.int8), _f16(b, 0)
    elif kind == "Q5_0":
        b = _blocks(raw, 22)
        codes, step = _low5(b, 2).astype(np.int8) - np.int8(16), _f16(b, 0)
    else:
        b = _blocks(raw, 24)
        codes, step = _low5(b, 4).astype(np.int8) - np.int8(16), _f16(b, 0)
        offset = (_f16(b, 2).astype(np.float64) + 16.0 * step.astype(np.float64)).astype(np.float16)
        offset = offset.reshape(m, k // GROUP)
    return GroupedMatrix(codes.reshape(m, k), step.reshape(m, k // GROUP), GROUP, "int8", offset,
                         f"{kind} lossless")


def affine_fit(w: np.ndarray, rounds: int = FIT_ROUNDS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """INT4 affine re-quantisation of groups w [..., g]: codes in [-8, 7], float32 scale, FP16 offset,
    minimising ||codes·scale + offset − w|| by alternating rounding and a least-squares line fit."""
    x = np.asarray(w, np.float64)
    lo, hi = x.min(-1, keepdims=True), x.max(-1, keepdims=True)
    s = np.where(hi > lo, (hi - lo) / 15.0, 1.0)
    o = lo + 8.0 * s
    for _ in range(rounds):
        c = np.clip(np.rint((x - o) / s), -8, 7)
        n = x.shape[-1]
        sc, sx = c.sum(-1, keepdims=True), x.sum(-1, keepdims=True)
        var = (c * c).sum(-1, keepdims=True) * n - sc * sc
        ok = var > 0
        s_new = np.where(ok, ((c * x).sum(-1, keepdims=True) * n - sc * sx) / np.where(ok, var, 1.0), s)
        s = np.where(np.abs(s_new) > 0, s_new, s)
        o = np.where(ok, (sx - s * sc) / n, o)
    scale = s.astype(F32)
    offset = o.astype(np.float16)
    c = np.clip(np.rint((x - offset.astype(np.float64)) / scale.astype(np.float64)), -8, 7)
    return c.astype(np.int8), scale[..., 0], offset[..., 0]


def requantize(w: np.ndarray, fmt: str, kind: str, affine: bool = True) -> GroupedMatrix:
    """Float weights [M, K] -> INT4 affine groups (`affine_fit`), or absmax groups (INT8 when kept at 8
    bits; INT4 with ``affine=False``, the first policy's rule), in slices of rows (bounded memory)."""
    m, k = w.shape
    codes = np.empty((m, k), np.int8)
    scale = np.empty((m, k // GROUP), F32)
    offset = np.empty((m, k // GROUP), np.float16) if fmt == "int4" and affine else None
    rows = max(1, ROW_SLICE // k)
    for lo in range(0, m, rows):
        groups = np.asarray(w[lo:lo + rows], F32).reshape(-1, k // GROUP, GROUP)
        if offset is None:
            q, s = absmax_quantize(groups, QMAX[fmt])
        else:
            q, s, offset[lo:lo + rows] = affine_fit(groups)
        codes[lo:lo + rows], scale[lo:lo + rows] = q.reshape(-1, k), s
    how = "INT4 affine fit" if offset is not None else f"{fmt.upper()} absmax"
    return GroupedMatrix(codes, scale, GROUP, fmt, offset, f"{kind} -> {how}")


def policy_matrix(kind: str, raw: np.ndarray, w: np.ndarray, keep8: bool, policy: str = "gguf"
                  ) -> GroupedMatrix:
    """The pccx matrix for one GGUF tensor of type ``kind`` (raw bytes and float32 values [M, K]).
    ``policy`` "absmax" is the first policy (symmetric absmax groups for every type), for comparison."""
    shape = w.shape
    if policy == "absmax":
        return requantize(w, "int8" if keep8 else "int4", kind, affine=False)
    if kind in LOSSLESS_INT4 and not keep8:
        return from_q4(kind, raw, shape)
    if kind in LOSSLESS_INT8 and keep8:
        return from_8bit_source(kind, raw, shape)
    return requantize(w, "int8" if keep8 else "int4", kind)


def permute_rows(g: GroupedMatrix, order: np.ndarray) -> GroupedMatrix:
    """The same matrix with rows reordered (Llama's q/k un-permutation applies to codes and scales)."""
    off = None if g.offset is None else g.offset[order]
    return GroupedMatrix(g.codes[order], g.scale[order], g.group, g.fmt, off, g.source)
