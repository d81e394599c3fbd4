"""rk3588 hardware description: an RK3588-class edge NPU with three cores (SHARD's target).

Per core: a matmul/conv engine (the CNA: a 1x1-conv array fed from the CBUF banks), a vector unit
working out of a 32 KB scratchpad, a DMA engine; per submission a task limit that stands for the
driver's job timeout. Every number carries a ``tier`` and a ``source`` in the preset
(``presets/hw/rk3588.toml``); derived rates are properties, never stored twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from npukit.errors import ConfigError
from npukit.evidence import Figure, Ledger, Tier

TIERS = ("measured", "derived", "projected")


def _check(where: str, value: float, tier: str) -> None:
    if not value > 0:
        raise ConfigError(f"{where} must be > 0, got {value}")
    if tier not in TIERS:
        raise ConfigError(f"{where}: tier must be one of {', '.join(TIERS)}, got {tier!r}")


@dataclass
class Sourced:
    """A number with its evidence tier and source (one TOML table each)."""

    value: float = 0.0
    tier: str = "projected"
    source: str = ""

    def figure(self, unit: str) -> Figure:
        return Figure(self.value, unit, Tier(self.tier), self.source or "presets/hw/rk3588.toml")


@dataclass
class CoreDesc:
    clock_mhz: Sourced = field(default_factory=Sourced)
    int8_macs_per_cycle: Sourced = field(default_factory=Sourced)
    fp16_macs_per_cycle: Sourced = field(default_factory=Sourced)
    cbuf_banks: Sourced = field(default_factory=Sourced)
    cbuf_bank_bytes: Sourced = field(default_factory=Sourced)
    scratchpad_bytes: Sourced = field(default_factory=Sourced)
    max_input_channels: Sourced = field(default_factory=Sourced)  # K per CNA pass
    weight_group_out: int = 16  # weights tiled in 16-output x 32-input groups
    weight_group_in: int = 32
    m_align: int = 4  # M padded to a multiple of 4
    vector_elems_per_cycle: Sourced = field(default_factory=Sourced)
    task_overhead_cycles: Sourced = field(default_factory=Sourced)  # register-command fetch per task


@dataclass
class DmaDesc:
    dram_gbps: Sourced = field(default_factory=Sourced)  # per core's DMA engine
    l3_gbps: Sourced = field(default_factory=Sourced)
    l3_bytes: Sourced = field(default_factory=Sourced)  # activations this size or less move at l3_gbps
    ddr_total_gbps: Sourced = field(default_factory=Sourced)  # the shared DDR all cores cross
    setup_cycles: Sourced = field(default_factory=Sourced)


@dataclass
class DriverDesc:
    max_tasks_per_submit: Sourced = field(default_factory=Sourced)
    submit_overhead_us: Sourced = field(default_factory=Sourced)


@dataclass
class RK3588HW:
    name: str = "rk3588"
    cores: Sourced = field(default_factory=Sourced)
    core: CoreDesc = field(default_factory=CoreDesc)
    dma: DmaDesc = field(default_factory=DmaDesc)
    driver: DriverDesc = field(default_factory=DriverDesc)

    def validate(self) -> None:
        for where, s in self._numbers():
            _check(where, s.value, s.tier)
        if int(self.cores.value) != self.cores.value:
            raise ConfigError(f"cores must be an integer, got {self.cores.value}")

    def _numbers(self) -> list[tuple[str, Sourced]]:
        out = [("cores", self.cores)]
        for prefix, obj in (("core", self.core), ("dma", self.dma), ("driver", self.driver)):
            out += [(f"{prefix}.{k}", v) for k, v in vars(obj).items() if isinstance(v, Sourced)]
        return out

    # derived quantities ---------------------------------------------------------------------
    @property
    def n_cores(self) -> int:
        return int(self.cores.value)

    @property
    def clock_hz(self) -> float:
        return self.core.clock_mhz.value * 1e6

    @property
    def cbuf_bytes(self) -> int:
        return int(self.core.cbuf_banks.value * self.core.cbuf_bank_bytes.value)

    @property
    def bank_bytes(self) -> int:
        return int(self.core.cbuf_bank_bytes.value)

    @property
    def banks(self) -> int:
        return int(self.core.cbuf_banks.value)

    @property
    def scratchpad(self) -> int:
        return int(self.core.scratchpad_bytes.value)

    @property
    def k_per_pass(self) -> int:
        return int(self.core.max_input_channels.value)

    @property
    def task_limit(self) -> int:
        return int(self.driver.max_tasks_per_submit.value)

    def macs_per_cycle(self, dtype: str) -> float:
        return (self.core.fp16_macs_per_cycle if dtype == "fp16" else self.core.int8_macs_per_cycle).value

    def dma_bytes_per_cycle(self) -> float:
        return self.dma.dram_gbps.value * 1e9 / self.clock_hz

    def l3_bytes_per_cycle(self) -> float:
        return self.dma.l3_gbps.value * 1e9 / self.clock_hz

    def ledger(self) -> Ledger:
        """Every number of the description as a tiered figure (what ``npukit hw`` and docs cite)."""
        units = {"clock_mhz": "MHz", "macs_per_cycle": "MAC/cycle", "banks": "banks", "bytes": "B",
                 "channels": "channels", "gbps": "GB/s", "cycles": "cycles", "tasks": "tasks",
                 "_us": "µs", "elems_per_cycle": "elem/cycle", "cores": "cores"}
        led = Ledger()
        for where, s in self._numbers():
            unit = next((u for k, u in units.items() if where.endswith(k)), "")
            led.figures[where] = s.figure(unit)
        peak = self.n_cores * self.core.int8_macs_per_cycle.value * 2 * self.clock_hz / 1e12
        led.add("peak_int8_tops", peak, "TOPS", Tier.weakest(Tier(self.cores.tier),
                Tier(self.core.int8_macs_per_cycle.tier)), "cores x int8 MAC/cycle x 2 x clock")
        return led
