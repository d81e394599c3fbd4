"""Registry record of the rk3588 target (SHARD)."""

from npukit.registry import Target

TARGET = Target(
    name="rk3588",
    summary="RK3588-class edge NPU: 3 cores, 32 KB vector scratchpad, CBUF banks; SHARD encoder compiler",
    hw="npukit.targets.rk3588.hw:RK3588HW",
    ledger="npukit.targets.rk3588.perf:ledger",
    extra={
        "compile": "npukit.targets.rk3588.compile:compile_graph",
        "encode": "npukit.targets.rk3588.runner:encode",
        "timing": "npukit.targets.rk3588.timing:simulate_plan",
        "sim_sweep": "npukit.targets.rk3588.sweep:ADAPTER",
    },
)
