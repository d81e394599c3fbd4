"""The ``tern`` backend for BitNet b1.58: the ``quant`` integer datapath
(`npukit.runtime.backend_bitnet.BitNetBackend`) executed by the simulated ternfpga — projections on
the ternary engine (base-3 weight stream, K-lane sign-select, int32 accumulation, the
activation-sparse gather for ``down_proj``), the attention and FFN-glue unit models, and the soft
CPU's integer RMSNorm and Q15 RoPE. Bit-identical to ``quant``, logits included; the tests check it
token for token.

Every step is recorded as `npukit.sim.work.Work`; on request the shared timing core runs through
`npukit.targets.tern.timing`: ``stats()["timing"]`` holds simulated cycles per token for each
ternfpga phase, and ``trace(path, phase)`` writes a Perfetto trace of the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from npukit.errors import ConfigError, FormatError
from npukit.evidence import Ledger, Tier
from npukit.hw import load_hw
from npukit.runtime.backend_bitnet import KV_MODES, BitNetBackend
from npukit.runtime.backends import register_backend
from npukit.sim.trace import write_trace
from npukit.sim.work import Work
from npukit.targets.tern.ledger import PHASES
from npukit.targets.tern.ops import TernOps
from npukit.targets.tern.timing import simulate_work

DEFAULT_HW = "tern-arty-a7-35t"


class TernBackend(BitNetBackend):
    ops: TernOps

    def __init__(self, model: Any, kv: str = "fp32", lanes: int | None = None, gather: bool = True,
                 hw: Any = DEFAULT_HW, temperature: str = "fold", trace: str | None = None) -> None:
        self.hw = load_hw(hw, expect="tern") if isinstance(hw, str | Path) else hw
        ops = TernOps(self.hw, gather=gather, lanes=lanes)
        super().__init__(model, kv=kv, target="tern", temperature=temperature, trace=trace, ops=ops)
        self._marks: list[tuple[str, int, int]] = []  # (prefill|decode, tokens, end of its work)

    @property
    def engine(self):
        return self.ops.engine

    def reset(self) -> None:
        super().reset()
        self.ops.reset()
        self._marks = []

    def _forward(self, ids: list[int], kind: str) -> np.ndarray:
        try:
            logits = super()._forward(ids, kind)
        except FormatError as exc:
            if not str(exc).startswith("attention_unit:") or "keys" not in str(exc):
                raise
            t_max = self.hw.attention.t_max
            raise ConfigError(
                f"tern: the context outgrew the attention unit ({exc}; preset {self.hw.name} has "
                f"attention.t_max={t_max}): shorten the prompt or --max-new-tokens to fit {t_max} "
                f"positions, pick a preset with more KV (tern-arty-a7-100t holds 128), or "
                f"--set attention.t_max=N") from None
        c = self.net.cfg
        self.ops.lm_head(c.vocab_size, c.hidden_size)
        self._marks.append((kind, len(ids), len(self.ops.work)))
        return logits

    # -- timing -------------------------------------------------------------------------------------
    def _groups(self) -> list[tuple[str, int, list[Work]]]:
        out, start = [], 0
        for kind, n, end in self._marks:
            out.append((kind, n, self.ops.work[start:end]))
            start = end
        return out

    def _tier(self, phase: str) -> Tier:
        """derived when the soft CPU's measured glue applies unscaled (same shapes, and for host
        attention the measured context); projected otherwise, and always for engine-bound."""
        c, h = self.net.cfg, self.hw.host
        if phase == "engine-bound":
            return Tier.PROJECTED
        same = (c.hidden_size, c.intermediate_size, c.num_attention_heads, c.num_key_value_heads,
                c.head_dim) == (h.hidden, h.intermediate, h.heads, h.kv_heads, h.head_dim)
        if phase == "host-split":
            same = same and all(w.sfu_elems == h.context for _, _, ws in self._groups() for w in ws
                                if w.engine == "attention")
        return Tier.weakest(Tier(self.hw.engine.tier), Tier(h.tier)) if same else Tier.PROJECTED

    def timing(self) -> Ledger:
        """Simulated cycles of this run per phase (one timing-core run per forward pass)."""
        led = Ledger()
        groups = self._groups()
        src = (f"npukit.sim.timing over the run's engine/unit/host work; costs from the tern "
               f"microarchitecture and preset {self.hw.name} (npukit.targets.tern.timing)")
        for ph in PHASES:
            tier = self._tier(ph)
            cyc = [(kind, n, simulate_work(ws, self.hw, ph).cycles) for kind, n, ws in groups]
            pre = [(n, c) for kind, n, c in cyc if kind == "prefill"]
            dec = [c for kind, _, c in cyc if kind == "decode"]
            if pre:
                led.add(f"prefill_cycles.{ph}", sum(c for _, c in pre), "cycles", tier,
                        f"{src}; {sum(n for n, _ in pre)} prompt tokens")
            if dec:
                per = sum(dec) / len(dec)
                led.add(f"cycles_per_token.{ph}", per, "cycles", tier,
                        f"{src}; mean of {len(dec)} decode steps")
                led.add(f"tokens_per_second.{ph}", self.hw.clock_hz / per, "tok/s", tier,
                        f"clock {self.hw.clock_mhz:g} MHz / cycles_per_token.{ph}")
        return led

    def trace(self, path: str | Path, phase: str = "fabric-ffn-glue") -> Path:
        """Write the run's timeline in ``phase`` as Chrome/Perfetto trace JSON."""
        if phase not in PHASES:
            raise ConfigError(f"unknown tern phase {phase!r} (known: {', '.join(PHASES)})")
        res = simulate_work(self.ops.work, self.hw, phase)
        return write_trace(res, path, process=f"tern {self.hw.name} ({phase})",
                           metadata={"hw": self.hw.name, "phase": phase, "tier": str(self._tier(phase))})

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        s = self.ops.engine.stats
        out.update(engine_lanes=self.ops.engine.K, engine_cycles=s.tiles,
                   engine_dense_cycles=s.dense_tiles, engine_weight_bytes=s.weight_bytes,
                   engine_gemvs=s.gemvs, hw=self.hw.name)
        if self._marks:
            out["timing"] = self.timing().to_json()
            out["figures"] = out["timing"]["figures"]  # shown by `npukit generate`
            if self.trace_path:  # stats() closes a run: write its timeline once
                out["trace"] = str(self.trace(self.trace_path))
        return out

register_backend("bitnet", "tern", TernBackend, KV_MODES,
                 help="the quant datapath on the simulated ternfpga engine and units (bit-identical)")
