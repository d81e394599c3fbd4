"""The analytic model's view of a device: peak rates, memory levels, energies, static power.

Targets describe their hardware in their own dataclasses (`npukit.hw`); an *adapter* per target
turns one into a `Machine`. Every number a Machine holds also sits in ``machine.figures`` with its
tier and source, so a report can say where each input came from.

The adapter is the ``perf`` capability of the target's `npukit.registry.Target` record
(``perf_machine(hw) -> Machine`` in ``npukit/targets/<target>/perf.py``). The ``roofline``
target is a plain description built here, for devices that have no npukit target (and for tests);
it registers its own record when this module is imported.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from npukit import hw as hwmod
from npukit import registry
from npukit.errors import ConfigError
from npukit.evidence import Ledger, Tier
from npukit.perf import energy

TRAFFIC = ("weights", "kv", "act")  # classes of bytes a memory level may carry


@dataclass(frozen=True)
class MemLevel:
    name: str
    capacity_bytes: float
    peak_bps: float  # bytes/s
    carries: tuple[str, ...]  # subset of TRAFFIC
    pj_per_bit: float = 0.0  # charged per bit moved through this level
    effective_bps: float | None = None  # sustained rate, if known
    clocked: bool = False  # bandwidth scales with the core clock (on-chip ports)

    def bps(self, basis: str) -> float:
        if basis == "effective" and self.effective_bps:
            return self.effective_bps
        return self.peak_bps


@dataclass(frozen=True)
class Machine:
    name: str
    target: str
    clock_hz: float
    lanes: int
    macs_per_lane_cycle: dict[str, float]  # by weight operand type: ternary/int4/int8/fp16/fp32
    sfu_per_cycle: float
    levels: tuple[MemLevel, ...]  # outermost first
    mac_pj: dict[str, float]
    sfu_pj: float
    static_power_w: float
    sfu_overlaps_mac: bool = True  # SFU consumes GEMV output through a FIFO while the next GEMV runs
    figures: Ledger = field(default_factory=Ledger, compare=False)

    def mac_rate(self, kind: str) -> float:
        """Peak MAC/s for a weight operand type; types the engine lacks run at its slowest rate
        (they would be widened to a supported type)."""
        per = self.macs_per_lane_cycle.get(kind)
        if per is None:
            per = min(self.macs_per_lane_cycle.values())
        return per * self.lanes * self.clock_hz

    def mac_energy(self, kind: str) -> float:
        return self.mac_pj.get(kind, max(self.mac_pj.values()))

    def level(self, name: str) -> MemLevel:
        for lv in self.levels:
            if lv.name == name:
                return lv
        raise ConfigError(f"machine {self.name} has no memory level {name!r}")

    def replace(self, **overrides: Any) -> Machine:
        """Machine-level overrides (``perf.*`` keys): clock_mhz, lanes, static_power_w, sfu_pj,
        <level>_gbps, <level>_effective_gbps, <level>_pj_per_bit, mac_pj_<type>."""
        kw: dict[str, Any] = {}
        levels = list(self.levels)
        macpj = dict(self.mac_pj)
        scale_clock = 1.0
        for key, value in overrides.items():
            try:
                v = float(value)
            except (TypeError, ValueError):
                raise ConfigError(f"perf.{key}: expected a number, got {value!r}") from None
            if not (math.isfinite(v) and v >= 0) or (v == 0 and key != "static_power_w"):
                raise ConfigError(f"perf.{key} must be a positive number, got {value!r}")
            if key == "clock_mhz":
                scale_clock = v * 1e6 / self.clock_hz
                kw["clock_hz"] = v * 1e6
            elif key == "lanes":
                kw["lanes"] = int(v)
            elif key in ("static_power_w", "sfu_pj", "sfu_per_cycle"):
                kw[key] = v
            elif key.startswith("mac_pj_"):
                macpj[key[7:]] = v
            else:
                for i, lv in enumerate(levels):
                    if key == f"{lv.name}_gbps":
                        levels[i] = dataclasses.replace(lv, peak_bps=v * 1e9)
                    elif key == f"{lv.name}_effective_gbps":
                        levels[i] = dataclasses.replace(lv, effective_bps=v * 1e9)
                    elif key == f"{lv.name}_pj_per_bit":
                        levels[i] = dataclasses.replace(lv, pj_per_bit=v)
                    else:
                        continue
                    break
                else:
                    names = ", ".join(f"{lv.name}_gbps" for lv in levels)
                    raise ConfigError(f"unknown perf override {key!r} (known: clock_mhz, lanes, "
                                      f"static_power_w, sfu_pj, mac_pj_<type>, {names}, ...)")
        if scale_clock != 1.0:  # on-chip ports run off the core clock
            levels = [dataclasses.replace(lv, peak_bps=lv.peak_bps * scale_clock,
                                          effective_bps=lv.effective_bps and lv.effective_bps * scale_clock)
                      if lv.clocked else lv for lv in levels]
        kw["levels"] = tuple(levels)
        kw["mac_pj"] = macpj
        figs = Ledger(dict(self.figures.figures))
        for key, value in overrides.items():
            figs.add(f"hw.override.{key}", float(value), "", Tier.PROJECTED, "user override (--set perf.*)")
        kw["figures"] = figs
        return dataclasses.replace(self, **kw)


# --- adapters ---------------------------------------------------------------------------------

target_of = hwmod.target_of


def machine_from_hw(desc: Any) -> Machine:
    """The Machine of a hardware description, from its target's ``perf`` adapter."""
    target = target_of(desc)
    try:
        fn: Callable[[Any], Machine] = registry.get(target, "perf").resolve("perf")
    except ConfigError:
        raise ConfigError(f"no performance adapter for target {target!r}") from None
    return fn(desc)


def load_machine(preset: str, overrides: list[str] | None = None) -> tuple[Any, Machine]:
    """Load a hardware preset with ``--set`` overrides; ``perf.*`` keys go to the Machine."""
    hw_over, perf_over = [], {}
    for text in overrides or []:
        path, value = hwmod.parse_override(text)
        if path[0] == "perf":
            if len(path) != 2:
                raise ConfigError(f"override {text!r}: perf overrides are perf.<key>=<value>")
            perf_over[path[1]] = value
        else:
            hw_over.append(text)
    desc = hwmod.load_hw(preset, hw_over)
    m = machine_from_hw(desc)
    return desc, (m.replace(**perf_over) if perf_over else m)


# --- generic "roofline" description ----------------------------------------------------------


@dataclass
class MemSpec:
    name: str
    capacity_mb: float
    bandwidth_gbps: float
    carries: list[str]
    pj_per_bit: float = 0.0
    effective_gbps: float = 0.0
    clocked: bool = False


@dataclass
class RooflineHw:
    """A device given directly by rates: for hardware without an npukit target."""

    name: str
    clock_mhz: float
    lanes: int
    memories: list[MemSpec]
    macs_per_lane_cycle_int4: float = 0.0
    macs_per_lane_cycle_int8: float = 0.0
    macs_per_lane_cycle_ternary: float = 0.0
    macs_per_lane_cycle_fp16: float = 0.0
    sfu_per_cycle: float = 1.0
    static_power_w: float = 0.0
    node_nm: float = 45.0
    vdd: float = 0.9
    fpga: bool = False
    sfu_overlaps_mac: bool = True
    source: str = "user description"

    def validate(self) -> None:
        if self.clock_mhz <= 0 or self.lanes < 1 or self.sfu_per_cycle <= 0:
            raise ConfigError("roofline: clock_mhz, lanes and sfu_per_cycle must be positive")
        if not self.memories:
            raise ConfigError("roofline: at least one memory level is needed")
        for m in self.memories:
            if m.bandwidth_gbps <= 0:
                raise ConfigError(f"roofline: memory {m.name!r} needs bandwidth_gbps > 0")
            bad = set(m.carries) - set(TRAFFIC)
            if bad:
                raise ConfigError(f"roofline: memory {m.name!r} carries unknown traffic {sorted(bad)[0]!r}")
        for t in TRAFFIC:
            if not any(t in m.carries for m in self.memories):
                raise ConfigError(f"roofline: no memory level carries {t!r}")
        if not self.rates():
            raise ConfigError("roofline: set at least one macs_per_lane_cycle_<type> > 0")

    def rates(self) -> dict[str, float]:
        return {k: v for k in ("int4", "int8", "ternary", "fp16")
                if (v := getattr(self, f"macs_per_lane_cycle_{k}")) > 0}


def roofline_machine(h: RooflineHw) -> Machine:
    scale = energy.Scale(h.node_nm, h.vdd, h.fpga)
    levels = tuple(MemLevel(m.name, m.capacity_mb * 1e6, m.bandwidth_gbps * 1e9, tuple(m.carries),
                            m.pj_per_bit, m.effective_gbps * 1e9 or None, m.clocked) for m in h.memories)
    f = Ledger()
    f.add("hw.clock", h.clock_mhz, "MHz", Tier.PROJECTED, h.source)
    for m in h.memories:
        f.add(f"hw.{m.name}_bandwidth", m.bandwidth_gbps, "GB/s", Tier.PROJECTED, h.source)
    f.add("power.static", h.static_power_w, "W", Tier.PROJECTED, h.source)
    return Machine(h.name, "roofline", h.clock_mhz * 1e6, h.lanes, h.rates(), h.sfu_per_cycle, levels,
                   {k: energy.mac_pj(k, scale).value for k in energy.MAC45},
                   energy.sfu_pj(scale).value, h.static_power_w, h.sfu_overlaps_mac, f)


# The generic description registers like any target (perf is below targets, so it registers itself).
ROOFLINE = registry.register(registry.Target(
    name="roofline",
    summary="a device given directly by peak rates and memory levels (no npukit target)",
    hw=f"{__name__}:RooflineHw",
    perf=f"{__name__}:roofline_machine",
))
