"""The tern target record: ternfpga's ternary engine, its units and its ledger (see `npukit.registry`)."""

from npukit.registry import Target

TARGET = Target(
    name="tern",
    summary="ternfpga: multiply-free ternary engine + fabric units (Arty A7); BitNet b1.58 simulated",
    hw="npukit.targets.tern.hw:TernHW",
    perf="npukit.targets.tern.perf:perf_machine",
    ledger="npukit.targets.tern.ledger:build_ledger",
    backends=("npukit.targets.tern.backend",),
    extra={"vectors": "npukit.targets.tern.vectors", "rtl": "npukit.targets.tern.rtl:port_maps",
           "sim_sweep": "npukit.targets.tern.sweep:ADAPTER"},
)
