"""Energy per action, with cited defaults, and the rule that scales them to a device.

Every default is a `Figure` (value, unit, tier, source). The 45 nm action energies are Horowitz's
ISSCC 2014 keynote table ("Computing's energy problem (and what we can do about it)", 45 nm, 0.9 V);
they are published estimates for that node, so they enter as ``derived``. Once scaled to another
node or to FPGA fabric they are ``projected``: the scaling rule below is an assumption, not a
measurement. Board power figures come from the seeds with the tier the seeds give them.

Scaling rule (stated, first order): dynamic energy ∝ C·V², C ∝ feature size, so
``E(node, V) = E45 · (node/45) · (V/0.9)²``; FPGA fabric pays ×14 dynamic power over an ASIC doing
the same work (Kuon & Rose, "Measuring the gap between FPGAs and ASICs", IEEE TCAD 26(2), 2007).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from npukit.errors import ConfigError
from npukit.evidence import Figure, Tier

HOROWITZ = "Horowitz, ISSCC 2014 keynote, 45 nm 0.9 V energy table"

# Horowitz 45 nm primitives (pJ per operation)
H45 = {
    "int8_add": Figure(0.03, "pJ", Tier.DERIVED, HOROWITZ),
    "int32_add": Figure(0.1, "pJ", Tier.DERIVED, HOROWITZ),
    "int8_mult": Figure(0.2, "pJ", Tier.DERIVED, HOROWITZ),
    "int32_mult": Figure(3.1, "pJ", Tier.DERIVED, HOROWITZ),
    "fp16_add": Figure(0.4, "pJ", Tier.DERIVED, HOROWITZ),
    "fp16_mult": Figure(1.1, "pJ", Tier.DERIVED, HOROWITZ),
    "fp32_add": Figure(0.9, "pJ", Tier.DERIVED, HOROWITZ),
    "fp32_mult": Figure(3.7, "pJ", Tier.DERIVED, HOROWITZ),
    # SRAM reads of a 64-bit word by array size
    "sram_8kb_64b": Figure(10.0, "pJ", Tier.DERIVED, HOROWITZ),
    "sram_32kb_64b": Figure(20.0, "pJ", Tier.DERIVED, HOROWITZ),
    "sram_1mb_64b": Figure(100.0, "pJ", Tier.DERIVED, HOROWITZ),
    # DRAM: 1.3–2.6 nJ per 64-bit access; the low end is used for DDR4-class parts
    "dram_64b": Figure(1300.0, "pJ", Tier.DERIVED, HOROWITZ + " (DRAM 1.3-2.6 nJ/64 b, low end)"),
}

# MAC energy at 45 nm by weight operand (activation INT8/BF16, 32-bit accumulate), each composed
# from the table by a stated rule: multiplier energy ∝ product of operand widths (array multiplier),
# plus one 32-bit accumulate add.
_MAC_RULES = {
    "ternary": (H45["int8_add"].value + H45["int32_add"].value,
                "sign-select (int8 add) + int32 accumulate; no multiplier"),
    "int4": (H45["int8_mult"].value * 4 * 8 / 64 + H45["int32_add"].value,
             "int8 mult × (4·8)/(8·8) + int32 add"),
    "int8": (H45["int8_mult"].value + H45["int32_add"].value, "int8 mult + int32 add"),
    "fp16": (H45["fp16_mult"].value + H45["fp16_add"].value, "fp16 mult + fp16 add"),
    "fp32": (H45["fp32_mult"].value + H45["fp32_add"].value, "fp32 mult + fp32 add"),
}
MAC45 = {k: Figure(v, "pJ/MAC", Tier.PROJECTED, f"{HOROWITZ}; rule: {why}")
         for k, (v, why) in _MAC_RULES.items()}

# SFU element: LUT + polynomial / CORDIC front ends cost about two FP32 multiply-adds (assumption)
SFU45 = Figure(2 * MAC45["fp32"].value, "pJ/elem", Tier.PROJECTED,
               f"{HOROWITZ}; assumption: 2 fp32 mult-adds per SFU element")

FPGA_FACTOR = Figure(14.0, "x", Tier.DERIVED,
                     "Kuon & Rose, IEEE TCAD 26(2) 2007: FPGA/ASIC dynamic power ratio ~14x")

# off-chip memory per bit
DRAM_PJ_PER_BIT = {
    "ddr4": Figure(H45["dram_64b"].value / 64, "pJ/bit", Tier.PROJECTED,
                   HOROWITZ + ": 1.3 nJ per 64-bit DRAM access (low end) / 64"),
    "ddr3": Figure(H45["dram_64b"].value * 2 / 64, "pJ/bit", Tier.PROJECTED,
                   HOROWITZ + ": 2.6 nJ per 64-bit DRAM access (high end) / 64"),
    "lpddr4": Figure(8.0, "pJ/bit", Tier.DERIVED,
                     "Accelergy example ERT (CactiDRAM, LPDDR4 64-bit word 512 pJ), refs/simulators.md §4"),
}


@dataclass(frozen=True)
class Scale:
    """Node, voltage and fabric of a device, turning 45 nm energies into its own."""

    node_nm: float = 45.0
    vdd: float = 0.9
    fpga: bool = False

    def __post_init__(self) -> None:
        if not (self.node_nm > 0 and self.vdd > 0):
            raise ConfigError("energy scale needs node_nm > 0 and vdd > 0")

    @property
    def factor(self) -> float:
        f = (self.node_nm / 45.0) * (self.vdd / 0.9) ** 2
        return f * (FPGA_FACTOR.value if self.fpga else 1.0)

    def describe(self) -> str:
        fab = f" × FPGA {FPGA_FACTOR.value:g}" if self.fpga else ""
        return f"scaled ×{self.factor:.3g} = ({self.node_nm:g}/45 nm)·({self.vdd:g}/0.9 V)²{fab}"


def mac_pj(kind: str, scale: Scale) -> Figure:
    base = MAC45.get(kind)
    if base is None:
        raise ConfigError(f"no MAC energy for operand type {kind!r}; known: {', '.join(MAC45)}")
    return Figure(base.value * scale.factor, "pJ/MAC", Tier.PROJECTED, f"{base.source}; {scale.describe()}")


def sfu_pj(scale: Scale) -> Figure:
    return Figure(SFU45.value * scale.factor, "pJ/elem", Tier.PROJECTED,
                  f"{SFU45.source}; {scale.describe()}")


def sram_pj_per_bit(capacity_bytes: float, scale: Scale) -> Figure:
    """Per-bit read energy of an on-chip SRAM of this size: log-linear between Horowitz's 8 KB,
    32 KB and 1 MB points (clamped outside), then scaled."""
    pts = [(8e3, H45["sram_8kb_64b"].value), (32e3, H45["sram_32kb_64b"].value),
           (1e6, H45["sram_1mb_64b"].value)]
    c = min(max(float(capacity_bytes), pts[0][0]), pts[-1][0])
    for (c0, e0), (c1, e1) in itertools.pairwise(pts):
        if c <= c1:
            t = (math.log(c) - math.log(c0)) / (math.log(c1) - math.log(c0))
            e = e0 + t * (e1 - e0)
            break
    v = e / 64 * scale.factor
    return Figure(v, "pJ/bit", Tier.PROJECTED,
                  f"{HOROWITZ}: SRAM 64-bit read at {capacity_bytes / 1e3:.0f} KB (log-interpolated) / 64; "
                  f"{scale.describe()}")


def dram_pj_per_bit(kind: str) -> Figure:
    """Off-chip DRAM energy is a property of the DRAM and its PHY, not of the accelerator's node."""
    fig = DRAM_PJ_PER_BIT.get(kind.lower())
    if fig is None:
        raise ConfigError(f"no DRAM energy for {kind!r}; known: {', '.join(DRAM_PJ_PER_BIT)}")
    return fig


def default_figures() -> dict[str, Figure]:
    """Every default energy figure, for docs/evidence.md and ``npukit perf --defaults``."""
    out: dict[str, Figure] = {f"energy.h45.{k}": v for k, v in H45.items()}
    out.update({f"energy.mac45.{k}": v for k, v in MAC45.items()})
    out["energy.sfu45"] = SFU45
    out["energy.fpga_factor"] = FPGA_FACTOR
    out.update({f"energy.dram.{k}": v for k, v in DRAM_PJ_PER_BIT.items()})
    return out
