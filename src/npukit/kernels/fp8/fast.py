"""The fused CPU implementation of the contract (bit-identical to `contract.gemm_reference`).

Steps per call: activations -> int8 (v4 quantization in numba, or int8 passed through), padded to a
multiple of 64 along K; the per-column fp16 reciprocals (N values, NumPy, as the contract says);
then the fused kernel (`_nb.kernels()`): per tile of output columns, decode -> scale -> int8
through a 256-entry table per column into a tile workspace, an int8 GEMM on it, and the epilogue:
the fp32 product rounded to fp16 (nearest even, as ``__float2half_rn``) in integer arithmetic,
stored in the output layout.

Memory per call: the int8 activations (M × Kp), one tile workspace per thread (tile × Kp bytes),
and the fp16 output itself (written in the requested layout by the kernel); never a weight-sized array.
"""

from __future__ import annotations

import numpy as np

from npukit.kernels.fp8 import contract as C
from npukit.sim.threads import start as start_threads

CHUNK = 64
# below these sizes one thread finishes before a second would be woken (parallel regions cost a
# thread hand-off, which on a shared 2-core machine can be a scheduler time slice)
SERIAL_MACS = 1 << 25
SERIAL_ACT_ELEMS = 1 << 18


def available() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def simd() -> tuple[str, str]:
    """("avx512-vnni-vbmi" | "portable", reason) — which inner loops this CPU runs."""
    from npukit.kernels.fp8 import _nb

    return _nb.probe()


def tile_for(m: int) -> int:
    """Columns per tile: wide tiles amortize streaming A when M is large; narrow ones keep both
    threads busy for small N."""
    return 64 if m > 16 else 16


def prepare_activations(op: C.Operands) -> tuple[np.ndarray, np.ndarray]:
    """int8 activations [M, Kp] (zero tail) and their row sums (int32)."""
    from npukit.kernels.fp8 import _nb

    m, k = op.a.shape
    kp = -(-k // CHUNK) * CHUNK
    a8 = np.zeros((m, kp), np.int8)
    asum = np.empty(m, np.int32)
    if op.a.dtype == np.int8:
        a8[:, :k] = op.a
        np.sum(op.a, axis=1, dtype=np.int32, out=asum)
    else:
        a16 = np.ascontiguousarray(C.to_f16(op.a)).view(np.uint16)
        quant = _nb.quantize_rows if m * k > SERIAL_ACT_ELEMS else _nb.quantize_rows_serial
        quant(a16, _nb.F16_TO_F32, np.float32(C.a_inv_f16(op.a_inv_scale)), a8, asum)
    return a8, asum


def gemm_fast(a, b_codes, col_scales, *, fmt: str = "e4m3", global_scale: float = 1.0,
              a_inv_scale: float | None = None, out_layout: str = "nm", portable: bool | None = None
              ) -> np.ndarray:
    """The fused kernel: the AVX-512 build where this CPU and numba's target allow it
    (`npukit.sim.cpu.choose`), else the portable build; ``portable=True`` forces the portable build."""
    from npukit.kernels.fp8 import _nb

    op = C.check_operands(a, b_codes, col_scales, fmt, global_scale, a_inv_scale, out_layout)
    build = _nb.kernels(portable=bool(portable))
    a8, asum = prepare_activations(op)
    lut32 = C.lut_f16(fmt).astype(np.float32)
    inv = C.inv_scales(op.col_scales).astype(np.float32)
    scale = op.col_scales.astype(np.float32) * np.float32(op.global_scale)
    m, n = a8.shape[0], op.b_codes.shape[0]
    nm = out_layout == "nm"
    out = np.empty((n, m) if nm else (m, n), np.uint16)  # float16 bits, written by the kernel
    parallel = m * n * a8.shape[1] > SERIAL_MACS
    if parallel:
        start_threads()  # (the pool under npukit's OpenMP policy, if this starts it)
    threads = _nb.nb.get_num_threads() if parallel else 1  # the count now (set_num_threads may lower it)
    ws = np.empty((threads, tile_for(m), a8.shape[1]), np.uint8)  # one tile per thread
    res = np.empty((threads, 16), np.int32)
    kernel = build.parallel if parallel else build.serial
    kernel(a8, asum, op.b_codes, lut32, inv, scale, out, nm, ws, res)
    return out.view(np.float16)
