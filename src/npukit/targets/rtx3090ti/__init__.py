"""The RTX 3090 Ti as data: the GPU the FP8-as-storage GEMM seed was measured on (a perf model in
`npukit.kernels.fp8.gpu`, not a simulated accelerator). Only its record lives here."""
