"""VTA hardware description: TVM's ``vta_config.json`` log2 parameters plus clocks and bandwidths.

Every SRAM shape and ISA field width follows from the log2 fields the way ``hw_spec_const.h`` derives
them (element = one tensor row: ``batch × block`` lanes; depth = buffer bytes / element bytes). The
timing numbers carry an evidence tier and a source each (``presets/hw/vta-alkali.toml``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from npukit.errors import ConfigError

TIERS = ("measured", "derived", "projected")

LOG_INS_WIDTH = 7  # hw_spec_const.h: 128-bit instructions
LOG_UOP_WIDTH = 5  # 32-bit micro-ops


@dataclass(frozen=True)
class Timing:
    """Cycle costs of the modules (VTA's pipelined cores: one uop iteration per cycle at best)."""

    clock_mhz: float = 333.0
    dram_bytes_per_cycle: float = 16.0  # one AXI beat of 128 bits per cycle
    dram_latency_cycles: float = 64.0  # per DMA command (setup + first beat)
    gemm_cycles_per_uop: float = 1.0
    gemm_pipeline_cycles: float = 8.0
    alu_cycles_per_uop: float = 1.0  # with an immediate
    alu_tensor_cycles_per_uop: float = 2.0  # two accumulator reads per element row
    alu_pipeline_cycles: float = 4.0
    fetch_cycles_per_insn: float = 1.0
    command_depth: int = 8  # per-module command queue
    dep_queue_depth: int = 8  # each dependency-token FIFO
    pj_per_mac: float = 0.5
    pj_per_alu_lane: float = 0.3
    pj_per_dram_byte: float = 20.0
    tier: str = "projected"
    source: str = ""
    energy_tier: str = "projected"
    energy_source: str = ""


@dataclass(frozen=True)
class VtaHw:
    """One VTA configuration (defaults: ``config/vta_config.json`` of apache/tvm-vta)."""

    name: str = "vta-default"
    description: str = ""
    log_inp_width: int = 3
    log_wgt_width: int = 3
    log_acc_width: int = 5
    log_batch: int = 0
    log_block: int = 4
    log_uop_buff_size: int = 15
    log_inp_buff_size: int = 15
    log_wgt_buff_size: int = 18
    log_acc_buff_size: int = 17
    config_source: str = "apache/tvm-vta config/vta_config.json"
    timing: Timing = field(default_factory=Timing)
    # filled from the log2 fields (so `npukit hw` shows them); any value given is replaced
    derived: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        self.validate()
        object.__setattr__(self, "derived", self.shapes())

    def validate(self) -> None:
        if (self.log_inp_width, self.log_wgt_width, self.log_acc_width) != (3, 3, 5):
            raise ConfigError("vta: only int8 inputs/weights and int32 accumulators are supported "
                              f"(log widths 3/3/5), got {self.log_inp_width}/{self.log_wgt_width}/"
                              f"{self.log_acc_width}")
        if not 0 <= self.log_batch <= 4 or not 1 <= self.log_block <= 6:
            raise ConfigError(f"vta: log_batch must be 0..4 and log_block 1..6, got {self.log_batch}, "
                              f"{self.log_block}")
        for name in ("uop", "inp", "wgt", "acc"):
            depth = getattr(self, f"log_{name}_depth")
            if depth < 1:
                raise ConfigError(f"vta: the {name} buffer holds less than two elements (log depth {depth})")
        if self.log_uop_depth > 16 or max(self.log_inp_depth, self.log_wgt_depth, self.log_acc_depth) > 16:
            raise ConfigError("vta: buffer depths above 2^16 do not fit the 16-bit sram_base field")
        a, i, w, u = self.log_acc_depth, self.log_inp_depth, self.log_wgt_depth, self.log_uop_depth
        units = {"GEMM/ALU header": 3 + 4 + 1 + u + (u + 1) + 14 + 14,
                 "GEMM factors": 2 * (a + i + w), "ALU factors + opcode + imm": 4 * a + 3 + 1 + 16}
        for what, used in units.items():
            if used > 64:
                raise ConfigError(f"vta: {what} need {used} bits, more than one 64-bit unit of the 128-bit "
                                  "instruction (hw_spec.h)")
        if self.uop_bits > 32:
            raise ConfigError(f"vta: a uop needs {self.uop_bits} bits, more than 32")
        t = self.timing
        for f in ("clock_mhz", "dram_bytes_per_cycle"):
            if not getattr(t, f) > 0:
                raise ConfigError(f"vta: timing.{f} must be > 0")
        if t.command_depth < 1 or t.dep_queue_depth < 1:
            raise ConfigError("vta: timing.command_depth and timing.dep_queue_depth must be >= 1")
        if t.tier not in TIERS or t.energy_tier not in TIERS:
            raise ConfigError(f"vta: tiers must be one of {', '.join(TIERS)}")

    # --- derived shapes (hw_spec_const.h) -------------------------------------------------------
    @property
    def batch(self) -> int:
        return 1 << self.log_batch

    @property
    def block(self) -> int:
        return 1 << self.log_block

    @property
    def inp_elem_bytes(self) -> int:
        return (1 << self.log_inp_width) * self.batch * self.block // 8

    @property
    def wgt_elem_bytes(self) -> int:
        return self.block * self.block * (1 << self.log_wgt_width) // 8

    @property
    def acc_elem_bytes(self) -> int:
        return self.batch * self.block * (1 << self.log_acc_width) // 8

    @property
    def out_elem_bytes(self) -> int:
        return self.batch * self.block  # int8 outputs

    @staticmethod
    def _log2(v: int) -> int:
        return v.bit_length() - 1

    @property
    def log_uop_depth(self) -> int:
        return self.log_uop_buff_size - LOG_UOP_WIDTH + 3

    @property
    def log_inp_depth(self) -> int:
        return self.log_inp_buff_size - self._log2(self.inp_elem_bytes)

    @property
    def log_wgt_depth(self) -> int:
        return self.log_wgt_buff_size - self._log2(self.wgt_elem_bytes)

    @property
    def log_acc_depth(self) -> int:
        return self.log_acc_buff_size - self._log2(self.acc_elem_bytes)

    @property
    def log_out_buff_size(self) -> int:  # TVM pkg_config: out buffer mirrors acc at output width
        return self.log_acc_buff_size + 3 - self.log_acc_width

    @property
    def uop_depth(self) -> int:
        return 1 << self.log_uop_depth

    @property
    def inp_depth(self) -> int:
        return 1 << self.log_inp_depth

    @property
    def wgt_depth(self) -> int:
        return 1 << self.log_wgt_depth

    @property
    def acc_depth(self) -> int:
        return 1 << self.log_acc_depth

    @property
    def log_src_depth(self) -> int:  # uop src_idx indexes inp (GEMM) or acc (ALU)
        return max(self.log_acc_depth, self.log_inp_depth)

    @property
    def uop_bits(self) -> int:
        return self.log_acc_depth + self.log_src_depth + self.log_wgt_depth

    @property
    def clock_hz(self) -> float:
        return self.timing.clock_mhz * 1e6

    def shapes(self) -> dict[str, object]:
        """The derived shapes `npukit hw` shows."""
        b, n = self.batch, self.block
        return {
            "gemm_core": f"({b}x{n}) x ({n}x{n}) int8 -> int32",
            "inp_buffer": f"{1 << self.log_inp_buff_size} B = {self.inp_depth} x {b}x{n} int8",
            "wgt_buffer": f"{1 << self.log_wgt_buff_size} B = {self.wgt_depth} x {n}x{n} int8",
            "acc_buffer": f"{1 << self.log_acc_buff_size} B = {self.acc_depth} x {b}x{n} int32",
            "out_buffer": f"{1 << self.log_out_buff_size} B (int8 view of acc)",
            "uop_buffer": f"{1 << self.log_uop_buff_size} B = {self.uop_depth} x 32-bit uops",
            "uop_bits": f"dst {self.log_acc_depth} + src {self.log_src_depth} + wgt {self.log_wgt_depth} "
                        f"= {self.uop_bits}",
            "macs_per_cycle": b * n * n,
        }
