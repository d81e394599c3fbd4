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
from npukit.targets.vta.hw import VtaHw
from npukit.targets.vta.isa import Mem
from npukit.targets.vta.program import Dram, RunResult, run


@dataclass
class Tiles:
    mt: int
    nt: int
    kt: int


def choose_tiles(hw: VtaHw, m: int, nb: int, kb: int, planes: int = 4) -> Tiles:
    """Half of each buffer per slot (double buffering); the accumulator slot holds ``planes`` copies."""
    inp_slot, wgt_slot, acc_slot = hw.inp_depth // 2, hw.wgt_depth // 2, hw.acc_depth // 2
    nt = min(nb, max(1, wgt_slot // 8), acc_slot // planes)
    kt = min(kb, wgt_slot // nt, inp_slot)
    mt = max(1, min(m, inp_slot // kt, acc_slot // (planes * nt), (1 << 14) - 1))
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

    def __init__(self, hw: VtaHw, m: int, w: np.ndarray, bias: np.ndarray) -> None:
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
        self.planes = planes_for(bound)
        self.out_addrs = [dram.reserve(m * self.nb * b) for _ in range(self.planes)]
        e = Emitter(hw, dram)
        self.tiles = t = choose_tiles(hw, m, self.nb, self.kb, self.planes)
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
                    sub = mask[n0:n0 + nt, k0:k0 + kt]
                    self._gemm(e, sub, (acc_base, inp_base, wgt_base), mt, nt, kt, pop=not first)
                    step += 1
                export_int32(e, acc_base, mt * nt, self.out_addrs, (m0 * self.nb + n0, mt, nt, self.nb))
                tile += 1
        e.emit("FINISH")
        self.instrs = e.instrs
        self.words = e.words()  # encoding checks every field against the description
        self.image = dram.image()
        self.result: RunResult | None = None

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
        """``a``: (M, K) int8 → (M, N) int32 computed on the simulated VTA."""
        b = self.hw.block
        ap = np.zeros((self.m, self.kb * b), np.int8)
        ap[:, : self.k] = a
        image = self.image.copy()
        image[self.a_addr:self.a_addr + ap.nbytes] = ap.view(np.uint8).reshape(-1)
        self.result = run(self.hw, self.instrs, image, timing=timing)
        out = read_int32(self.result.dram, self.out_addrs, self.m * self.nb * b)
        return out.reshape(self.m, self.nb * b)[:, : self.n]
