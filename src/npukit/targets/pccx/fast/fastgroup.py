"""The fast executor's grouped GEMV (`npukit.targets.pccx.grouped`, layout bits ``W_GROUPED`` and
``W_GROUP_OFFSETS``): one compiled call per instruction (`_nbgroup.grouped_gemv`), bit-identical to
the readable simulator's `grouped.run_grouped`.

The binding reads the host image once: the codes as int8 laid out K-major (the kernel's lanes run
across rows), the scale
table transposed to [groups, M] and the FP16 offsets as exact int64 fixed point, kept as one cached
`Codes` entry of the simulator, so a host write over the image invalidates it like any INT4 cache.
Everything else (the NumPy backend, a GEMM, an operand the reference would fault on, a non-finite
offset) returns None and the reference simulator runs the step.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.fast import kernels as kx
from npukit.targets.pccx.fast.state import Codes, FastState, MatBinding
from npukit.targets.pccx.grouped import GROUP, check, grouped_work, layout
from npukit.targets.pccx.memory import (
    W_GROUP_OFFSETS,
    W_OFFSET_MASK,
    W_OFFSET_SHIFT,
    WORD_BYTES,
    DeviceFault,
    row_bytes,
)

_E = 8
ROWS = 256  # rows per block of the kernel (`_nbgroup.ROWS`)
_NO_OFFSETS = np.zeros((0, 0, 0), np.int64)


@dataclass
class GroupedOperands(Codes):
    """A `Codes` cache entry (invalidated by host writes over the image) with the grouped GEMV's
    offsets and its key in the simulator's cache."""

    offsets: np.ndarray = field(default_factory=lambda: _NO_OFFSETS)
    cache_key: tuple = ()


def _operands(sim: FastState, addr: int, m: int, k: int, fmt: str, offsets: bool) -> GroupedOperands | None:
    """The cached operands of the image at ``addr`` in the kernel's `blocked` layout: codes [B, K, 256]
    int8 (INT4: [B, K/2, 256] uint8, two biased codes a byte, `pack_biased`), the scale table
    [B, G, 256] float32 in ``scale``, the offsets [B, G, 256] int64 fixed point in ``offsets``; None
    if unreadable."""
    key = (addr, m, k, fmt, "grouped", offsets)
    got = sim._codes.get(key)
    if isinstance(got, GroupedOperands):
        return got
    s_at, o_at, size = layout(m, k, fmt, offsets)
    image = sim.host.view(addr, size)
    if image is None:
        return None
    groups, rb = k // GROUP, row_bytes(fmt, k)
    body = image[:m * rb].reshape(m, rb)
    if sim._cached_bytes + m * row_bytes(fmt, k) > sim.cache_bytes:
        return None
    fixed = _NO_OFFSETS
    if offsets:
        off = image[o_at:o_at + 2 * m * groups].view("<f2").astype(np.float16).reshape(m, groups)
        if not np.all(np.isfinite(off)):
            return None  # the reference raises (or returns NaN) exactly as v002's FP16 GEMV would
        fixed = blocked(nx.fp16_fixed(off).T)
    if fmt == "int4":  # K-major pairs of codes per byte, biased by 8, the even K row in the low nibble
        codes = blocked(pack_biased(nx.unpack_int4(body, k).T))
    else:
        codes = blocked(body.view(np.int8).T)  # K-major blocks: vector lanes across rows
    scales = blocked(image[s_at:s_at + 4 * m * groups].view("<f4").reshape(m, groups).T.astype(np.float32))
    entry = GroupedOperands(addr, addr + size, codes, scales, offsets=fixed, cache_key=key)
    sim._codes[key] = entry
    sim._cached_bytes += codes.nbytes
    lo, hi = sim._codes_span
    sim._codes_span = (min(lo, entry.start) if hi else entry.start, max(hi, entry.end))
    return entry


# bindings made per plan step and descriptor key: programs that share a GEMV word (same operand
# addresses, other weights) share the step, which then alternates between their keys every token
_BOUND: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def bind_grouped(sim: FastState, site, key: bytes, m: int, n: int, k: int, a: int, hi: int, lo: int
                 ) -> MatBinding | None:
    """The binding of a grouped GEMV (N = 1, numba backend), or None: the reference runs it."""
    if sim.backend != "numba" or n != 1:
        return None
    known = _BOUND.setdefault(site, {})
    got = known.get(key)
    ops = got.codes if got is not None else None
    if isinstance(ops, GroupedOperands) and ops.valid and ops is sim._codes.get(ops.cache_key):
        return got
    got = _bind(sim, site, key, m, n, k, a, hi, lo)
    if got is not None:
        if len(known) >= 64:
            known.clear()
        known[key] = got
    return got


def _bind(sim: FastState, site, key: bytes, m: int, n: int, k: int, a: int, hi: int, lo: int
          ) -> MatBinding | None:
    try:
        fmt = check(a, site.ins, k)
    except DeviceFault:
        return None
    ins = site.ins
    s0, d0, lim = ins.src_addr, ins.dest_reg, sim.limits.l2_words
    if s0 + -(-k // _E) > lim or d0 + -(-m // _E) > lim:
        return None
    offsets = bool(a & W_GROUP_OFFSETS)
    addr = ((hi << 16) | lo) * WORD_BYTES + ((a & W_OFFSET_MASK) >> W_OFFSET_SHIFT)
    ops = _operands(sim, addr, m, k, fmt, offsets)
    if ops is None:
        return None
    flat = sim.flat
    x, d = flat[s0 * _E: s0 * _E + k], flat[d0 * _E: d0 * _E + m]
    kern = _kernel(m * k >= kx.PARALLEL_MIN_MACS)
    w, scales, fixed = ops.codes, ops.scale, ops.offsets
    accm, findemax, packed = site.accm, site.findemax, fmt == "int4"
    lut32, lut64 = kx.LUT32, kx.LUT64

    def run() -> None:
        if kern(x, w, packed, scales, fixed, d, accm, lut32, lut64) == 1:
            d[:] = 0x7FC0  # a non-finite activation: every output NaN (numerics.gemv)
        if findemax:  # e_max <- max(e_max, outputs), as numerics.findemax
            sim.e_max = nx.to_bits(nx.findemax(sim.emax, kx.LUT32[d]))[()]

    work = grouped_work(site.idx, ins, m, n, k, fmt, offsets, site.asm)
    return MatBinding(key, work, run, ops)


def _kernel(parallel: bool):
    """The compiled kernel: the thread-parallel build, or its serial twin for small matrices (a parallel
    region costs more than they take)."""
    from npukit.targets.pccx.fast import _nbgroup

    return _nbgroup.grouped_gemv if parallel else _nbgroup.grouped_gemv_1


def warm() -> None:
    """Compile (or load from the cache) every build of the kernel: INT4 with offsets, INT8 without."""
    rng = np.random.default_rng(0)
    x = nx.to_bits(nx.bf16(rng.standard_normal(64).astype(np.float32)))
    codes = rng.integers(-8, 8, (64, 300)).astype(np.int8)
    scales = blocked(np.ones((2, 300), np.float32))
    fixed = blocked(nx.fp16_fixed(np.ones((2, 300), np.float16)))
    packed = blocked(pack_biased(codes))
    for parallel in (False, True):
        kern = _kernel(parallel)
        kern(x, packed, True, scales, fixed, np.zeros(300, np.uint16), False, kx.LUT32, kx.LUT64)
        kern(x, blocked(codes), False, scales, _NO_OFFSETS, np.zeros(300, np.uint16), True, kx.LUT32,
             kx.LUT64)


def pack_biased(km: np.ndarray) -> np.ndarray:
    """INT4 codes [K, M] (K even) -> uint8 [K/2, M]: ``c[2i] + 8`` in the low nibble, ``c[2i+1] + 8`` high."""
    u = km.astype(np.int16) + 8
    return (u[0::2] | (u[1::2] << 4)).astype(np.uint8)


def blocked(a: np.ndarray) -> np.ndarray:
    """[C, M] -> [ceil(M / ROWS), C, ROWS] (rows zero-padded): the kernel's operand layout."""
    c, m = a.shape
    n = -(-m // ROWS)
    out = np.zeros((n, c, ROWS), a.dtype)
    full = m // ROWS
    out[:full] = a[:, :full * ROWS].reshape(c, full, ROWS).transpose(1, 0, 2)
    if m % ROWS:
        out[full, :, :m % ROWS] = a[:, full * ROWS:]
    return out
