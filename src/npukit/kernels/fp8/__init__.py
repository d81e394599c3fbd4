"""FP8-as-storage GEMM: FP8 weight bytes, decoded and re-quantized to int8 inside an int8 GEMM.

The contract is the one of cuda-fp8-ampere (v2: int8 activations; v4: fp16/bf16 activations with
one per-tensor ``a_inv_scale``), written out in `contract`; `gemm` runs the fused CPU kernel
(`fast`, numba) where numba is installed and the NumPy reference otherwise — bit-identical.
`encode` chooses the scales the seed leaves to the caller.
"""

from __future__ import annotations

import numpy as np

from npukit.errors import FormatError
from npukit.kernels.fp8 import contract
from npukit.kernels.fp8.contract import FORMATS, gemm_reference
from npukit.kernels.fp8.encode import Fp8Weights, activation_inv_scale, encode, from_codes

__all__ = ["FORMATS", "Fp8Weights", "activation_inv_scale", "contract", "encode", "from_codes", "gemm",
           "gemm_reference"]


def gemm(a, b_codes, col_scales, *, fmt: str = "e4m3", global_scale: float = 1.0,
         a_inv_scale: float | None = None, out_layout: str = "nm", impl: str = "auto") -> np.ndarray:
    """D = contract(a, b_codes, col_scales): [N, M] fp16 for ``out_layout="nm"`` (the seed's D),
    [M, N] for ``"mn"``. ``impl``: "auto" (fused where numba exists), "fast", "portable" (fused,
    plain loops), "reference" (NumPy, materializes the int8 weights)."""
    kw = {"fmt": fmt, "global_scale": global_scale, "a_inv_scale": a_inv_scale, "out_layout": out_layout}
    if impl == "reference":
        return gemm_reference(a, b_codes, col_scales, **kw)
    from npukit.kernels.fp8 import fast

    if impl not in ("auto", "fast", "portable"):
        raise FormatError(f"impl must be auto|fast|portable|reference, got {impl!r}")
    if not fast.available():
        if impl == "auto":
            return gemm_reference(a, b_codes, col_scales, **kw)
        raise FormatError("the fused FP8 GEMM needs numba (pip install 'npukit[fast]')")
    return fast.gemm_fast(a, b_codes, col_scales, **kw, portable=True if impl == "portable" else None)
