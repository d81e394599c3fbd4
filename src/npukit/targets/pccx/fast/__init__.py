"""The fast pccx executor: a pre-decoded, bit-identical replay of a program (`fastsim.FastSimulator`).

`fastsim` owns the machine state and the plan; `fastmat` (GEMV/GEMM bindings) and `fastcvo` (CVO /
reduction programs) build the per-instruction closures it replays, given the simulator state they
need as arguments; `kernels` picks the NumPy or numba (`_nbkernels`) implementation.
"""
