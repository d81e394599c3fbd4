"""tern in `npukit sweep --level sim`: one BitNet b1.58 block decoding a token at a context.

The workload is a BitNet config (a model preset name or a HF ``config.json`` path) cut to one block,
with synthetic ternary weights from a seed: the config and seed are what travels to the workers,
each rebuilds the weights once. Compile = the block's decode step run through the simulated
ternfpga datapath (`TernOps`: engine GEMVs, attention unit, FFN glue, host glue) after a KV cache of
``context - 1`` positions, giving the step's `Work` records; it depends on ``engine.lanes``, the
context and ``gather``, not on clocks, DDR rates or the phase. Time = those records on the shared
timing core in ``phase`` (where attention and the FFN glue run, `npukit.targets.tern.timing`).

A context past the attention unit's ``attention.t_max`` cannot be held: that point is an error row.
Energy is board power × time (ternfpga's method). The roofline is the roofline adapter's machine
(`npukit.targets.tern.perf`): the step's engine lane-slots at the peak ternary MAC rate or its
weight bytes at the DDR3 peak.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from npukit.errors import ConfigError, ModelError
from npukit.evidence import Tier
from npukit.perf.simsweep import SimResult, accumulate, roofline
from npukit.targets.tern.hw import TernHW
from npukit.targets.tern.ledger import PHASES
from npukit.targets.tern.perf import perf_machine
from npukit.targets.tern.timing import ENGINES, simulate_work

_WEIGHTS: dict[str, Any] = {}  # per process: synthetic weights of a workload, built once


@dataclass(frozen=True)
class BlockWorkload:
    name: str
    config: str  # the HF config as canonical JSON, cut to one block
    seed: int = 0


class TernSweep:
    target = "tern"
    engines = ENGINES
    workload_axes: ClassVar[dict[str, Any]] = {"context": 64, "phase": "fabric-ffn-glue", "gather": 1}

    def load_workload(self, spec: str) -> BlockWorkload:
        from npukit.models.presets import model_preset

        path = Path(spec)
        if path.suffix == ".json":
            try:
                cfg = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                raise ModelError(f"--model {spec}: not a readable config.json ({exc})") from None
        else:
            cfg = model_preset(spec)
        cfg.update(num_hidden_layers=1)
        cfg["quantization_config"] = dict(cfg.get("quantization_config") or {}, quantization_mode="online")
        return BlockWorkload(spec, json.dumps(cfg, sort_keys=True))

    def workload_digest(self, workload: BlockWorkload) -> str:
        return hashlib.sha256(f"{workload.config}|{workload.seed}".encode()).hexdigest()[:16]

    def program_key(self, hw: TernHW, params: dict[str, Any]) -> Any:
        return [hw.engine.lanes, int(params["context"]), bool(int(params["gather"])), hw.attention.t_max]

    def _net(self, workload: BlockWorkload, ops: Any) -> Any:
        from npukit.models.bitnet import BitNet
        from npukit.models.bitnet.config import BitNetConfig
        from npukit.models.bitnet.load import synthetic_weights

        key = self.workload_digest(workload)
        if key not in _WEIGHTS:
            cfg = BitNetConfig.from_hf(json.loads(workload.config))
            _WEIGHTS.clear()
            _WEIGHTS[key] = (cfg, synthetic_weights(cfg, workload.seed))
        cfg, w = _WEIGHTS[key]
        return BitNet(cfg, w, mode="quant", ops=ops)

    def compile(self, workload: BlockWorkload, hw: TernHW, params: dict[str, Any]) -> list:
        from npukit.targets.tern.ops import TernOps

        context = int(params["context"])
        if context < 1:
            raise ConfigError(f"tern: context must be >= 1, got {context}")
        ops = TernOps(hw, gather=bool(int(params["gather"])))
        net = self._net(workload, ops)
        cache = net.new_cache()
        c = net.cfg
        rng = np.random.default_rng(context)  # the cache's values only steer the data-dependent gather
        shape = (context - 1, c.num_key_value_heads, c.head_dim)
        cache.k[0] = rng.standard_normal(shape).astype(np.float32)
        cache.v[0] = rng.standard_normal(shape).astype(np.float32)
        net.forward([1], cache)
        return list(ops.work)

    def time(self, program: list, hw: TernHW, params: dict[str, Any]) -> SimResult:
        phase = params["phase"]
        if phase not in PHASES:
            raise ConfigError(f"tern: unknown phase {phase!r} (known: {', '.join(PHASES)})")
        res = simulate_work(program, hw, phase)
        cycles, busy, stalls = accumulate([res])
        tier = Tier.PROJECTED if phase == "engine-bound" else \
            Tier.weakest(Tier(hw.engine.tier), Tier(hw.host.tier), Tier.DERIVED)
        seconds = cycles / hw.clock_hz
        m = perf_machine(hw)
        macs = float(sum(w.macs for w in program if w.engine == "engine"))
        dram = float(sum(w.weight_bytes for w in program))
        roof_s, bound = roofline(macs, m.mac_rate("ternary"), dram, m.levels[0].peak_bps)
        roof_tier = Tier.weakest(m.figures["hw.peak_macs"].tier, m.figures["hw.ddr_peak"].tier)
        return SimResult(cycles, seconds, tier, hw.power.total_w * seconds,
                         Tier.weakest(Tier(hw.power.tier), tier), busy, stalls, macs, dram, roof_s, bound,
                         roof_tier, f"tern timing core, preset {hw.name}, phase {phase}, one block's decode")


ADAPTER = TernSweep()
