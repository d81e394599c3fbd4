"""pccx W4A8 arithmetic primitives, exactly as ``docs/numerics.md`` states them.

Every function is pure and vectorized. BF16 values travel as ``float32`` arrays whose values are
exactly representable in BF16 ("bf16-valued float32"); `to_bits` / `from_bits` convert to and from
the raw ``uint16`` patterns stored in L2. The functional simulator executes one of these per
instruction and the quantized Gemma 3n reference is written only as calls to them, so the two agree
bit for bit by construction; the tests check each against an independent oracle.

Rounding, per function:

* `bf16` rounds any float32/float64 value **once**, to nearest even, to BF16 (a float32 input gives
  exactly RNE on the float32 bit pattern). NaN becomes the quiet NaN 0x7FC0 (sign kept); values at or
  beyond the overflow midpoint become ±inf.
* SFU (CVO) functions widen their BF16 inputs to float64, compute there, and call `bf16` once.
* `reduce_sum` is the exception the contract names: serial float32 accumulation from +0.0, then `bf16`.
* The GEMV epilogue works in float32 (`gemv`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from npukit.errors import FormatError

F32 = np.float32
F64 = np.float64

BF16_QNAN = 0x7FC0
BF16_NEG_INF = 0xFF80
DSP_ACC_BOUND = 4096  # lower-channel accumulation bound of the W4A8 DSP packing (dsp48e2_w4a8.rst)
FP16_FIX_SHIFT = 24  # fp16 * 2**24 is an integer for every finite fp16 (smallest subnormal 2**-24)
GELU_C = float(np.sqrt(2.0 / np.pi))


# --- BF16 ------------------------------------------------------------------------------------------

def bf16(x: np.ndarray | float) -> np.ndarray:
    """Round to BF16 once (RNE) from the exact value of a float32/float64 input; returns float32."""
    with np.errstate(invalid="ignore"):  # signalling NaNs quiet on widening
        a = np.asarray(x, dtype=F64)
    mag = np.abs(a)
    finite = np.isfinite(a)
    # floor(log2|a|) from frexp (exact); BF16 subnormals share float32's fixed spacing 2**-133.
    _, ex = np.frexp(np.where(finite & (mag > 0), mag, 1.0))
    e = np.maximum(ex.astype(np.int64) - 1, -126)
    ulp_exp = e - 7
    with np.errstate(over="ignore", invalid="ignore"):
        q = np.ldexp(np.rint(np.ldexp(np.where(finite, a, 0.0), -ulp_exp)), ulp_exp)
        out = np.where(finite, q, a).astype(F32)  # 2**128 overflows to inf here, as IEEE does
    out = np.where(np.isnan(a), np.copysign(F32(np.nan), a).astype(F32), out)
    return out.astype(F32)


def to_bits(x: np.ndarray | float) -> np.ndarray:
    """BF16 bit patterns (uint16) of `bf16(x)`; NaN is the canonical quiet NaN 0x7FC0 | sign."""
    r = bf16(x)
    u = (np.atleast_1d(r).view(np.uint32) >> 16).astype(np.uint16)
    nan = np.isnan(np.atleast_1d(r))
    u = np.where(nan, (u & 0x8000) | BF16_QNAN, u).astype(np.uint16)
    return u.reshape(np.shape(r))


def from_bits(u: np.ndarray | int) -> np.ndarray:
    """Widen BF16 bit patterns to float32 (exact)."""
    return (np.asarray(u, dtype=np.uint16).astype(np.uint32) << 16).view(F32)


def _f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=F32).astype(F64)


# --- activation quantization and GEMV -----------------------------------------------------------

def act_exponent(x: np.ndarray) -> int:
    """``floor(log2(max|x|))`` of a finite BF16 vector (true exponent for subnormals); 0 if all zero."""
    m = float(np.max(np.abs(_f64(x)))) if np.size(x) else 0.0
    if not np.isfinite(m):
        raise FormatError("activation vector has a non-finite element")
    if m == 0.0:
        return 0
    return int(np.frexp(m)[1]) - 1


def quantize_act(x: np.ndarray) -> tuple[np.ndarray, int]:
    """Emax alignment: ``q = clip(rint(x / 2**(e-6)), -127, 127)`` (int8), with ``e = act_exponent(x)``.

    The division is a power-of-two scaling and therefore exact; rint rounds half to even.
    """
    e = act_exponent(x)
    q = np.clip(np.rint(np.ldexp(_f64(x), 6 - e)), -127, 127).astype(np.int8)
    return q, e


def unpack_int4(packed: np.ndarray, k: int) -> np.ndarray:
    """Signed two's-complement INT4, two per byte, even index in the low nibble -> int8 [..., k]."""
    p = np.asarray(packed, dtype=np.uint8)
    if p.shape[-1] * 2 < k:
        raise FormatError(f"INT4 row holds {p.shape[-1] * 2} values, need {k}")
    nib = np.stack([p & 0x0F, p >> 4], axis=-1).reshape(*p.shape[:-1], -1)[..., :k]
    return ((nib.astype(np.int8) ^ 8) - 8).astype(np.int8)


def pack_int4(w: np.ndarray) -> np.ndarray:
    """Inverse of `unpack_int4`; an odd K is padded with a zero high nibble."""
    a = np.asarray(w)
    if a.size and (a.min() < -8 or a.max() > 7):
        raise FormatError("INT4 weights must lie in [-8, 7]")
    if a.shape[-1] % 2:
        a = np.concatenate([a, np.zeros((*a.shape[:-1], 1), a.dtype)], axis=-1)
    n = a.astype(np.int64) & 0xF
    return (n[..., 0::2] | (n[..., 1::2] << 4)).astype(np.uint8)


def fp16_fixed(w: np.ndarray) -> np.ndarray:
    """FP16 weights as exact integers ``w * 2**24`` (int64); every finite fp16 maps exactly."""
    a = np.asarray(w, dtype=np.float16)
    if not np.all(np.isfinite(a)):
        raise FormatError("FP16 weight operand has a non-finite element")
    return np.ldexp(a.astype(F64), FP16_FIX_SHIFT).astype(np.int64)


def int_dot(w: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Exact ``Σ_k w[m,k]·q[k]`` as int64 for |w| < 2**40, |q| <= 127 and K < 2**16.

    Splits w into 20-bit halves so each float64 BLAS dot stays below 2**53 (exact in any order).
    """
    w64 = np.asarray(w, dtype=np.int64)
    qf = np.asarray(q, dtype=F64)
    if w64.size and np.max(np.abs(w64)) < (1 << 20):
        return np.rint(w64.astype(F64) @ qf).astype(np.int64)
    lo = w64 & ((1 << 20) - 1)
    hi = w64 >> 20
    return (np.rint(hi.astype(F64) @ qf).astype(np.int64) << 20) + np.rint(lo.astype(F64) @ qf).astype(
        np.int64)


def k_splits(k: int, bound: int = DSP_ACC_BOUND) -> int:
    """How many K-chunks the DSP accumulation bound forces (functionally invisible)."""
    return max(1, -(-int(k) // bound))


def gemv(w: np.ndarray, x: np.ndarray, w_scale: np.ndarray | None = None, dest: np.ndarray | None = None,
         fmt: str = "int4") -> np.ndarray:
    """One W4A8 GEMV: ``dest[m] = bf16(t)`` with the float32 epilogue of docs/numerics.md §3.

    ``w`` is the unpacked weight matrix [M, K]: INT4 or INT8 values (``fmt`` "int4"/"int8"), or float16
    (``fmt`` "fp16", converted by `fp16_fixed`). ``x`` is the BF16 activation [K]. ``w_scale`` [M]
    (float32) multiplies each row when given (the ``w_scale`` flag); ``dest`` [M] is added when given
    (the ``accm`` flag). A non-finite activation makes every output NaN (npukit decision).
    """
    wa = np.asarray(w)
    xv = np.asarray(x, dtype=F32)
    if wa.ndim != 2 or xv.ndim != 1 or wa.shape[1] != xv.shape[0]:
        raise FormatError(f"GEMV shapes do not match: W {wa.shape}, x {xv.shape}")
    m = wa.shape[0]
    if not np.all(np.isfinite(xv)):
        return np.full(m, np.nan, dtype=F32)
    q, e = quantize_act(xv)
    if fmt == "fp16":
        acc = int_dot(fp16_fixed(wa), q)
        a32 = np.ldexp(acc.astype(F32), -FP16_FIX_SHIFT)  # int64->f32 is the single rounding
    elif fmt in ("int4", "int8"):
        lim = 8 if fmt == "int4" else 128
        if wa.size and (wa.min() < -lim or wa.max() > lim - 1):
            raise FormatError(f"{fmt} weights out of range")
        a32 = int_dot(wa, q).astype(F32)
    else:
        raise FormatError(f"unknown GEMV weight format {fmt!r}")
    t = a32 if w_scale is None else (a32 * np.asarray(w_scale, dtype=F32)).astype(F32)
    t = np.ldexp(t, np.int32(e - 6)).astype(F32)
    if dest is not None:
        t = (np.asarray(dest, dtype=F32) + t).astype(F32)
    return bf16(t)


def gemm(w: np.ndarray, xs: np.ndarray, w_scale: np.ndarray | None = None, dest: np.ndarray | None = None,
         fmt: str = "int4") -> np.ndarray:
    """GEMM = one `gemv` per activation vector (each vector has its own emax): xs [N, K] -> [N, M]."""
    xa = np.atleast_2d(np.asarray(xs, dtype=F32))
    rows = [gemv(w, xa[n], w_scale, None if dest is None else np.asarray(dest)[n], fmt)
            for n in range(xa.shape[0])]
    return np.stack(rows) if rows else np.zeros((0, np.asarray(w).shape[0]), F32)


def findemax(e_max: float, dest: np.ndarray) -> np.float32:
    """``max(e_max, max_m dest[m])`` (BF16 values; NaN propagates)."""
    d = np.asarray(dest, dtype=F32)
    return F32(np.max(np.concatenate([[F32(e_max)], d.ravel()])))


# --- SFU (CVO) functions: float64 inside, one BF16 rounding ----------------------------------------
#
# The transcendental functions' float64 formulas are written once, as in-place kernels on a scratch
# array the caller owns: the cvo_* functions below round them, and the fast executor (fast/fastcvo.py)
# runs the very same kernels before its own rounding (npukit.targets.pccx.cvo.CvoSpec.core).

def exp_core(a: np.ndarray) -> np.ndarray:
    return np.exp(a, out=a)


def gelu_core(a: np.ndarray) -> np.ndarray:
    """``0.5·a·(1 + tanh(√(2/π)·(a + 0.044715·a³)))`` evaluated left to right, one operation at a time."""
    t = np.multiply(0.044715, a, out=np.empty_like(a))
    t *= a
    t *= a
    t += a
    t *= GELU_C
    np.tanh(t, out=t)
    t += 1.0
    a *= 0.5
    a *= t
    return a


def sin_core(a: np.ndarray) -> np.ndarray:
    return np.sin(a, out=a)


def cos_core(a: np.ndarray) -> np.ndarray:
    return np.cos(a, out=a)


def tanh_core(a: np.ndarray) -> np.ndarray:
    return np.tanh(a, out=a)


def sfu_unary(core: Callable[[np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    """The cvo_* function of a float64 ``core``: ``bf16(core(x))`` or ``bf16(dst + core(x))``."""

    def cvo(x: np.ndarray, dst: np.ndarray | None = None) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return _sfu(core(_f64(x)), dst)

    cvo.__name__ = f"cvo_{core.__name__.removesuffix('_core')}"
    return cvo


def _sfu(y: np.ndarray, dst: np.ndarray | None) -> np.ndarray:
    """One rounding of ``y`` (float64), or of ``dst + y`` when accumulating (``accm``)."""
    if dst is not None:
        y = _f64(dst) + y
    return bf16(y)


def cvo_exp(x: np.ndarray, e_max: float | None = None, dst: np.ndarray | None = None) -> np.ndarray:
    """``exp(x)``, or ``exp(x - e_max)`` with ``sub_emax`` (difference taken in float64)."""
    with np.errstate(over="ignore", invalid="ignore"):
        a = _f64(x)  # a fresh array (0-d included), so the kernel may work in place
        if e_max is not None:
            a -= F64(F32(e_max))
        return _sfu(exp_core(a), dst)


def cvo_sqrt(x: np.ndarray, dst: np.ndarray | None = None) -> np.ndarray:
    """``sqrt(x)``; negative inputs give NaN, -0 gives -0."""
    with np.errstate(invalid="ignore"):
        return _sfu(np.sqrt(_f64(x)), dst)


def cvo_gelu(x: np.ndarray, dst: np.ndarray | None = None) -> np.ndarray:
    """Tanh-form GELU (Gemma's gelu_pytorch_tanh): ``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))``."""
    with np.errstate(over="ignore", invalid="ignore"):
        return _sfu(gelu_core(_f64(x)), dst)


def cvo_sin(x: np.ndarray, dst: np.ndarray | None = None) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return _sfu(sin_core(_f64(x)), dst)


def cvo_cos(x: np.ndarray, dst: np.ndarray | None = None) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return _sfu(cos_core(_f64(x)), dst)


def reduce_sum(x: np.ndarray, dst: float | None = None) -> np.float32:
    """Serial float32 sum in index order from +0.0, rounded to BF16 (accm: ``bf16(dst + sum)`` in f64)."""
    a = np.concatenate([np.zeros(1, F32), np.asarray(x, dtype=F32).ravel()])
    with np.errstate(over="ignore", invalid="ignore"):
        s = np.add.accumulate(a, dtype=F32)[-1]  # accumulate is strictly sequential (no pairwise sum)
    return F32(_sfu(np.asarray(F64(s)), None if dst is None else np.asarray(dst))[()])


def cvo_scale(x: np.ndarray, scalar: float, recip: bool = False, dst: np.ndarray | None = None
              ) -> np.ndarray:
    """``x · s`` or, with ``recip_scale``, ``x / s`` (float64, one rounding); ``x / 0`` gives 0."""
    a, s = _f64(x), F64(F32(scalar))
    if recip:
        y = np.zeros_like(a) if s == 0.0 else a / s
    else:
        y = a * s
    return _sfu(y, dst)


def cvo_recip(x: np.ndarray, dst: np.ndarray | None = None) -> np.ndarray:
    """``1 / x`` in float64 (IEEE: ±0 gives ±inf; only CVO_SCALE has the divide-by-zero-is-0 rule)."""
    with np.errstate(divide="ignore"):
        return _sfu(1.0 / _f64(x), dst)


# extended profile (npukit additions in reserved cvo_func codes 0x8-0xF)

def cvo_tanh(x: np.ndarray, dst: np.ndarray | None = None) -> np.ndarray:
    return _sfu(tanh_core(_f64(x)), dst)


def cvo_mul(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Elementwise ``x · y`` (exact in float64, so this is the correctly rounded product)."""
    return bf16(_f64(x) * _f64(y))


def cvo_add(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Elementwise ``x + y`` (float64, one rounding)."""
    with np.errstate(invalid="ignore"):
        return bf16(_f64(x) + _f64(y))


def cvo_relu_bias(x: np.ndarray, c: float, dst: np.ndarray | None = None) -> np.ndarray:
    """The GELU path's bias-and-clip front end: ``max(x − c, 0)`` (Gaussian top-k); NaN propagates."""
    with np.errstate(invalid="ignore"):
        d = _f64(x) - F64(F32(c))
        return _sfu(np.where(np.isnan(d), d, np.maximum(d, 0.0)), dst)


def cvo_rsqrt(x: np.ndarray, dst: np.ndarray | None = None) -> np.ndarray:
    """``1 / sqrt(x)`` in float64; +0 gives +inf, negatives NaN."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return _sfu(1.0 / np.sqrt(_f64(x)), dst)


def cvo_square(x: np.ndarray, dst: np.ndarray | None = None) -> np.ndarray:
    """``x²`` (exact in float64)."""
    a = _f64(x)
    return _sfu(a * a, dst)


def reduce_max(x: np.ndarray) -> np.float32:
    """Maximum of a BF16 vector (NaN propagates; empty gives -inf)."""
    a = np.asarray(x, dtype=F32)
    return F32(np.max(a)) if a.size else F32(-np.inf)
