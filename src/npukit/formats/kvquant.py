"""KV-cache quantization: INT8 or INT4 per token and per head, one float32 scale per vector.

Input: keys or values shaped (..., head_dim), e.g. (tokens, kv_heads, head_dim); every
head_dim-vector gets its own scale, so ``scales.shape == x.shape[:-1]``. This is the pccx
KV-cache contract of docs/numerics.md ("INT8 or INT4, per token and head, FP32 scale").

| bits | scale (float32)     | code                              | storage                    |
|------|---------------------|-----------------------------------|----------------------------|
| 8    | f32(amax) / 127     | clip(rint(x / scale), -127, 127)  | int8, one per byte         |
| 4    | f32(amax) / 7       | clip(rint(x / scale), -7, 7)      | int4 nibbles (`int4.pack_int4`) |

rint rounds half to even; the arithmetic is float32 (one division for the scale, one per
element). Both grids are symmetric, so -128 / -8 are never produced. An all-zero vector (or
one whose scale underflows to 0) gets codes 0 and scale 0. Dequantization is ``code · scale``
in float32. Codes come back unpacked as int8 (``(..., head_dim)``); pack INT4 with
`npukit.formats.int4.pack_int4` when bytes are needed.
"""

from __future__ import annotations

import numpy as np

from npukit.errors import FormatError
from npukit.formats._minifloat import as_float32
from npukit.formats.int4 import absmax_quantize

_QMAX = {8: 127, 4: 7}


def _qmax(bits: object) -> int:
    try:
        return _QMAX[bits]  # type: ignore[index]
    except (KeyError, TypeError):
        raise FormatError(f"KV-cache quantization supports bits 8 or 4, got {bits!r}") from None


def quantize_kv(x: object, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(..., head_dim) floats -> (int8 codes (..., head_dim), float32 scales (...))."""
    qmax = _qmax(bits)
    arr = as_float32(x, f"quantize_kv(bits={bits})")
    if arr.ndim == 0 or arr.shape[-1] == 0:
        raise FormatError(f"quantize_kv: need a non-empty last (head_dim) axis, got shape {arr.shape}")
    return absmax_quantize(arr, qmax)


def dequantize_kv(codes: object, scales: object, bits: int) -> np.ndarray:
    """int8 codes (..., head_dim) and float32 scales (...) -> float32 (..., head_dim)."""
    qmax = _qmax(bits)
    c, s = np.asarray(codes), np.asarray(scales)
    if c.dtype != np.int8:
        raise FormatError(f"dequantize_kv: codes must be int8, got dtype {c.dtype}")
    if c.ndim == 0 or s.shape != c.shape[:-1]:
        raise FormatError(f"dequantize_kv: scales {s.shape} must equal codes {c.shape} minus the last axis")
    if s.dtype != np.float32:
        raise FormatError(f"dequantize_kv: scales must be float32, got dtype {s.dtype}")
    if c.size and (int(c.min()) < -qmax - 1 or int(c.max()) > qmax):
        raise FormatError(f"dequantize_kv: INT{bits} codes must lie in [{-qmax - 1}, {qmax}]")
    return c.astype(np.float32) * s[..., None]
