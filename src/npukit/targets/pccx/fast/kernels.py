"""Fast kernels behind `npukit.targets.pccx.fast.fastsim`, bit-identical to `numerics.py`.

Two interchangeable backends with the same functions: ``numba`` (compiled loops, used when numba is
importable) and ``numpy`` (vectorised NumPy, always available). Everything works on the raw BF16 bit
patterns (uint16) that L2 holds, so a result is written straight into L2 without a float round trip.
Why each path equals the reference (docs/targets/pccx.md, "Performance"):

* BF16 rounding: round-to-nearest-even on the bit pattern (float32: add ``0x7FFF + lsb``; float64: the
  same at bit 45, with the BF16 subnormal range rounded on the fixed 2^-133 grid) is exactly the single
  rounding `numerics.bf16` performs; NaN becomes ``0x7FC0`` with its sign.
* Activation quantization: the scaling by 2^(6-e) is exact in float64, rint is the 1.5·2^52 trick
  (round half to even for |v| < 2^51).
* Integer dot products: int32 accumulation in numba (|acc| ≤ 65 535·128·127 < 2^31 for every K the
  16-bit shape field allows); float32 BLAS in NumPy on chunks of K whose partial sums stay below 2^24
  (16 384 for INT4, 1 032 for INT8), chunk sums added in float64 — every step is an exact integer.
* The float32 epilogue is the same float32 operations in the same order; ``ldexp(t, e-6)`` equals the
  product with the float32 power of two 2^(e-6) (always representable: -139 ≤ e-6 ≤ 121).
* SFU functions: the arithmetic ones (+ − × ÷ sqrt) are correctly rounded IEEE operations in any
  implementation; transcendental ones (exp, tanh, sin, cos, GELU) are evaluated by the very NumPy
  ufuncs `numerics.py` calls, on the same float64 inputs, and only the rounding is replaced.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

try:  # optional: the compiled backend
    import numba as _nb
except ImportError:  # pragma: no cover - exercised where numba is absent
    _nb = None

HAVE_NUMBA = _nb is not None
BACKENDS = ("numba", "numpy") if HAVE_NUMBA else ("numpy",)

# CVO arithmetic op codes (one fused kernel: widen, compute in float64, optional accm, round)
SQUARE, SCALE, DIVS, ZERO, RECIP, RSQRT, SQRT, RELU, MUL, ADD, COPY = range(11)
INT4_CHUNK = 16_384  # K per float32 BLAS chunk: 16 384 · 8 · 127 < 2^24
INT8_CHUNK = 1_032  # 1 032 · 128 · 127 < 2^24

_ALL = np.arange(1 << 16, dtype=np.uint32)
LUT32 = (_ALL << 16).view(np.float32)  # BF16 bits -> float32 (exact)
with np.errstate(invalid="ignore"):
    LUT64 = LUT32.astype(np.float64)  # BF16 bits -> float64 (exact)


# --- NumPy backend ------------------------------------------------------------------------------------

def np_f32_bits(t: np.ndarray) -> np.ndarray:
    """float32 -> BF16 bits, RNE; NaN -> 0x7FC0 | sign."""
    u = np.ascontiguousarray(t, np.float32).view(np.uint32)
    r = ((u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype(np.uint16)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    if nan.any():
        r[nan] = ((u[nan] >> 16) & 0x8000) | 0x7FC0
    return r


def f32_scalar_bits(s: np.float32) -> int:
    """One float32 -> BF16 bits, RNE (as `np_f32_bits`, without array overhead)."""
    u = int(np.float32(s).view(np.uint32))
    if (u & 0x7FFFFFFF) > 0x7F800000:
        return ((u >> 16) & 0x8000) | 0x7FC0
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def np_f64_bits(y: np.ndarray) -> np.ndarray:
    """float64 -> BF16 bits with one RNE rounding (numerics.bf16 on a float64 input)."""
    a = np.ascontiguousarray(y, np.float64)
    u = a.view(np.uint64)
    sign = ((u >> np.uint64(48)) & np.uint64(0x8000)).astype(np.uint16)
    mag = u & np.uint64(0x7FFF_FFFF_FFFF_FFFF)
    rounded = (mag + (np.uint64(0x0FFF_FFFF_FFFF) + ((mag >> np.uint64(45)) & np.uint64(1)))) & ~np.uint64(
        0x1FFF_FFFF_FFFF)
    with np.errstate(over="ignore", invalid="ignore"):
        big = rounded.view(np.float64).astype(np.float32).view(np.uint32) >> 16  # >= 2^128 -> inf
    out = big.astype(np.uint16)
    tiny = mag < np.uint64(0x3810_0000_0000_0000)  # |a| < 2^-126: BF16 subnormal grid 2^-133
    if tiny.any():
        v = np.abs(a[tiny]) * 2.0**133
        out[tiny] = ((v + 6755399441055744.0) - 6755399441055744.0).astype(np.uint16)
    nan = mag > np.uint64(0x7FF0_0000_0000_0000)
    out[nan] = 0x7FC0
    return out | sign


def np_quantize(x_bits: np.ndarray) -> tuple[np.ndarray, int] | None:
    """Emax alignment on BF16 bits -> (q int8, e); None when an element is not finite."""
    mag = x_bits & 0x7FFF
    top = int(mag.max()) if mag.size else 0
    if top >= 0x7F80:
        return None
    e = _exponent(top)
    v = LUT64[x_bits] * 2.0 ** (6 - e)
    q = np.clip((v + 6755399441055744.0) - 6755399441055744.0, -127, 127).astype(np.int8)
    return q, e


def _exponent(top: int) -> int:
    """floor(log2) of the BF16 magnitude pattern ``top`` (0 for zero)."""
    if top == 0:
        return 0
    ex = top >> 7
    return ex - 127 if ex else (top & 0x7F).bit_length() - 1 - 133


def np_int_dot(w: np.ndarray, q: np.ndarray, chunk: int) -> np.ndarray:
    """Exact Σ_k w[m,k]·q[k] for float32-held integer weights, as float64 integers."""
    k = w.shape[1]
    qf = q.astype(np.float32)
    if k <= chunk:
        return (w @ qf).astype(np.float64)
    acc = np.zeros(w.shape[0], np.float64)
    for lo in range(0, k, chunk):
        acc += w[:, lo:lo + chunk] @ qf[lo:lo + chunk]
    return acc


def np_epilogue(acc: np.ndarray, e: int, scale: np.ndarray | None, dst: np.ndarray, accm: bool) -> None:
    """numerics.gemv's float32 epilogue, written into ``dst`` (BF16 bits) in place."""
    a32 = acc.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        t = a32 if scale is None else a32 * scale
        t = t * np.float32(2.0 ** (e - 6))
        if accm:
            t = LUT32[dst] + t
    dst[:] = np_f32_bits(t)


def np_cvo(op: int, x: np.ndarray, d: np.ndarray | None, out: np.ndarray, s: float, accm: bool) -> None:
    a = LUT64[x]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if op == SQUARE:
            y = a * a
        elif op == SCALE:
            y = a * s
        elif op == DIVS:
            y = a / s
        elif op == ZERO:
            y = np.zeros_like(a)
        elif op == RECIP:
            y = 1.0 / a
        elif op == RSQRT:
            y = 1.0 / np.sqrt(a)
        elif op == SQRT:
            y = np.sqrt(a)
        elif op == RELU:
            dd = a - s
            y = np.where(np.isnan(dd), dd, np.maximum(dd, 0.0))
        elif op == MUL:
            y = a * LUT64[d]
        elif op == ADD:
            y = a + LUT64[d]
        else:
            y = a
        if accm:
            y = LUT64[d] + y
    out[:] = np_f64_bits(y)


def np_round_store(y: np.ndarray, d: np.ndarray | None, out: np.ndarray, accm: bool) -> None:
    if accm:
        with np.errstate(invalid="ignore", over="ignore"):
            y = LUT64[d] + y
    out[:] = np_f64_bits(y)


def np_reduce_sum(x: np.ndarray) -> np.float32:
    a = np.concatenate([np.zeros(1, np.float32), LUT32[x]])
    with np.errstate(over="ignore", invalid="ignore"):
        return np.add.accumulate(a, dtype=np.float32)[-1]


# --- numba backend -------------------------------------------------------------------------------------

PARALLEL_MIN_MACS = 1 << 20  # below this a GEMV runs on the calling thread only


@contextmanager
def one_thread() -> Iterator[None]:
    """Run numba parallel regions on one thread inside the block (restores the previous count)."""
    from npukit.sim import threads

    threads.start()  # (the pool under npukit's OpenMP policy, if this starts it)
    n = _nb.get_num_threads()  # the count now, which may differ from the pool's start (restored after)
    if n == 1:
        yield
        return
    _nb.set_num_threads(1)
    try:
        yield
    finally:
        _nb.set_num_threads(n)


def simd() -> str:
    """The numba kernels' INT4 SIMD path: "avx512-vnni", "avx2" or "ssse3" (each probed by a trial run),
    "portable", or "none"."""
    if _nb is None:
        return "none"
    from npukit.targets.pccx.fast import _nbkernels

    return _nbkernels.SIMD



def _numba_kernels() -> dict[str, Any]:
    """Compiled kernels (compiled lazily on first call, cached on disk); empty without numba."""
    if _nb is None:
        return {}
    from npukit.targets.pccx.fast import _nbblock, _nbkernels, _nbkm

    _nbkernels.KERNELS["cvo_block"] = _nbblock.block  # a fused run in one call (imports _nbkernels)
    _nbkernels.KERNELS["gemv_km_p4"] = _nbkm.gemv_km_p4  # a sparse K-major INT4 GEMV on packed bytes
    return _nbkernels.KERNELS
