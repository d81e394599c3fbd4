"""rk3588: an RK3588-class edge NPU (SHARD) — tiles, fences and shards transformer encoders over 3 cores."""

from npukit.targets.rk3588.hw import RK3588HW

__all__ = ["RK3588HW"]
