"""The rk3588 compiler: an ordered list of passes over the graph IR, each one optional.

The passes are `Pass` records (name, when enabled, what it does to the `Plan`); `compile_graph` turns
the enabled ones into stages of the shared `npukit.compile.pipeline.Pipeline` (ZigZag-style stage
list, each stage Plan → Plan, timed): sandwich → quantize (int8 only) → tile → barrier →
vendor-fuse → place → shard.
Turning a pass off shows what breaks without it: no tiling → the placement check fails on the first
op that does not fit; no barriers → the vendor optimizer re-fuses the tiles and placement fails;
no sandwich → LayerNorm squares overflow fp16 on spiking activations and the output collapses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npukit.compile.pipeline import Pipeline, Stage
from npukit.targets.rk3588.compile.barrier import insert_barriers
from npukit.targets.rk3588.compile.fuse import vendor_fuse
from npukit.targets.rk3588.compile.place import PlacementError, place
from npukit.targets.rk3588.compile.quantize import quantize
from npukit.targets.rk3588.compile.sandwich import MARGIN, Site, apply_sandwich, calibrate, plan_sites
from npukit.targets.rk3588.compile.shard import Shard, shard
from npukit.targets.rk3588.compile.tile import tile
from npukit.targets.rk3588.graph import Graph
from npukit.targets.rk3588.hw import RK3588HW
from npukit.targets.rk3588.tasks import WorkingSet, totals

__all__ = ["SCHEDULES", "CompileOptions", "Pass", "PlacementError", "Plan", "compile_graph"]

SCHEDULES = ("single", "round-robin", "pipeline", "data-parallel")


@dataclass
class CompileOptions:
    tiling: bool = True
    barriers: bool = True
    sandwich: bool = True
    schedule: str = "pipeline"
    task_limit: int | None = None
    pack: bool = False  # pack half-layer blocks into fewer submissions (else one per block, as the seed)
    dtype: str = "fp16"  # "int8": w8a8 matmuls (per-channel weight scales, static per-tensor activations)
    margin: float = MARGIN


@dataclass
class Plan:
    graph: Graph
    hw: RK3588HW
    options: CompileOptions
    shards: list[Shard] = field(default_factory=list)
    working_sets: dict[str, WorkingSet] = field(default_factory=dict)
    sites: list[Site] = field(default_factory=list)
    fused: list[str] = field(default_factory=list)
    calibration: dict[str, dict[str, float]] = field(default_factory=dict)
    log: list[tuple[str, str]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # wall time per pass (the pipeline's)

    @property
    def tasks(self) -> int:
        return sum(s.tasks for s in self.shards)

    def to_json(self) -> dict[str, Any]:
        g = self.graph
        return {
            "model": g.name, "seq_len": g.meta.get("seq_len"), "hw": self.hw.name,
            "options": vars(self.options),
            "passes": [{"pass": p, "result": r, "seconds": self.seconds.get(p)} for p, r in self.log],
            "sandwich": [vars(s) for s in self.sites],
            "ops": [{"name": n.name, "op": n.op, "shape": list(n.shape), "block": n.block,
                     "tiling": n.tiling, "tasks": totals(n, g, n.tiling, self.hw)[0],
                     "working_set": vars(self.working_sets[n.name]) if n.name in self.working_sets else None}
                    for n in g.nodes],
            "shards": [s.to_json() for s in self.shards], "tasks": self.tasks,
        }


@dataclass
class Pass:
    name: str
    enabled: Callable[[CompileOptions], bool]
    run: Callable[[Plan, list[np.ndarray]], str]


def _sandwich(plan: Plan, calib: list[np.ndarray]) -> str:
    if not calib:
        return "skipped: no calibration inputs"
    plan.calibration = calibrate(plan.graph, calib)
    plan.sites = plan_sites(plan.graph, plan.calibration, plan.options.margin)
    apply_sandwich(plan.graph, plan.sites)
    if not plan.sites:
        return "no intermediate near fp16 overflow; nothing applied"
    return "; ".join(f"{s.node} x2^{s.exp} (peak {s.quantity} {s.peak:.4g})" for s in plan.sites)


def _quantize(plan: Plan, calib: list[np.ndarray]) -> str:
    if not calib:
        from npukit.errors import ConfigError

        raise ConfigError("int8 (w8a8) needs calibration inputs for the activation scales")
    if not plan.calibration:
        plan.calibration = calibrate(plan.graph, calib)
    names = quantize(plan.graph, plan.calibration, plan.calibration["x"]["peak"])
    return f"{len(names)} matmuls w8a8 (per-channel weight scales, static per-tensor activation scales)"


def _tile(plan: Plan, calib: list[np.ndarray]) -> str:
    tile(plan.graph, plan.hw)
    return f"{sum(totals(n, plan.graph, n.tiling, plan.hw)[0] for n in plan.graph.nodes)} tasks"


def _barrier(plan: Plan, calib: list[np.ndarray]) -> str:
    before = len(plan.graph.nodes)
    insert_barriers(plan.graph)
    return f"{len(plan.graph.nodes) - before} barriers"


def _fuse(plan: Plan, calib: list[np.ndarray]) -> str:
    plan.fused = vendor_fuse(plan.graph)
    if plan.fused:
        return f"re-fused {len(plan.fused)} tiled ops"
    return "nothing to fuse (every tiled op fenced)"


def _place(plan: Plan, calib: list[np.ndarray]) -> str:
    plan.working_sets = place(plan.graph, plan.hw)
    worst = max(plan.working_sets.values(), key=lambda w: w.scratch_bytes)
    banks = max(w.cbuf_banks for w in plan.working_sets.values())
    return f"every op fits (max scratchpad {worst.scratch_bytes:,} B, max CBUF {banks} banks)"


def _shard(plan: Plan, calib: list[np.ndarray]) -> str:
    plan.shards = shard(plan.graph, plan.hw, plan.options.task_limit, plan.options.pack)
    return f"{len(plan.shards)} submissions of <= {plan.options.task_limit or plan.hw.task_limit} tasks"


PASSES: tuple[Pass, ...] = (
    Pass("sandwich", lambda o: o.sandwich, _sandwich),
    Pass("quantize", lambda o: o.dtype == "int8", _quantize),
    Pass("tile", lambda o: o.tiling, _tile),
    Pass("barrier", lambda o: o.barriers and o.tiling, _barrier),
    Pass("vendor-fuse", lambda o: True, _fuse),
    Pass("place", lambda o: True, _place),
    Pass("shard", lambda o: True, _shard),
)


def compile_graph(g: Graph, hw: RK3588HW, options: CompileOptions | None = None,
                  calibration: list[np.ndarray] | None = None) -> Plan:
    """Run the passes on a copy of ``g``; `PlacementError` if an op does not fit."""
    options = options or CompileOptions()
    if options.schedule not in SCHEDULES:
        from npukit.errors import ConfigError

        raise ConfigError(f"unknown schedule {options.schedule!r} (choose from {', '.join(SCHEDULES)})")
    if options.dtype not in ("fp16", "int8"):
        from npukit.errors import ConfigError

        raise ConfigError(f"unknown dtype {options.dtype!r} (fp16 or int8)")
    plan = Plan(g.copy(), hw, options)
    calib = calibration or []
    stages = [Stage(p.name, Plan, Plan, _stage(p)) for p in PASSES if p.enabled(options)]
    run = Pipeline(stages).run(plan, calibration=calib, log={})
    logged = run.ctx["log"]
    plan.log = [(p.name, logged.get(p.name, "off")) for p in PASSES]
    plan.seconds = run.timings()
    return plan


def _stage(p: Pass) -> Callable[[Plan, dict[str, Any]], Plan]:
    def fn(plan: Plan, ctx: dict[str, Any]) -> Plan:
        ctx["log"][p.name] = p.run(plan, ctx["calibration"])
        return plan

    return fn
