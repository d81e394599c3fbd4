"""BitNet b1.58 backends: ``golden`` (float32 AutoBitLinear arithmetic), ``quant`` (the integer
reference of ternfpga's datapath, `npukit.models.bitnet.intpath`) and ``tern`` (the same integer
datapath executed by the simulated ternfpga: projections on the ternary engine — base-3 weight
stream, K-lane sign-select, int32 accumulation, the activation-sparse gather for ``down_proj`` —
the attention and FFN-glue unit models, and the soft CPU's integer RMSNorm and Q15 RoPE).
``tern`` is bit-identical to ``quant``, logits included; the tests check it token for token.

``tern`` also records every step as `npukit.sim.work.Work` and, on request, runs the shared timing
core through `npukit.targets.tern.timing`: ``stats()["timing"]`` holds simulated cycles per token
for each ternfpga phase, and ``trace(path, phase)`` writes a Perfetto trace of the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from npukit.errors import ConfigError
from npukit.evidence import Ledger, Tier
from npukit.hw import load_hw
from npukit.models.bitnet.model import BitNet
from npukit.runtime.backends import register_backend
from npukit.sim.trace import write_trace
from npukit.sim.work import Work
from npukit.targets.tern.ledger import PHASES
from npukit.targets.tern.ops import TernOps
from npukit.targets.tern.timing import simulate_work

KV_MODES = ("fp32",)  # the references keep their K/V cache in float32
DEFAULT_HW = "tern-arty-a7-35t"


class BitNetBackend:
    def __init__(self, model: Any, kv: str = "fp32", target: str = "golden", lanes: int | None = None,
                 gather: bool = True, hw: Any = DEFAULT_HW, temperature: str = "fold",
                 trace: str | None = None) -> None:
        if trace is not None and target != "tern":
            raise ConfigError(f"--trace needs a target with a timing model; {target!r} has none (use tern)")
        self.target, self.kv, self.trace_path = target, kv, trace
        self.ops: TernOps | None = None
        if target == "tern":
            self.hw = load_hw(hw, expect="tern") if isinstance(hw, str | Path) else hw
            self.ops = TernOps(self.hw, gather=gather, lanes=lanes)
        mode = "golden" if target == "golden" else "quant"
        self.net = BitNet(model.config, model.weights, mode=mode, ops=self.ops, temperature=temperature)
        self.cache = self.net.new_cache()
        self._marks: list[tuple[str, int, int]] = []  # (prefill|decode, tokens, end of its work)

    @property
    def engine(self):
        return None if self.ops is None else self.ops.engine

    def reset(self) -> None:
        self.cache = self.net.new_cache()
        if self.ops is not None:
            self.ops.reset()
        self._marks = []

    def _forward(self, ids: list[int], kind: str) -> np.ndarray:
        logits = self.net.forward(ids, self.cache)[-1]
        if self.ops is not None:
            c = self.net.cfg
            self.ops.lm_head(c.vocab_size, c.hidden_size)
            self._marks.append((kind, len(ids), len(self.ops.work)))
        return logits

    def prefill(self, ids: Sequence[int]) -> np.ndarray:
        return self._forward([int(t) for t in ids], "prefill")

    def step(self, token: int) -> np.ndarray:
        return self._forward([int(token)], "decode")

    # -- timing -------------------------------------------------------------------------------------
    def _groups(self) -> list[tuple[str, int, list[Work]]]:
        assert self.ops is not None
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
        if self.ops is None:
            raise ConfigError(f"target {self.target!r} has no timing model (only tern)")
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
        if self.ops is None:
            raise ConfigError(f"target {self.target!r} has no timing model (only tern)")
        if phase not in PHASES:
            raise ConfigError(f"unknown tern phase {phase!r} (known: {', '.join(PHASES)})")
        res = simulate_work(self.ops.work, self.hw, phase)
        return write_trace(res, path, process=f"tern {self.hw.name} ({phase})",
                           metadata={"hw": self.hw.name, "phase": phase, "tier": str(self._tier(phase))})

    def stats(self) -> dict[str, Any]:
        c = self.net.cfg
        out: dict[str, Any] = {"target": self.target, "kv": self.kv, "positions": self.cache.length,
                               "kv_bytes": 2 * c.num_hidden_layers * self.cache.length * c.kv_dim * 4}
        if self.ops is not None:
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


def _factory(target: str):
    def make(model: Any, kv: str = "fp32", **options: Any) -> BitNetBackend:
        return BitNetBackend(model, kv=kv, target=target, **options)
    return make


register_backend("bitnet", "golden", _factory("golden"), KV_MODES,
                 help="float32 NumPy reference of transformers' BitNet (AutoBitLinear)")
register_backend("bitnet", "quant", _factory("quant"), KV_MODES,
                 help="integer reference of ternfpga's datapath (int8×ternary, Q15 glue, fixed-point units)")
register_backend("bitnet", "tern", _factory("tern"), KV_MODES,
                 help="the quant datapath on the simulated ternfpga engine and units (bit-identical)")
