"""tern hardware description: ternfpga's ternary engine, its fabric units, the soft CPU's measured glue,
the board's DDR3, power and block-RAM budget. Numbers and sources are in ``presets/hw/tern-*.toml``.

Microarchitecture fields (pipeline depths, divider width) are the RTL's; cycle counts of the units are
derived from them in `npukit.targets.tern.units`. Measured inputs carry their own ``tier`` and
``source`` strings so the ledger cites the preset, not code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from npukit.errors import ConfigError
from npukit.targets.tern.units import AttentionTiming, FFNGlueTiming

TIERS = ("measured", "derived", "projected")


def _pos(where: str, v: float) -> None:
    if not v > 0:
        raise ConfigError(f"{where} must be > 0, got {v}")


def _tier(where: str, t: str) -> None:
    if t not in TIERS:
        raise ConfigError(f"{where} must be one of {', '.join(TIERS)}, got {t!r}")


@dataclass
class Engine:
    lanes: int = 8  # K ternary lanes (sign-select + adder tree)
    cycles_per_tile: float = 1.0  # measured on silicon at K = 8
    bits_per_weight: float = 1.6  # base-3, five trits per byte
    tier: str = "measured"
    source: str = ""


@dataclass
class AttentionUnit:
    t_max: int = 64  # keys the KV BRAM holds (the SoC build; 128 out of context)
    mac_drain: int = 2
    exp_pipe: int = 3
    fin: int = 1
    source: str = ""

    @property
    def timing(self) -> AttentionTiming:
        return AttentionTiming(self.mac_drain, self.exp_pipe, self.fin)


@dataclass
class FFNGlueUnit:
    f_max: int = 6912
    bram_read: int = 1
    pipe_stages: int = 8
    detect: int = 1
    divider_bits: int = 128
    fin: int = 1
    source: str = ""

    @property
    def timing(self) -> FFNGlueTiming:
        return FFNGlueTiming(self.bram_read, self.pipe_stages, self.detect, self.divider_bits, self.fin)


@dataclass
class HostGlue:
    """Soft CPU (VexRiscv) integer glue per decoder layer, measured at one context on one model."""

    cpu: str = "VexRiscv"
    norm_cycles: int = 0  # both RMSNorms
    rope_cycles: int = 0
    attention_cycles: int = 0  # scores + softmax + a·V over the DRAM-resident KV cache
    ffn_glue_cycles: int = 0
    context: int = 64  # positions in the KV cache when measured
    hidden: int = 2560  # model shape it was measured on (host costs scale from it)
    intermediate: int = 6912
    heads: int = 20
    kv_heads: int = 5
    head_dim: int = 128
    tier: str = "measured"
    source: str = ""


@dataclass
class Power:
    dynamic_w: float = 0.425
    static_w: float = 0.064
    tier: str = "derived"
    source: str = ""

    @property
    def total_w(self) -> float:
        return self.dynamic_w + self.static_w


@dataclass
class Ddr:
    size_mb: int = 256
    peak_mbps: float = 1600.0
    read_mbps: float = 1423.0  # sustained DMA read
    tier: str = "measured"
    source: str = ""


@dataclass
class Bram:
    """Block-RAM tiles (36 Kb) of the part and of each block as built."""

    total: int = 50
    soc_engine: float = 27.0  # VexRiscv + LiteDRAM + engine
    ffn_glue: float = 18.0
    attention: float = 18.0
    tier: str = "measured"
    source: str = ""


@dataclass
class Board:
    part: str = ""
    luts: int = 0
    ffs: int = 0
    dsps: int = 0
    price_usd: float = 0.0
    source: str = ""


@dataclass
class TernHW:
    name: str
    clock_mhz: float = 100.0
    engine: Engine = field(default_factory=Engine)
    attention: AttentionUnit = field(default_factory=AttentionUnit)
    ffn_glue: FFNGlueUnit = field(default_factory=FFNGlueUnit)
    host: HostGlue = field(default_factory=HostGlue)
    power: Power = field(default_factory=Power)
    ddr: Ddr = field(default_factory=Ddr)
    bram: Bram = field(default_factory=Bram)
    board: Board = field(default_factory=Board)
    clock_source: str = ""

    @property
    def clock_hz(self) -> float:
        return self.clock_mhz * 1e6

    def validate(self) -> None:
        _pos("clock_mhz", self.clock_mhz)
        _pos("engine.lanes", self.engine.lanes)
        _pos("engine.cycles_per_tile", self.engine.cycles_per_tile)
        _pos("engine.bits_per_weight", self.engine.bits_per_weight)
        _pos("ddr.read_mbps", self.ddr.read_mbps)
        _pos("attention.t_max", self.attention.t_max)
        _pos("ffn_glue.f_max", self.ffn_glue.f_max)
        _pos("bram.total", self.bram.total)
        if self.power.dynamic_w < 0 or self.power.static_w < 0:
            raise ConfigError("power.dynamic_w and power.static_w must be >= 0")
        for where, t in (("engine.tier", self.engine.tier), ("host.tier", self.host.tier),
                         ("power.tier", self.power.tier), ("ddr.tier", self.ddr.tier),
                         ("bram.tier", self.bram.tier)):
            _tier(where, t)
        for where, v in (("attention.mac_drain", self.attention.mac_drain),
                         ("ffn_glue.pipe_stages", self.ffn_glue.pipe_stages),
                         ("ffn_glue.divider_bits", self.ffn_glue.divider_bits),
                         ("host.context", self.host.context)):
            if v < 0:
                raise ConfigError(f"{where} must be >= 0, got {v}")
