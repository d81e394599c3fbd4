"""A step's table row for `_nbblock.block`: the row kinds' shared constants, the INT4 GEMV row
(`int4_row`), a step lowered for the constant caches (`_lowered`), and the unary cores' tables (`tabled`),
which the fused runs (`fastrun`), the steps (`faststeps`) and the CVO rows (`fastcvo`) all read."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from npukit.sim.work import Work
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.fast import kernels as kx
from npukit.targets.pccx.fast.fastmat import (
    MatSite,
    _mat_work,
    _unpacked,
    key_fields,
    kmajor_row,
    packed_views,
)
from npukit.targets.pccx.fast.state import FastState
from npukit.targets.pccx.memory import FORMAT_CODES, row_bytes

_COLS = 20  # table columns (`_nbblock.COLS`)
_INT4 = FORMAT_CODES["int4"]
_BY_ADDRESS = (10, 11, 14)  # INT4 rows that read their image by address (the table keeps the arrays)
_LARGE = 4  # an INT4 row's flag (column 5) of a large matrix (`_nbblock.LARGE`)
_YIELD = 13  # a row `_nbblock.block` returns at: the caller runs that step, then resumes after it
_PADS = [(0,) * (_COLS - k) for k in range(_COLS + 1)]

# Unary cores a fused run reads from a table (`_nbblock` kind 12, the steps `fastcvo` marks): a BF16
# input has 2^16 values, so core(x) for each, computed once by the core itself (NumPy, float64, as the
# single step calls it on its slice; the loops are elementwise), is what every single step would
# compute; the rounding (and accm's add) is then the single step's own `round_store`.
_TABLED = (nx.gelu_core, nx.tanh_core, nx.sin_core, nx.cos_core)
TLUT = np.zeros((len(_TABLED), 1 << 16), np.float64)
TBITS = np.zeros((len(_TABLED), 1 << 16), np.uint16)  # the same, rounded to BF16 (a row without accm)
_TLUT_MADE = [False] * len(_TABLED)


def tabled(core: Callable[[np.ndarray], np.ndarray]) -> int:
    """`TLUT`'s row holding ``core`` of every BF16 value (made on first use), or -1: not tabled."""
    i = next((i for i, c in enumerate(_TABLED) if c is core), -1)
    if i >= 0 and not _TLUT_MADE[i]:
        with np.errstate(all="ignore"):
            TLUT[i] = core(kx.LUT64.copy())
            TBITS[i] = kx.np_f64_bits(TLUT[i])  # the single step's own rounding
        _TLUT_MADE[i] = True
    return i

def int4_row(sim: FastState, site: MatSite, key: bytes) -> tuple | bool:
    """The `_nbblock` row of a plain INT4 GEMV for the binding key ``key``, and its Work: kind 11
    where the single step reads cached int8 codes, else kind 10 (the packed image in place), so a run
    of fused steps goes on through every projection of a decode step (a layer between two host
    interactions is one compiled call). A large matrix (from `kernels.PARALLEL_MIN_MACS` weights) is
    flagged `_nbblock.LARGE`: the run's call then takes the twin `twins.TwinChooser` picks, as the
    single step would. False for every other binding. The last item holds what the row reads by
    address (kept alive), and the codes whose validity the table depends on."""
    f = key_fields(key)
    if sim.backend != "numba" or len(f) != 9:
        return False
    m, n, k, a, hi, lo = f[:6]
    if a != _INT4 or n > 1 or m == 0 or k == 0:
        return kmajor_row(sim, site, f)  # (a K-major image: kind 14, or False)
    ins, rb = site.ins, row_bytes("int4", k)
    got = packed_views(sim, site, m, k, (hi << 16) | lo, m, rb)
    if got is None:
        return False
    addr, body, sb, body_at, sb_at = got
    s0, d0 = ins.src_addr, ins.dest_reg
    codes = sim.int4_codes(addr, m, k, site.w_scale) if _unpacked(sim, m, 1, k) else None
    flags = int(site.accm) | int(site.findemax) << 1 | (_LARGE if m * k >= kx.PARALLEL_MIN_MACS else 0)
    work = _mat_work(site, m, 1, k, "int4")
    if codes is not None:
        c = np.ascontiguousarray(codes.codes)
        scale = codes.scale.ctypes.data if codes.scale.size else 0
        row = (11, ins.shape_ptr_addr, ins.size_ptr_addr, s0, d0, flags, c.ctypes.data, m, k, scale, 0, *f)
        return row, work, None, None, (c, codes)
    row = (10, ins.shape_ptr_addr, ins.size_ptr_addr, s0, d0, flags, body_at, m, k, sb_at, rb, *f)
    return row, work, None, None, (body, sb)


def _lowered(step: Callable[[], Work], cc: np.ndarray | None) -> tuple | None:
    """A step's table row (and what goes with it: `fuse_groups`) for the constant caches ``cc``: a
    `_YIELD` row for a GEMV the compiled loop does not cover (the caller runs it between two calls);
    None where the step cannot be bound now (the table ends before it)."""
    got = step.fuse(cc) if callable(step.fuse) else step.fuse
    if got is False and getattr(step, "fuse_may_end", False) and cc is not None:
        ins = step.fuse_ins  # a GEMV: a yield while its descriptors hold this binding key
        shp, siz = ins.shape_ptr_addr, ins.size_ptr_addr
        if siz + 2 <= cc.shape[1]:
            key = [*cc[0, shp].tolist(), *cc[1, siz: siz + 2].reshape(-1).tolist()]
            return (_YIELD, shp, siz, *(0,) * 8, *key), None
    return None if got is False else got
