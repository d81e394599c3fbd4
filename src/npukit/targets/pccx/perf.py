"""The pccx adapter of the analytic model: a `PccxHw` -> `npukit.perf.machine.Machine`."""

from __future__ import annotations

import math
from typing import Any

from npukit.evidence import Figure, Ledger, Tier
from npukit.perf import energy
from npukit.perf.machine import Machine, MemLevel

PCCX_SRC = "presets/hw/pccx-v002-kv260.toml (refs/pccx_gemma3n.md §3)"
# No seed or pccx document gives a measured or estimated KV260 power; this is a stated assumption.
PCCX_STATIC_W = Figure(5.0, "W", Tier.PROJECTED,
                       "assumption: KV260 board power while streaming (no pccx or seed figure exists); "
                       "override with --set perf.static_power_w=W")


def perf_machine(h: Any) -> Machine:
    scale = energy.Scale(node_nm=16.0, vdd=0.85, fpga=True)  # ZU5EV: 16 nm FinFET, 0.85 V core
    core = h.clocks.core_hz
    l2_bps = 2 * h.l2.port_bytes_per_clk * core  # ports A and B
    ddr = energy.dram_pj_per_bit("ddr4")
    l2_pj = energy.sram_pj_per_bit(h.l2.size_bytes, scale)
    hp = h.hp_ports.peak_bytes_per_s(h.clocks)
    levels = (
        MemLevel("ddr", float(h.ddr.size_bytes), h.ddr.peak_gbps * 1e9, ("weights", "kv"), ddr.value,
                 effective_bps=h.ddr.bandwidth_gbps * 1e9),
        MemLevel("hp_ports", math.inf, hp, ("weights", "kv"), 0.0),  # KV is a GEMV operand too
        MemLevel("l2", float(h.l2.size_bytes), l2_bps, ("act",), l2_pj.value, clocked=True),
    )
    # GEMV cores take INT4 weights through a 16-entry product LUT; other weight widths are not
    # native (they would need bit-serial passes), so they run at the int4 rate here and are flagged.
    per_lane = {"int4": float(h.gemv.macs_per_core)}
    macpj = {k: energy.mac_pj(k, scale).value for k in energy.MAC45}
    f = Ledger()
    f.add("hw.clock", core / 1e6, "MHz", Tier.DERIVED, f"{PCCX_SRC}: clocks.core_mhz")
    f.add("hw.peak_macs", h.gemv_peak_macs_per_s / 1e9, "GMAC/s", Tier.DERIVED,
          f"{PCCX_SRC}: {h.gemv.cores} GEMV cores × {h.gemv.macs_per_core} MAC/clk × clock")
    f.add("hw.sfu_rate", h.sfu.elems_per_s_per_hz * core / 1e9, "Gelem/s", Tier.DERIVED,
          f"{PCCX_SRC}: sfu.instances × elems_per_clk × clock")
    f.add("hw.ddr_peak", h.ddr.peak_gbps, "GB/s", Tier.DERIVED,
          f"{PCCX_SRC}: ddr.peak_gbps (KV260 DDR4 spec)")
    f.add("hw.ddr_effective", h.ddr.bandwidth_gbps, "GB/s", Tier.PROJECTED,
          f"{PCCX_SRC}: ddr.bandwidth_gbps (pccx kv_cache.rst '~10 GB/s effective', not measured)")
    f.add("hw.hp_ports", hp / 1e9, "GB/s", Tier.DERIVED,
          f"{PCCX_SRC}: {h.hp_ports.count} HP ports × {h.hp_ports.width_bits} bit × AXI clock")
    f.add("hw.l2_bandwidth", l2_bps / 1e9, "GB/s", Tier.DERIVED,
          f"{PCCX_SRC}: 2 ports × 256 bit × core clock")
    f.add("hw.l2_capacity", h.l2.size_bytes / 2**20, "MiB", Tier.DERIVED, f"{PCCX_SRC}: l2.words × 16 B")
    f.figures["energy.ddr"] = ddr
    f.figures["energy.l2"] = l2_pj
    f.figures["energy.mac.int4"] = energy.mac_pj("int4", scale)
    f.figures["energy.sfu"] = energy.sfu_pj(scale)
    f.figures["power.static"] = PCCX_STATIC_W
    return Machine(h.name, "pccx", core, h.gemv.cores, per_lane, float(h.sfu.elems_per_s_per_hz) / 1,
                   levels, macpj, energy.sfu_pj(scale).value, PCCX_STATIC_W.value,
                   sfu_overlaps_mac=True, figures=f)
