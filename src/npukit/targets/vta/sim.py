"""Functional VTA simulator, bit-exact to TVM's fsim (``src/sim/sim_driver.cc``) semantics, in NumPy.

State: DRAM (bytes), the four SRAMs (inp int8 rows, wgt int8 blocks, acc int32 rows, uop words).
Instructions go to the module TVM's TLPP verifier sends them to: LOAD of INP/WGT to *load*, LOAD of
UOP/ACC/ACC_8BIT, GEMM, ALU and FINISH to *compute*, STORE to *store*. Each module runs its queue
in order; an instruction first pops its tokens (``pop_prev``/``pop_next`` name the queues towards
the previous/next module: load→compute ``l2g``, compute→load ``g2l``, compute→store ``g2s``,
store→compute ``s2g``) and pushes its tokens after it ran. When no module can move and some still
hold instructions, `VtaDeadlock` names the queue and the instruction each one waits on.

Semantics (fsim): LOAD copies a 2-D strided DRAM window and writes zero padding around it; STORE
truncates each int32 accumulator to int8; GEMM accumulates ``int8 × int8`` dot products over a
two-level uop loop (``reset_reg`` zeroes instead); ALU MIN/MAX/ADD/SHR/MUL on int32 with a 16-bit
signed immediate or an accumulator operand, wrapping like C ``int32_t`` on x86; SHR with a negative
amount shifts left; shift amounts are taken modulo 32 (x86 masks the count, as fsim's compiled
``x >> y`` does). Loops are vectorized over all iterations when no iteration can see another's
result (unique destinations not read as sources), else run in order.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from npukit.errors import NpukitError
from npukit.targets.vta.hw import VtaHw
from npukit.targets.vta.isa import ISA, UOP, AluOp, Mem, Opcode

MODULES = ("load", "compute", "store")
# module -> (queue popped by pop_prev, by pop_next, pushed by push_prev, by push_next)
QUEUES = {
    "load": (None, "g2l", None, "l2g"),
    "compute": ("l2g", "s2g", "g2l", "g2s"),
    "store": ("g2s", None, "s2g", None),
}


class VtaFault(NpukitError):
    """An instruction the device cannot execute (index out of a buffer, bad memory type, ...)."""


class VtaDeadlock(VtaFault):
    """Modules wait on dependency queues that will never be filled."""

    def __init__(self, waits: list[tuple[int, str, str, str]]) -> None:
        self.waits = waits  # (instruction index, text, module, queue)
        self.queues = tuple(dict.fromkeys(w[3] for w in waits))
        parts = [f"instruction {i} ({t}) on {m} waits to pop {q!r} (empty)" for i, t, m, q in waits]
        super().__init__("dependency-queue deadlock: " + "; ".join(parts))


def module_of(ins) -> str:
    """The module an instruction runs on: LOADs of inp/wgt on load, STORE on store, the rest on compute."""
    op = Opcode(ins.opcode)
    if op is Opcode.LOAD:
        return "load" if ins.memory_type in (Mem.INP, Mem.WGT) else "compute"
    return "store" if op is Opcode.STORE else "compute"


def tokens_of(ins, module: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    pp, pn, up, un = QUEUES[module]
    pops = tuple(q for flag, q in ((ins.pop_prev, pp), (ins.pop_next, pn)) if flag)
    pushes = tuple(q for flag, q in ((ins.push_prev, up), (ins.push_next, un)) if flag)
    for flag, q, what in ((ins.pop_prev, pp, "pop_prev"), (ins.pop_next, pn, "pop_next"),
                          (ins.push_prev, up, "push_prev"), (ins.push_next, un, "push_next")):
        if flag and q is None:
            raise VtaFault(f"{Opcode(ins.opcode).name} runs on the {module} module, which has no "
                           f"{what[-4:]} queue ({what} set)")
    return pops, pushes


@dataclass
class Counters:
    """fsim's Profiler counters."""

    inp_load_nbytes: int = 0
    wgt_load_nbytes: int = 0
    acc_load_nbytes: int = 0
    uop_load_nbytes: int = 0
    out_store_nbytes: int = 0
    gemm_counter: int = 0
    alu_counter: int = 0

    def to_json(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class Executed:
    """One instruction as it ran: its index, module and tokens, for the timing adapter."""

    index: int
    ins: object
    module: str
    pops: tuple[str, ...]
    pushes: tuple[str, ...]


@dataclass
class VtaState:
    hw: VtaHw
    dram: np.ndarray  # uint8
    inp: np.ndarray = field(init=False)
    wgt: np.ndarray = field(init=False)
    acc: np.ndarray = field(init=False)
    uop: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        h = self.hw
        self.inp = np.zeros((h.inp_depth, h.batch * h.block), np.int8)
        self.wgt = np.zeros((h.wgt_depth, h.block, h.block), np.int8)
        self.acc = np.zeros((h.acc_depth, h.batch * h.block), np.int32)
        self.uop = np.zeros(h.uop_depth, np.uint32)


class Simulator:
    """Runs decoded instructions on a `VtaState`; ``skip_exec`` keeps counters and order only."""

    def __init__(self, hw: VtaHw, dram: np.ndarray, skip_exec: bool = False) -> None:
        self.hw = hw
        self.state = VtaState(hw, dram)
        self.counters = Counters()
        self.skip_exec = skip_exec
        self.finished = 0
        u = UOP.bind(hw).formats[0]
        self._uf = [(f.lo, (1 << f.width) - 1) for f in u.values]

    # --- scheduling (TVM's TLPP order: each module runs until it must wait) ---------------------
    def run(self, instrs: list) -> list[Executed]:
        queues = {m: deque() for m in MODULES}
        for i, ins in enumerate(instrs):
            m = module_of(ins)
            pops, pushes = tokens_of(ins, m)
            queues[m].append(Executed(i, ins, m, pops, pushes))
        tokens = {"l2g": 0, "g2l": 0, "g2s": 0, "s2g": 0}
        order: list[Executed] = []
        progress = True
        while progress:
            progress = False
            for m in MODULES:
                q = queues[m]
                while q:
                    e = q[0]
                    if any(tokens[t] == 0 for t in e.pops):
                        break
                    for t in e.pops:
                        tokens[t] -= 1
                    self.execute(e.index, e.ins)
                    for t in e.pushes:
                        tokens[t] += 1
                    order.append(q.popleft())
                    progress = True
        if any(queues.values()):
            syntax_text = _text(self.hw)
            waits = []
            for m in MODULES:
                if queues[m]:
                    e = queues[m][0]
                    queue = next(t for t in e.pops if tokens[t] == 0)
                    waits.append((e.index, syntax_text(e.ins), m, queue))
            raise VtaDeadlock(waits)
        return order

    # --- instructions ------------------------------------------------------------------------
    def execute(self, index: int, ins) -> None:
        op = Opcode(ins.opcode)
        try:
            _EXECUTE[op](self, ins)
        except VtaFault as e:
            raise VtaFault(f"instruction {index} ({op.name}): {e}") from None

    def _finish(self, ins) -> None:
        self.finished += 1

    def _sram(self, mem: Mem) -> tuple[np.ndarray, int]:
        h, s = self.hw, self.state
        acc = (s.acc, h.acc_elem_bytes)
        table = {Mem.INP: (s.inp, h.inp_elem_bytes), Mem.WGT: (s.wgt, h.wgt_elem_bytes),
                 Mem.ACC: acc, Mem.UOP: (s.uop, 4), Mem.ACC_8BIT: acc}
        if mem not in table:
            raise VtaFault(f"LOAD into memory_type {getattr(mem, 'name', mem)} is not supported")
        return table[mem]

    def _load(self, ins) -> None:
        if ins.x_size == 0:
            return
        sram, elem = self._sram(ins.memory_type)
        c = self.counters
        nbytes = ins.x_size * ins.y_size * elem
        attr = {Mem.INP: "inp_load_nbytes", Mem.WGT: "wgt_load_nbytes", Mem.UOP: "uop_load_nbytes"}.get(
            ins.memory_type, "acc_load_nbytes")
        setattr(c, attr, getattr(c, attr) + nbytes)
        if self.skip_exec and ins.memory_type != Mem.UOP:  # uops are state later instructions need
            return
        xt = ins.x_size + ins.x_pad_0 + ins.x_pad_1
        yt = ins.y_size + ins.y_pad_0 + ins.y_pad_1
        end = ins.sram_base + xt * yt
        if end > sram.shape[0]:
            raise VtaFault(f"SRAM range [{ins.sram_base}, {end}) beyond depth {sram.shape[0]}")
        eight = ins.memory_type == Mem.ACC_8BIT
        src_elem = elem // 4 if eight else elem
        rows = ins.y_size
        start = ins.dram_base * src_elem
        last = start + ((rows - 1) * ins.x_stride + ins.x_size) * src_elem
        if last > self.state.dram.size:
            raise VtaFault(f"DRAM range [{start}, {last}) beyond the {self.state.dram.size}-byte DRAM")
        idx = (np.arange(rows)[:, None] * ins.x_stride + np.arange(ins.x_size)[None, :]) * src_elem
        raw = self.state.dram[start + idx[..., None] + np.arange(src_elem)]  # (rows, x, bytes)
        if eight:
            vals = raw.view(np.int8).astype(np.int32)
        else:
            vals = raw.reshape(rows, ins.x_size, elem).copy().view(sram.dtype)
        block = np.zeros((yt, xt, *sram.shape[1:]), sram.dtype)
        block[ins.y_pad_0:ins.y_pad_0 + rows, ins.x_pad_0:ins.x_pad_0 + ins.x_size] = \
            vals.reshape((rows, ins.x_size, *sram.shape[1:]))
        sram[ins.sram_base:end] = block.reshape((-1, *sram.shape[1:]))

    def _store(self, ins) -> None:
        if ins.x_size == 0:
            return
        if ins.memory_type != Mem.OUT:
            what = getattr(ins.memory_type, "name", ins.memory_type)
            raise VtaFault(f"STORE from memory_type {what} is not supported (only OUT)")
        if ins.x_pad_0 or ins.x_pad_1 or ins.y_pad_0 or ins.y_pad_1:
            raise VtaFault("STORE with padding")
        h = self.hw
        self.counters.out_store_nbytes += ins.x_size * ins.y_size * h.out_elem_bytes
        if self.skip_exec:
            return
        end = ins.sram_base + ins.x_size * ins.y_size
        if end > self.state.acc.shape[0]:
            raise VtaFault(f"acc range [{ins.sram_base}, {end}) beyond depth {self.state.acc.shape[0]}")
        lanes = h.out_elem_bytes
        idx = (np.arange(ins.y_size)[:, None] * ins.x_stride + np.arange(ins.x_size)[None, :]).reshape(-1)
        last = (ins.dram_base + int(idx.max()) + 1) * lanes
        if last > self.state.dram.size:
            raise VtaFault(f"DRAM store end {last} beyond the {self.state.dram.size}-byte DRAM")
        vals = self.state.acc[ins.sram_base:end].astype(np.int8)  # truncation: the low byte
        addr = (ins.dram_base + idx)[:, None] * lanes + np.arange(lanes)
        self.state.dram[addr] = vals.view(np.uint8)

    def _indices(self, ins, factors: tuple[str, ...]) -> list[np.ndarray]:
        words = self.state.uop[ins.uop_bgn:ins.uop_end].astype(np.int64)
        y = np.arange(ins.iter_out)[:, None, None]
        x = np.arange(ins.iter_in)[None, :, None]
        out = []
        for (lo, mask), (fo, fi) in zip(self._uf, factors, strict=False):
            base = (words >> lo) & mask
            out.append((base[None, None, :] + y * getattr(ins, fo) + x * getattr(ins, fi)).reshape(-1))
        return out

    def _check(self, idx: np.ndarray, depth: int, what: str) -> None:
        if idx.size and int(idx.max()) >= depth:
            raise VtaFault(f"{what} index {int(idx.max())} beyond depth {depth}")

    def _gemm(self, ins) -> None:
        n = ins.iter_out * ins.iter_in * (ins.uop_end - ins.uop_bgn)
        if not ins.reset_reg:
            self.counters.gemm_counter += n
        if self.skip_exec or n == 0:
            return
        s = self.state
        dst, src, wgt = self._indices(ins, (("dst_factor_out", "dst_factor_in"),
                                            ("src_factor_out", "src_factor_in"),
                                            ("wgt_factor_out", "wgt_factor_in")))
        self._check(dst, s.acc.shape[0], "acc")
        if ins.reset_reg:
            s.acc[dst] = 0
            return
        self._check(src, s.inp.shape[0], "inp")
        self._check(wgt, s.wgt.shape[0], "wgt")
        b = self.hw.batch
        x = s.inp[src].reshape(n, b, -1).astype(np.int32)
        w = s.wgt[wgt].astype(np.int32)  # (n, out, in)
        prod = np.matmul(x, w.transpose(0, 2, 1)).reshape(n, -1)  # |dot| ≤ 16·128·128: no overflow
        # int32 accumulation wraps modulo 2^32 exactly like fsim's int32_t sum
        np.add.at(s.acc, dst, prod)

    def _alu(self, ins) -> None:
        n = ins.iter_out * ins.iter_in * (ins.uop_end - ins.uop_bgn)
        self.counters.alu_counter += n
        if self.skip_exec or n == 0:
            return
        s = self.state
        dst, src = self._indices(ins, (("dst_factor_out", "dst_factor_in"),
                                       ("src_factor_out", "src_factor_in")))
        self._check(dst, s.acc.shape[0], "acc")
        if not ins.use_imm:
            self._check(src, s.acc.shape[0], "acc")
        op = ins.alu_opcode
        seen = np.bincount(dst, minlength=s.acc.shape[0])
        uniq = seen.max() <= 1
        if uniq and (ins.use_imm or np.array_equal(src, dst) or not seen[src].any()):
            a = s.acc[dst].astype(np.int64)
            b = np.int64(ins.imm) if ins.use_imm else s.acc[src].astype(np.int64)
            s.acc[dst] = _alu(op, a, b)
            return
        for d, r in zip(dst.tolist(), src.tolist(), strict=True):  # order matters: fsim's loop
            b = np.int64(ins.imm) if ins.use_imm else s.acc[r].astype(np.int64)
            s.acc[d] = _alu(op, s.acc[d].astype(np.int64), b)


_EXECUTE = {Opcode.LOAD: Simulator._load, Opcode.STORE: Simulator._store, Opcode.GEMM: Simulator._gemm,
            Opcode.ALU: Simulator._alu, Opcode.FINISH: Simulator._finish}


def _alu(op: AluOp, a: np.ndarray, b) -> np.ndarray:
    if op == AluOp.ADD:
        r = a + b
    elif op == AluOp.MUL:
        r = a * b
    elif op == AluOp.MIN:
        r = np.minimum(a, b)
    elif op == AluOp.MAX:
        r = np.maximum(a, b)
    elif op == AluOp.SHR:
        b = np.broadcast_to(b, a.shape)
        right = np.right_shift(a, b & 31)
        left = np.left_shift(a, (-b) & 31)
        r = np.where(b >= 0, right, left)
    else:
        raise VtaFault(f"unknown ALU opcode {op!r}")
    return r.astype(np.int32)  # wrap to int32 (two's complement)


def _text(hw: VtaHw):
    from npukit.targets.vta.isa import SYNTAX

    bound = ISA.bind(hw)
    return lambda ins: SYNTAX.format(bound, ins)
