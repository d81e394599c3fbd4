"""The integer steps of the BitNet ``quant`` datapath executed on the simulated ternfpga: projections
on the ternary engine (base-3 stream, K-lane sign-select, optional activation-sparse gather), the
attention and FFN-glue fabric units, and the soft CPU's integer RMSNorm requant and Q15 RoPE
(`npukit.targets.tern.units`). Implements `npukit.models.bitnet.intpath.IntOps`, so a `BitNet` in
quant mode run with `TernOps` must give the reference's logits bit for bit.

Every step appends a `npukit.sim.work.Work` record to ``work`` (program order); its ``engine``
field names the kind of step, which `npukit.targets.tern.timing` maps onto the machine per phase:

* ``engine`` — one GEMV: ``macs`` = tiles × K lane slots, ``lanes`` = K, ``weight_bytes`` = base-3
  bytes streamed from DDR3;
* ``attention`` — one query head: ``macs`` = 2·S·D (scores + a·V), ``sfu_elems`` = S exp look-ups;
* ``ffn_glue`` — one token: ``sfu_elems`` = F channels;
* ``norm`` / ``rope`` — host glue: ``sfu_elems`` = elements processed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from npukit.sim.work import Work
from npukit.targets.tern import units
from npukit.targets.tern.engine import PackedMatrix, TernaryEngine
from npukit.targets.tern.hw import TernHW


class TernOps:
    def __init__(self, hw: TernHW, gather: bool = True, lanes: int | None = None) -> None:
        self.hw = hw
        self.engine = TernaryEngine(lanes or hw.engine.lanes, record_work=True)
        self.work: list[Work] = self.engine.stats.work
        self.gather = gather
        self._packed: dict[int, PackedMatrix] = {}

    def _emit(self, kind: str, label: str, **kw: int) -> None:
        self.work.append(Work(index=len(self.work), engine=kind, label=label, **kw))

    # -- IntOps -------------------------------------------------------------------------------------
    def matvec(self, layer: int, lin: Any, q: np.ndarray) -> np.ndarray:
        W = self._packed.get(id(lin))
        if W is None:
            W = self._packed[id(lin)] = PackedMatrix.from_trits(lin.t)
        label = f"L{layer}.{lin.name}"
        if self.gather and lin.name == "down_proj":  # relu² makes down_proj's input sparse
            return self.engine.gather_gemv(W, q, label)
        return self.engine.gemv(W, q, label)

    def rmsnorm_requant(self, layer: int, name: str, x: np.ndarray, w_q15: np.ndarray) -> np.ndarray:
        self._emit("norm", f"L{layer}.{name}", sfu_elems=int(x.size))
        return np.stack([units.rmsnorm_requant(row, w_q15) for row in x])

    def rope(self, layer: int, name: str, x: np.ndarray, pos: np.ndarray, cos_t: np.ndarray,
             sin_t: np.ndarray) -> np.ndarray:
        self._emit("rope", f"L{layer}.rope_{name}", sfu_elems=int(x.size))
        return np.stack([units.rope_q15(x[t], int(p), cos_t, sin_t) for t, p in enumerate(pos)])

    def attention(self, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                  shift: int) -> tuple[np.ndarray, np.ndarray]:
        heads, D = q.shape
        S = k.shape[0]
        num = np.empty((heads, D), np.int64)
        sum_e = np.empty(heads, np.int64)
        for h in range(heads):
            num[h], sum_e[h], _ = units.attention_unit(q[h], k[:, h], v[:, h], shift,
                                                       t_max=self.hw.attention.t_max)
            self._emit("attention", f"L{layer}.attention h{h} T={S}", macs=2 * S * D, sfu_elems=S)
        return num, sum_e

    def ffn_glue(self, layer: int, g: np.ndarray, u: np.ndarray, w_q: np.ndarray) -> np.ndarray:
        out = np.empty(g.shape, np.int8)
        for t in range(g.shape[0]):
            out[t] = units.ffn_glue_unit(g[t], u[t], w_q)[0]
            self._emit("ffn_glue", f"L{layer}.ffn_glue", sfu_elems=int(g.shape[1]))
        return out

    # -- outside the integer datapath -----------------------------------------------------------------
    def lm_head(self, vocab: int, hidden: int) -> None:
        """Account the tied LM head for one position as ternfpga's composition does (streamed
        through the engine at its tile rate); npukit computes it in float32 on the host, so it is
        recorded as work only, outside the engine's functional counters."""
        K = self.engine.K
        tiles = vocab * self.engine.tiles_per_row(hidden)
        self._emit("engine", "lm_head", macs=tiles * K, lanes=K, weight_bytes=vocab * -(-hidden // 5))

    def reset(self) -> None:
        self.engine.stats = type(self.engine.stats)()
        self.work = self.engine.stats.work
