"""One compiled call per fused run of the fast executor's steps (`fastcvo.fuse_groups`): `block`.

A run is lowered once into a table of int64 rows (`fastcvo`, `fastmat.fused_row`), one per
instruction, and `block` executes the rows in order on the flat L2, the constant caches and the S /
e_max registers, dispatching on the row's kind to the kernels the single steps call. Kinds:

* 0 arithmetic CVO, 1 REDUCE_SUM, 2 LOAD_SCALAR, 3 MEMSET of S / e_max, 4 / 5 MEMCPY (L2 or a host
  region into L2, while its shape entry is the one it was bound for), 6 MEMSET of a constant-cache
  entry;
* 7 an FP16 row-major GEMV and 9 an FP16 K-major GEMV (the attention's score and value products:
  their shape and address come from the constant caches at run time, as the span grows token by
  token; the image must lie in the host region the row was built with);
* 8 EXP (optionally of x − e_max), see `_exp_row`;
* 10 a packed INT4 GEMV with its row scales (every plain INT4 projection of a decode step), on the
  serial twin (`_nbkernels._SERIAL["gemv_p4_1"]`) or, for a large matrix (flag 4 in column 5) when
  the caller asks (``par``), on the parallel twin (`_nbkernels._P4`): both the build of the INT4 path
  this CPU took (VNNI, AVX2 or portable), so `block` is built once per path under its own name; the
  image is read in place at the host address the row was built for, while the descriptors hold the
  binding key it was built from (`_key_holds`; else the single step rebinds);
* 12 GELU, TANH, SIN or COS (no e_max): core(x) from a table of every BF16 input (`fastrows.TLUT`,
  made by the NumPy core itself), then the single step's rounding (`round_store`, accm included);
  without accm the rounded value itself, from `fastrows.TBITS` (the table rounded by the single
  step's NumPy rounding: 128 KiB a function rather than 512);
* 11 the same GEMV on its cached int8 codes (`FastSimulator.int4_codes`; the serial int8 kernel, or
  its parallel twin as for kind 10), where the single step would read codes (the caller rebuilds the
  table once a host write drops them);
* 14 a K-major packed INT4 GEMV (a decode token's sparse W_down, `fastmat.kmajor_row`): the live
  rows of the image read in place (`_nbkm.gemv_km_p4`), ``info[r]`` gets their count for the Work;
* 13 a step the loop does not run (a GEMV binding it does not cover, e.g. a K-major INT4 image): the
  call returns ``-2 - index``, the caller runs it and calls again from the next row
  (`fastcvo._Resume`); while the descriptors hold the binding key (columns 11..19, as kinds 10 and
  11) it was lowered for, else it returns the index as a row not run (the table is made again).

A row the compiled loop cannot finish exactly as the single step would — a fault, an operand outside
its region, an ambiguous e_max or exp — is left undone (nothing written) and `block` returns its
index; the caller runs it and the rest step by step. A GEMV whose outputs are written but whose e_max
update needs the reference reduction returns ``rows + index``. ``info[r]`` receives the (m, k, live
rows) a GEMV row ran with, from which the caller builds its Work record.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from numba import types
from numba.extending import intrinsic

from npukit.sim.cpu import njit_variant
from npukit.targets.pccx.fast import _nbkernels as nbk
from npukit.targets.pccx.fast import _nbkm
from npukit.targets.pccx.fast._nbarith import arith_row, copy_apart, copy_words, round_into, sum_bits

_OPTS = {"cache": True, "error_model": "numpy", "nogil": True}
_F16, _F16_KMAJOR = 2, 2 | 4  # weight-slot ``a`` of an FP16 image, row-major / K-major (memory.W_KMAJOR)
_EPS = 2.0 ** -40  # the exp rows' margin, relative (`_exp_row`)
_NO_SCALE = np.zeros(0, np.float32)
gemv_f16_1 = nbk._SERIAL["gemv_f16_1"]
gemv_km_f16 = nbk.gemv_km_f16
_p4 = nbk._SERIAL["gemv_p4_1"]  # the serial packed INT4 twin of this CPU's path (VNNI, AVX2, portable)
_i8 = nbk._SERIAL["gemv_i8_1"]  # the serial int8-codes twin (portable)
_p4_par, _i8_par = nbk._P4, nbk.gemv_i8  # their parallel twins (large rows, when ``par``)
LARGE = 4  # column-5 flag of an INT4 row over `kernels.PARALLEL_MIN_MACS` weights
# kinds 10 and 11: 6 image (codes) address, 7 m, 8 k, 9 scale address (0: none), 10 bytes per row,
# 11..19 the binding key (shape entry m, n, k; weight slot a, hi, lo; slot + 1 a, hi, lo)
COLS = 20
INT4_KEY = 11
_SCRATCH = 4096  # elements of the block's row scratch to start with (grown for a longer row)


def pointer_at(name: str, item: types.Type):
    """An intrinsic named ``name``: a host address (int64) as a pointer to ``item`` (for
    `numba.carray`): plain LLVM inttoptr."""

    def at(typingctx, addr):  # pragma: no cover - numba
        sig = types.CPointer(item)(types.int64)

        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], context.get_value_type(types.CPointer(item)))

        return sig, codegen

    at.__name__ = at.__qualname__ = name  # numba names the intrinsic (and its cache entries) by it
    return intrinsic(at)


_u8_at = pointer_at("_u8_at", types.uint8)


@nb.njit(**_OPTS)
def _exp_row(x, d, sub, emax_bits, f64, u16):
    """EXP of BF16 bits ``x`` (less e_max when ``sub``) into ``d``; False, writing nothing, when the
    result might differ from NumPy's.

    The reference evaluates NumPy's float64 exp and rounds once to BF16; here the exp is LLVM's (the C
    library's). Both are accurate to a few units in the last place of float64, so they differ by far
    less than the relative margin 2^-40: where the BF16 rounding of y·(1 − 2^-40) and of y·(1 + 2^-40)
    agree, every value in between, NumPy's result included, rounds to the same BF16 (rounding is
    monotone). Anything else (a NaN input, whose sign the two libraries may treat differently, or a
    value that close to a rounding boundary) is left to the single step, which calls NumPy. ``f64`` and
    ``u16`` are the block's scratch (at least 3n and 2n elements)."""
    n = x.shape[0]
    y, lo, hi = f64[:n], f64[n: 2 * n], f64[2 * n: 3 * n]
    blo, bhi = u16[:n], u16[n: 2 * n]
    e = nbk.bf16_64(emax_bits)
    for i in range(n):
        a = nbk.bf16_64(x[i])
        if sub:
            a = a - e
        if a != a:
            return False
        y[i] = np.exp(a)
    for i in range(n):
        lo[i] = y[i] * (1.0 - _EPS)
        hi[i] = y[i] * (1.0 + _EPS)
    nbk._round64(lo, blo)
    nbk._round64(hi, bhi)
    for i in range(n):
        if blo[i] != bhi[i]:
            return False
    nbk._round64(y, d)
    return True


@nb.njit(**_OPTS)
def _gemv_row(tab_r, flat, cc, state, h, q, lut32, lut64, info_r):
    """Kinds 7 and 9: 0 done, 1 not run (the single step must), 2 done but e_max left to the caller."""
    kind, shp, siz, s0, d0, flags, base, lim = (tab_r[0], tab_r[1], tab_r[2], tab_r[3], tab_r[4],
                                                 tab_r[5], tab_r[7], tab_r[8])
    m, n, k = np.int64(cc[0, shp, 0]), np.int64(cc[0, shp, 1]), np.int64(cc[0, shp, 2])
    a, hi, lo = np.int64(cc[1, siz, 0]), np.int64(cc[1, siz, 1]), np.int64(cc[1, siz, 2])
    if m == 0 or k == 0 or n > 1 or a != (_F16 if kind == 7 else _F16_KMAJOR):
        return 1
    kw, mw = (k + 7) // 8, (m + 7) // 8
    if s0 + kw > lim or d0 + mw > lim:
        return 1
    off = ((hi << 16) | lo) * 16 - base  # bytes into the region
    if off < 0 or off % 2 or off // 2 + m * k > h.shape[0]:
        return 1
    w = h[off // 2: off // 2 + m * k]
    x = flat[s0 * 8: s0 * 8 + k]
    d = flat[d0 * 8: d0 * 8 + m]
    accm = (flags & 1) != 0
    if kind == 7:
        st = gemv_f16_1(x, w.reshape((m, k)), _NO_SCALE, d, accm, q, lut32, lut64)
        if st == 2:
            return 1  # a non-finite weight: the single step raises (nothing written yet)
        if st == 1:
            d[:] = 0x7FC0
        live = k
    else:
        live = gemv_km_f16(x, w.reshape((k, m)), _NO_SCALE, d, accm, q, lut32, lut64)
        if live == -2:
            return 1
        if live < 0:
            d[:] = 0x7FC0
            live = k
    info_r[0], info_r[1], info_r[2] = m, k, live
    if flags & 2:  # findemax: the unambiguous cases here, the rest by the reference reduction
        b = nbk.max_bits(np.int64(state[1]), d, lut32)
        if b < 0:
            return 2
        state[1] = np.uint16(b)
    return 0


@nb.njit(**_OPTS)
def _key_holds(t, cc):
    """Whether the descriptors still hold the binding key an INT4 row (kinds 10, 11) or a yield (13)
    was built for: the shape entry and the weight slot. Not slot + 1 (the key's last three columns):
    a plain INT4 binding never reads it, and whether a GEMV is a row or a yield depends on the first
    six fields only (`fastmat.fused_row`, `fastrows.int4_row`); a decode program's slot + 1 may be an
    entry the next GEMV reads, rewritten every token."""
    shp, siz = t[1], t[2]
    for j in range(3):
        if np.int64(cc[0, shp, j]) != t[INT4_KEY + j] or np.int64(cc[1, siz, j]) != t[INT4_KEY + 3 + j]:
            return False
    return True


@nb.njit(**_OPTS)
def _int4_done(t, d, st, state, lut32, info_r):
    """After an INT4 row's GEMV (``st``: its kernel's status): NaN outputs, shape info, e_max (0 done,
    2 e_max left to the caller)."""
    if st == 1:
        d[:] = 0x7FC0  # a non-finite activation: every output NaN (numerics.gemv)
    info_r[0], info_r[1], info_r[2] = t[7], t[8], t[8]
    if t[5] & 2:
        b = nbk.max_bits(np.int64(state[1]), d, lut32)
        if b < 0:
            return 2
        state[1] = np.uint16(b)
    return 0


def _int4_row(t, flat, cc, state, q, lut32, lut64, info_r, par):  # pragma: no cover - numba
    """Kind 10 (packed image) and 11 (cached int8 codes, column 10 unused): 0 done, 1 not run (the
    descriptors changed: the single step rebinds), 2 done but e_max left to the caller. A large row
    runs on the parallel twin when ``par`` (the same exact sums: the rows' partition changes no bit)."""
    if not _key_holds(t, cc):
        return 1
    m, k = t[7], t[8]
    scale = np.empty(m if t[9] != 0 else 0, np.float32)
    if t[9] != 0:  # the row scales (FP32, little-endian): live (kind 10) or the codes' copy (11)
        scale.view(np.uint8)[:] = nb.carray(_u8_at(t[9]), (4 * m,))
    x = flat[t[3] * 8: t[3] * 8 + k]
    d = flat[t[4] * 8: t[4] * 8 + m]
    accm = (t[5] & 1) != 0
    wide = par and (t[5] & LARGE) != 0
    if t[0] == 10:
        p = nb.carray(_u8_at(t[6]), (m, t[10]))
        if wide:
            st = _p4_par(x, p, scale, d, accm, q, lut32, lut64)
        else:
            st = _p4(x, p, scale, d, accm, q, lut32, lut64)
    else:
        w = nb.carray(_u8_at(t[6]), (m, k)).view(np.int8)
        if wide:
            st = _i8_par(x, w, scale, d, accm, q, lut32, lut64)
        else:
            st = _i8(x, w, scale, d, accm, q, lut32, lut64)
    return _int4_done(t, d, st, state, lut32, info_r)


@nb.njit(**_OPTS)
def _kmajor_row(t, flat, cc, state, q, lut32, lut64, info_r):
    """Kind 14, a K-major packed INT4 GEMV (`_nbkm.gemv_km_p4`, the live rows only): 0 done, 1 not run
    (the descriptors changed), 2 done but e_max left to the caller; ``info_r`` gets the live rows."""
    if not _key_holds(t, cc):
        return 1
    m, k = t[7], t[8]
    scale = np.empty(m if t[9] != 0 else 0, np.float32)
    if t[9] != 0:
        scale.view(np.uint8)[:] = nb.carray(_u8_at(t[9]), (4 * m,))
    d = flat[t[4] * 8: t[4] * 8 + m]
    live = _nbkm.gemv_km_p4(flat[t[3] * 8: t[3] * 8 + k], nb.carray(_u8_at(t[6]), (k, t[10])), scale, d,
                            (t[5] & 1) != 0, q, lut32, lut64)
    if live < 0:
        d[:] = 0x7FC0  # a non-finite activation: every output NaN, every row counted live
        live = k
    st = _int4_done(t, d, 0, state, lut32, info_r)
    info_r[2] = live
    return st


@nb.njit(**_OPTS)
def _region(hosts, j):
    """Host region ``j`` of a table (`hosts[j]`: its address and length in BF16 words) as uint16 words."""
    return nb.carray(_u8_at(hosts[j, 0]), (2 * hosts[j, 1],)).view(np.uint16)


@nb.njit(**_OPTS, inline="always")
def _row_clock():
    """A row's start time: none in the plain build (`benchmarks/block_kinds.py` binds a cycle counter)."""
    return 0


@nb.njit(**_OPTS, inline="always")
def _row_done(tab, r, t0):
    """Called after each row the loop finished: nothing in the plain build (the diagnostic build of
    `benchmarks/block_kinds.py` adds the row's cycles to its kind's tally)."""
    return


@nb.njit(**_OPTS)
def _scratch(tab, start):
    """The rows' float64, uint16 and uint32 intermediates, sized once for the table's longest row
    (allocated before the row loop: an array reassigned inside the loop cost its reference counting
    on every row, as much as a short row's arithmetic)."""
    need = _SCRATCH
    for r in range(start, tab.shape[0]):
        kind = tab[r, 0]
        if (kind == 0 or kind == 4 or kind == 8 or kind == 12) and tab[r, 3] > need:
            need = tab[r, 3]
    return np.empty(3 * need, np.float64), np.empty(2 * need, np.uint16), np.empty(need, np.uint32)


def _block(tab, start, flat, cc, state, hosts, q, info, lut32, lut64, tlut, tbits, par):  # pragma: no cover
    """Execute table rows in order from row ``start`` (module docstring): -1 when all ran, ``-2 - r``
    at a yield row r, else the row to resume at (``rows + r``: row r ran but its e_max update is the
    caller's). ``par``: large INT4
    rows on the parallel twin (`twins.TwinChooser` picks it per call)."""
    f64, u16, u32 = _scratch(tab, start)
    for r in range(start, tab.shape[0]):
        t0 = _row_clock()
        kind, op, s0, n, d0, accm = tab[r, 0], tab[r, 1], tab[r, 2], tab[r, 3], tab[r, 4], tab[r, 5]
        if kind == 13:  # a step the caller runs (a GEMV this loop does not cover), then resumes after;
            return -2 - r if _key_holds(tab[r], cc) else r  # its descriptors changed: rebuild
        if kind == 0:  # arithmetic CVO (op < 0: the S-register ops, resolved now as `fastcvo.arith`)
            s = 0.0
            if op < 0:
                s = nbk.bf16_64(state[0])
                if op == -1:
                    op = 1  # SCALE
                elif op == -2:
                    op = 3 if s == 0.0 else 2  # ZERO | DIVS
                else:
                    op = 7  # RELU
            arith_row(op, flat, s0, d0, n, s, accm != 0, f64, u32)
        elif kind == 1:  # REDUCE_SUM -> S and the first element of the destination word
            if accm:
                f64[0] = nbk.bf16_64(flat[d0]) + np.float64(nbk.reduce_sum(flat[s0: s0 + n], lut32))
                nbk._round64(f64[:1], u16[:1])
                b = u16[0]
            else:
                b = sum_bits(flat, s0, n)
            state[0] = b
            flat[d0] = b
            for i in range(1, 8):
                flat[d0 + i] = 0
        elif kind == 2:  # LOAD_SCALAR
            state[0] = flat[s0 + n - 1]
        elif kind == 3:  # MEMSET of S (op 0) or e_max (op 1)
            state[op] = np.uint16(tab[r, 6])
        elif kind == 6:  # MEMSET of constant-cache entry (cache op, slot s0) to (n, d0, accm)
            cc[op, s0, 0], cc[op, s0, 1], cc[op, s0, 2] = n, d0, accm
        elif kind == 7 or kind == 9:
            st = _gemv_row(tab[r], flat, cc, state, _region(hosts, tab[r, 6]), q, lut32, lut64, info[r])
            if st == 1:
                return r
            if st == 2:
                return tab.shape[0] + r
        elif kind == 10 or kind == 11 or kind == 14:
            st = (_kmajor_row(tab[r], flat, cc, state, q, lut32, lut64, info[r]) if kind == 14 else
                  _int4_row_nb(tab[r], flat, cc, state, q, lut32, lut64, info[r], par))
            if st == 1:
                return r
            if st == 2:
                return tab.shape[0] + r
        elif kind == 12:  # GELU, TANH, SIN, COS: core(x) from its `fastcvo.TLUT` row, the step's rounding
            a = np.uint64(s0)
            if accm == 0:  # the rounded core from `TBITS` (a quarter of the bytes: 128 KiB a function)
                for i in range(np.uint64(n)):  # (all read before any is written: the ranges may overlap)
                    u16[i] = tbits[op, flat[a + i]]
                b = np.uint64(d0)
                for i in range(np.uint64(n)):
                    flat[b + i] = u16[i]
            else:
                for i in range(np.uint64(n)):
                    f64[i] = tlut[op, flat[a + i]]
                round_into(f64, flat, np.uint64(d0), np.uint64(n), True)
        elif kind == 8:  # EXP (op: less e_max)
            if not _exp_row(flat[s0: s0 + n], flat[d0: d0 + n], op != 0, state[1], f64, u16):
                return r
        else:  # MEMCPY (4: L2 -> L2, 5: host region ``hosts[col 6]`` -> L2) of shape entry ``op``,
            # bound for the (a, b, c) packed in column 5
            if (np.int64(cc[0, op, 0]) != (accm & 0xFFFF) or np.int64(cc[0, op, 1]) != ((accm >> 16) & 0xFFFF)
                    or np.int64(cc[0, op, 2]) != ((accm >> 32) & 0xFFFF)):
                return r
            if kind == 4:
                copy_words(flat, s0, flat, d0, n, u16)  # whole source first: the ranges may overlap
            else:
                copy_apart(_region(hosts, tab[r, 6]), s0, flat, d0, n)
        _row_done(tab, r, t0)
    return -1



# one build per INT4 path (`_nbkernels.SIMD`: VNNI, AVX2, SSSE3 or portable, chosen before compiling),
# each under its own name so numba's disk cache never hands one path the other's code
_PATH = nbk._P4.__name__.removeprefix("gemv_p4")  # "_vnni", "_avx2", "_ssse3" or "" (the chosen GEMV's)
_int4_row_nb = njit_variant(_int4_row, "block_int4_row" + _PATH, _OPTS, _p4=_p4, _p4_par=_p4_par)
block = njit_variant(_block, "cvo_block" + _PATH, _OPTS, _int4_row_nb=_int4_row_nb)
