"""The fused block's arithmetic CVO rows (`_nbblock` kind 0): `arith_row`, one small loop per op.

Every op is the reference's: widen BF16 to float64, compute, optionally add the destination (accm),
round once to BF16 (`_nbround.round64`). Products without accm (SQUARE, SCALE by S, MUL) take a
shorter exact route: two 8-bit significands make a product of at most 16 significant bits, which
float32 holds exactly as long as it is a normal float32, zero or infinite (a finite product of 2^128
or more is infinite in float32 and, being past the largest BF16's rounding midpoint, infinite in BF16
as well). So it is formed in float32 (twice the vector lanes of float64, no widening) and rounded by
the integer round to nearest even on its pattern (`_nbround.rne16_finite`). Where a product of the row
is a NaN or below 2^-126 in magnitude (float32 would round a subnormal product), the row takes the
float64 route instead.

A sum or quotient (ADD and DIVS without accm; the accm sum d + p of a product p that is exact and
finite) is one IEEE float32 operation on exact operands: its float32 result r is the float32 value
nearest the exact one. Every BF16 rounding midpoint (a pattern whose low 16 bits are 0x8000) is a
float32 value, so none lies strictly between r and the exact result (it would be nearer): the two round
to the same BF16 value unless the operation rounded onto a midpoint. ADD of two BF16 values cannot (a
sum that rounds has an exponent gap over 16 and lies within 2^-16 of its larger operand, far from any
midpoint), nor can DIVS (a quotient of 8-bit significands never equals a 9-bit midpoint, and one that
is not lies ~2^-17 or more from it); for d + p it is checked (TwoSum's error, exact in float32). So
these rows are formed in float32 and rounded on the pattern too, and a row with a NaN result (its sign
is the hardware's pick of operand) or with d + p rounded onto a midpoint takes the float64 route. The
float64 reference's one rounding gives the same value: its sum or quotient of BF16 operands is exact,
or rounds onto no midpoint either. An overflowing float32 result lies past the largest BF16's midpoint
(infinite both ways); an accm product must itself be finite (an infinite p whose exact value is finite
could cancel against d).

A row names its operands by offset into the flat L2 (``flat[s0: s0 + n]``, the destination
``flat[d0: d0 + n]``) rather than as slices: each slice of a reference-counted array costs a pair of
atomic reference-count updates and its bounds arithmetic, ~35 ns a row on this host, more than a
short row's arithmetic (a third of the block's rows have one element). The offsets are unsigned, so
numba adds no negative-index wraparound and LLVM vectorises the loops.

Compiled without fastmath; portable numba (plain LLVM IR), nothing of any particular CPU.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from npukit.targets.pccx.fast._nbround import bf16, bf16_64, bits64, f32_bits, rne16, rne16_finite

_OPTS = {"cache": True, "error_model": "numpy", "nogil": True}
_SMALLEST_NORMAL = np.float32(2.0**-126)
_INF32 = np.float32(np.inf)
# `kernels` op codes
SQUARE, SCALE, DIVS, ZERO, RECIP, RSQRT, SQRT, RELU, MUL, ADD = range(10)


@nb.njit(**_OPTS, inline="always")
def _bad(p):
    """1 where float32 product ``p`` may not be the exact product (NaN, or a nonzero subnormal)."""
    return 0 if (abs(p) >= _SMALLEST_NORMAL or p == 0) else 1


@nb.njit(**_OPTS)
def _products32(op, flat, a, b, n, f, u):
    """Each element's float32 product pattern into ``u``; False when one may not be exact."""
    bad = 0
    if op == SQUARE:
        for i in range(n):
            v = bf16(flat[a + i])
            p = v * v
            bad |= _bad(p)
            u[i] = f32_bits(p)
    elif op == SCALE:
        for i in range(n):
            p = bf16(flat[a + i]) * f
            bad |= _bad(p)
            u[i] = f32_bits(p)
    else:
        for i in range(n):
            p = bf16(flat[a + i]) * bf16(flat[b + i])
            bad |= _bad(p)
            u[i] = f32_bits(p)
    return bad == 0


@nb.njit(**_OPTS, inline="always")
def _exact_term(p):
    """1 where float32 product ``p`` may not be the exact product or is infinite (an accm sum's term)."""
    return 0 if (p == 0 or (abs(p) >= _SMALLEST_NORMAL and abs(p) < _INF32)) else 1


@nb.njit(**_OPTS, inline="always")
def _nan(r):
    return 1 if r != r else 0


@nb.njit(**_OPTS, inline="always")
def _inexact_tie(d, p, r):
    """1 where the float32 sum ``r`` of ``d`` and ``p`` is a NaN, or a BF16 rounding midpoint it rounded
    onto (its error, Knuth's TwoSum: exact in float32 arithmetic, is not 0; module docstring)."""
    bv = r - d
    err = (d - (r - bv)) + (p - bv)
    tie = (f32_bits(r) & np.uint32(0xFFFF)) == np.uint32(0x8000)
    return 1 if (r != r or (tie and err != 0)) else 0


@nb.njit(**_OPTS)
def _rounded32(op, flat, a, b, n, f, u):
    """Each element's float32 result pattern into ``u`` for ADD and DIVS (no accm) and the products with
    accm (d + p); False when one may not round to the reference's BF16 value (module docstring)."""
    bad = 0
    if op == ADD:
        for i in range(n):
            r = bf16(flat[a + i]) + bf16(flat[b + i])
            bad |= _nan(r)
            u[i] = f32_bits(r)
    elif op == DIVS:
        for i in range(n):
            r = bf16(flat[a + i]) / f
            bad |= _nan(r)
            u[i] = f32_bits(r)
    else:  # d + p, p = x·x, x·S or x·d (a loop-invariant choice: LLVM unswitches it)
        for i in range(n):
            v, d = bf16(flat[a + i]), bf16(flat[b + i])
            p = v * (v if op == SQUARE else f if op == SCALE else d)
            r = d + p
            bad |= _exact_term(p) | _inexact_tie(d, p, r)
            u[i] = f32_bits(r)
    return bad == 0


@nb.njit(**_OPTS)
def _store16(u, flat, b, n):
    for i in range(n):
        flat[b + i] = rne16_finite(u[i])


@nb.njit(**_OPTS)
def _unary64(op, flat, a, n, s, y):
    """y = op(x[, S]) in float64 for the ops of one operand."""
    if op == SQUARE:
        for i in range(n):
            v = bf16_64(flat[a + i])
            y[i] = v * v
    elif op == SCALE:
        for i in range(n):
            y[i] = bf16_64(flat[a + i]) * s
    elif op == DIVS:
        for i in range(n):
            y[i] = bf16_64(flat[a + i]) / s
    elif op == RELU:
        for i in range(n):
            v = bf16_64(flat[a + i]) - s
            y[i] = v if (v != v or v > 0.0) else 0.0
    else:
        _rare64(op, flat, a, n, y)


@nb.njit(**_OPTS)
def _rare64(op, flat, a, n, y):
    """The ops of short rows (one element, mostly): ZERO, RECIP, RSQRT, SQRT, copy."""
    for i in range(n):
        v = bf16_64(flat[a + i])
        if op == ZERO:
            v = 0.0
        elif op == RECIP:
            v = 1.0 / v
        elif op == RSQRT:
            v = 1.0 / np.sqrt(v)
        elif op == SQRT:
            v = np.sqrt(v)
        y[i] = v


@nb.njit(**_OPTS)
def _binary64(op, flat, a, b, n, y):
    if op == MUL:
        for i in range(n):
            y[i] = bf16_64(flat[a + i]) * bf16_64(flat[b + i])
    else:
        for i in range(n):
            y[i] = bf16_64(flat[a + i]) + bf16_64(flat[b + i])


@nb.njit(**_OPTS)
def round_into(y, flat, b, n, accm):
    """flat[b: b + n] = BF16([flat[b + i] +] y[i]), one rounding each (`_nbround.bits64`)."""
    if accm:
        for i in range(n):
            flat[b + i] = bits64(bf16_64(flat[b + i]) + y[i])
    else:
        for i in range(n):
            flat[b + i] = bits64(y[i])


@nb.njit(**_OPTS)
def arith_row(op, flat, s0, d0, n, s, accm, y, u):
    """``flat[d0: d0 + n]`` = BF16([d +] op(x[, d or s])) for x = ``flat[s0: s0 + n]`` and `kernels`'
    op codes 0..10 (10: a copy), one rounding; ``s`` the S register's value (SCALE, DIVS, RELU).
    ``y`` (float64) and ``u`` (uint32), at least n elements each, are scratch; every result is formed
    before any is written, so the source may overlap the destination at any offset."""
    a, b, m = np.uint64(s0), np.uint64(d0), np.uint64(n)
    product = op in (SQUARE, SCALE, MUL)
    if product and not accm:
        fine = _products32(op, flat, a, b, m, np.float32(s), u)
    elif product or (not accm and op in (ADD, DIVS)):
        fine = _rounded32(op, flat, a, b, m, np.float32(s), u)
    else:
        fine = False
    if fine:
        _store16(u, flat, b, m)
        return
    if op in (MUL, ADD):
        _binary64(op, flat, a, b, m, y)
    else:
        _unary64(op, flat, a, m, s, y)
    round_into(y, flat, b, m, accm)


@nb.njit(**_OPTS)
def sum_bits(flat, s0, n):
    """REDUCE_SUM of ``flat[s0: s0 + n]``: the serial float32 sum from +0.0 in index order, as BF16
    bits (`_nbkernels.reduce_sum_bits`)."""
    a = np.uint64(s0)
    t = np.float32(0.0)
    for i in range(np.uint64(n)):
        t = t + bf16(flat[a + i])
    return rne16(f32_bits(t))


@nb.njit(**_OPTS)
def copy_words(src, s0, flat, d0, n, tmp):
    """``flat[d0: d0 + n] = src[s0: s0 + n]``, the whole source read first (``tmp``, at least n
    elements): it may overlap the destination."""
    a, b, m = np.uint64(s0), np.uint64(d0), np.uint64(n)
    for i in range(m):
        tmp[i] = src[a + i]
    for i in range(m):
        flat[b + i] = tmp[i]


@nb.njit(**_OPTS)
def copy_apart(src, s0, flat, d0, n):
    """``flat[d0: d0 + n] = src[s0: s0 + n]`` for a source apart from ``flat`` (a host region)."""
    a, b = np.uint64(s0), np.uint64(d0)
    for i in range(np.uint64(n)):
        flat[b + i] = src[a + i]
