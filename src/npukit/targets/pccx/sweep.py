"""pccx in `npukit sweep --level sim`: a Gemma 3n decode token (or a prefill chunk) at a context.

The workload is a Gemma 3n model (``embedded``: the shipped ``gemma3n-tiny``; a model directory; a
preset or a ``config.json`` with synthetic weights), quantized once to the driver's INT4 store (what
the object store ships). Compile = the driver's whole path on the fast executor: trace, lower and
compile the programs, prefill ``context - 1`` prompt tokens in chunks, then run the step; its `Work`
records are the program (phase ``decode``: the token at position ``context - 1``; phase ``prefill``:
the first chunk of that prompt, as many tokens as one chunk holds). The program depends on the
compute and memory shapes, not on the clocks, DDR rates, HP/ACP ports or DMA costs, so those sweeps
share it. Time = the records on the pccx timing model.

Energy = the roofline adapter's per-action energies (`npukit.targets.pccx.perf`: INT4 MACs, SFU
elements, DDR bits) plus its static power × time; the roofline = the step's MACs at the GEMV peak or
its DDR bytes at the DDR peak.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
from typing import Any, ClassVar

from npukit.errors import ConfigError, ModelError
from npukit.evidence import Tier
from npukit.perf.simsweep import SimResult, accumulate, roofline
from npukit.targets.pccx.hw import AcpPort, Clocks, Dma, HpPorts, PccxHw
from npukit.targets.pccx.perf import perf_machine

PHASES = ("decode", "prefill")


def _synthetic(path: str) -> Any:
    import json
    from pathlib import Path

    from npukit.models.gemma3n import Gemma3nConfig, synthetic_weights

    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ModelError(f"--model {path}: not a readable config.json ({exc})") from None
    return synthetic_weights(Gemma3nConfig.from_hf(raw), seed=0)


class PccxSweep:
    target = "pccx"
    engines = ("gemv", "gemm", "sfu", "dma", "ctrl")
    workload_axes: ClassVar[dict[str, Any]] = {"context": 64, "kv": "int8", "phase": "decode"}

    def load_workload(self, spec: str) -> Any:
        from npukit.models.loading import load_model
        from npukit.targets.pccx.gemma3n_quant import Int4Store

        if spec in ("embedded", "gemma3n-tiny"):
            from npukit.models.embedded import default_model_dir

            spec = str(default_model_dir())
        if spec.endswith(".json"):  # a config alone: synthetic weights (seed 0)
            return Int4Store(_synthetic(spec))
        loaded = load_model(spec)
        if loaded.family != "gemma3n":
            raise ConfigError(f"pccx runs Gemma 3n models; {spec} is {loaded.family}")
        return Int4Store(loaded.weights)

    def workload_digest(self, store: Any) -> str:
        if not hasattr(store, "_sweep_digest"):
            store._sweep_digest = hashlib.sha256(pickle.dumps(store)).hexdigest()[:16]
        return store._sweep_digest

    def program_key(self, hw: PccxHw, params: dict[str, Any]) -> Any:
        ddr = dataclasses.replace(hw.ddr, peak_gbps=0.0, bandwidth_gbps=0.0)  # its size stays in the key
        shape = dataclasses.replace(hw, name="", clocks=Clocks(), ddr=ddr, hp_ports=HpPorts(),
                                    acp=AcpPort(), dma=Dma())
        return [repr(shape), int(params["context"]), params["kv"], params["phase"]]

    def compile(self, store: Any, hw: PccxHw, params: dict[str, Any]) -> list:
        from npukit.targets.pccx.driver import PccxDriver

        context, phase = int(params["context"]), params["phase"]
        if phase not in PHASES or context < 2:
            raise ConfigError(f"pccx: phase decode|prefill and context >= 2, got {phase}, {context}")
        drv = PccxDriver(hw, executor="fast", timing=False).open().load(store)
        drv.kv_init(params["kv"]).start()
        prompt = [3 + i % 61 for i in range(context - 1)]
        if phase == "prefill":  # the first chunk of a context-token prompt
            drv.prefill(prompt[:drv.chunk_length(0, context - 1)])
        else:
            drv.prefill(prompt)
            drv.step(5)
        works = list(drv.last_works)
        drv.close()
        return works

    def time(self, works: list, hw: PccxHw, params: dict[str, Any]) -> SimResult:
        from npukit.targets.pccx.timing import simulate_works

        res = simulate_works(hw, works)
        cycles, busy, stalls = accumulate([res])
        seconds = res.seconds
        m = perf_machine(hw)
        macs = float(sum(w.macs for w in works))
        ddr = float(sum(w.weight_bytes + w.ddr_read_bytes + w.ddr_write_bytes for w in works))
        sfu = float(sum(w.sfu_elems for w in works))
        dyn_pj = macs * m.mac_energy("int4") + sfu * m.sfu_pj + ddr * 8 * m.levels[0].pj_per_bit
        energy = dyn_pj * 1e-12 + m.static_power_w * seconds
        roof_s, bound = roofline(macs, m.mac_rate("int4"), ddr, m.levels[0].peak_bps)
        roof_tier = Tier.weakest(m.figures["hw.peak_macs"].tier, m.figures["hw.ddr_peak"].tier)
        return SimResult(cycles, seconds, Tier.DERIVED, energy, Tier.PROJECTED, busy, stalls, macs, ddr,
                         roof_s, bound, roof_tier,
                         f"pccx timing model, preset {hw.name}, {params['phase']} at context "
                         f"{params['context']}")


ADAPTER = PccxSweep()
