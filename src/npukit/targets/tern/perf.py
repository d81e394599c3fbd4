"""The tern adapter of the analytic model: a `TernHW` -> `npukit.perf.machine.Machine`."""

from __future__ import annotations

from typing import Any

from npukit.evidence import Ledger, Tier
from npukit.perf import energy
from npukit.perf.machine import Machine, MemLevel


def perf_machine(h: Any) -> Machine:
    """ternfpga: K sign-select lanes at the measured cycles/tile, DDR3 at the measured read rate.
    Energy follows ternfpga's own method — board power (dynamic + static, Vivado estimate) × time —
    so per-action energies are zero here (adding them would count dynamic power twice)."""
    src = f"presets/hw/{h.name}.toml"
    clock = h.clock_hz
    bram_bytes = h.bram.total * 36 * 1024 / 8
    levels = (
        MemLevel("ddr", h.ddr.size_mb * 1e6, h.ddr.peak_mbps * 1e6, ("weights", "kv"), 0.0,
                 effective_bps=h.ddr.read_mbps * 1e6),
        # one 128-bit word per cycle per BRAM port pair: generous; activations never bind here
        MemLevel("bram", bram_bytes, 16 * clock, ("act",), 0.0, clocked=True),
    )
    f = Ledger()
    f.add("hw.clock", h.clock_mhz, "MHz", Tier.MEASURED, f"{src}: {h.clock_source or 'clock_mhz'}")
    f.add("hw.peak_macs", h.engine.lanes / h.engine.cycles_per_tile * clock / 1e9, "GMAC/s",
          Tier(h.engine.tier), f"{src}: engine.lanes / cycles_per_tile × clock; {h.engine.source}")
    f.add("hw.ddr_peak", h.ddr.peak_mbps / 1e3, "GB/s", Tier.DERIVED, f"{src}: ddr.peak_mbps (port peak)")
    f.add("hw.ddr_effective", h.ddr.read_mbps / 1e3, "GB/s", Tier(h.ddr.tier), f"{src}: {h.ddr.source}")
    f.add("hw.sfu_rate", clock / 1e9, "Gelem/s", Tier.PROJECTED,
          "assumption: fabric glue units retire 1 element/cycle (FFN-glue unit is pipelined)")
    f.add("power.static", h.power.total_w, "W", Tier(h.power.tier),
          f"{src}: dynamic + static board power × time (ternfpga's method); {h.power.source}")
    zero = {k: 0.0 for k in energy.MAC45}
    return Machine(h.name, "tern", clock, h.engine.lanes, {"ternary": 1.0 / h.engine.cycles_per_tile},
                   1.0, levels, zero, 0.0, h.power.total_w, sfu_overlaps_mac=False, figures=f)
