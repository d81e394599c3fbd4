"""GEMV/GEMM steps of `npukit.targets.pccx.fast.fastsim`: bind operands once per constant-cache state.

`bind_mat` repeats the reference simulator's checks; whenever one would fault (or the fast path does
not cover the case) it returns None and the step runs the reference `Simulator._exec` instead, which
raises the identical error interrupt. Otherwise it returns a binding whose ``run`` executes the
instruction from pre-resolved views: activation and result slices of L2, the weight operand (cached
INT4 codes, the packed image in place, or an INT8/FP16 host view) and the row scales.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from npukit.errors import FormatError
from npukit.sim.work import Work
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.asm import format_instr
from npukit.targets.pccx.fast import kernels as kx
from npukit.targets.pccx.fast.state import FastState, MatBinding
from npukit.targets.pccx.isa import GemvFlag, Instr, words_of
from npukit.targets.pccx.memory import (
    FORMATS,
    W_ACT_SCALE,
    W_EXT_BITS,
    W_FMT_MASK,
    W_KMAJOR,
    W_OFFSET_MASK,
    W_OFFSET_SHIFT,
    W_SPLIT_SCALES,
    WORD_BYTES,
    row_bytes,
)

_E = 8
_NO_SCALE = np.zeros(0, np.float32)


_ASM: dict[Instr, str] = {}


def _asm_text(ins: Instr) -> str:
    """format_instr, memoised: a step rebinds when its descriptors change, its instruction does not."""
    t = _ASM.get(ins)
    if t is None:
        if len(_ASM) > 1 << 16:
            _ASM.clear()
        t = _ASM[ins] = format_instr(ins)
    return t


def _mat_work(idx: int, ins: Instr, m: int, n: int, k: int, fmt: str, w_scale: bool, accm: bool) -> Work:
    """The reference simulator's Work record for this GEMV/GEMM (same fields, same label)."""
    rb = row_bytes(fmt, k)
    kw, mw = words_of(k), words_of(m)
    src = (ins.src_addr, ins.src_addr + words_of(n * kw * _E))
    dst = (ins.dest_reg, ins.dest_reg + words_of(n * mw * _E))
    label = (f"{_asm_text(ins)}  ; M={m} N={n} K={k} {fmt}"
             f"{' w_scale' if w_scale else ''} ksplit={nx.k_splits(k)}")
    return Work(idx, ins.op.name.lower(), label, macs=m * n * k,
                weight_bytes=m * rb + (4 * m if w_scale else 0),
                onchip_read_bytes=(n * kw + (n * mw if accm else 0)) * WORD_BYTES,
                onchip_write_bytes=n * mw * WORD_BYTES, is_async=bool(ins.async_),
                reads=(src, dst) if accm else (src,), writes=(dst,), lanes=ins.parallel_lane)


def bind_mat(sim: FastState, idx: int, ins: Instr, key: bytes) -> MatBinding | None:

    m, n, k = (int(v) for v in sim.cc[0, ins.shape_ptr_addr])
    n = max(n, 1)
    a, hi, lo = (int(v) for v in sim.cc[1, ins.size_ptr_addr])
    code, ext = a & W_FMT_MASK, a & ~W_FMT_MASK
    if m == 0 or k == 0 or code not in FORMATS:
        return None  # faults: the reference path raises the error interrupt
    if ext:
        return bind_ext(sim, idx, ins, key, m, n, k, a, hi, lo)
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
    if fmt == "int4" and (sim.backend == "numpy" or sim.weights == "int8" or (
            sim.weights == "auto" and m * k < kx.PARALLEL_MIN_MACS and not (sim.vnni and k >= 128))):
        codes = sim.int4_codes(addr, m, k, w_scale)
    findemax = bool(ins.flags & GemvFlag.FINDEMAX)
    if n > 1 and fmt == "int4" and codes is None and sim.backend == "numba":
        gemm = _gemm_kernel(sim, flat, s0, d0, kw, mw, n, k, body.reshape(m, rb), sbytes, accm)

        def run_gemm() -> None:
            gemm()
            if findemax:
                update_emax(sim, ds)

        return MatBinding(key, _mat_work(idx, ins, m, n, k, fmt, w_scale, accm), run_gemm, None)
    vec = _vector_kernel(sim, fmt, codes, body, sbytes, m, k, rb, accm)
    if vec is None:
        return None

    def run() -> None:
        for x, d in zip(xs, ds, strict=True):
            vec(x, d)
        if findemax:
            update_emax(sim, ds)

    return MatBinding(key, _mat_work(idx, ins, m, n, k, fmt, w_scale, accm), run, codes)


def _gemm_kernel(sim: FastState, flat: np.ndarray, s0: int, d0: int, kw: int, mw: int, n: int, k: int,
                 p: np.ndarray, sbytes: np.ndarray | None, accm: bool) -> Callable[[], None]:
    """All N vectors against the packed INT4 image in one call: each row is read once (prefill)."""
    xoff = np.array([(s0 + j * kw) * _E for j in range(n)], np.int64)
    doff = np.array([(d0 + j * mw) * _E for j in range(n)], np.int64)
    q2 = np.zeros((n, k + 16), np.int8)
    gemm, lut32, lut64 = sim._k["gemm_p4"], kx.LUT32, kx.LUT64

    def run() -> None:
        scale = sbytes.view("<f4").astype(np.float32) if sbytes is not None else _NO_SCALE
        gemm(flat, xoff, k, doff, p, scale, accm, q2, lut32, lut64)

    return run


def update_emax(sim: FastState, ds: list[np.ndarray]) -> None:
    """e_max <- max(e_max, outputs) (numerics.findemax); numba answers the unambiguous cases."""
    if sim.backend == "numba" and len(ds) == 1:
        b = sim._k["max_bits"](int(sim.e_max), ds[0], kx.LUT32)
        if b >= 0:
            sim.e_max = np.uint16(b)
            return
    outs = np.concatenate([kx.LUT32[d] for d in ds])
    sim.e_max = nx.to_bits(nx.findemax(sim.emax, outs))[()]


def _vector_kernel(sim: FastState, fmt: str, codes, body: np.ndarray, sbytes: np.ndarray | None,
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

        if m * k < kx.PARALLEL_MIN_MACS:  # the serial twin: a parallel region costs more than a small GEMV
            gemv = next(kern[n + "_1"] for n in ("gemv_i8", "gemv_p4", "gemv_f16") if kern[n] is gemv)
        lut32, lut64 = kx.LUT32, kx.LUT64

        def vec(x: np.ndarray, d: np.ndarray) -> None:
            st = gemv(x, w, get_scale(), d, accm, q, lut32, lut64)
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


def _slot1(sim: FastState, slot: int) -> int | None:
    """Host address held in weight slot + 1 (split/activation scales), None where the reference faults."""
    if slot + 1 >= sim.limits.cc_entries:
        return None
    off, hi, lo = (int(v) for v in sim.cc[1, slot + 1])
    return None if off >= WORD_BYTES else ((hi << 16) | lo) * WORD_BYTES + off


def bind_ext(sim: FastState, idx: int, ins: Instr, key: bytes, m: int, n: int, k: int, a: int, hi: int,
             lo: int) -> MatBinding | None:
    """GEMV with the extended weight-layout bits (docs/targets/pccx.md): byte offset, split row scales,
    K-major image with zero-row skipping, activation scales. A K-major GEMM (N > 1, prefill's sparse
    W_down) runs vector by vector with the reference's union of live rows in its Work; other GEMMs
    with layout bits, overlapping GEMM operands and anything the reference would fault on take the
    reference path."""

    ext = a & ~W_FMT_MASK
    if ext & ~W_EXT_BITS or sim.profile != "extended" or (ext & W_SPLIT_SCALES and ext & W_ACT_SCALE):
        return None
    fmt = FORMATS[a & W_FMT_MASK]
    addr = ((hi << 16) | lo) * WORD_BYTES + ((a & W_OFFSET_MASK) >> W_OFFSET_SHIFT)
    kmajor, act = bool(ext & W_KMAJOR), bool(ext & W_ACT_SCALE)
    if (act and not kmajor) or (n > 1 and not kmajor):
        return None
    rows, cols = (k, m) if kmajor else (m, k)
    rb = row_bytes(fmt, cols)
    s0, d0, lim = ins.src_addr, ins.dest_reg, sim.limits.l2_words
    kw, mw = words_of(k), words_of(m)
    if s0 + n * kw > lim or d0 + n * mw > lim:
        return None
    if n > 1 and s0 < d0 + n * mw and d0 < s0 + n * kw:
        return None  # the reference reads every input before writing any output
    w_scale = bool(ins.flags & GemvFlag.W_SCALE)
    accm = bool(ins.flags & GemvFlag.ACCM)
    s1 = _slot1(sim, ins.size_ptr_addr) if ext & (W_SPLIT_SCALES | W_ACT_SCALE) else None
    if ext & (W_SPLIT_SCALES | W_ACT_SCALE) and s1 is None:
        return None
    s_addr = s1 if ext & W_SPLIT_SCALES else addr + rows * rb + (-(rows * rb)) % WORD_BYTES
    sbytes = sim.host.view(s_addr, 4 * m) if w_scale else None
    abytes = sim.host.view(s1, 4 * k) if act else None
    body = sim.host.view(addr, rows * rb)
    if body is None or (w_scale and sbytes is None) or (act and abytes is None):
        return None
    flat = sim.l2.reshape(-1)
    xs = [flat[(s0 + j * kw) * _E: (s0 + j * kw) * _E + k] for j in range(n)]
    ds = [flat[(d0 + j * mw) * _E: (d0 + j * mw) * _E + m] for j in range(n)]
    x, d = xs[0], ds[0]
    findemax = bool(ins.flags & GemvFlag.FINDEMAX)
    base = _mat_work(idx, ins, m, n, k, fmt, w_scale, accm)

    def live_scale() -> np.ndarray:
        return sbytes.view("<f4").astype(np.float32) if sbytes is not None else _NO_SCALE

    def emax() -> None:
        if findemax:
            update_emax(sim, ds)

    if not kmajor:  # row-major with split scales / byte offset: the weights change with the ring
        vec = _vector_kernel(sim, fmt, None, body, sbytes, m, k, rb, accm)
        if vec is None:
            return None

        def run_rows() -> None:
            vec(x, d)
            emax()

        return MatBinding(key, base, run_rows, None)
    static = fmt == "int4" and ext & ~W_OFFSET_MASK == W_KMAJOR  # a weight image, not a KV ring block
    codes = sim.int4_kmajor_codes(addr, m, k) if static else None
    if fmt == "fp16" and (sim.backend != "numba" or n > 1):
        return None  # (N > 1: a non-finite live weight faults before the reference writes anything)
    pre = base.label.split("  ; ")[0]
    tail = f" ksplit={nx.k_splits(k)}"
    head = f"{pre}  ; M={m} N={n} K={k} {fmt}{' w_scale' if w_scale else ''} kmajor"
    q = sim._qbuf
    kern = sim._k

    def weights() -> np.ndarray:  # [K, M] codes (int8 for numba, float32 for NumPy)
        if codes is not None:
            return codes.codes
        if fmt == "int4":
            w = nx.unpack_int4(body.reshape(k, rb), m)
        elif fmt == "int8":
            w = body.view(np.int8).reshape(k, m)
        else:
            return body.view("<u2").reshape(k, m)
        return w if sim.backend == "numba" else w.astype(np.float32)

    def one(x: np.ndarray, d: np.ndarray) -> np.ndarray | None:
        """One vector into ``d``; its live-row mask (None: all rows, a non-finite activation)."""
        xb = x
        if act:
            xb = nx.to_bits(nx.cvo_mul(kx.LUT32[x], abytes.view("<f4").astype(np.float32)))
        w = weights()
        if sim.backend == "numba":
            live = kern["gemv_km_f16" if fmt == "fp16" else "gemv_km"](xb, w, live_scale(), d, accm, q,
                                                                       kx.LUT32, kx.LUT64)
            if live == -2:
                raise FormatError("FP16 weight operand has a non-finite element")
            if live < 0:
                d[:] = 0x7FC0
                return None
            return q[:k] != 0
        qe = kx.np_quantize(xb)
        if qe is None:
            d[:] = 0x7FC0
            return None
        acc = kx.np_int_dot(w.T, qe[0], kx.INT4_CHUNK if fmt == "int4" else kx.INT8_CHUNK)
        kx.np_epilogue(acc, qe[1], live_scale() if w_scale else None, d, accm)
        return qe[0] != 0

    def run_km() -> Work:
        if n == 1:
            mask = one(x, d)
            live = k if mask is None else int(np.count_nonzero(mask))
        else:  # the reference's Work counts the union of the vectors' live rows
            union = np.zeros(k, bool)
            for xj, dj in zip(xs, ds, strict=True):
                mj = one(xj, dj)
                union = np.ones(k, bool) if mj is None else union | mj
            live = int(np.count_nonzero(union))
        emax()
        return dataclasses.replace(
            base, macs=m * n * live,
            weight_bytes=live * rb + (4 * m if w_scale else 0) + (4 * k if act else 0),
            label=f"{head} live_k={live}{' act_scale' if act else ''}{tail}")

    return MatBinding(key, base, run_km, codes)
