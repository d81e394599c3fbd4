"""``C = A · W + bias`` (int8 × int8 → int32) as one VTA program, tiled onto the 16×16 GEMM core.

Layouts in DRAM (16 = the block): A as (M, kb) input elements of 16 int8 (K zero-padded); W as
(nb, kb) weight blocks, block (n, k) holding ``W[16k + i, 16n + j]`` at row j, column i (VTA's
``wgt[j][k]``); bias as nb accumulator elements; the result as int8 byte planes of (M, nb)
elements: as many as the layer's accumulators can need (``|acc| ≤ 128·Σ|w| + |bias'|`` per channel,
known at build time), at most four. A tile is up to ``mt`` rows × ``nt`` output blocks × ``kt``
reduction blocks:

* load (per reduction step, input slot = step parity): LOAD INP (mt × kt), LOAD WGT (nt × kt)
  unless that slot still holds the same weight blocks (one reduction step, several row tiles);
* compute: LOAD ACC of the bias row repeated mt times (``x_stride = 0``) at the first step of an
  output tile, then GEMM over ``iter_out = mt`` rows; all-zero weight blocks (a depthwise layer's
  off-diagonal blocks) get no uop, otherwise the inner loop runs over the output blocks;
* export and store: see `program_builder.export_int32`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npukit.targets.vta.delegate.program_builder import Emitter, export_int32, planes_for, read_int32
from npukit.targets.vta.delegate.requant import CONSTS, N_REGS, Requant, emit_requant
from npukit.targets.vta.hw import VtaHw
from npukit.targets.vta.isa import Mem
from npukit.targets.vta.program import Dram, RunResult, run


@dataclass
class Tiles:
    mt: int
    nt: int
    kt: int


def choose_tiles(hw: VtaHw, m: int, nb: int, kb: int, planes: int = 4, per_block: int = 0) -> Tiles:
    """Half of each buffer per slot (double buffering); the accumulator slot holds ``planes`` copies
    of the tile plus ``per_block`` rows per output block (constants)."""
    inp_slot, wgt_slot, acc_slot = hw.inp_depth // 2, hw.wgt_depth // 2, hw.acc_depth // 2
    nt = min(nb, max(1, wgt_slot // 8), acc_slot // (planes + per_block))
    kt = min(kb, wgt_slot // nt, inp_slot)
    mt = max(1, min(m, inp_slot // kt, (acc_slot // nt - per_block) // planes, (1 << 14) - 1))
    return Tiles(mt, nt, kt)


def weight_blocks(w: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """(K, N) int8 → (nb, kb, block, block) blocks ``[n, k, j, i] = W[k·B + i, n·B + j]`` and the
    (nb, kb) mask of blocks holding a nonzero weight."""
    k, n = w.shape
    kb, nb = -(-k // block), -(-n // block)
    wp = np.zeros((kb * block, nb * block), np.int8)
    wp[:k, :n] = w
    blocks = wp.reshape(kb, block, nb, block).transpose(2, 0, 3, 1)
    return np.ascontiguousarray(blocks), blocks.any(axis=(2, 3))


class GemmProgram:
    """Built once per layer (shapes and weights are static); `run` takes A and returns int32 C."""

    def __init__(self, hw: VtaHw, m: int, w: np.ndarray, bias: np.ndarray,
                 requant: Requant | None = None) -> None:
        self.hw, self.m, self.k, self.n = hw, m, w.shape[0], w.shape[1]
        b = hw.block
        self.kb, self.nb = -(-self.k // b), -(-self.n // b)
        blocks, mask = weight_blocks(w, b)
        dram = Dram()
        self.a_addr = dram.reserve(m * self.kb * b)
        w_addr = dram.put(blocks)
        bias_p = np.zeros(self.nb * b, np.int32)
        bias_p[: self.n] = bias
        bias_addr = dram.put(bias_p)
        bound = int((128 * np.abs(w.astype(np.int64)).sum(axis=0) + np.abs(bias.astype(np.int64))).max())
        self.requant = requant if requant is not None and requant.feasible(bound) else None
        self.planes = 1 if self.requant else planes_for(bound)
        self.out_addrs = [dram.reserve(m * self.nb * b) for _ in range(self.planes)]
        if self.requant:
            const_addr = dram.put(self.requant.constants(self.nb * b))
        e = Emitter(hw, dram)
        regions, per_block = (N_REGS, len(CONSTS)) if self.requant else (self.planes, 0)
        self.tiles = t = choose_tiles(hw, m, self.nb, self.kb, regions, per_block)
        e.prologue()
        step = tile = 0
        held: list[tuple | None] = [None, None]  # weight blocks in each wgt slot
        for n0 in range(0, self.nb, t.nt):
            nt = min(t.nt, self.nb - n0)
            for m0 in range(0, m, t.mt):
                mt = min(t.mt, m - m0)
                acc_base = (tile % 2) * (hw.acc_depth // 2)
                for k0 in range(0, self.kb, t.kt):
                    kt = min(t.kt, self.kb - k0)
                    inp_base, wgt_base = (step % 2) * (hw.inp_depth // 2), (step % 2) * (hw.wgt_depth // 2)
                    resident = held[step % 2] == (n0, k0, nt, kt)  # this slot already holds the blocks
                    e.emit("LOAD", memory_type=Mem.INP, sram_base=inp_base,
                           dram_base=self.a_addr // hw.inp_elem_bytes + m0 * self.kb + k0,
                           y_size=mt, x_size=kt, x_stride=self.kb, pop_next=True, push_next=resident)
                    if not resident:
                        e.emit("LOAD", memory_type=Mem.WGT, sram_base=wgt_base,
                               dram_base=w_addr // hw.wgt_elem_bytes + n0 * self.kb + k0,
                               y_size=nt, x_size=kt, x_stride=self.kb, push_next=True)
                        held[step % 2] = (n0, k0, nt, kt)
                    first = k0 == 0
                    if first:
                        e.emit("LOAD", memory_type=Mem.ACC, sram_base=acc_base,
                               dram_base=bias_addr // hw.acc_elem_bytes + n0, y_size=mt, x_size=nt,
                               x_stride=0, pop_prev=True, pop_next=True)
                        const_base = acc_base + regions * mt * nt
                        if self.requant:
                            e.emit("LOAD", memory_type=Mem.ACC, sram_base=const_base,
                                   dram_base=const_addr // hw.acc_elem_bytes + n0, y_size=len(CONSTS),
                                   x_size=nt, x_stride=self.nb)
                    sub = mask[n0:n0 + nt, k0:k0 + kt]
                    self._gemm(e, sub, (acc_base, inp_base, wgt_base), mt, nt, kt, pop=not first)
                    step += 1
                out_row = (m0 * self.nb + n0, mt, nt, self.nb)
                if self.requant:
                    self._requant_store(e, acc_base, mt, nt, const_base, out_row)
                else:
                    export_int32(e, acc_base, mt * nt, self.out_addrs, out_row)
                tile += 1
        e.emit("FINISH")
        self.instrs = e.instrs
        self.words = e.words()  # encoding checks every field against the description
        self.image = dram.image()
        self.result: RunResult | None = None

    def _requant_store(self, e: Emitter, base: int, mt: int, nt: int, const_base: int,
                       out_row: tuple[int, int, int, int]) -> None:
        last, result = emit_requant(e, base, mt, nt, const_base, self.requant)
        e.set_flag(last, "push_next")
        row0, ys, xs, stride = out_row
        e.emit("STORE", memory_type=Mem.OUT, sram_base=result, dram_base=self.out_addrs[0] // 16 + row0,
               y_size=ys, x_size=xs, x_stride=stride, pop_prev=True, push_prev=True)

    @staticmethod
    def _gemm(e: Emitter, sub: np.ndarray, bases: tuple[int, int, int], mt: int, nt: int, kt: int,
              pop: bool) -> None:
        acc_base, inp_base, wgt_base = bases
        flags = {"pop_prev": pop, "push_prev": True}
        if sub.all():  # dense: uops over k, inner loop over output blocks
            ks = np.arange(kt)
            kernel = np.stack([np.full(kt, acc_base), inp_base + ks, wgt_base + ks], axis=1)
            bgn, end = e.uops(("dense", acc_base, inp_base, wgt_base, kt), kernel)
            e.emit("GEMM", uop_bgn=bgn, uop_end=end, iter_out=mt, iter_in=nt, dst_factor_out=nt,
                   dst_factor_in=1, src_factor_out=kt, wgt_factor_in=kt, **flags)
            return
        ns, ks = np.nonzero(sub)
        if ns.size == 0:  # all weights zero: nothing to accumulate, but the tokens must still flow
            ns, ks = np.zeros(1, np.int64), np.zeros(1, np.int64)
        kernel = np.stack([acc_base + ns, inp_base + ks, wgt_base + ns * kt + ks], axis=1)
        bgn, end = e.uops(("sparse", acc_base, inp_base, wgt_base, kt, sub.tobytes(), sub.shape), kernel)
        e.emit("GEMM", uop_bgn=bgn, uop_end=end, iter_out=mt, iter_in=1, dst_factor_out=nt,
               src_factor_out=kt, **flags)

    def run(self, a: np.ndarray, timing: bool = False) -> np.ndarray:
        """``a``: (M, K) int8 → (M, N) int32 computed on the simulated VTA (int8 when the program
        requantizes on VTA)."""
        b = self.hw.block
        ap = np.zeros((self.m, self.kb * b), np.int8)
        ap[:, : self.k] = a
        image = self.image.copy()
        image[self.a_addr:self.a_addr + ap.nbytes] = ap.view(np.uint8).reshape(-1)
        self.result = run(self.hw, self.instrs, image, timing=timing)
        if self.requant:  # int8 outputs, requantized on VTA
            raw = self.result.dram[self.out_addrs[0]:self.out_addrs[0] + self.m * self.nb * b]
            return raw.view(np.int8).reshape(self.m, self.nb * b)[:, : self.n].copy()
        out = read_int32(self.result.dram, self.out_addrs, self.m * self.nb * b)
        return out.reshape(self.m, self.nb * b)[:, : self.n]
