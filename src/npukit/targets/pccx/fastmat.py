"""GEMV/GEMM steps of `npukit.targets.pccx.fastsim`: bind operands once per constant-cache state.

`bind_mat` repeats the reference simulator's checks; whenever one would fault (or the fast path does
not cover the case) it returns None and the step runs the reference `Simulator._exec` instead, which
raises the identical error interrupt. Otherwise it returns a binding whose ``run`` executes the
instruction from pre-resolved views: activation and result slices of L2, the weight operand (cached
INT4 codes, the packed image in place, or an INT8/FP16 host view) and the row scales.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from npukit.errors import FormatError
from npukit.sim.work import Work
from npukit.targets.pccx import kernels as kx
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.asm import format_instr
from npukit.targets.pccx.isa import GemvFlag, Instr, words_of
from npukit.targets.pccx.sim import FORMATS, WORD_BYTES, row_bytes

if TYPE_CHECKING:
    from npukit.targets.pccx.fastsim import FastSimulator, _MatBinding

_E = 8
_NO_SCALE = np.zeros(0, np.float32)


def _mat_work(idx: int, ins: Instr, m: int, n: int, k: int, fmt: str, w_scale: bool, accm: bool) -> Work:
    """The reference simulator's Work record for this GEMV/GEMM (same fields, same label)."""
    rb = row_bytes(fmt, k)
    kw, mw = words_of(k), words_of(m)
    src = (ins.src_addr, ins.src_addr + words_of(n * kw * _E))
    dst = (ins.dest_reg, ins.dest_reg + words_of(n * mw * _E))
    label = (f"{format_instr(ins)}  ; M={m} N={n} K={k} {fmt}"
             f"{' w_scale' if w_scale else ''} ksplit={nx.k_splits(k)}")
    return Work(idx, ins.op.name.lower(), label, macs=m * n * k,
                weight_bytes=m * rb + (4 * m if w_scale else 0),
                onchip_read_bytes=(n * kw + (n * mw if accm else 0)) * WORD_BYTES,
                onchip_write_bytes=n * mw * WORD_BYTES, is_async=bool(ins.async_),
                reads=(src, dst) if accm else (src,), writes=(dst,), lanes=ins.parallel_lane)


def bind_mat(sim: FastSimulator, idx: int, ins: Instr, key: bytes) -> _MatBinding | None:
    from npukit.targets.pccx.fastsim import _MatBinding

    m, n, k = (int(v) for v in sim.cc[0, ins.shape_ptr_addr])
    n = max(n, 1)
    code, hi, lo = (int(v) for v in sim.cc[1, ins.size_ptr_addr])
    if m == 0 or k == 0 or code not in FORMATS:
        return None  # faults, and the extended layout bits of the weight slot: the reference path
    fmt = FORMATS[code]
    addr = ((hi << 16) | lo) * WORD_BYTES
    rb = row_bytes(fmt, k)
    kw, mw = words_of(k), words_of(m)
    s0, d0 = ins.src_addr, ins.dest_reg
    lim = sim.limits.l2_words
    if s0 + n * kw > lim or d0 + n * mw > lim:
        return None
    if n > 1 and (fmt == "fp16" or (s0 < d0 + n * mw and d0 < s0 + n * kw)):
        return None  # the reference reads every input (and may fault) before writing any output
    w_scale = bool(ins.flags & GemvFlag.W_SCALE)
    accm = bool(ins.flags & GemvFlag.ACCM)
    s_addr = addr + m * rb + (-(m * rb)) % WORD_BYTES
    sbytes = sim.host.view(s_addr, 4 * m) if w_scale else None
    body = sim.host.view(addr, m * rb)
    if body is None or (w_scale and sbytes is None):
        return None
    flat = sim.l2.reshape(-1)
    xs = [flat[(s0 + j * kw) * _E: (s0 + j * kw) * _E + k] for j in range(n)]
    ds = [flat[(d0 + j * mw) * _E: (d0 + j * mw) * _E + m] for j in range(n)]
    codes = None
    if fmt == "int4" and (sim.backend == "numpy" or sim.weights == "int8"):
        codes = sim.int4_codes(addr, m, k, w_scale)
    vec = _vector_kernel(sim, fmt, codes, body, sbytes, m, k, rb, accm)
    if vec is None:
        return None
    findemax = bool(ins.flags & GemvFlag.FINDEMAX)

    def run() -> None:
        for x, d in zip(xs, ds, strict=True):
            vec(x, d)
        if findemax:
            outs = np.concatenate([kx.LUT32[d] for d in ds])
            sim.e_max = nx.to_bits(nx.findemax(sim.emax, outs))[()]

    return _MatBinding(key, _mat_work(idx, ins, m, n, k, fmt, w_scale, accm), run, codes)


def _vector_kernel(sim: FastSimulator, fmt: str, codes, body: np.ndarray, sbytes: np.ndarray | None,
                   m: int, k: int, rb: int, accm: bool) -> Callable[[np.ndarray, np.ndarray], None] | None:
    """One activation vector -> its result bits, written into the L2 view ``d``."""
    q = sim._qbuf

    def live_scale() -> np.ndarray:
        return sbytes.view("<f4").astype(np.float32) if sbytes is not None else _NO_SCALE

    if sim.backend == "numba":
        kern = sim._k
        if codes is not None:
            w, gemv = codes.codes, kern["gemv_i8"]
            scale = codes.scale if codes.scale.size else _NO_SCALE

            def get_scale() -> np.ndarray:
                return scale
        elif fmt == "int4":
            w, gemv, get_scale = body.reshape(m, rb), kern["gemv_p4"], live_scale
        elif fmt == "int8":
            w, gemv, get_scale = body.view(np.int8).reshape(m, k), kern["gemv_i8"], live_scale
        else:
            w, gemv, get_scale = body.view("<u2").reshape(m, k), kern["gemv_f16"], live_scale

        small = m * k < kx.PARALLEL_MIN_MACS

        def vec(x: np.ndarray, d: np.ndarray) -> None:
            if small:  # one thread: a parallel region costs more than a small GEMV (and waits for
                with kx.one_thread():  # a descheduled worker on a shared machine)
                    st = gemv(x, w, get_scale(), d, accm, q, kx.LUT32, kx.LUT64)
            else:
                st = gemv(x, w, get_scale(), d, accm, q, kx.LUT32, kx.LUT64)
            if st == 1:
                d[:] = 0x7FC0  # a non-finite activation: every output NaN (numerics.gemv)
            elif st == 2:
                raise FormatError("FP16 weight operand has a non-finite element")

        return vec
    if fmt == "fp16":
        return None  # NumPy backend: the reference path is already NumPy
    if codes is not None:
        wf, chunk = codes.codes, kx.INT4_CHUNK
        scale = codes.scale if codes.scale.size else None

        def get_w() -> np.ndarray:
            return wf
    elif fmt == "int8":
        chunk, scale = kx.INT8_CHUNK, None
        w8 = body.view(np.int8).reshape(m, k)

        def get_w() -> np.ndarray:
            return w8.astype(np.float32)
    else:
        chunk, scale = kx.INT4_CHUNK, None
        p = body.reshape(m, rb)

        def get_w() -> np.ndarray:
            return nx.unpack_int4(p, k).astype(np.float32)
    fixed_scale = codes is not None

    def vec_np(x: np.ndarray, d: np.ndarray) -> None:
        qe = kx.np_quantize(x)
        if qe is None:
            d[:] = 0x7FC0
            return
        acc = kx.np_int_dot(get_w(), qe[0], chunk)
        s = scale if fixed_scale else (live_scale() if sbytes is not None else None)
        kx.np_epilogue(acc, qe[1], s, d, accm)

    return vec_np
