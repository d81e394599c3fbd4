"""Registry record of the rk3588 target (SHARD)."""

from npukit.registry import Target

TARGET = Target(
    name="rk3588",
    summary="RK3588-class edge NPU: 3 cores, 32 KB vector scratchpad, CBUF banks; SHARD encoder compiler",
    hw="npukit.targets.rk3588.hw:RK3588HW",
)
