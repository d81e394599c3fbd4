"""The operation set the W4A8 reference is written in: one method call = one future pccx instruction.

`PccxOps` forwards every device operation to `npukit.targets.pccx.numerics` unchanged, so a
compiler that emits one instruction per call and a simulator that executes numerics per
instruction agree with the reference bit for bit. A few operations are not arithmetic of the
numerics module and are named here explicitly:

* ``kv_quantize`` — the KV write path (MEMCPY L2 → DDR with quantization, pccx kv_cache §2.1);
  its rule is `npukit.targets.pccx.memory.kv_quantize` (absmax, as `npukit.formats.int4`).
* ``const`` — a constant-cache entry (MEMSET at load): BF16.
* ``swap_halves`` — two L2 → L2 MEMCPYs (pure data movement, exact) used by RoPE.
* ``concat`` / ``stack`` — vectors laid side by side in L2 (a compiler places the parts there; no
  instruction when they are word aligned). ``batch`` — the N activation rows of a GEMM (prefill),
  each row word aligned.
* ``host_to_l2`` / ``l2_to_host`` — MEMCPY across the host boundary. Host-side arithmetic
  (embedding and per-layer-embedding row dequantization, RoPE cos/sin tables, sampling) is float32
  on the host; a value crosses into L2 rounded once to BF16.

`RecordingOps` is the same set with every call appended to a trace (name, shapes; the shared
`npukit.compile.record.Recorder`), the starting point for lowering the reference into a program.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from npukit.compile.record import Recorder
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.cvo import CVO, STRICT_CVO
from npukit.targets.pccx.memory import kv_quantize

# device primitives taken verbatim from the numerics module: the GEMV family, then the CVO family's
# operation names from its table (npukit.targets.pccx.cvo.CVO); pccx v002 has no TANH, vector MUL/ADD,
# relu-with-bias, RSQRT or SQUARE: those are npukit's extended profile (reserved cvo_func codes)
DEVICE_OPS = ("gemv", "gemm", "findemax",
              *(s.op_name for f, s in CVO.items() if s.op_name and f in STRICT_CVO))
EXTENDED_OPS = tuple(s.op_name for f, s in CVO.items() if s.op_name and f not in STRICT_CVO)
MOVE_OPS = ("const", "kv_quantize", "swap_halves", "host_to_l2", "l2_to_host", "concat", "stack", "batch")


class PccxOps:
    """Default operation set: the pccx numerics primitives plus the named data movements."""

    gemv = staticmethod(nx.gemv)
    gemm = staticmethod(nx.gemm)  # one `gemv` per activation row, each with its own exponent
    findemax = staticmethod(nx.findemax)
    kv_quantize = staticmethod(kv_quantize)

    @staticmethod
    def const(x: float) -> np.float32:
        """A constant-cache entry (written by MEMSET at model load): the BF16 value of ``x``."""
        return np.float32(nx.bf16(x)[()])

    @staticmethod
    def swap_halves(x: np.ndarray) -> np.ndarray:
        """[a, b] -> [b, a]: two L2 -> L2 MEMCPYs of half a head each."""
        h = x.shape[-1] // 2
        return np.concatenate((x[..., h:], x[..., :h]), axis=-1)

    @staticmethod
    def concat(parts: list[np.ndarray]) -> np.ndarray:
        """Vectors side by side (the compiler places them contiguously in L2)."""
        return np.concatenate(parts)

    @staticmethod
    def stack(parts: list[np.ndarray]) -> np.ndarray:
        """Equal-length vectors as rows of one block (contiguous in L2)."""
        return np.stack(parts)

    @staticmethod
    def batch(parts: list[np.ndarray]) -> np.ndarray:
        """Equal-length activation vectors as the N rows of a GEMM operand (each row starts on an L2
        word; a compiler pads rows to whole words)."""
        return np.stack(parts)

    @staticmethod
    def host_to_l2(x: np.ndarray) -> np.ndarray:
        """A host float32 vector written into L2: one BF16 rounding (RNE)."""
        return nx.bf16(np.asarray(x, dtype=np.float32))

    @staticmethod
    def l2_to_host(x: np.ndarray) -> np.ndarray:
        """BF16 values read back to the host as float32 (exact)."""
        return np.asarray(x, dtype=np.float32).copy()


for _spec in CVO.values():  # the CVO family's operations, each the numerics function its table row names
    if _spec.op_name:
        setattr(PccxOps, _spec.op_name, staticmethod(_spec.numerics))


@dataclass
class RecordingOps(Recorder, PccxOps):
    """`PccxOps` that also records each call: (op name, shapes of array arguments, keyword flags)."""

    recorded: ClassVar[frozenset[str]] = frozenset(DEVICE_OPS + EXTENDED_OPS + MOVE_OPS)
