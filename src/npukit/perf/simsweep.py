"""Simulator-level design-space sweeps: each point compiles the workload for one hardware description
and runs the target's cycle-level timing model, next to the roofline of the same compiled program.

A target takes part through a `SimAdapter` named by its registry record (``extra["sim_sweep"]``, the
way the roofline's ``perf`` adapter is found), so this module never imports a target. The adapter
splits the work in two:

* ``compile(workload, hw, params)`` — what depends on the program only (lowering, partitioning,
  placement); its result is cached per process under a content key (`program_key`), so points that
  differ only in parameters the program ignores (clocks, bandwidths, phases) share it;
* ``time(program, hw, params)`` — the timing run, returning a `SimResult`.

Every row holds the full parameter set, a ``point_id`` (a digest of that set, the workload's digest,
the preset and the fixed overrides: what ``--resume`` matches on), and either the figures or a
one-line ``error``. Rows depend only on the point, never on which process or node ran it.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Protocol

from npukit import hw as hwmod
from npukit import registry
from npukit.errors import ConfigError
from npukit.evidence import Tier

STATUS_OK, STATUS_ERROR = "ok", "error"
CACHE_LIMIT = 64  # compiled programs kept per process (least recently used dropped)


@dataclass
class SimResult:
    """One point's timing run. ``busy`` and ``stalls`` are cycles (stalls keyed ``engine.kind``);
    the roofline is the same program's MACs and DRAM bytes at the hardware's peak rates."""

    cycles: float
    seconds: float
    time_tier: Tier
    energy_j: float | None  # None: the target has no energy model
    energy_tier: Tier | None
    busy: dict[str, float]
    stalls: dict[str, float]
    macs: float
    dram_bytes: float
    roofline_s: float
    roofline_bound: str
    roofline_tier: Tier
    source: str


class SimAdapter(Protocol):
    target: str
    engines: tuple[str, ...]
    workload_axes: dict[str, Any]  # parameters of the workload (not hardware fields), with defaults

    def load_workload(self, spec: str) -> Any: ...
    def workload_digest(self, workload: Any) -> str: ...
    def program_key(self, hw: Any, params: dict[str, Any]) -> Any: ...
    def compile(self, workload: Any, hw: Any, params: dict[str, Any]) -> Any: ...
    def time(self, program: Any, hw: Any, params: dict[str, Any]) -> SimResult: ...


def adapter_for(target: str) -> SimAdapter:
    try:
        rec = registry.get(target)
    except ConfigError:
        raise ConfigError(f"unknown target {target!r}") from None
    if not rec.provides("sim_sweep"):
        have = ", ".join(n for n in registry.names() if registry.get(n).provides("sim_sweep"))
        raise ConfigError(f"--level sim: target {target!r} has no simulator sweep (targets with one: {have})")
    return rec.resolve("sim_sweep")


@dataclass
class SimSpec:
    """What every point shares: the preset, fixed overrides, the workload and the swept axes."""

    hw: str
    model: str
    axes: dict[str, list[Any]]
    overrides: list[str] = field(default_factory=list)
    fixed: dict[str, Any] = field(default_factory=dict)  # workload parameters not swept
    use_cache: bool = True

    @property
    def target(self) -> str:
        return hwmod.target_of(hwmod.load_hw(self.hw, self.overrides))


def digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def point_id(spec: SimSpec, workload_digest: str, params: dict[str, Any]) -> str:
    return digest({"hw": spec.hw, "set": spec.overrides, "model": workload_digest, "point": params})


def grid(spec: SimSpec, adapter: SimAdapter) -> list[dict[str, Any]]:
    """Every point's full parameter set: swept axes, then the workload's fixed or default values."""
    import itertools

    for k in spec.fixed:
        if k not in adapter.workload_axes:
            raise ConfigError(f"{k!r} is not a parameter of the {adapter.target} workload "
                              f"(known: {', '.join(adapter.workload_axes)})")
    names = list(spec.axes)
    out = []
    for combo in itertools.product(*spec.axes.values()):
        p = dict(zip(names, combo, strict=True))
        for k, v in adapter.workload_axes.items():
            p.setdefault(k, spec.fixed.get(k, v))
        out.append(p)
    return out


def columns(spec: SimSpec, adapter: SimAdapter) -> list[str]:
    params = [*spec.axes, *(k for k in adapter.workload_axes if k not in spec.axes)]
    return [*params, "point_id", "status", "error", "cycles", "time_s", "time_tier", "energy_j",
            "energy_tier", *(f"util.{e}" for e in adapter.engines), "util_tier", "stalls", "dominant_stall",
            "dominant_stall_share", "roofline_s", "roofline_bound", "roofline_tier", "sim_over_roofline",
            "ratio_tier", "macs", "dram_bytes", "counts_tier", "program_id", "source"]


@dataclass
class Failed:
    """A program that cannot be built: its one-line error (kept, and shipped, instead of the exception,
    which need not survive pickling)."""

    error: str


class CompileFailure(Exception):
    pass


def one_line(exc: BaseException) -> str:
    if isinstance(exc, CompileFailure):
        return str(exc)
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


@dataclass
class Evaluator:
    """Evaluates points in one process: hardware descriptions and compiled programs cached here."""

    spec: SimSpec
    workload: Any
    adapter: SimAdapter = field(init=False)
    workload_digest: str = field(init=False)
    programs: OrderedDict = field(default_factory=OrderedDict)
    hws: dict[tuple, Any] = field(default_factory=dict)
    compiles: int = 0
    hits: int = 0
    compile_s: float = 0.0

    def __post_init__(self) -> None:
        self.adapter = adapter_for(self.spec.target)
        self.workload_digest = self.adapter.workload_digest(self.workload)

    def _hw(self, params: dict[str, Any]) -> Any:
        over = tuple(f"{k}={v}" for k, v in params.items() if k not in self.adapter.workload_axes)
        if over not in self.hws:
            self.hws[over] = hwmod.load_hw(self.spec.hw, [*self.spec.overrides, *over])
        return self.hws[over]

    def row_id(self, params: dict[str, Any]) -> str:
        return point_id(self.spec, self.workload_digest, params)

    def program_id(self, params: dict[str, Any]) -> str:
        """The content key of the program this point compiles ("" when its hardware is invalid)."""
        try:
            return digest([self.workload_digest, self.adapter.program_key(self._hw(params), params)])
        except Exception:  # reported when the point runs
            return ""

    def compile(self, params: dict[str, Any]) -> Any:
        """This point's program built here (a `Failed` when it cannot be), counted, not cached."""
        t0 = time.perf_counter()
        try:
            prog = self.adapter.compile(self.workload, self._hw(params), params)
        except Exception as exc:  # a program that cannot be built fails the same way every time
            prog = Failed(one_line(exc))
        self.compile_s += time.perf_counter() - t0
        self.compiles += 1
        return prog

    def adopt(self, key: str, prog: Any) -> None:
        """Keep a program (compiled here or elsewhere) under its content key."""
        if self.spec.use_cache:
            self.programs[key] = prog
            while len(self.programs) > CACHE_LIMIT:
                self.programs.popitem(last=False)

    def _program(self, hw: Any, params: dict[str, Any]) -> tuple[str, Any]:
        key = digest([self.workload_digest, self.adapter.program_key(hw, params)])
        if self.spec.use_cache and key in self.programs:
            self.hits += 1
            self.programs.move_to_end(key)
            prog = self.programs[key]
        else:
            prog = self.compile(params)
            self.adopt(key, prog)
        if isinstance(prog, Failed):
            raise CompileFailure(prog.error)
        return key, prog

    def row(self, params: dict[str, Any]) -> dict[str, Any]:
        row: dict[str, Any] = {**params, "point_id": self.row_id(params)}
        try:
            hw = self._hw(params)
            key, prog = self._program(hw, params)
            res = self.adapter.time(prog, hw, params)
        except Exception as exc:  # a failing point is a row, the sweep goes on
            row.update(status=STATUS_ERROR, error=one_line(exc))
            return row
        row.update(status=STATUS_OK, error="", program_id=key, **figures(res, self.adapter.engines))
        return row

    def rows(self, points: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [self.row(p) for p in points]


def figures(res: SimResult, engines: tuple[str, ...]) -> dict[str, Any]:
    """A result's columns: utilisation per engine, the stalls as ``engine.kind=cycles;...`` (cycles of
    the timing run: ``time_tier``) and the dominant one with its share of all engine-cycles, the
    roofline next to the simulator, each figure with its tier."""
    cyc = res.cycles
    stalls = {k: v for k, v in sorted(res.stalls.items()) if v > 0}
    dom = max(stalls, key=lambda k: stalls[k]) if stalls else ""
    total = cyc * len(engines)
    out: dict[str, Any] = {
        "cycles": float(cyc), "time_s": float(res.seconds), "time_tier": str(res.time_tier),
        "energy_j": None if res.energy_j is None else float(res.energy_j),
        "energy_tier": "" if res.energy_tier is None else str(res.energy_tier),
        **{f"util.{e}": float(100.0 * res.busy.get(e, 0.0) / cyc) if cyc else 0.0 for e in engines},
        "util_tier": str(res.time_tier),
        "stalls": ";".join(f"{k}={v:.6g}" for k, v in stalls.items()),
        "dominant_stall": dom, "dominant_stall_share": float(stalls[dom] / total) if dom and total else 0.0,
        "roofline_s": float(res.roofline_s), "roofline_bound": res.roofline_bound,
        "roofline_tier": str(res.roofline_tier),
        "sim_over_roofline": float(res.seconds / res.roofline_s) if res.roofline_s > 0 else float("nan"),
        "ratio_tier": str(Tier.weakest(res.time_tier, res.roofline_tier)),
        "macs": float(res.macs), "dram_bytes": float(res.dram_bytes),
        "counts_tier": str(Tier.DERIVED),  # counted from the compiled program
        "source": res.source,
    }
    return out


def accumulate(results: list[Any]) -> tuple[float, dict[str, float], dict[str, float]]:
    """Programs run back to back (`npukit.sim.timing.TimingResult` each): total cycles, busy cycles
    per engine, stall cycles per ``engine.kind``."""
    cycles, busy, stalls = 0.0, {}, {}
    for r in results:
        cycles += r.cycles
        for name, st in r.engines.items():
            busy[name] = busy.get(name, 0.0) + st.busy
            for kind, c in st.stalls.items():
                stalls[f"{name}.{kind}"] = stalls.get(f"{name}.{kind}", 0.0) + c
    return cycles, busy, stalls


def roofline(macs: float, mac_rate: float, dram_bytes: float, dram_bps: float) -> tuple[float, str]:
    """The roofline bound of a program: its MACs at the peak MAC rate or its DRAM bytes at the peak
    bandwidth, whichever takes longer."""
    t_mac = macs / mac_rate if mac_rate > 0 else 0.0
    t_mem = dram_bytes / dram_bps if dram_bps > 0 else 0.0
    return (t_mac, "compute") if t_mac >= t_mem else (t_mem, "dram")
