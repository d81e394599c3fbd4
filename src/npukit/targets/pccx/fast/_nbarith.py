"""The fused block's arithmetic CVO rows (`_nbblock` kind 0): `arith_row`, one small loop per op.

Every op is the reference's: widen BF16 to float64, compute, optionally add the destination (accm),
round once to BF16 (`_nbround.round64`). Products without accm (SQUARE, SCALE by S, MUL) take a
shorter exact route: two 8-bit significands make a product of at most 16 significant bits, which
float32 holds exactly as long as it is a normal float32, zero or infinite (a finite product of 2^128
or more is infinite in float32 and, being past the largest BF16's rounding midpoint, infinite in BF16
as well). So it is formed in float32 (twice the vector lanes of float64, no widening) and rounded by
the integer round to nearest even on its pattern (`_nbround.rne16_finite`). Where a product of the row
is a NaN or below 2^-126 in magnitude (float32 would round a subnormal product), the row takes the
float64 route instead. Each op has its own loop function: one function holding every op's loop cost
~75 ns per call before any element (measured on this host at one element), more than the row.

Compiled without fastmath; portable numba (plain LLVM IR), nothing of any particular CPU.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from npukit.targets.pccx.fast._nbround import f32_bits, f32_of_bits, rne16_finite, round64

_OPTS = {"cache": True, "error_model": "numpy", "nogil": True}
_SMALLEST_NORMAL = np.float32(2.0**-126)
# `kernels` op codes
SQUARE, SCALE, DIVS, ZERO, RECIP, RSQRT, SQRT, RELU, MUL, ADD = range(10)


@nb.njit(**_OPTS, inline="always")
def _f32(bits):
    """BF16 bits as float32: a shift into the high half and a bit cast (exact)."""
    return f32_of_bits(np.uint32(np.uint32(bits) << np.uint32(16)))


@nb.njit(**_OPTS, inline="always")
def _f64(bits):
    return np.float64(_f32(bits))


@nb.njit(**_OPTS, inline="always")
def _bad(p):
    """1 where float32 product ``p`` may not be the exact product (NaN, or a nonzero subnormal)."""
    return 0 if (abs(p) >= _SMALLEST_NORMAL or p == 0) else 1


@nb.njit(**_OPTS, inline="always")
def _square32(x, u):
    bad = 0
    for i in range(x.shape[0]):
        a = _f32(x[i])
        p = a * a
        bad |= _bad(p)
        u[i] = f32_bits(p)
    return bad == 0


@nb.njit(**_OPTS, inline="always")
def _scale32(x, f, u):
    bad = 0
    for i in range(x.shape[0]):
        p = _f32(x[i]) * f
        bad |= _bad(p)
        u[i] = f32_bits(p)
    return bad == 0


@nb.njit(**_OPTS, inline="always")
def _mul32(x, d, u):
    bad = 0
    for i in range(x.shape[0]):
        p = _f32(x[i]) * _f32(d[i])
        bad |= _bad(p)
        u[i] = f32_bits(p)
    return bad == 0


@nb.njit(**_OPTS, inline="always")
def _store16(u, out):
    for i in range(out.shape[0]):
        out[i] = rne16_finite(u[i])


@nb.njit(**_OPTS, inline="always")
def _product32(op, x, d, out, s, u):
    """SQUARE / SCALE / MUL in float32 into ``out``; False (nothing written) where not exact. Every
    product is formed (into ``u``) before any output is written: ``x`` may overlap ``out``."""
    u = u[: x.shape[0]]
    if op == SQUARE:
        ok = _square32(x, u)
    elif op == SCALE:
        ok = _scale32(x, np.float32(s), u)
    else:
        ok = _mul32(x, d, u)
    if ok:
        _store16(u, out)
    return ok


@nb.njit(**_OPTS, inline="always")
def _unary64(op, x, s, y):
    """y = op(x[, S]) in float64 for the ops of one operand."""
    if op == SQUARE:
        for i in range(x.shape[0]):
            a = _f64(x[i])
            y[i] = a * a
    elif op == SCALE:
        for i in range(x.shape[0]):
            y[i] = _f64(x[i]) * s
    elif op == DIVS:
        for i in range(x.shape[0]):
            y[i] = _f64(x[i]) / s
    elif op == RELU:
        for i in range(x.shape[0]):
            v = _f64(x[i]) - s
            y[i] = v if (v != v or v > 0.0) else 0.0
    else:
        _rare64(op, x, y)


@nb.njit(**_OPTS, inline="always")
def _rare64(op, x, y):
    """The ops of short rows (one element, mostly): ZERO, RECIP, RSQRT, SQRT, copy."""
    for i in range(x.shape[0]):
        a = _f64(x[i])
        if op == ZERO:
            a = 0.0
        elif op == RECIP:
            a = 1.0 / a
        elif op == RSQRT:
            a = 1.0 / np.sqrt(a)
        elif op == SQRT:
            a = np.sqrt(a)
        y[i] = a


@nb.njit(**_OPTS, inline="always")
def _binary64(op, x, d, y):
    if op == MUL:
        for i in range(x.shape[0]):
            y[i] = _f64(x[i]) * _f64(d[i])
    else:
        for i in range(x.shape[0]):
            y[i] = _f64(x[i]) + _f64(d[i])


@nb.njit(**_OPTS, inline="always")
def _accumulate(d, y):
    for i in range(y.shape[0]):
        y[i] = _f64(d[i]) + y[i]


@nb.njit(**_OPTS)
def arith_row(op, x, d, out, s, accm, y, u):
    """``out`` = BF16([d +] op(x[, d or s])) for `kernels`' op codes 0..10 (10: a copy), one
    rounding; ``s`` the S register's value (SCALE, DIVS, RELU). ``y`` (float64) and ``u`` (uint32),
    at least len(x) elements each, are scratch; every result is formed before any is written, so
    ``x`` may overlap ``out`` at any offset (``d`` is ``out`` or lies apart from it)."""
    n = x.shape[0]
    if not accm and (op in (SQUARE, SCALE, MUL)) and _product32(op, x, d, out, s, u):
        return
    y = y[:n]
    if op in (MUL, ADD):
        _binary64(op, x, d, y)
    else:
        _unary64(op, x, s, y)
    if accm:
        _accumulate(d, y)
    round64(y, out)
