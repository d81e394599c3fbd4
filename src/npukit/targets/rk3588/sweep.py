"""rk3588 in `npukit sweep --level sim`: an encoder compiled for the NPU and timed per schedule.

``--model NAME[:layers=N][:px=N]``: a SigLIP preset (synthetic seeded weights, default 1 layer at
128 px) or a model directory; the loaded encoder is the workload the object store ships. Compile = the
fixed-shape plan (`runner.fixed_shape_plan`: fuse, tile, place, shard) for the schedule; a scratchpad
or CBUF too small for an op fails tiling or placement, and that point is a row with the error. Time =
the plan on the shared timing core for ``batch`` inputs (`timing.simulate_plan`).

The preset has no energy figures, so energy is left empty. The roofline: the plan's MACs at every
core's peak MAC rate, or its DMA bytes at the shared DDR's rate, whichever is longer.
"""

from __future__ import annotations

import hashlib
import pickle
from typing import Any, ClassVar

from npukit.errors import ConfigError
from npukit.evidence import Tier
from npukit.perf.simsweep import SimResult, accumulate, roofline
from npukit.targets.rk3588.compile import SCHEDULES, CompileOptions, Plan
from npukit.targets.rk3588.hw import RK3588HW
from npukit.targets.rk3588.tasks import totals


def _spec(text: str) -> tuple[str, int, int | None]:
    name, *opts = text.split(":")
    layers, px = 1, 128
    for o in opts:
        key, _, value = o.partition("=")
        if key not in ("layers", "px") or not value.isdigit():
            raise ConfigError(f"--model {text}: options are :layers=N and :px=N")
        layers, px = (int(value), px) if key == "layers" else (layers, int(value))
    return name, layers, px


class Rk3588Sweep:
    target = "rk3588"
    engines = ("npu0", "npu1", "npu2")
    workload_axes: ClassVar[dict[str, Any]] = {"schedule": "pipeline", "batch": 3, "tiling": 1,
                                               "dtype": "fp16"}

    def load_workload(self, spec: str) -> Any:
        from npukit.targets.rk3588.runner import resolve_model

        name, layers, px = _spec(spec)
        return resolve_model(name, layers, px)

    def workload_digest(self, workload: Any) -> str:
        if not hasattr(workload, "_sweep_digest"):
            workload._sweep_digest = hashlib.sha256(pickle.dumps(workload)).hexdigest()[:16]
        return workload._sweep_digest

    def program_key(self, hw: RK3588HW, params: dict[str, Any]) -> Any:
        return [repr(hw), params["schedule"], int(params["tiling"]), params["dtype"]]

    def compile(self, workload: Any, hw: RK3588HW, params: dict[str, Any]) -> Plan:
        from npukit.targets.rk3588.runner import fixed_shape_plan

        if params["schedule"] not in SCHEDULES:
            raise ConfigError(f"rk3588: unknown schedule {params['schedule']!r} ({', '.join(SCHEDULES)})")
        opts = CompileOptions(tiling=bool(int(params["tiling"])), schedule=params["schedule"],
                              dtype=params["dtype"])
        return fixed_shape_plan(workload, workload.config.seq_len or 128, hw, opts)

    def time(self, plan: Plan, hw: RK3588HW, params: dict[str, Any]) -> SimResult:
        from npukit.targets.rk3588.timing import simulate_plan

        batch = int(params["batch"])
        if batch < 1:
            raise ConfigError(f"rk3588: batch must be >= 1, got {batch}")
        rep = simulate_plan(plan, params["schedule"], batch)
        cycles, busy, stalls = accumulate([rep.result])
        g = plan.graph
        sums = [totals(n, g, n.tiling, hw) for n in g.nodes]
        dma, macs = batch * sum(s[1] for s in sums), batch * sum(s[2] for s in sums)
        per = hw.core.int8_macs_per_cycle if params["dtype"] == "int8" else hw.core.fp16_macs_per_cycle
        roof_s, bound = roofline(macs, hw.n_cores * per.value * hw.clock_hz, dma,
                                 hw.dma.ddr_total_gbps.value * 1e9)
        roof_tier = Tier.weakest(Tier(per.tier), Tier(hw.dma.ddr_total_gbps.tier),
                                 Tier(hw.core.clock_mhz.tier))
        return SimResult(cycles, cycles / hw.clock_hz, Tier.PROJECTED, None, None, busy, stalls, float(macs),
                         float(dma), roof_s, bound, roof_tier,
                         f"rk3588 timing core, {params['schedule']}, batch {batch} (no energy model)")


ADAPTER = Rk3588Sweep()
