"""Host-side compute kernels that stand in for an accelerator's datapath on the CPU.

``fp8``: FP8-as-storage GEMM (FP8 weight bytes decoded, scaled and re-quantized to int8 inside an
int8 GEMM), the contract of cuda-fp8-ampere written as NumPy plus a fused numba implementation.
"""
