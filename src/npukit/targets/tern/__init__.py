"""tern: ternfpga's multiply-free ternary engine, its on-fabric units and its evidence ledger."""

from npukit.targets.tern.hw import TernHW

__all__ = ["TernHW"]
