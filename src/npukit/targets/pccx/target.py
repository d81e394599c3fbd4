"""The pccx v002 target record: what npukit knows how to do with a pccx NPU (see `npukit.registry`)."""

from npukit.registry import Target

TARGET = Target(
    name="pccx",
    summary="pccx v002 NPU (KV260): INT4 GEMV cores + BF16 CVO unit; Gemma 3n compiled and simulated",
    hw="npukit.targets.pccx.hw:PccxHw",
    perf="npukit.targets.pccx.perf:perf_machine",
    backends=("npukit.targets.pccx.backend", "npukit.targets.pccx.backend_quant"),
)
