"""CVO steps of `npukit.targets.pccx.fast.fastsim`: L2 views and the Work record bound at load time.

A CVO's operands and Work depend only on the instruction (decode already checked its ranges), so the
step is fixed when the program is loaded (a CVO that runs as a fused-run row gets its closure on its
first single call only); per call it reads S or e_max if the function uses them and runs one fused
kernel. Transcendental functions run the float64 kernel their `cvo.CVO` row names (the
one `numerics.py` rounds too); only the widening and the BF16 rounding are replaced.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from npukit.sim.work import Work, work_at
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.asm import format_instr
from npukit.targets.pccx.cvo import CVO, CvoForm, CvoSpec
from npukit.targets.pccx.fast import fastrun
from npukit.targets.pccx.fast import kernels as kx
from npukit.targets.pccx.fast.fastrows import _TABLED, TLUT, tabled  # noqa: F401 (their home was here)
from npukit.targets.pccx.fast.state import FastState
from npukit.targets.pccx.isa import CvoFlag, Instr, cvo_out_elems, words_of

_E = 8
# the fused kernel's code of each arithmetic numerics function (keyed by the function, so a table row
# that changes its meaning no longer takes the fused kernel)
_ARITH = {nx.cvo_square: kx.SQUARE, nx.cvo_recip: kx.RECIP, nx.cvo_rsqrt: kx.RSQRT, nx.cvo_sqrt: kx.SQRT,
          nx.cvo_mul: kx.MUL, nx.cvo_add: kx.ADD}
_ZEROS7 = np.zeros(_E - 1, np.uint16)


_WORK_FIELDS: dict[int, tuple] = {}  # id(decoded CVO) -> (it, its Work's fields, its rows: `_memo`)
_MAX_WORK_FIELDS = 1 << 18
# the CVO flags as ints: an IntFlag `&` builds a flag member (~2 µs; four per CVO a chunk program plans)
_ACCM, _SUB_EMAX, _RECIP = int(CvoFlag.ACCM), int(CvoFlag.SUB_EMAX), int(CvoFlag.RECIP_SCALE)


def _memo(ins: Instr) -> tuple:
    """(``ins``, its Work's fields, its `CVO` row, its fused-run row on the numba backend): what a CVO's
    step takes from its instruction alone, made once per instruction object: a decoded instruction is
    shared by every index its word appears at (`FastSimulator._decoded`), and a new span bucket's ~1 000
    recompiled CVO steps hold ~250 distinct words (the layers repeat them)."""
    hit = _WORK_FIELDS.get(id(ins))  # (the hit inline: three in four of a build's CVO steps)
    if hit is not None and hit[0] is ins:
        if hit[2] is CVO[ins.cvo_func]:
            return hit
        # the function's row was replaced since (the table is open; decoded instructions are shared
        # process-wide, `isa.decode`'s memo): made again for the row in the table now
        del _WORK_FIELDS[id(ins)]

    def made() -> tuple:  # `_cvo_fields` and `_fused_row` (the plain definitions), from the shape memo
        spec, n, ws, wo, two, writes, rd, wr, asy, head = _shape(ins)
        s, d = ins.src_addr, ins.dst_addr
        src, dst = (s, s + ws), (d, d + wo)
        return ({"index": 0, "engine": "sfu", "label": format_instr(ins), "macs": 0, "sfu_elems": n,
                 "weight_bytes": 0, "ddr_read_bytes": 0, "ddr_write_bytes": 0, "onchip_read_bytes": rd,
                 "onchip_write_bytes": wr, "is_async": asy, "reads": (src, dst) if two else (src,),
                 "writes": (dst,) if writes else (), "lanes": 0},
                spec, None if head is None else _row_at(head, n, s * _E, d * _E))

    return _per_instruction(_WORK_FIELDS, ins, made)


_SHAPES: dict[tuple, tuple] = {}  # (function, its spec, length, flags, asynchrony) -> `_shape`


def _shape(ins: Instr) -> tuple:
    """What a CVO's Work fields and fused-run row take from its function, length, flags and asynchrony,
    not its addresses: (spec, length, source and destination words, whether it reads the destination,
    whether it writes it, on-chip bytes read and written, is_async, `_row_head`). Made once per shape: a
    fresh process's first decode program and the two span buckets built ahead hold ~1 100 new CVO
    instructions of 57 shapes (hidden 1024)."""
    flags, spec = int(ins.flags), CVO[ins.cvo_func]
    # keyed by the function's registered spec object too (kept in the entry, so its id stays its own):
    # the registry is open (a toy or new function registered, a test's monkeypatch undone), and an
    # entry made under another spec would run that spec's numerics
    key = (ins.cvo_func, id(spec), ins.length, flags, ins.async_)
    hit = _SHAPES.get(key)
    if hit is None:
        n = ins.length
        out_n = cvo_out_elems(ins.cvo_func, n)
        two = bool(out_n and (flags & _ACCM or spec.arity == 2))
        writes = spec.form is not CvoForm.LOAD_SCALAR
        ws, wo = words_of(n), words_of(out_n)
        if len(_SHAPES) >= _MAX_WORK_FIELDS:
            _SHAPES.clear()
        hit = _SHAPES[key] = (spec, n, ws, wo, two, writes, (ws + (wo if two else 0)) * 16,
                              wo * 16 if writes else 0, bool(ins.async_), _row_head(spec, flags, n, out_n))
    return hit


def _per_instruction(memo: dict[int, tuple], ins: Instr, make: Callable[[], tuple]) -> tuple:
    """``(ins, *make())``, made once per instruction object: ``memo`` is keyed by its id, and the entry
    keeps ``ins`` (so the id stays its own while the entry lives)."""
    hit = memo.get(id(ins))
    if hit is None or hit[0] is not ins:
        if len(memo) >= _MAX_WORK_FIELDS:
            memo.clear()
        hit = memo[id(ins)] = (ins, *make())
    return hit


_FIXED_WORK: dict[int, tuple] = {}  # id(decoded instruction) -> (it, a Work's fields)


def work_like(idx: int, ins: Instr, make: Callable[[], Work]) -> Work:
    """The Work record ``make()`` makes, at index ``idx``: for a step whose record depends on its
    instruction and index only (a MEMSET), ``make`` runs once per instruction object and later records
    are copies of its fields with their own index (the layers repeat words, so a build's ~500 MEMSETs
    hold far fewer instructions; a record made field by field with its label formatted is ~5 µs)."""
    return work_at(_per_instruction(_FIXED_WORK, ins, lambda: (dict(vars(make())),))[1], idx)


def _cvo_fields(ins: Instr) -> dict:
    """A CVO's Work fields at index 0: the plain definition (`_memo` makes them from `_shape`; the tests
    compare the two)."""
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
    def of(cls, sim: FastState, ins: Instr, work: Work) -> _Operands:
        n, flat = ins.length, sim.l2.reshape(-1)
        s0, d0 = ins.src_addr * _E, ins.dst_addr * _E
        out_n = cvo_out_elems(ins.cvo_func, n)
        numba = sim.backend == "numba"
        return cls(sim, work, flat, n, s0, d0, out_n, flat[s0: s0 + n],
                   flat[d0: d0 + max(out_n, 1)], bool(int(ins.flags) & _ACCM),
                   out_n > 0 and s0 != d0 and s0 < d0 + out_n and d0 < s0 + n, numba,
                   (kx.LUT64,) if numba else (), (kx.LUT32,) if numba else ())


def compile_cvo(sim: FastState, idx: int, ins: Instr) -> Callable[[], Work] | None:
    """The step for one CVO (by its table row), or None where the reference path should run it. A CVO
    that is a row of the fused runs (`_fused_row`) runs there, not as a step: it is a `FusedCvoStep`
    (traced itself), whose closure (L2 views, kernels) is made on its first single call only, if any (a
    new span bucket's build compiles ~1 000 of them); any other CVO is a closure for `_traced`."""
    _, fields, spec, row = _memo(ins)
    work = work_at(fields, idx)
    if row is not None and sim.backend == "numba":
        return FusedCvoStep(sim, ins, spec, work, (row, work))
    body = _body(sim, ins, spec, work)
    if body is None:
        return None  # a form added later runs on the reference path
    body.work = work  # the step's one Work record (`ahead.prepare` hands it to the timing model early)
    return body


class FusedCvoStep:
    """The plan step of a CVO that is a fused-run row: one small record in place of a closure pair
    (the body made on demand and `FastSimulator._traced`'s tracing wrapper, each with its cells and
    attribute dict), since a build makes thousands and a run almost never calls one. Calling it runs the
    CVO as a single step and traces it, as the traced closure did."""

    __slots__ = ("_body", "_trace", "fuse", "fuse_ins", "sim", "spec", "work")

    def __init__(self, sim: FastState, ins: Instr, spec: CvoSpec, work: Work, fuse: tuple) -> None:
        self.sim, self.fuse_ins, self.spec, self.work, self.fuse = sim, ins, spec, work, fuse
        self._body: Callable[[], Work] | None = None
        self._trace = sim.trace

    def __call__(self) -> Work:
        body = self._body
        if body is None:
            body = self._body = _body(self.sim, self.fuse_ins, self.spec, self.work)
        w = body()
        self._trace.append((self.fuse_ins, w))
        return w


def _body(sim: FastState, ins: Instr, spec: CvoSpec, work: Work) -> Callable[[], Work] | None:
    """The closure that runs one CVO and returns ``work``; None for a form without one."""
    ops = _Operands.of(sim, ins, work)
    if _is_arith(spec):
        return _arith(ops, spec, ins)
    if spec.core is not None:
        return _transcendental(ops, spec.core, bool(int(ins.flags) & _SUB_EMAX))
    build = _BY_FORM.get(spec.form)
    return None if build is None else build(ops)


def _is_arith(spec: CvoSpec) -> bool:
    return spec.numerics in _ARITH or spec.form in (CvoForm.SCALE, CvoForm.BIAS)


def _fused_row(backend: str, spec: CvoSpec, ins: Instr) -> tuple | None:
    """The CVO's row of a fused run (`fastrun.fuse_groups`, `_nbblock.block`; the numba backend), or
    None where it runs as a single step only (`_row_head`)."""
    if backend != "numba":
        return None
    n = ins.length
    head = _row_head(spec, int(ins.flags), n, cvo_out_elems(ins.cvo_func, n))
    return None if head is None else _row_at(head, n, ins.src_addr * _E, ins.dst_addr * _E)


def _row_head(spec: CvoSpec, flags: int, n: int, out_n: int) -> tuple[int, int, int, bool] | None:
    """A CVO's fused-run row less its addresses, (kind, code, accm column, whether the row names the
    destination), or None where it has no row: the arithmetic ones (kind 0; a negative code takes the
    operation from S), the exponent (8, `_nbblock._exp_row`), a tabled transcendental (12, core(x)
    from `TLUT`), REDUCE_SUM (1) and LOAD_SCALAR (2), each where the output is as long as the input."""
    accm, same = int(bool(flags & _ACCM)), out_n == n
    if _is_arith(spec):
        fixed = _ARITH.get(spec.numerics)
        sop = -3 if spec.form is CvoForm.BIAS else (-2 if flags & _RECIP else -1)
        return (0, sop if fixed is None else fixed, accm, True) if same else None
    if spec.core is not None:
        sub = bool(flags & _SUB_EMAX)
        if spec.core is nx.exp_core and not accm and same:
            return (8, int(sub), 0, True)
        if not sub and same and (row := tabled(spec.core)) >= 0:
            return (12, row, accm, True)
        return None
    if spec.form is CvoForm.REDUCE_SUM:
        return (1, 0, accm, True)
    if spec.form is CvoForm.LOAD_SCALAR:
        return (2, 0, 0, False)
    return None


def _row_at(head: tuple[int, int, int, bool], n: int, s0: int, d0: int) -> tuple:
    """The row of `_row_head` ``head`` for ``n`` elements from element ``s0`` to element ``d0``."""
    kind, code, accm, to_dst = head
    return (kind, code, s0, n, d0 if to_dst else 0, accm, 0)


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

    return trans


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

    return load_scalar


_BY_FORM = {CvoForm.REDUCE_SUM: _reduce_sum, CvoForm.REDUCE_MAX: _reduce_max,
            CvoForm.LOAD_SCALAR: _load_scalar}


def __getattr__(name: str):  # the fused runs moved to `fastrun` (callers importing them from here)
    if name in ("fuse_groups", "repatch_groups", "int4_row", "_FusedRun", "_Repatch", "_Resume", "_Table"):
        return getattr(fastrun, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
