"""8-bit floating point: OCP E4M3FN, OCP E5M2 and the IEEE-style E4M3.

Bit layout of one code (a uint8), most significant bit first::

    e4m3fn, e4m3:  S EEEE MMM    bias 7
    e5m2:          S EEEEE MM    bias 15

value = (-1)^S · 2^(E-bias) · (1 + M/2^m) for E > 0, (-1)^S · 2^(1-bias) · M/2^m for E = 0.

| fmt    | specials                                       | max finite   | min normal | min subnormal |
|--------|------------------------------------------------|--------------|------------|---------------|
| e4m3fn | NaN = S.1111.111 only, no inf (OCP OFP8 E4M3)  | 448 (0x7E)   | 2^-6       | 2^-9          |
| e5m2   | inf = S.11111.00, NaN = S.11111.{01,10,11}     | 57344 (0x7B) | 2^-14      | 2^-16         |
| e4m3   | inf = S.1111.000, NaN = S.1111.{001…111}       | 240 (0x77)   | 2^-6       | 2^-9          |

``e4m3`` is the IEEE-style variant (ml_dtypes ``float8_e4m3``) that the cuda-fp8-ampere GEMM
decodes; ``e4m3fn`` is the OCP format that NVIDIA/PyTorch call ``float8_e4m3fn``.

Encoding (float32 -> code) rounds to nearest, ties to even, straight from the float32 bits.
Rounding happens first, then the overflow rule:

* ``saturate=False`` (ml_dtypes ``astype`` semantics): e4m3fn overflows to NaN (|x| > 464, and
  ±inf), e5m2 to ±inf (|x| >= 61440), e4m3 to ±inf (|x| >= 248);
* ``saturate=True`` (NVIDIA ``__NV_SATFINITE``, ONNX ``Cast`` default): finite overflow **and
  ±inf** clamp to ±max finite — equal to ml_dtypes casting ``clip(x, -max, max)``.

NaN inputs encode to the format's quiet NaN with the input's sign (0x7F/0xFF for e4m3fn,
0x7E/0xFE for e5m2, 0x7C/0xFC for e4m3) in both modes: saturation is for magnitudes, and a NaN
has none. ``-0.0`` keeps its sign. Inputs are converted to float32 first (exact for float16 and
float32; a float64 input is rounded to float32 before the FP8 rounding).
"""

from __future__ import annotations

import numpy as np

from npukit.errors import FormatError
from npukit.formats import _minifloat as mf

FORMATS: dict[str, mf.Minifloat] = {
    "e4m3fn": mf.Minifloat("e4m3fn", 4, 3, 7, "fn"),
    "e5m2": mf.Minifloat("e5m2", 5, 2, 15, "ieee"),
    "e4m3": mf.Minifloat("e4m3", 4, 3, 7, "ieee"),
}


def spec(fmt: str) -> mf.Minifloat:
    try:
        return FORMATS[fmt]
    except (KeyError, TypeError):
        raise FormatError(f"unknown FP8 format {fmt!r}; known: {', '.join(FORMATS)}") from None


def max_value(fmt: str) -> float:
    """Largest finite value (448, 57344 or 240)."""
    return spec(fmt).max_value


def table(fmt: str) -> np.ndarray:
    """The read-only 256-entry float32 decode table, indexed by code."""
    return spec(fmt).table


def encode(x: object, fmt: str, saturate: bool = True) -> np.ndarray:
    """Float array -> uint8 FP8 codes of the same shape (see the module docstring for the rules)."""
    f = spec(fmt)
    arr = mf.as_float32(x, f"fp8.encode({fmt})")
    return mf.encode(arr, f, saturate)


def decode(codes: object, fmt: str, out: np.ndarray | None = None) -> np.ndarray:
    """uint8 FP8 codes -> float32 values of the same shape, through the lookup table.

    ``out``, if given, must be a C-contiguous float32 array of the same shape.
    """
    f = spec(fmt)
    c = mf.check_codes(codes, f, f"fp8.decode({fmt})")
    if out is not None and (out.dtype != np.float32 or out.shape != c.shape
                            or not out.flags.c_contiguous):
        raise FormatError(f"fp8.decode: out must be C-contiguous float32 of shape {c.shape}")
    return mf.decode(c, f, out)
