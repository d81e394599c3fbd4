"""GEMV/GEMM steps of `npukit.targets.pccx.fast.fastsim`: bind operands once per constant-cache state.

`bind_mat` repeats the reference simulator's checks; whenever one would fault (or the fast path does
not cover the case) it returns None and the step runs the reference `Simulator._exec` instead, which
raises the identical error interrupt. Otherwise it returns a binding whose ``run`` executes the
instruction from pre-resolved views: activation and result slices of L2, the weight operand (cached
INT4 codes, the packed image in place, or an INT8/FP16 host view) and the row scales.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from npukit.errors import FormatError
from npukit.sim.work import Work, make_work, work_from
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.asm import format_instr
from npukit.targets.pccx.fast import kernels as kx
from npukit.targets.pccx.fast.state import Codes, FastState, MatBinding
from npukit.targets.pccx.isa import GemvFlag, Instr, Op
from npukit.targets.pccx.memory import (
    FORMAT_CODES,
    FORMATS,
    W_ACT_SCALE,
    W_EXT_BITS,
    W_FMT_MASK,
    W_GROUP_OFFSETS,
    W_GROUPED,
    W_KMAJOR,
    W_OFFSET_MASK,
    W_OFFSET_SHIFT,
    W_SPLIT_SCALES,
    WORD_BYTES,
    row_bytes,
)

_E = 8
_NO_SCALE = np.zeros(0, np.float32)
_KEY9 = struct.Struct("=9H")  # the binding key: shape entry (m, n, k), weight slot and slot + 1 (a, hi, lo)
_SERIAL = {"gemv_i8": "gemv_i8_1", "gemv_p4": "gemv_p4_1", "gemv_f16": "gemv_f16_1"}
_MEMO = 256  # Work records remembered per instruction (a span-variable GEMV gets a new shape per token)
_ASM: dict[int, tuple[Instr, str]] = {}  # id(instruction) -> (it, its text): no dataclass hash per lookup
_W_SCALE, _ACCM, _FINDEMAX = int(GemvFlag.W_SCALE), int(GemvFlag.ACCM), int(GemvFlag.FINDEMAX)  # (mat_site)
_ENGINE = {op: op.name.lower() for op in Op}


def asm_text(ins: Instr) -> str:
    """format_instr, memoised: a step rebinds when its descriptors change, its instruction does not.
    Keyed by the instruction object (its id, the entry keeping it alive), as decoded instructions are
    shared by every index their word is at: a frozen dataclass's hash is ~0.7 µs, an id lookup ~0.2."""
    hit = _ASM.get(id(ins))
    if hit is None or hit[0] is not ins:
        if len(_ASM) > 1 << 16:
            _ASM.clear()
        hit = _ASM[id(ins)] = (ins, format_instr(ins))
    return hit[1]


@dataclass(eq=False)
class MatSite:
    """What binding one GEMV/GEMM needs from its instruction alone (decoded once per plan step), and the
    Work records it made, by shape: a binding is rebuilt whenever the span descriptors change (every
    token for attention), and an unchanged shape hands back the very same Work object."""

    idx: int
    ins: Instr
    asm: str
    w_scale: bool
    accm: bool
    findemax: bool
    engine: str = ""
    is_async: bool = False
    works: dict = field(default_factory=dict)
    fp16_maker: tuple | None = None  # (row kind, its `_fp16_works` maker): made once per site, not per row

    @property
    def asm_head(self) -> str:  # the text a K-major label starts with (the reference splits its label)
        return self.asm.split("  ; ")[0]


def mat_site(idx: int, ins: Instr) -> MatSite:
    f = int(ins.flags)  # (an IntFlag `&` builds a flag member, ~2 µs: three per GEMV a build binds)
    return MatSite(idx, ins, asm_text(ins), bool(f & _W_SCALE), bool(f & _ACCM), bool(f & _FINDEMAX),
                   _ENGINE[ins.op], bool(ins.async_))


def _remember(site: MatSite, key: tuple, work: Work) -> Work:
    if len(site.works) >= _MEMO:
        site.works.clear()
    site.works[key] = work
    return work


def _mat_work(site: MatSite, m: int, n: int, k: int, fmt: str) -> Work:
    """The reference simulator's Work record for this GEMV/GEMM (same fields, same label)."""
    w = site.works.get((m, n, k, fmt))
    if w is not None:
        return w
    rb, w_scale = row_bytes(fmt, k), site.w_scale
    label = (f"{site.asm}  ; M={m} N={n} K={k} {fmt}"
             f"{' w_scale' if w_scale else ''} ksplit={nx.k_splits(k)}")
    w = _new_work(site, m, n, k, label, m * n * k, m * rb + (4 * m if w_scale else 0))
    return _remember(site, (m, n, k, fmt), w)


def _new_work(site: MatSite, m: int, n: int, k: int, label: str, macs: int, weight_bytes: int) -> Work:
    ins, accm = site.ins, site.accm
    kw, mw = -(-k // _E), -(-m // _E)
    src = (ins.src_addr, ins.src_addr + n * kw)
    dst = (ins.dest_reg, ins.dest_reg + n * mw)
    rd = (n * kw + (n * mw if accm else 0)) * WORD_BYTES
    reads = (src, dst) if accm else (src,)
    return make_work(site.idx, site.engine, label, macs=macs, weight_bytes=weight_bytes, onchip_read_bytes=rd,
                     onchip_write_bytes=n * mw * WORD_BYTES, is_async=site.is_async, reads=reads,
                     writes=(dst,), lanes=ins.parallel_lane)


def fused_row(sim: FastState, site: MatSite, key: bytes) -> tuple | bool:
    """The `_nbblock` row of an FP16 GEMV (kinds 7, 9: the attention's products, whose shape and
    address change every token) for the binding key ``key`` (the descriptors as the run will have set
    them): (row, None, host region words, Work maker); False where the compiled loop does not cover
    it (the other formats and layouts, row scales, N > 1). The row reads the descriptors when it runs;
    the key only says which kind of product it is and which host region holds the image."""
    ins = site.ins
    m, n, k, a, hi, lo = key_fields(key)[:6]
    if sim.backend != "numba" or site.w_scale or n > 1 or m == 0 or k == 0:
        return False
    if a == FORMAT_CODES["fp16"]:
        kind = 7
    elif a == FORMAT_CODES["fp16"] | W_KMAJOR and sim.profile == "extended":
        kind = 9
    else:
        return False
    addr = ((hi << 16) | lo) * WORD_BYTES
    hit = sim.host.region_words(addr, 2 * m * k)
    if hit is None:
        return False
    row = (kind, ins.shape_ptr_addr, ins.size_ptr_addr, ins.src_addr, ins.dest_reg,
           int(site.accm) | int(site.findemax) << 1, 0, addr - 2 * hit[1], sim.limits.l2_words)
    maker = site.fp16_maker  # (the same maker for every row of the site: its Works come from `site.works`)
    if maker is None or maker[0] != kind:
        maker = site.fp16_maker = (kind, _fp16_works(site, kind == 9))
    return row, None, hit[0], maker[1]


def _fp16_works(site: MatSite, kmajor: bool) -> Callable[[list[int]], Work]:
    """The Work maker of an FP16 GEMV row (`fused_row`) from the (m, k, live rows) it ran with: what
    `_mat_work` / `_kmajor_work` give (the same memo, key, label and fields; tested), in one call with
    the site's constants bound (a span-grown product: a new Work each token, ~100 a step; its fields
    but label, MACs and bytes change every 8 tokens (words): kept as one dict, copied into each Work)."""
    works, ins, accm = site.works, site.ins, site.accm
    s0, d0, lanes = ins.src_addr, ins.dest_reg, ins.parallel_lane
    idx, engine, is_async = site.idx, site.engine, site.is_async
    head = f"{site.asm_head if kmajor else site.asm}  ; M="
    tail = " fp16 kmajor live_k=" if kmajor else " fp16 ksplit="
    bound = nx.DSP_ACC_BOUND
    shaped: list = [None, None]  # the last (K words, M words) and the Work fields they give

    def fields(kw: int, mw: int) -> dict:
        src, dst, rd = (s0, s0 + kw), (d0, d0 + mw), (kw + mw if accm else kw) * WORD_BYTES
        shaped[:] = (kw, mw), dict(index=idx, engine=engine, label="", macs=0, sfu_elems=0, weight_bytes=0,
                                   ddr_read_bytes=0, ddr_write_bytes=0, onchip_read_bytes=rd,
                                   onchip_write_bytes=mw * WORD_BYTES, is_async=is_async,
                                   reads=(src, dst) if accm else (src,), writes=(dst,), lanes=lanes)
        return shaped[1]

    def work(info: list[int]) -> Work:
        m, k, live = info
        key = ("kmajor", m, 1, k, "fp16", live, False) if kmajor else (m, 1, k, "fp16")
        w = works.get(key)
        if w is not None:
            return w
        splits = -(-k // bound) or 1  # (max(1, ...): K >= 0)
        if kmajor:
            label, macs, wb = f"{head}{m} N=1 K={k}{tail}{live} ksplit={splits}", m * live, live * 2 * m
        else:
            label, macs, wb = f"{head}{m} N=1 K={k}{tail}{splits}", m * k, m * 2 * k
        words = (-(-k // _E), -(-m // _E))
        made = shaped[1] if shaped[0] == words else fields(*words)
        return _remember(site, key, work_from(made, label=label, macs=macs, weight_bytes=wb))

    return work


def prebind_mat(sim: FastState, site: MatSite, cell: list, cc: np.ndarray, shp: int, siz: int) -> Work | None:
    """Bind a GEMV/GEMM step (its binding ``cell``; shape entry ``shp``, size entries ``siz``, ``siz+1``)
    now for the constant caches ``cc`` (a program built ahead: `fast.ahead`); the step still compares
    the real entries when it runs and rebinds if they differ. The binding's fixed Work, if any."""
    key = cc[0, shp].tobytes() + cc[1, siz: siz + 2].tobytes()
    if cell[0] is None or cell[0].key != key:
        cell[0] = bind_mat(sim, site, key)
    return None if cell[0] is None else cell[0].work


def key_fields(key: bytes) -> tuple[int, ...]:
    """(m, n, k, a, hi, lo[, a1, hi1, lo1]) from a binding key (the raw constant-cache entries)."""
    if len(key) == 18:
        return _KEY9.unpack(key)
    return struct.unpack(f"={len(key) // 2}H", key)


def bind_mat(sim: FastState, site: MatSite, key: bytes) -> MatBinding | None:
    """The binding for the constant-cache entries ``key`` (`key_fields`), or None: the reference runs it."""
    f = key_fields(key)
    m, n, k, a, hi, lo = f[:6]
    n = max(n, 1)
    code, ext = a & W_FMT_MASK, a & ~W_FMT_MASK
    if m == 0 or k == 0 or code not in FORMATS:
        return None  # faults: the reference path raises the error interrupt
    if ext:
        return bind_ext(sim, site, key, m, n, k, a, hi, lo, f[6:])
    ins = site.ins
    fmt = FORMATS[code]
    addr = ((hi << 16) | lo) * WORD_BYTES
    rb = row_bytes(fmt, k)
    kw, mw = -(-k // _E), -(-m // _E)
    s0, d0 = ins.src_addr, ins.dest_reg
    lim = sim.limits.l2_words
    if s0 + n * kw > lim or d0 + n * mw > lim:
        return None
    if n > 1 and (fmt == "fp16" or (s0 < d0 + n * mw and d0 < s0 + n * kw)):
        return None  # the reference reads every input (and may fault) before writing any output
    w_scale, accm, findemax = site.w_scale, site.accm, site.findemax
    s_addr = addr + m * rb + (-(m * rb)) % WORD_BYTES
    sbytes = sim.host.view(s_addr, 4 * m) if w_scale else None
    body = sim.host.view(addr, m * rb)
    if body is None or (w_scale and sbytes is None):
        return None
    flat = sim.flat
    codes = sim.int4_codes(addr, m, k, w_scale) if fmt == "int4" and _unpacked(sim, m, n, k) else None
    work = _mat_work(site, m, n, k, fmt)
    if n > 1 and fmt == "int4" and codes is None and sim.backend == "numba":
        ds = [flat[(d0 + j * mw) * _E: (d0 + j * mw) * _E + m] for j in range(n)]
        gemm = _gemm_kernel(sim, flat, s0, d0, kw, mw, n, k, body.reshape(m, rb), sbytes, accm)

        def run_gemm() -> None:
            gemm()
            if findemax:
                update_emax(sim, ds)

        return MatBinding(key, work, run_gemm, None)
    vec = _vector_kernel(sim, fmt, codes, body, sbytes, m, k, rb, accm)
    if vec is None:
        return None
    if n == 1:  # a GEMV: one vector, no loop
        x, d = flat[s0 * _E: s0 * _E + k], flat[d0 * _E: d0 * _E + m]
        ds = [d]

        def run1() -> None:
            vec(x, d)
            if findemax:
                update_emax(sim, ds)

        return MatBinding(key, work, run1, codes)
    xs = [flat[(s0 + j * kw) * _E: (s0 + j * kw) * _E + k] for j in range(n)]
    ds = [flat[(d0 + j * mw) * _E: (d0 + j * mw) * _E + m] for j in range(n)]

    def run() -> None:
        for x, d in zip(xs, ds, strict=True):
            vec(x, d)
        if findemax:
            update_emax(sim, ds)

    return MatBinding(key, work, run, codes)


def _unpacked(sim: FastState, m: int, n: int, k: int) -> bool:
    """Whether an INT4 GEMV/GEMM reads cached int8 codes rather than the packed image in place.
    ``weights="auto"``: small matrices (< PARALLEL_MIN_MACS weights, they stay in cache) only, except
    on VNNI or AVX2 from K = 128 on (two 64-byte runs per row beat int8 codes). A large matrix is read packed
    on every CPU: the portable packed loop (offset-binary nibbles, the next rows prefetched) streamed
    a 2 MB matrix in 0.31-0.47 ms against 0.56-1.6 ms for its int8 codes on this host's Haswell,
    Skylake-SP and x86-64-v2 builds (docs/targets/pccx-user-path-log.md), and holds no second copy."""
    if sim.backend == "numpy" or sim.weights == "int8":
        return True
    if sim.weights != "auto":
        return False
    return m * k < kx.PARALLEL_MIN_MACS and not (sim.simd_rows and k >= 128)


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
            w, name = codes.codes, "gemv_i8"
            scale = codes.scale if codes.scale.size else _NO_SCALE

            def get_scale() -> np.ndarray:
                return scale
        elif fmt == "int4":
            w, name, get_scale = body.reshape(m, rb), "gemv_p4", live_scale
        elif fmt == "int8":
            w, name, get_scale = body.view(np.int8).reshape(m, k), "gemv_i8", live_scale
        else:
            w, name, get_scale = body.view("<u2").reshape(m, k), "gemv_f16", live_scale
        gemv = kern[_SERIAL[name]]  # the serial twin: a parallel region costs more than a small GEMV
        if m * k >= kx.PARALLEL_MIN_MACS:  # large: the twin that runs faster here now (`twins`)
            gemv = sim.twins.wrap(kern[name], gemv, w.nbytes)
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


def _slot1(sim: FastState, entry: tuple[int, ...]) -> int | None:
    """Host address held in weight slot + 1 (``entry``: its (a, b, c), empty past the last slot; split or
    activation scales), None where the reference faults."""
    if not entry:
        return None
    off, hi, lo = entry
    return None if off >= WORD_BYTES else ((hi << 16) | lo) * WORD_BYTES + off


def bind_ext(sim: FastState, site: MatSite, key: bytes, m: int, n: int, k: int, a: int, hi: int, lo: int,
             entry1: tuple[int, ...]) -> MatBinding | None:
    """GEMV with the extended weight-layout bits (docs/targets/pccx.md): byte offset, split row scales,
    K-major image with zero-row skipping, activation scales. A K-major GEMM (N > 1, prefill's sparse
    W_down) runs vector by vector with the reference's union of live rows in its Work; other GEMMs
    with layout bits, overlapping GEMM operands and anything the reference would fault on take the
    reference path."""

    ext = a & ~W_FMT_MASK
    if ext & ~W_EXT_BITS or sim.profile != "extended" or (ext & W_SPLIT_SCALES and ext & W_ACT_SCALE):
        return None
    if ext & (W_GROUPED | W_GROUP_OFFSETS):  # scales per (row, group of 32): its own module
        from npukit.targets.pccx.fast.fastgroup import bind_grouped

        return bind_grouped(sim, site, key, m, n, k, a, hi, lo)
    fmt = FORMATS[a & W_FMT_MASK]
    addr = ((hi << 16) | lo) * WORD_BYTES + ((a & W_OFFSET_MASK) >> W_OFFSET_SHIFT)
    kmajor, act = bool(ext & W_KMAJOR), bool(ext & W_ACT_SCALE)
    if (act and not kmajor) or (n > 1 and not kmajor):
        return None
    rows, cols = (k, m) if kmajor else (m, k)
    rb = row_bytes(fmt, cols)
    ins = site.ins
    s0, d0, lim = ins.src_addr, ins.dest_reg, sim.limits.l2_words
    kw, mw = -(-k // _E), -(-m // _E)
    if s0 + n * kw > lim or d0 + n * mw > lim:
        return None
    if n > 1 and s0 < d0 + n * mw and d0 < s0 + n * kw:
        return None  # the reference reads every input before writing any output
    w_scale, accm = site.w_scale, site.accm
    s1 = _slot1(sim, entry1) if ext & (W_SPLIT_SCALES | W_ACT_SCALE) else None
    if ext & (W_SPLIT_SCALES | W_ACT_SCALE) and s1 is None:
        return None
    s_addr = s1 if ext & W_SPLIT_SCALES else addr + rows * rb + (-(rows * rb)) % WORD_BYTES
    sbytes = sim.host.view(s_addr, 4 * m) if w_scale else None
    abytes = sim.host.view(s1, 4 * k) if act else None
    body = sim.host.view(addr, rows * rb)
    if body is None or (w_scale and sbytes is None) or (act and abytes is None):
        return None
    flat = sim.flat
    xs = [flat[(s0 + j * kw) * _E: (s0 + j * kw) * _E + k] for j in range(n)]
    ds = [flat[(d0 + j * mw) * _E: (d0 + j * mw) * _E + m] for j in range(n)]
    findemax = site.findemax
    if not kmajor:  # row-major with split scales / byte offset: the weights change with the ring
        vec = _vector_kernel(sim, fmt, None, body, sbytes, m, k, rb, accm)
        if vec is None:
            return None
        x, d = xs[0], ds[0]

        def run_rows() -> None:
            vec(x, d)
            if findemax:
                update_emax(sim, ds)

        return MatBinding(key, _mat_work(site, m, n, k, fmt), run_rows, None)
    static = fmt == "int4" and ext & ~W_OFFSET_MASK == W_KMAJOR  # a weight image, not a KV ring block
    # (numba reads the packed image in place, `_nbkm`: no int8 copy of it is made)
    codes = sim.int4_kmajor_codes(addr, m, k) if static and sim.backend != "numba" else None
    if fmt == "fp16" and (sim.backend != "numba" or n > 1):
        return None  # (N > 1: a non-finite live weight faults before the reference writes anything)
    one = _kmajor_vector(sim, fmt, codes, body, sbytes, abytes, m, k, rb, accm)

    def run_km() -> Work:
        if n == 1:
            live = one(xs[0], ds[0])
        else:  # the reference's Work counts the union of the vectors' live rows
            union = np.zeros(k, bool)
            for xj, dj in zip(xs, ds, strict=True):
                one(xj, dj, union)
            live = int(np.count_nonzero(union))
        if findemax:
            update_emax(sim, ds)
        return _kmajor_work(site, m, n, k, fmt, live, act)

    return MatBinding(key, None, run_km, codes)


def packed_views(sim: FastState, site: MatSite, m: int, k: int, word: int, rows: int,
                 rb: int) -> tuple[int, np.ndarray, np.ndarray | None, int, int] | None:
    """A compiled INT4 row's operands, or None (the single step runs): the activation (K) and output
    (M) inside L2, and host views of the packed image at word address ``word`` (``rows`` rows of
    ``rb`` bytes) and of its M float32 scales after it where the site has them. (byte address,
    image, scales, the image's and the scales' data addresses (0: none))."""
    s0, d0, lim = site.ins.src_addr, site.ins.dest_reg, sim.limits.l2_words
    if s0 + -(-k // _E) > lim or d0 + -(-m // _E) > lim:
        return None
    addr = word * WORD_BYTES
    body = sim.host.view_at(addr, rows * rb)
    sb = sim.host.view_at(addr + rows * rb + (-(rows * rb)) % WORD_BYTES, 4 * m) if site.w_scale else None
    if body is None or (site.w_scale and sb is None):
        return None
    return (addr, body[0], None, body[1], 0) if sb is None else (addr, body[0], sb[0], body[1], sb[1])


def kmajor_row(sim: FastState, site: MatSite, f: tuple[int, ...]) -> tuple | bool:
    """The `_nbblock` row (kind 14) of a plain K-major INT4 GEMV for the key fields ``f`` (a decode
    token's sparse W_down: layout bits W_KMAJOR alone, N = 1), read in place from the packed image
    (`_nbkm.gemv_km_p4`), its Work made from the live row count the row reports; False for anything
    else (a yield: the single step runs it). Columns as kind 10's, column 10 the bytes per K row."""
    m, n, k, a, hi, lo = f[:6]
    if sim.profile != "extended" or a != FORMAT_CODES["int4"] | W_KMAJOR or n != 1 or m == 0 or k == 0:
        return False
    rb = row_bytes("int4", m)
    got = packed_views(sim, site, m, k, (hi << 16) | lo, k, rb)
    if got is None:
        return False
    _, body, sb, body_at, sb_at = got
    ins = site.ins
    row = (14, ins.shape_ptr_addr, ins.size_ptr_addr, ins.src_addr, ins.dest_reg,
           int(site.accm) | int(site.findemax) << 1, body_at, m, k, sb_at, rb, *f)
    return row, None, None, lambda info: _kmajor_work(site, m, 1, k, "int4", info[2], False), (body, sb)


def _kmajor_work(site: MatSite, m: int, n: int, k: int, fmt: str, live: int, act: bool) -> Work:
    """The reference's Work of a K-major GEMV/GEMM with ``live`` activation rows (label, MACs, bytes)."""
    key = ("kmajor", m, n, k, fmt, live, act)
    w = site.works.get(key)
    if w is not None:
        return w
    rb, w_scale = row_bytes(fmt, m), site.w_scale
    head = f"{site.asm_head}  ; M={m} N={n} K={k} {fmt}{' w_scale' if w_scale else ''} kmajor"
    w = _new_work(site, m, n, k, f"{head} live_k={live}{' act_scale' if act else ''} ksplit={nx.k_splits(k)}",
                  m * n * live, live * rb + (4 * m if w_scale else 0) + (4 * k if act else 0))
    return _remember(site, key, w)


def _kmajor_vector(sim: FastState, fmt: str, codes: Codes | None, body: np.ndarray, sbytes: np.ndarray | None,
                   abytes: np.ndarray | None, m: int, k: int, rb: int,
                   accm: bool) -> Callable[..., int]:
    """One vector through a K-major image into ``d``: its live row count (k: a non-finite activation,
    every row counted); ``union`` (a bool [K], GEMM) gets the vector's live rows or-ed in."""
    q, kern, numba = sim._qbuf, sim._k, sim.backend == "numba"

    def live_scale() -> np.ndarray:
        return sbytes.view("<f4").astype(np.float32) if sbytes is not None else _NO_SCALE

    fixed = None  # the weights as a view of the live image (FP16, INT8 on numba) or cached codes
    if codes is not None:
        fixed = codes.codes
    elif fmt == "fp16":
        fixed = body.view("<u2").reshape(k, m)
    elif fmt == "int8" and numba:
        fixed = body.view(np.int8).reshape(k, m)

    def weights() -> np.ndarray:  # [K, M] codes (int8 for numba, float32 for NumPy)
        if fixed is not None:
            return fixed
        if fmt == "int4":
            w = nx.unpack_int4(body.reshape(k, rb), m)
        else:
            w = body.view(np.int8).reshape(k, m)
        return w if numba else w.astype(np.float32)

    gemv = kern.get("gemv_km_f16" if fmt == "fp16" else "gemv_km")
    if fmt == "int4" and numba:  # the live rows, prefetched, from the packed bytes (half the codes' bytes:
        # a decode token's sparse W_down took 2x as long on the cached int8 codes, measured)
        fixed, gemv = body.reshape(k, rb), kern["gemv_km_p4"]
    lut32, lut64 = kx.LUT32, kx.LUT64

    def one(x: np.ndarray, d: np.ndarray, union: np.ndarray | None = None) -> int:
        xb = x
        if abytes is not None:
            xb = nx.to_bits(nx.cvo_mul(lut32[x], abytes.view("<f4").astype(np.float32)))
        w = weights()
        if numba:
            live = gemv(xb, w, live_scale(), d, accm, q, lut32, lut64)
            if live == -2:
                raise FormatError("FP16 weight operand has a non-finite element")
            if live < 0:
                d[:] = 0x7FC0
                if union is not None:
                    union[:] = True
                return k
            if union is not None:
                union |= q[:k] != 0
            return live
        qe = kx.np_quantize(xb)
        if qe is None:
            d[:] = 0x7FC0
            if union is not None:
                union[:] = True
            return k
        acc = kx.np_int_dot(w.T, qe[0], kx.INT4_CHUNK if fmt == "int4" else kx.INT8_CHUNK)
        kx.np_epilogue(acc, qe[1], live_scale() if sbytes is not None else None, d, accm)
        live = qe[0] != 0
        if union is not None:
            union |= live
        return int(np.count_nonzero(live))

    return one
