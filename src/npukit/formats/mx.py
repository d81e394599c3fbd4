"""OCP Microscaling (MX v1.0): blocks of 32 elements sharing one E8M0 power-of-two scale.

Element formats (bit layout MSB first; values are in units of the block scale X):

| fmt          | element                     | bias | emax | max finite | specials            |
|--------------|-----------------------------|------|------|------------|---------------------|
| mxfp8_e4m3   | S EEEE MMM   (OCP E4M3FN)   | 7    | 8    | 448        | NaN S.1111.111      |
| mxfp8_e5m2   | S EEEEE MM   (OCP E5M2)     | 15   | 15   | 57344      | inf, NaN            |
| mxfp6_e2m3   | S EE MMM                    | 1    | 2    | 7.5        | none                |
| mxfp6_e3m2   | S EEE MM                    | 3    | 4    | 28         | none                |
| mxfp4_e2m1   | S EE M                      | 1    | 2    | 6          | none                |
| mxint8       | two's complement int8 · 2^-6| —    | 0    | 127/64     | none                |

Scale: E8M0, one unsigned byte ``s``: X = 2^(s-127) for s in 0…254, s = 255 is NaN; no sign,
no zero. Elements and scales are returned as separate uint8 code arrays (elements one per byte,
low bits used; scales one per block).

Quantization (the spec's rule, "FLOOR"): for each block of 32 along the last axis,
``shared = floor(log2(max|v|)) - emax``, clamped to [-127, 127] (an all-zero block gets -127);
the element is v / 2^shared rounded to nearest even and **saturated** to ±max finite. MXINT8
elements are ``clip(rint(v / 2^shared · 64), -127, 127)``: symmetric, so -128 is never produced
(it still decodes, to -2). A block containing NaN or ±inf gets the NaN scale (255) and zero
elements, so the whole block decodes to NaN, the spec's meaning of a NaN scale.

Dequantization: element value · X in float32. This is exact: elements carry at most 4
significant bits with the lowest at 2^-16 and X >= 2^-127, so every product is representable.

Packed byte layout (``pack``/``unpack``, along the last axis, little-endian bit order):
4-bit: two elements per byte, element 2i in bits 0-3 and 2i+1 in bits 4-7; 6-bit: four
elements per three bytes, the 24-bit little-endian word ``e0 | e1<<6 | e2<<12 | e3<<18``;
8-bit: one per byte. A packed block of 32 is 16, 24 or 32 bytes plus its 1-byte scale, i.e.
4.25, 6.25 or 8.25 bits per element.

``to_gguf_mxfp4``/``from_gguf_mxfp4`` convert MXFP4 to llama.cpp's 17-byte block (scale byte, then
16 bytes whose low nibble is element j and high nibble element j+16).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npukit.errors import FormatError
from npukit.formats import _minifloat as mf
from npukit.formats import fp8

BLOCK = 32


@dataclass(frozen=True)
class MXSpec:
    name: str
    elem: mf.Minifloat | None  # None: MXINT8
    emax: int

    @property
    def bits(self) -> int:
        return self.elem.bits if self.elem is not None else 8

    @property
    def bits_per_element(self) -> float:
        """Storage cost including the shared 8-bit scale."""
        return self.bits + 8 / BLOCK

    @property
    def max_value(self) -> float:
        return self.elem.max_value if self.elem is not None else 127 / 64


FORMATS: dict[str, MXSpec] = {
    "mxfp8_e4m3": MXSpec("mxfp8_e4m3", fp8.FORMATS["e4m3fn"], 8),
    "mxfp8_e5m2": MXSpec("mxfp8_e5m2", fp8.FORMATS["e5m2"], 15),
    "mxfp6_e2m3": MXSpec("mxfp6_e2m3", mf.Minifloat("e2m3", 2, 3, 1, "none"), 2),
    "mxfp6_e3m2": MXSpec("mxfp6_e3m2", mf.Minifloat("e3m2", 3, 2, 3, "none"), 4),
    "mxfp4_e2m1": MXSpec("mxfp4_e2m1", mf.Minifloat("e2m1", 2, 1, 1, "none"), 2),
    "mxint8": MXSpec("mxint8", None, 0),
}

_E8M0 = np.append(np.ldexp(np.float32(1), np.arange(255) - 127), np.nan).astype(np.float32)
_E8M0.flags.writeable = False
_E8M0_INT8 = _E8M0 / np.float32(64)  # MXINT8's implicit 2^-6, exact down to 2^-133
_E8M0_INT8.flags.writeable = False


def spec(fmt: str) -> MXSpec:
    try:
        return FORMATS[fmt]
    except (KeyError, TypeError):
        raise FormatError(f"unknown MX format {fmt!r}; known: {', '.join(FORMATS)}") from None


@dataclass(frozen=True)
class MXArray:
    """An MX-quantized tensor: element codes shaped like the input, one E8M0 code per 32-block."""

    fmt: str
    elements: np.ndarray  # uint8, shape (..., n)
    scales: np.ndarray  # uint8, shape (..., n // 32)

    def dequantize(self) -> np.ndarray:
        return dequantize(self.elements, self.scales, self.fmt)

    @property
    def nbytes(self) -> int:
        """Bytes when stored packed: elements at their bit width plus one byte per block."""
        return self.elements.size * spec(self.fmt).bits // 8 + self.scales.size


def e8m0_decode(codes: object) -> np.ndarray:
    """E8M0 scale codes -> float32 2^(s-127), NaN for 255."""
    c = np.asarray(codes)
    if c.dtype != np.uint8:
        raise FormatError(f"e8m0: scale codes must be uint8, got dtype {c.dtype}")
    return np.take(_E8M0, c)


def _block_absmax(xb: np.ndarray) -> np.ndarray:
    """max |x| per row of (n, 32), NaN if the row has a NaN.

    Works on the magnitude bits: for non-negative floats the uint32 order is the float order and
    NaN sorts above inf. A halving tree of elementwise maxima beats a 32-wide axis reduction.
    """
    m = xb.view(np.uint32) & np.uint32(0x7FFFFFFF)
    while m.shape[1] > 1:
        h = m.shape[1] // 2
        m = np.maximum(m[:, :h], m[:, h:])
    return m[:, 0].view(np.float32)


def quantize(x: object, fmt: str) -> MXArray:
    """Float array (last axis a multiple of 32) -> `MXArray` by the OCP MX v1.0 rule."""
    s = spec(fmt)
    arr = mf.as_float32(x, f"mx.quantize({fmt})")
    if arr.ndim == 0 or arr.shape[-1] % BLOCK:
        raise FormatError(f"mx.quantize: last axis must be a multiple of {BLOCK}, got shape {arr.shape}")
    xb = arr.reshape(-1, BLOCK)
    amax = _block_absmax(xb)
    bad = ~np.isfinite(amax)
    _, e = np.frexp(amax)  # amax = f·2^e with f in [0.5, 1): floor(log2 amax) = e - 1, exact
    shared = np.clip(e.astype(np.int32) - 1 - s.emax, -127, 127)
    shared[amax == 0] = -127
    scales = (shared + 127).astype(np.uint8)
    if bad.any():
        scales[bad] = 255
        shared[bad] = 0
    # Multiplying by a power of two is exact wherever the element could be non-zero.
    v = xb * np.ldexp(np.float32(1), -shared).astype(np.float32)[:, None]
    if bad.any():
        v[bad] = 0
    if s.elem is None:
        elements = np.clip(np.rint(v * np.float32(64)), -127, 127).astype(np.int8).view(np.uint8)
    else:
        elements = mf.encode(v, s.elem, saturate=True)
    return MXArray(fmt, elements.reshape(arr.shape), scales.reshape(*arr.shape[:-1], -1))


def _check(elements: object, scales: object, s: MXSpec) -> tuple[np.ndarray, np.ndarray]:
    el, sc = np.asarray(elements), np.asarray(scales)
    if el.dtype != np.uint8 or sc.dtype != np.uint8:
        raise FormatError(f"mx: elements and scales must be uint8, got {el.dtype} and {sc.dtype}")
    if el.ndim == 0 or sc.shape != (*el.shape[:-1], el.shape[-1] // BLOCK) or el.shape[-1] % BLOCK:
        raise FormatError(f"mx: elements {el.shape} and scales {sc.shape} do not form blocks of {BLOCK}")
    if s.elem is not None:
        mf.check_codes(el, s.elem, f"mx.dequantize({s.name})")
    return el, sc


def dequantize(elements: object, scales: object, fmt: str) -> np.ndarray:
    """Element codes (..., n) and E8M0 codes (..., n/32) -> float32 (..., n)."""
    s = spec(fmt)
    el, sc = _check(elements, scales, s)
    if s.elem is None:
        # int8 -> float32 is a SIMD cast; the 2^-6 folds into the scale (X/64 is exact in float32)
        out = np.asarray(el, order="C").view(np.int8).astype(np.float32)
        table = _E8M0_INT8
    else:
        out = mf.decode(el, s.elem)
        table = _E8M0
    ob = out.reshape(-1, BLOCK)
    with np.errstate(over="ignore"):  # only reachable from hand-made codes; IEEE gives ±inf
        ob *= np.take(table, sc.reshape(-1))[:, None]
    return out


def pack(elements: object, fmt: str) -> np.ndarray:
    """Element codes (..., n) -> packed bytes along the last axis (layout in the module docstring)."""
    s = spec(fmt)
    el = np.asarray(elements)
    if el.dtype != np.uint8 or el.ndim == 0 or el.shape[-1] % BLOCK:
        raise FormatError(f"mx.pack: need uint8 codes with last axis a multiple of {BLOCK}, "
                          f"got {el.dtype} {el.shape}")
    if s.elem is not None:
        mf.check_codes(el, s.elem, f"mx.pack({fmt})")
    if s.bits == 8:
        return el.copy()
    if s.bits == 4:
        return el[..., 0::2] | (el[..., 1::2] << np.uint8(4))
    q = el.reshape(*el.shape[:-1], -1, 4).astype(np.uint32)
    w = q[..., 0] | (q[..., 1] << 6) | (q[..., 2] << 12) | (q[..., 3] << 18)
    out = np.stack([w & 0xFF, (w >> 8) & 0xFF, w >> 16], axis=-1).astype(np.uint8)
    return out.reshape(*el.shape[:-1], -1)


def unpack(data: object, fmt: str) -> np.ndarray:
    """Packed bytes (..., m) -> element codes (..., n); the inverse of `pack`."""
    s = spec(fmt)
    d = np.asarray(data)
    per = {8: 1, 4: 2, 6: 4 / 3}[s.bits]
    n = d.shape[-1] * per if d.ndim else 0.5
    if d.dtype != np.uint8 or n != int(n) or int(n) % BLOCK:
        raise FormatError(f"mx.unpack: {fmt} needs uint8 bytes holding whole blocks of {BLOCK}, "
                          f"got {d.dtype} {d.shape}")
    if s.bits == 8:
        return d.copy()
    if s.bits == 4:
        out = np.empty((*d.shape[:-1], d.shape[-1] * 2), np.uint8)
        out[..., 0::2] = d & np.uint8(0xF)
        out[..., 1::2] = d >> np.uint8(4)
        return out
    t = d.reshape(*d.shape[:-1], -1, 3).astype(np.uint32)
    w = t[..., 0] | (t[..., 1] << 8) | (t[..., 2] << 16)
    out = np.stack([(w >> k) & 0x3F for k in (0, 6, 12, 18)], axis=-1).astype(np.uint8)
    return out.reshape(*d.shape[:-1], -1)


def to_gguf_mxfp4(mx: MXArray) -> np.ndarray:
    """MXFP4 -> llama.cpp GGML_TYPE_MXFP4 blocks, shape (n_blocks, 17) uint8."""
    if mx.fmt != "mxfp4_e2m1":
        raise FormatError(f"to_gguf_mxfp4: needs mxfp4_e2m1, got {mx.fmt}")
    el = mx.elements.reshape(-1, 2, BLOCK // 2)
    qs = el[:, 0] | (el[:, 1] << np.uint8(4))
    # GGUF stores doubled E2M1 values with a halved scale: 2·X/2 is the same product.
    return np.concatenate([mx.scales.reshape(-1, 1), qs], axis=1)


def from_gguf_mxfp4(blocks: object, shape: tuple[int, ...]) -> MXArray:
    """llama.cpp MXFP4 blocks (uint8, n_blocks·17 bytes) -> `MXArray` of the given element shape."""
    b = np.asarray(blocks)
    shape = tuple(int(d) for d in shape)
    n = int(np.prod(shape))
    if b.dtype != np.uint8 or not shape or shape[-1] % BLOCK or b.size != n // BLOCK * 17:
        raise FormatError(f"from_gguf_mxfp4: {b.dtype} data of {b.size} bytes does not hold "
                          f"shape {shape} in 17-byte blocks")
    b = b.reshape(-1, 17)
    qs = b[:, 1:]
    el = np.concatenate([qs & np.uint8(0xF), qs >> np.uint8(4)], axis=1)
    return MXArray("mxfp4_e2m1", el.reshape(shape), b[:, 0].reshape(*shape[:-1], -1).copy())
