"""CVO steps of `npukit.targets.pccx.fast.fastsim`: L2 views and the Work record bound at load time.

A CVO's operands and Work depend only on the instruction (decode already checked its ranges), so the
step is fixed when the program is loaded; per call it reads S or e_max if the function uses them and
runs one fused kernel. Transcendental functions run the float64 kernel their `cvo.CVO` row names (the
one `numerics.py` rounds too); only the widening and the BF16 rounding are replaced.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field, fields

import numpy as np

from npukit.sim.work import Work
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.asm import format_instr
from npukit.targets.pccx.cvo import CVO, CvoForm, CvoSpec
from npukit.targets.pccx.fast import kernels as kx
from npukit.targets.pccx.fast.fastmat import MatSite, _mat_work, _unpacked, key_fields, update_emax
from npukit.targets.pccx.fast.state import Codes, FastState
from npukit.targets.pccx.isa import CvoFlag, Instr, cvo_out_elems, words_of
from npukit.targets.pccx.memory import FORMAT_CODES, WORD_BYTES, row_bytes

_E = 8
# the fused kernel's code of each arithmetic numerics function (keyed by the function, so a table row
# that changes its meaning no longer takes the fused kernel)
_ARITH = {nx.cvo_square: kx.SQUARE, nx.cvo_recip: kx.RECIP, nx.cvo_rsqrt: kx.RSQRT, nx.cvo_sqrt: kx.SQRT,
          nx.cvo_mul: kx.MUL, nx.cvo_add: kx.ADD}
_ZEROS7 = np.zeros(_E - 1, np.uint16)
_NO_HOST = np.zeros(0, np.uint16)  # an unused host-region argument of `cvo_block`


_KEYS = ("index", "engine", "label", "macs", "sfu_elems", "weight_bytes", "ddr_read_bytes", "ddr_write_bytes",
         "onchip_read_bytes", "onchip_write_bytes", "is_async", "reads", "writes", "lanes")
# Work is a plain dataclass of exactly these fields: a record can be filled without its __init__
_PLAIN_WORK = (tuple(f.name for f in fields(Work)) == _KEYS and "__slots__" not in vars(Work)
               and not hasattr(Work, "__post_init__"))
_WORK_FIELDS: dict[int, tuple[Instr, dict]] = {}  # id(decoded CVO) -> (it, its Work's fields but the index)
_MAX_WORK_FIELDS = 1 << 18
# the CVO flags as ints: an IntFlag `&` builds a flag member (~2 µs; four per CVO a chunk program plans)
_ACCM, _SUB_EMAX, _RECIP = int(CvoFlag.ACCM), int(CvoFlag.SUB_EMAX), int(CvoFlag.RECIP_SCALE)


def _cvo_work(idx: int, ins: Instr) -> Work:
    """The CVO's Work record at program index ``idx``. A decoded instruction is shared by every index
    its word appears at (`FastSimulator._decoded`; a prefill chunk repeats most words per token), so
    its fields (label, ranges, bytes) are made once per instruction object and reused."""
    hit = _WORK_FIELDS.get(id(ins))
    if hit is None or hit[0] is not ins:
        if len(_WORK_FIELDS) >= _MAX_WORK_FIELDS:
            _WORK_FIELDS.clear()
        hit = _WORK_FIELDS[id(ins)] = (ins, _cvo_fields(ins))  # (the entry keeps ``ins``, so its id)
    if not _PLAIN_WORK:
        return Work(**{**hit[1], "index": idx})
    w = object.__new__(Work)
    fields = w.__dict__
    fields.update(hit[1])
    fields["index"] = idx  # (first in the fields as in the dataclass: ``index`` leads the template)
    return w


def _cvo_fields(ins: Instr) -> dict:
    fn, n = ins.cvo_func, ins.length
    accm = bool(int(ins.flags) & _ACCM)
    out_n = cvo_out_elems(fn, n)
    src = (ins.src_addr, ins.src_addr + words_of(n))
    dst = (ins.dst_addr, ins.dst_addr + words_of(out_n))
    two = out_n and (accm or CVO[fn].arity == 2)
    reads = (src, dst) if two else (src,)
    writes = (dst,) if CVO[fn].form is not CvoForm.LOAD_SCALAR else ()
    rd = (src[1] - src[0]) + ((dst[1] - dst[0]) if two else 0)
    return dict(index=0, engine="sfu", label=format_instr(ins), macs=0, sfu_elems=n, weight_bytes=0,
                ddr_read_bytes=0, ddr_write_bytes=0, onchip_read_bytes=rd * 16,
                onchip_write_bytes=(dst[1] - dst[0]) * 16 if writes else 0, is_async=bool(ins.async_),
                reads=reads, writes=writes, lanes=0)


@dataclass
class _Operands:
    """One CVO's bound operands: L2 views and the backend's kernels, fixed at load time."""

    sim: FastState
    work: Work
    flat: np.ndarray
    n: int
    s0: int
    d0: int
    out_n: int
    x: np.ndarray
    d: np.ndarray
    accm: bool
    shifted: bool  # the input overlaps the output at another offset: read it whole before writing
    numba: bool
    lut: tuple
    lut32: tuple

    @classmethod
    def of(cls, sim: FastState, idx: int, ins: Instr) -> _Operands:
        n, flat = ins.length, sim.l2.reshape(-1)
        s0, d0 = ins.src_addr * _E, ins.dst_addr * _E
        out_n = cvo_out_elems(ins.cvo_func, n)
        numba = sim.backend == "numba"
        return cls(sim, _cvo_work(idx, ins), flat, n, s0, d0, out_n, flat[s0: s0 + n],
                   flat[d0: d0 + max(out_n, 1)], bool(int(ins.flags) & _ACCM),
                   out_n > 0 and s0 != d0 and s0 < d0 + out_n and d0 < s0 + n, numba,
                   (kx.LUT64,) if numba else (), (kx.LUT32,) if numba else ())


def compile_cvo(sim: FastState, idx: int, ins: Instr) -> Callable[[], Work] | None:
    """The step for one CVO (by its table row), or None where the reference path should run it."""
    spec = CVO[ins.cvo_func]
    ops = _Operands.of(sim, idx, ins)
    if spec.numerics in _ARITH or spec.form in (CvoForm.SCALE, CvoForm.BIAS):
        body = _arith(ops, spec, ins)
    elif spec.core is not None:
        body = _transcendental(ops, spec.core, bool(int(ins.flags) & _SUB_EMAX))
    else:
        build = _BY_FORM.get(spec.form)
        if build is None:
            return None  # a form added later runs on the reference path
        body = build(ops)
    body.work = ops.work  # the step's one Work record (`ahead.prepare` hands it to the timing model early)
    return body


def _arith(ops: _Operands, spec: CvoSpec, ins: Instr) -> Callable[[], Work]:
    sim, work, x, d, accm, lut, shifted = ops.sim, ops.work, ops.x, ops.d, ops.accm, ops.lut, ops.shifted
    fixed = _ARITH.get(spec.numerics)
    bias = spec.form is CvoForm.BIAS
    recip = bool(int(ins.flags) & _RECIP)
    cvo = sim._k["cvo"] if ops.numba else kx.np_cvo

    def arith() -> Work:
        s = 0.0
        op = fixed
        if op is None:
            s = float(kx.LUT64[int(sim.s_reg)])
            if bias:
                op = kx.RELU
            elif recip:
                op = kx.ZERO if s == 0.0 else kx.DIVS
            else:
                op = kx.SCALE
        cvo(op, x.copy() if shifted else x, d, d, s, accm, *lut)
        return work

    if ops.numba and ops.out_n == ops.n:
        sop = -3 if bias else (-2 if recip else -1)
        arith.fuse = ((0, sop if fixed is None else fixed, ops.s0, ops.n, ops.d0, int(accm), 0), work)
    return arith


def _transcendental(ops: _Operands, core: Callable[[np.ndarray], np.ndarray], sub: bool
                    ) -> Callable[[], Work]:
    """The numerics module's own float64 kernel (the table row's ``core``), then one rounding."""
    sim, work, x, d, accm, lut = ops.sim, ops.work, ops.x, ops.d, ops.accm, ops.lut
    store = sim._k["round_store"] if ops.numba else kx.np_round_store

    def trans() -> Work:  # runs under the executor's np.errstate (fastsim._QUIET)
        a = kx.LUT64[x]  # a fresh array: the subtraction may be in place
        if sub:
            a -= kx.LUT64[int(sim.e_max)]
        store(core(a), d, d, accm, *lut)
        return work

    if ops.numba and core is nx.exp_core and not accm and ops.out_n == ops.n:
        trans.fuse = ((8, int(sub), ops.s0, ops.n, ops.d0, 0, 0), work)  # `_nbblock._exp_row`
    elif ops.numba and not sub and ops.out_n == ops.n and (row := tabled(core)) >= 0:
        trans.fuse = ((12, row, ops.s0, ops.n, ops.d0, int(accm), 0), work)  # core(x) from `TLUT`
    return trans


# Unary cores a fused run reads from a table (`_nbblock` kind 12): a BF16 input has 2^16 values, so
# core(x) for each, computed once by the core itself (NumPy, float64, as the single step calls it on
# its slice; the loops are elementwise), is what every single step would compute; the rounding (and
# accm's add) is then the single step's own `round_store`.
_TABLED = (nx.gelu_core, nx.tanh_core, nx.sin_core, nx.cos_core)
TLUT = np.zeros((len(_TABLED), 1 << 16), np.float64)
_TLUT_MADE = [False] * len(_TABLED)


def tabled(core: Callable[[np.ndarray], np.ndarray]) -> int:
    """`TLUT`'s row holding ``core`` of every BF16 value (made on first use), or -1: not tabled."""
    for i, c in enumerate(_TABLED):
        if c is core:
            if not _TLUT_MADE[i]:
                with np.errstate(all="ignore"):
                    TLUT[i] = core(kx.LUT64.copy())
                _TLUT_MADE[i] = True
            return i
    return -1


def _reduce_sum(ops: _Operands) -> Callable[[], Work]:
    sim, work, x, accm, lut32 = ops.sim, ops.work, ops.x, ops.accm, ops.lut32
    rsum = sim._k["reduce_sum"] if ops.numba else kx.np_reduce_sum
    word = ops.flat[ops.d0: ops.d0 + _E]
    rbits = sim._k["reduce_sum_bits"] if ops.numba else None

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

    if ops.numba:
        red_sum.fuse = ((1, 0, ops.s0, ops.n, ops.d0, int(accm), 0), work)
    return red_sum


def _reduce_max(ops: _Operands) -> Callable[[], Work]:
    sim, work, x = ops.sim, ops.work, ops.x
    word = ops.flat[ops.d0: ops.d0 + _E]

    def red_max() -> Work:
        mx = nx.reduce_max(kx.LUT32[x])
        b = nx.to_bits(mx)[()]
        sim.e_max = b
        word[0] = b
        word[1:] = _ZEROS7
        return work

    return red_max


def _load_scalar(ops: _Operands) -> Callable[[], Work]:  # S <- element len - 1 of the source
    sim, work, x, n = ops.sim, ops.work, ops.x, ops.n

    def load_scalar() -> Work:
        sim.s_reg = np.uint16(x[n - 1])
        return work

    if ops.numba:
        load_scalar.fuse = ((2, 0, ops.s0, n, 0, 0, 0), work)
    return load_scalar


_BY_FORM = {CvoForm.REDUCE_SUM: _reduce_sum, CvoForm.REDUCE_MAX: _reduce_max,
            CvoForm.LOAD_SCALAR: _load_scalar}


def fuse_groups(sim: FastState, plan: list[Callable[[], Work]], old: list | None = None,
                changed: frozenset[int] = frozenset()) -> list[tuple[int, Callable] | None]:
    """Runs of >= 2 consecutive steps marked ``fuse`` (arithmetic CVO, EXP, REDUCE_SUM, LOAD_SCALAR,
    MEMSET, MEMCPY, FP16 GEMV, on the numba backend) as one compiled call each (`_nbblock.block`):
    ``out[i] = (end, run)`` for a run starting at i, and also after each step that may end a run (a
    GEMV whose binding the compiled loop does not cover: `fastmat.fused_row` says False), so that the
    rest of the run is one call too. The table rows replay exactly what the single steps do, in order;
    a row that cannot (a fault, an operand outside its bound region, a copy whose shape entry changed,
    an ambiguous exp) stops the call before it, and the caller runs the remaining steps one by one.
    ``run()`` returns the Work records of the steps it executed, in order (possibly none).
    ``old``: the groups of the program this one patches, ``changed`` its patched step indices; a run
    with the same bounds keeps its table, with the patched rows replaced (`_FusedRun.patched`)."""
    n = len(plan)
    out: list[tuple[int, Callable] | None] = [None] * n
    marks = sorted(changed)  # (a chunk program changes tens of thousands of steps: find a run's by bisection)
    i = 0
    while i < n:
        j = i
        while j < n and getattr(plan[j], "fuse", None) is not None:
            j += 1
        starts = [i] + [p + 1 for p in range(i, j) if getattr(plan[p], "fuse_may_end", False)]
        snap: tuple[int, list] | None = None  # the runs ending at j share one copy of their steps
        for s0 in starts:
            if j - s0 < 2:
                continue
            if snap is None:
                snap = (s0, plan[s0:j])
            prev = old[s0] if old is not None else None
            if prev is not None and prev[0] == j and isinstance(prev[1], _FusedRun | _Repatch):
                lo = bisect_left(marks, s0)
                hi = bisect_left(marks, j, lo)
                out[s0] = (j, _Repatch.of(prev[1], snap[1], s0 - snap[0], (marks, lo, hi), s0)
                           if lo < hi else prev[1])
            else:
                out[s0] = (j, _Repatch(None, snap[1], s0 - snap[0], [], s0, sim))
        i = max(j, i + 1)
    return out


def repatch_groups(plan: list[Callable[[], Work]], groups: list, changed: list[int]) -> list:
    """`fuse_groups` for a program whose ``changed`` steps were recompiled without changing what can
    fuse (the runs keep their bounds): each run holding a changed step becomes its `patched` copy,
    made when it is first called (`_Repatch`). A prefill chunk program patches thousands of span
    words, and its runs overlap (one starts after each GEMV of a longer run, all ending together),
    while only the runs the loop reaches are ever called: patching every one of them at load time
    cost ~50 ms a prompt token. The runs sharing an end share one copy of their steps."""
    out = list(groups)
    marks = sorted(changed)
    snaps: dict[int, tuple[int, list]] = {}  # run end -> (first start, plan[start:end] now)
    for s0, g in enumerate(groups):
        if g is None or not isinstance(g[1], _FusedRun | _Repatch):
            continue
        end = g[0]
        lo = bisect_left(marks, s0)
        hi = bisect_left(marks, end, lo)
        if lo < hi:
            snap = snaps.get(end)
            if snap is None:
                snap = snaps[end] = (s0, plan[s0:end])
            out[s0] = (end, _Repatch.of(g[1], snap[1], s0 - snap[0], (marks, lo, hi), s0))
    return out


@dataclass
class _Table:
    """A fused run lowered for `_nbblock.block`: rows, Work records (None: made from ``info`` after
    the call, ``makers``), the host regions the rows read, and whether a longer prefix may follow."""

    tab: np.ndarray
    ins: list
    works: list
    makers: dict[int, Callable[[np.ndarray], Work]]
    h0: np.ndarray
    h1: np.ndarray
    info: np.ndarray
    retry: bool
    keep: list = field(default_factory=list)  # what INT4 rows (kinds 10, 11) read by address

    def __post_init__(self) -> None:
        self.codes = [held[1] for held in self.keep if isinstance(held[1], Codes)]  # kind 11's

    @property
    def stale(self) -> bool:
        """Whether cached codes an INT4 row reads were dropped (a host write over their image)."""
        return not all(c.valid for c in self.codes)

    @property
    def items(self) -> list:
        """The trace entries (instruction, Work) of the rows (made once per table)."""
        got = self.__dict__.get("_items")
        if got is None:
            got = self.__dict__["_items"] = list(zip(self.ins, self.works, strict=True))
        return got


_COLS = 20  # table columns (`_nbblock.COLS`)
_INT4 = FORMAT_CODES["int4"]


def int4_row(sim: FastState, site: MatSite, key: bytes) -> tuple | bool:
    """The `_nbblock` row of a small plain INT4 GEMV for the binding key ``key``, and its Work: the
    GEMVs the single step runs on a serial kernel (`fastmat.bind_mat`: below `kernels.PARALLEL_MIN_MACS`),
    as kind 11 where it reads cached int8 codes, else kind 10 (the packed image in place), so a run of
    fused steps goes on through them; False for every other binding (large ones keep their parallel
    twin, a step of their own). The last item holds what the row reads by address (kept alive), and
    the codes whose validity the table depends on."""
    f = key_fields(key)
    if sim.backend != "numba" or len(f) != 9:
        return False
    m, n, k, a, hi, lo = f[:6]
    if a != _INT4 or n > 1 or m == 0 or k == 0 or m * k >= kx.PARALLEL_MIN_MACS:
        return False
    ins, rb = site.ins, row_bytes("int4", k)
    s0, d0, lim = ins.src_addr, ins.dest_reg, sim.limits.l2_words
    if s0 + -(-k // _E) > lim or d0 + -(-m // _E) > lim:
        return False
    addr = ((hi << 16) | lo) * WORD_BYTES
    body = sim.host.view(addr, m * rb)
    sb = sim.host.view(addr + m * rb + (-(m * rb)) % WORD_BYTES, 4 * m) if site.w_scale else None
    if body is None or (site.w_scale and sb is None):
        return False
    codes = sim.int4_codes(addr, m, k, site.w_scale) if _unpacked(sim, m, 1, k) else None
    flags = int(site.accm) | int(site.findemax) << 1
    work = _mat_work(site, m, 1, k, "int4")
    if codes is not None:
        c = np.ascontiguousarray(codes.codes)
        scale = codes.scale.ctypes.data if codes.scale.size else 0
        row = (11, ins.shape_ptr_addr, ins.size_ptr_addr, s0, d0, flags, c.ctypes.data, m, k, scale, 0, *f)
        return row, work, None, None, (c, codes)
    row = (10, ins.shape_ptr_addr, ins.size_ptr_addr, s0, d0, flags, body.ctypes.data, m, k,
           0 if sb is None else sb.ctypes.data, rb, *f)
    return row, work, None, None, (body, sb)


def _cc_before(cc: np.ndarray, tab: np.ndarray, row: int) -> np.ndarray:
    """The constant caches as the table's MEMSET rows before ``row`` leave ``cc``."""
    out = cc.copy()
    for r in np.flatnonzero(tab[:row, 0] == 6):
        out[tab[r, 1], tab[r, 2]] = tab[r, 3:6]
    return out


_RETRIES = 4  # builds that may stop at a step not bound yet before that prefix is final


class _FusedRun:
    """One run of fusable steps as a callable (`fuse_groups`): lowered lazily on its first call."""

    def __init__(self, sim: FastState, steps: list[Callable[[], Work]], table: _Table | None = None) -> None:
        self.sim, self.steps, self.table = sim, steps, table
        self.dead = False  # fewer than two leading rows can ever be fused: the caller runs the steps
        self.builds = 0

    def patched(self, offsets: list[int], steps: list[Callable[[], Work]]) -> _FusedRun:
        """A copy for a program whose steps at ``offsets`` were recompiled (same run bounds): a built
        table keeps its other rows and takes the recompiled steps' rows (a copy's or a GEMV's from
        the constant caches as the rows before it leave them, as `_build` does); it is built anew
        when a recompiled row is not available or reads a host region the table does not hold."""
        t = self.table
        new = _FusedRun(self.sim, steps)
        new.builds, new.dead = self.builds, self.dead
        if t is None:
            new.dead = self.dead and not any(callable(steps[o].fuse) for o in offsets)
            return new
        done = len(t.works)
        if any(o >= done and callable(steps[o].fuse) for o in offsets):
            new.dead = False
            return new  # the prefix may now run further: build it again
        tab, ins, works, makers, keep = t.tab.copy(), list(t.ins), list(t.works), dict(t.makers), list(t.keep)
        for o in sorted(x for x in offsets if x < done):
            st = steps[o]
            got = st.fuse(_cc_before(self.sim.cc, tab, o)) if callable(st.fuse) else st.fuse
            if got is None or got is False:
                return new
            row = [*got[0], *(0,) * (_COLS - len(got[0]))]
            if row[0] in (10, 11):
                keep.append(got[4])
            elif len(got) > 2:
                if got[2] is not t.h0 and got[2] is not t.h1:
                    return new
                row[6] = 0 if got[2] is t.h0 else 1
            makers.pop(o, None)
            if len(got) > 3 and got[3] is not None:
                makers[o] = got[3]
            tab[o], ins[o], works[o] = row, st.fuse_ins, got[1]
        new.table = _Table(tab, ins, works, makers, t.h0, t.h1, np.zeros_like(t.info), t.retry, keep)
        return new

    def _build(self, cc: np.ndarray | None = None) -> _Table | None:
        """The table, the copy and GEMV rows bound for the constant caches ``cc`` (default: the device's
        now) as the run's own MEMSETs leave them; each such row checks its entries when it runs."""
        self.builds += 1
        rows, ins, works, makers, regions, keep = [], [], [], {}, [], []
        retry = False
        cc = (self.sim.cc if cc is None else cc).copy()  # as the run leaves them before each step
        for st in self.steps:
            got = st.fuse(cc) if callable(st.fuse) else st.fuse
            if got is None or got is False:
                retry = got is None and self.builds < _RETRIES
                break
            row = [*got[0], *(0,) * (_COLS - len(got[0]))]
            if row[0] == 6:  # a MEMSET of an entry
                cc[row[1], row[2]] = row[3:6]
            if row[0] in (10, 11):  # an INT4 GEMV reads its image by address: the table keeps the arrays
                keep.append(got[4])
            elif len(got) > 2:  # a host region the row reads, by identity (at most two per table)
                j = next((j for j, h in enumerate(regions) if h is got[2]), len(regions))
                if j == 2:
                    break
                if j == len(regions):
                    regions.append(got[2])
                row[6] = j
            if len(got) > 3 and got[3] is not None:
                makers[len(rows)] = got[3]
            rows.append(row)
            ins.append(st.fuse_ins)
            works.append(got[1])
        if len(rows) < 2:
            self.dead = not retry
            return None
        h0, h1 = [*regions, _NO_HOST, _NO_HOST][:2]
        return _Table(np.array(rows, np.int64), ins, works, makers, h0, h1,
                      np.zeros((len(rows), 3), np.int64), retry, keep)

    def __call__(self) -> list[Work]:
        if self.dead:
            return []
        t = self.table
        if t is None or (t.codes and t.stale):
            t = self.table = self._build()
            if t is None:
                return []
        sim = self.sim
        r = sim._k["cvo_block"](t.tab, sim.flat, sim.cc, sim._regs, t.h0, t.h1, sim._qbuf, t.info,
                                kx.LUT32, kx.LUT64, TLUT)
        rows = len(t.works)
        done = rows if r < 0 else (r - rows + 1 if r >= rows else r)
        if 0 <= r < rows or t.retry:
            self.table = None  # a binding or copy changed (or a longer prefix may fuse): rebuild next time
        works, items = t.works[:done], t.items[:done]
        for i, make in t.makers.items():  # the Work of a GEMV row, from the shape it ran with
            if i < done:
                works[i] = make(t.info[i])
                items[i] = (t.ins[i], works[i])
        if r >= rows:  # the last row ran, its e_max update is the reference reduction's
            i = r - rows
            m, d0 = int(t.info[i, 0]), int(t.tab[i, 4]) * _E
            update_emax(sim, [sim.flat[d0: d0 + m]])
        sim.trace.extend(items)
        return works


class _Repatch:
    """A fused run made on first use (`fuse_groups`, `repatch_groups`): new (``base`` None), or the
    `_FusedRun.patched` copy of ``base``. It holds the run it patches, the
    steps of the program now (``steps[at:]``), and the patched step indices (absolute, as ranges
    ``marks[lo:hi]`` of sorted lists) gathered over every patch since that run. Patching a run at
    once with all the offsets of several patches gives the table patching it patch by patch gives:
    a step outside the newest patch is the same in every program since, and a recompiled row is
    bound for the entries the rows before it leave, whenever it is bound (its own check at run time
    keeps the call exact either way). Reads and writes of the run's state resolve it."""

    def __init__(self, base: _FusedRun | None, steps: list, at: int, ranges: list[tuple[list[int], int, int]],
                 s0: int, sim: FastState | None = None) -> None:
        self.base, self._steps, self.at, self.ranges, self.s0 = base, steps, at, ranges, s0
        self.sim = sim if base is None else base.sim
        self._real: _FusedRun | None = None

    @classmethod
    def of(cls, run: _FusedRun | _Repatch, steps: list, at: int, marks: tuple[list[int], int, int],
           s0: int) -> _Repatch:
        if isinstance(run, _Repatch) and run._real is None:
            return cls(run.base, steps, at, [*run.ranges, marks], s0, run.sim)
        return cls(run._real if isinstance(run, _Repatch) else run, steps, at, [marks], s0)

    def offsets(self) -> list[int]:
        return sorted({c - self.s0 for m, lo, hi in self.ranges for c in m[lo:hi]})

    def resolve(self) -> _FusedRun:
        real = self._real
        if real is None:
            steps = self._steps[self.at:]
            real = self._real = _FusedRun(self.sim, steps) if self.base is None else \
                self.base.patched(self.offsets(), steps)
            self.base = self._steps = None  # type: ignore[assignment]  (what the copy no longer needs)
        return real

    def __call__(self) -> list[Work]:
        return self.resolve()()

    def patched(self, offsets: list[int], steps: list[Callable[[], Work]]) -> _FusedRun:
        if self._real is not None:
            return self._real.patched(offsets, steps)
        if self.base is None:  # never called: nothing to keep
            return _FusedRun(self.sim, steps)
        return self.base.patched(sorted({*self.offsets(), *offsets}), steps)

    def _build(self, cc: np.ndarray | None = None) -> _Table | None:
        return self.resolve()._build(cc)

    @property
    def steps(self) -> list[Callable[[], Work]]:
        return self.resolve().steps

    @property
    def table(self) -> _Table | None:
        return self.resolve().table

    @table.setter
    def table(self, value: _Table | None) -> None:
        self.resolve().table = value

    @property
    def dead(self) -> bool:
        return self.resolve().dead

    @property
    def builds(self) -> int:
        return self.resolve().builds

    @builds.setter
    def builds(self, value: int) -> None:
        self.resolve().builds = value
