"""pccx v002 hardware description: a few base parameters, everything else derived.

VTA-style: the preset stores counts and log2 sizes/widths; address-field widths, byte sizes and peak
rates are properties, so one override (``--set gemv.cores_log2=1``) changes every dependent number
consistently. Sources for each number are cited in ``presets/hw/pccx-v002-kv260.toml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from npukit.errors import ConfigError


def _log2_range(where: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi:
        raise ConfigError(f"{where} must be in [{lo}, {hi}], got {value}")


def _positive(where: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(f"{where} must be > 0, got {value}")


@dataclass
class Clocks:
    core_mhz: float = 400.0  # GEMV/GEMM/SFU/L2 port B
    axi_mhz: float = 250.0  # HP/ACP ports, weight-buffer write side

    @property
    def core_hz(self) -> float:
        return self.core_mhz * 1e6

    @property
    def axi_hz(self) -> float:
        return self.axi_mhz * 1e6

    @property
    def core_per_axi(self) -> float:
        """Core cycles per AXI cycle (1.6 on the KV260 build)."""
        return self.core_mhz / self.axi_mhz


@dataclass
class Ddr:
    size_log2: int = 32  # host DDR4 bytes, log2
    peak_gbps: float = 19.2  # theoretical
    bandwidth_gbps: float = 10.0  # effective, what the timing model uses

    @property
    def size_bytes(self) -> int:
        return 1 << self.size_log2

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth_gbps * 1e9

    @property
    def efficiency(self) -> float:
        return self.bandwidth_gbps / self.peak_gbps


@dataclass
class HpPorts:
    """AXI HP ports that stream weights from DDR into the weight-buffer FIFOs."""

    count_log2: int = 2
    width_log2: int = 7  # bits per beat, log2

    @property
    def count(self) -> int:
        return 1 << self.count_log2

    @property
    def width_bits(self) -> int:
        return 1 << self.width_log2

    @property
    def bytes_per_axi_clk(self) -> int:
        return self.count * self.width_bits // 8

    def peak_bytes_per_s(self, clocks: Clocks) -> float:
        return self.bytes_per_axi_clk * clocks.axi_hz


@dataclass
class AcpPort:
    """The ACP port used by MEMCPY between host DDR and L2 port A."""

    width_log2: int = 7

    @property
    def bytes_per_axi_clk(self) -> int:
        return (1 << self.width_log2) // 8

    def peak_bytes_per_s(self, clocks: Clocks) -> float:
        return self.bytes_per_axi_clk * clocks.axi_hz


@dataclass
class WeightBuffer:
    fifo_count_log2: int = 2  # one FIFO per HP port
    depth_log2: int = 12  # words per FIFO
    word_log2: int = 7  # bits per word, log2

    @property
    def fifo_count(self) -> int:
        return 1 << self.fifo_count_log2

    @property
    def fifo_bytes(self) -> int:
        return (1 << self.depth_log2) * (1 << self.word_log2) // 8

    @property
    def total_bytes(self) -> int:
        return self.fifo_count * self.fifo_bytes


@dataclass
class L2:
    words: int = 114_688  # physical 128-bit words (not a power of two: URAM count)
    word_log2: int = 7
    addr_bits: int = 17  # ISA address field width, in words
    banks_log2: int = 3
    port_width_log2: int = 8  # bits per clock per port, log2 (two ports: A = ACP DMA, B = compute)

    @property
    def word_bytes(self) -> int:
        return (1 << self.word_log2) // 8

    @property
    def size_bytes(self) -> int:
        return self.words * self.word_bytes

    @property
    def addr_space_words(self) -> int:
        return 1 << self.addr_bits

    @property
    def banks(self) -> int:
        return 1 << self.banks_log2

    @property
    def port_bytes_per_clk(self) -> int:
        return (1 << self.port_width_log2) // 8

    @property
    def elems_per_word(self) -> int:
        """BF16 activations per word (docs/numerics.md: 8 per 128-bit word)."""
        return (1 << self.word_log2) // 16


@dataclass
class ConstantCache:
    entries_log2: int = 6
    value_bits: int = 16  # ISA view: three 16-bit values per entry
    values_per_entry: int = 3

    @property
    def entries(self) -> int:
        return 1 << self.entries_log2

    @property
    def index_bits(self) -> int:
        return self.entries_log2

    @property
    def entry_bits(self) -> int:
        return self.value_bits * self.values_per_entry

    @property
    def max_value(self) -> int:
        return (1 << self.value_bits) - 1


@dataclass
class Gemv:
    cores_log2: int = 2
    macs_per_core_log2: int = 5
    batch_rows: int = 512  # rows per core call (RTL GemvBatch)
    pipeline_cycles: int = 5  # 32 -> 1 reduction tree depth
    weight_bits: int = 4  # INT4 weights

    @property
    def cores(self) -> int:
        return 1 << self.cores_log2

    @property
    def macs_per_core(self) -> int:
        return 1 << self.macs_per_core_log2

    @property
    def macs_per_clk(self) -> int:
        return self.cores * self.macs_per_core

    @property
    def lane_bits(self) -> int:
        """Width of an ISA field that counts cores 0..cores (0 = all)."""
        return max(1, self.cores.bit_length())

    def peak_macs_per_s(self, clocks: Clocks) -> float:
        return self.macs_per_clk * clocks.core_hz


@dataclass
class Gemm:
    rows_log2: int = 5
    cols_log2: int = 5
    macs_per_dsp: int = 2  # W4A8 dual packing
    pipeline_cycles: int = 64  # systolic fill + drain, rows + cols

    @property
    def rows(self) -> int:
        return 1 << self.rows_log2

    @property
    def cols(self) -> int:
        return 1 << self.cols_log2

    @property
    def dsps(self) -> int:
        return self.rows * self.cols

    @property
    def macs_per_clk(self) -> int:
        return self.dsps * self.macs_per_dsp

    def peak_macs_per_s(self, clocks: Clocks) -> float:
        return self.macs_per_clk * clocks.core_hz


@dataclass
class Sfu:
    instances: int = 1
    elems_per_clk: int = 1
    pipeline_cycles: int = 20  # CORDIC 15-20 stages (upper bound)
    fifo_depth: int = 512  # direct GEMV->SFU FIFO, elements
    length_bits: int = 16  # CVO length field

    @property
    def elems_per_s_per_hz(self) -> int:
        return self.instances * self.elems_per_clk

    @property
    def max_length(self) -> int:
        return (1 << self.length_bits) - 1


@dataclass
class Dma:
    setup_cycles: int = 64  # fixed per-transfer latency in core cycles (placeholder)
    memset_cycles_per_entry: int = 1


@dataclass
class Frontend:
    cmd_fifo_depth: int = 8  # AXI-Lite command FIFO entries
    word_bits: int = 64
    opcode_bits: int = 4


@dataclass
class PccxHw:
    name: str = "pccx-v002-kv260"
    clocks: Clocks = field(default_factory=Clocks)
    ddr: Ddr = field(default_factory=Ddr)
    hp_ports: HpPorts = field(default_factory=HpPorts)
    acp: AcpPort = field(default_factory=AcpPort)
    weight_buffer: WeightBuffer = field(default_factory=WeightBuffer)
    l2: L2 = field(default_factory=L2)
    constant_cache: ConstantCache = field(default_factory=ConstantCache)
    gemv: Gemv = field(default_factory=Gemv)
    gemm: Gemm = field(default_factory=Gemm)
    sfu: Sfu = field(default_factory=Sfu)
    dma: Dma = field(default_factory=Dma)
    frontend: Frontend = field(default_factory=Frontend)

    # --- derived rates -------------------------------------------------------------------------
    @property
    def weight_stream_bytes_per_s(self) -> float:
        """Weights arrive at the slower of DDR (effective) and the HP ports."""
        return min(self.ddr.bytes_per_s, self.hp_ports.peak_bytes_per_s(self.clocks))

    @property
    def acp_bytes_per_s(self) -> float:
        return min(self.ddr.bytes_per_s, self.acp.peak_bytes_per_s(self.clocks))

    @property
    def gemv_peak_macs_per_s(self) -> float:
        return self.gemv.peak_macs_per_s(self.clocks)

    @property
    def gemm_peak_macs_per_s(self) -> float:
        return self.gemm.peak_macs_per_s(self.clocks)

    @property
    def gemv_ridge_macs_per_byte(self) -> float:
        """Arithmetic intensity (MAC per weight byte) above which a GEMV is compute-bound."""
        return self.gemv_peak_macs_per_s / self.weight_stream_bytes_per_s

    def validate(self) -> None:
        _positive("clocks.core_mhz", self.clocks.core_mhz)
        _positive("clocks.axi_mhz", self.clocks.axi_mhz)
        _positive("ddr.peak_gbps", self.ddr.peak_gbps)
        _positive("ddr.bandwidth_gbps", self.ddr.bandwidth_gbps)
        if self.ddr.bandwidth_gbps > self.ddr.peak_gbps:
            raise ConfigError(f"ddr.bandwidth_gbps ({self.ddr.bandwidth_gbps}) exceeds ddr.peak_gbps "
                              f"({self.ddr.peak_gbps})")
        _log2_range("ddr.size_log2", self.ddr.size_log2, 20, 40)
        _log2_range("hp_ports.count_log2", self.hp_ports.count_log2, 0, 3)
        _log2_range("hp_ports.width_log2", self.hp_ports.width_log2, 5, 10)
        _log2_range("acp.width_log2", self.acp.width_log2, 5, 10)
        _log2_range("weight_buffer.fifo_count_log2", self.weight_buffer.fifo_count_log2, 0, 4)
        _log2_range("weight_buffer.depth_log2", self.weight_buffer.depth_log2, 4, 20)
        _log2_range("weight_buffer.word_log2", self.weight_buffer.word_log2, 5, 10)
        _log2_range("l2.word_log2", self.l2.word_log2, 4, 10)
        _log2_range("l2.addr_bits", self.l2.addr_bits, 8, 24)
        _log2_range("l2.banks_log2", self.l2.banks_log2, 0, 6)
        _log2_range("l2.port_width_log2", self.l2.port_width_log2, 4, 11)
        if not 0 < self.l2.words <= self.l2.addr_space_words:
            raise ConfigError(f"l2.words must be in [1, {self.l2.addr_space_words}] for "
                              f"{self.l2.addr_bits}-bit addresses, got {self.l2.words}")
        _log2_range("constant_cache.entries_log2", self.constant_cache.entries_log2, 1, 10)
        _log2_range("constant_cache.value_bits", self.constant_cache.value_bits, 8, 32)
        _log2_range("gemv.cores_log2", self.gemv.cores_log2, 0, 4)
        _log2_range("gemv.macs_per_core_log2", self.gemv.macs_per_core_log2, 0, 10)
        _log2_range("gemv.weight_bits", self.gemv.weight_bits, 1, 16)
        _log2_range("gemm.rows_log2", self.gemm.rows_log2, 0, 8)
        _log2_range("gemm.cols_log2", self.gemm.cols_log2, 0, 8)
        _log2_range("gemm.macs_per_dsp", self.gemm.macs_per_dsp, 1, 4)
        _log2_range("sfu.instances", self.sfu.instances, 1, 64)
        _log2_range("sfu.elems_per_clk", self.sfu.elems_per_clk, 1, 64)
        _log2_range("sfu.fifo_depth", self.sfu.fifo_depth, 1, 1 << 20)
        _log2_range("sfu.length_bits", self.sfu.length_bits, 4, 32)
        for where, v in (("gemv.batch_rows", self.gemv.batch_rows),
                         ("frontend.cmd_fifo_depth", self.frontend.cmd_fifo_depth)):
            if v < 1:
                raise ConfigError(f"{where} must be >= 1, got {v}")
        for where, v in (("gemv.pipeline_cycles", self.gemv.pipeline_cycles),
                         ("gemm.pipeline_cycles", self.gemm.pipeline_cycles),
                         ("sfu.pipeline_cycles", self.sfu.pipeline_cycles),
                         ("dma.setup_cycles", self.dma.setup_cycles),
                         ("dma.memset_cycles_per_entry", self.dma.memset_cycles_per_entry)):
            if v < 0:
                raise ConfigError(f"{where} must be >= 0, got {v}")
