"""CVO steps of `npukit.targets.pccx.fast.fastsim`: L2 views and the Work record bound at load time.

A CVO's operands and Work depend only on the instruction (decode already checked its ranges), so the
step is fixed when the program is loaded; per call it reads S or e_max if the function uses them and
runs one fused kernel. Transcendental functions run the float64 kernel their `cvo.CVO` row names (the
one `numerics.py` rounds too); only the widening and the BF16 rounding are replaced.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from npukit.sim.work import Work
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.asm import format_instr
from npukit.targets.pccx.cvo import CVO
from npukit.targets.pccx.fast import kernels as kx
from npukit.targets.pccx.fast.state import FastState
from npukit.targets.pccx.isa import CvoFlag, CvoFunc, Instr, cvo_out_elems, words_of

_E = 8
_ARITH = {CvoFunc.SQUARE: kx.SQUARE, CvoFunc.RECIP: kx.RECIP, CvoFunc.RSQRT: kx.RSQRT,
          CvoFunc.SQRT: kx.SQRT, CvoFunc.MUL: kx.MUL, CvoFunc.ADD: kx.ADD}
_ZEROS7 = np.zeros(_E - 1, np.uint16)
_NO_HOST = np.zeros(0, np.uint16)  # an unused host-region argument of `cvo_block`


def _cvo_work(idx: int, ins: Instr) -> Work:
    fn, n = ins.cvo_func, ins.length
    accm = bool(ins.flags & CvoFlag.ACCM)
    out_n = cvo_out_elems(fn, n)
    src = (ins.src_addr, ins.src_addr + words_of(n))
    dst = (ins.dst_addr, ins.dst_addr + words_of(out_n))
    two = out_n and (accm or CVO[fn].arity == 2)
    reads = (src, dst) if two else (src,)
    writes = (dst,) if fn != CvoFunc.LOAD_SCALAR else ()
    rd = (src[1] - src[0]) + ((dst[1] - dst[0]) if two else 0)
    return Work(idx, "sfu", format_instr(ins), sfu_elems=n, onchip_read_bytes=rd * 16,
                onchip_write_bytes=(dst[1] - dst[0]) * 16 if writes else 0,
                is_async=bool(ins.async_), reads=reads, writes=writes)


def compile_cvo(sim: FastState, idx: int, ins: Instr) -> Callable[[], Work] | None:
    """The step for one CVO, or None where the reference path should run it."""
    fn, n = ins.cvo_func, ins.length
    work = _cvo_work(idx, ins)
    flat = sim.l2.reshape(-1)
    s0, d0 = ins.src_addr * _E, ins.dst_addr * _E
    out_n = cvo_out_elems(fn, n)
    x = flat[s0: s0 + n]
    d = flat[d0: d0 + max(out_n, 1)]
    accm = bool(ins.flags & CvoFlag.ACCM)
    # an input that overlaps the output at another offset must be read whole before writing
    shifted = out_n > 0 and s0 != d0 and s0 < d0 + out_n and d0 < s0 + n
    numba = sim.backend == "numba"
    kern = sim._k
    lut = (kx.LUT64,) if numba else ()
    lut32 = (kx.LUT32,) if numba else ()

    def src() -> np.ndarray:
        return x.copy() if shifted else x

    if fn in _ARITH or fn in (CvoFunc.SCALE, CvoFunc.RELU_BIAS):
        fixed = _ARITH.get(fn)
        recip = bool(ins.flags & CvoFlag.RECIP_SCALE)
        cvo = kern["cvo"] if numba else kx.np_cvo

        def arith() -> Work:
            s = 0.0
            op = fixed
            if op is None:
                s = float(kx.LUT64[int(sim.s_reg)])
                if fn == CvoFunc.RELU_BIAS:
                    op = kx.RELU
                elif recip:
                    op = kx.ZERO if s == 0.0 else kx.DIVS
                else:
                    op = kx.SCALE
            cvo(op, src(), d, d, s, accm, *lut)
            return work

        if numba and out_n == n:
            sop = -3 if fn == CvoFunc.RELU_BIAS else (-2 if recip else -1)
            arith.fuse = ((0, sop if fixed is None else fixed, s0, n, d0, int(accm), 0), work)
        return arith
    core = CVO[fn].core
    if core is not None:  # a transcendental: the numerics module's own float64 kernel, then one rounding
        sub = bool(ins.flags & CvoFlag.SUB_EMAX)
        store = kern["round_store"] if numba else kx.np_round_store

        def trans() -> Work:  # runs under the executor's np.errstate (fastsim._QUIET)
            a = kx.LUT64[x]  # a fresh array: the subtraction may be in place
            if sub:
                a -= kx.LUT64[int(sim.e_max)]
            store(core(a), d, d, accm, *lut)
            return work

        return trans
    if fn == CvoFunc.REDUCE_SUM:
        rsum = kern["reduce_sum"] if numba else kx.np_reduce_sum
        word = flat[d0: d0 + _E]

        rbits = kern["reduce_sum_bits"] if numba else None

        def red_sum() -> Work:
            if accm:
                s = np.float32(rsum(x, *lut32))
                bits = kx.np_f64_bits(np.array([kx.LUT64[int(word[0])] + np.float64(s)]))[0]
            elif rbits is not None:  # a float32 value: its BF16 rounding is the RNE on its pattern
                bits = np.uint16(rbits(x, kx.LUT32))
            else:
                bits = np.uint16(kx.f32_scalar_bits(np.float32(rsum(x))))
            sim.s_reg = bits
            word[0] = bits
            word[1:] = _ZEROS7
            return work

        if numba:
            red_sum.fuse = ((1, 0, s0, n, d0, int(accm), 0), work)
        return red_sum
    if fn == CvoFunc.REDUCE_MAX:
        word = flat[d0: d0 + _E]

        def red_max() -> Work:
            mx = nx.reduce_max(kx.LUT32[x])
            b = nx.to_bits(mx)[()]
            sim.e_max = b
            word[0] = b
            word[1:] = _ZEROS7
            return work

        return red_max
    if fn == CvoFunc.LOAD_SCALAR:  # S <- element len - 1 of the source

        def load_scalar() -> Work:
            sim.s_reg = np.uint16(x[n - 1])
            return work

        if numba:
            load_scalar.fuse = ((2, 0, s0, n, 0, 0, 0), work)
        return load_scalar
    return None  # anything added to the ISA later: the reference path


def fuse_groups(sim: FastState, plan: list[Callable[[], Work]], old: list | None = None,
                changed: frozenset[int] = frozenset()) -> list[tuple[int, Callable] | None]:
    """Runs of >= 2 consecutive steps marked ``fuse`` (arithmetic CVO, REDUCE_SUM, LOAD_SCALAR, MEMSET
    of S/e_max, L2-to-L2 MEMCPY on the numba backend) as one `cvo_block` call each: ``out[i] = (end,
    run)`` for a run starting at i. The table rows replay exactly what the single steps do, in order
    (each CVO reads its whole input before writing; none of them can fault once decoded; a copy runs
    only while its shape entry is the one it was bound for), so a run equals its steps. ``run()``
    returns the Work records of the steps it executed, in order: all of them, or a prefix (possibly
    empty) after which the caller runs the remaining steps one by one.
    ``old``: the groups of the program this one patches, ``changed`` its patched step indices; a run
    with the same bounds and no patched step keeps its old block (per token, only the softmax runs
    whose length is the attention span are rebuilt)."""
    n = len(plan)
    out: list[tuple[int, Callable] | None] = [None] * n
    i = 0
    while i < n:
        j = i
        while j < n and getattr(plan[j], "fuse", None) is not None:
            j += 1
        if j - i >= 2:
            prev = old[i] if old is not None else None
            keep = prev is not None and prev[0] == j and not any(c in changed for c in range(i, j))
            out[i] = prev if keep else (j, _group(sim, plan[i:j]))
        i = max(j, i + 1)
    return out


def _group(sim: FastState, steps: list[Callable[[], Work]]) -> Callable[[], list[Work]]:
    block, flat, cc, trace, regs = sim._k["cvo_block"], sim.flat, sim.cc, sim.trace, sim._regs
    lut32, lut64 = kx.LUT32, kx.LUT64
    copies = any(callable(st.fuse) for st in steps)  # a MEMCPY's row: from its binding (`fuse()`)

    def build() -> tuple[np.ndarray, list, list[Work], np.ndarray, np.ndarray] | None:
        rows = [st.fuse() if callable(st.fuse) else st.fuse for st in steps]
        if any(r is None for r in rows):
            return None  # a copy not bound (yet) or on the reference path
        regions: list[np.ndarray] = []  # host regions the copies read, by identity (at most two)
        tab = np.array([r[0] for r in rows], np.int64)
        for i, r in enumerate(rows):
            if len(r) > 2:
                j = next((j for j, h in enumerate(regions) if h is r[2]), len(regions))
                if j == len(regions):
                    regions.append(r[2])
                tab[i, 6] = j
        if len(regions) > 2:
            return None
        h0, h1 = [*regions, _NO_HOST, _NO_HOST][:2]
        works = [r[1] for r in rows]
        return tab, [(st.fuse_ins, w) for st, w in zip(steps, works, strict=True)], works, h0, h1

    cell = [None if copies else build()]

    def run() -> list[Work]:
        c = cell[0]
        if c is None:
            c = cell[0] = build()
            if c is None:
                return []
        tab, items, works, h0, h1 = c
        r = block(tab, flat, cc, regs, h0, h1, lut32, lut64)
        if r < 0:
            trace.extend(items)
            return works
        cell[0] = None  # a copy's descriptor changed: the steps rebind, the table is rebuilt next time
        trace.extend(items[:r])
        return works[:r]

    return run

