"""Registry record: presets with ``target = "rtx3090ti"`` build `npukit.kernels.fp8.gpu.RTX3090TiHW`."""

from npukit.registry import Target

TARGET = Target(
    name="rtx3090ti",
    summary="RTX 3090 Ti (GPU perf model of the FP8-as-storage GEMM paths; npukit fp8 gpu)",
    hw="npukit.kernels.fp8.gpu:RTX3090TiHW",
)
