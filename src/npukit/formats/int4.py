"""Symmetric INT4 weights: per output channel or per group, float32 scales, nibble packing.

Quantization rule (absmax, no zero point), all arithmetic in float32:

    scale = f32(amax) / 7            one float32 division per channel/group
    q     = clip(rint(w / scale), -8, 7)   rint rounds half to even

so |q| <= 7 (the code -8 is legal storage but never produced; an asymmetric -8 would bias the
grid). A channel/group whose scale is 0 (all zeros, or amax so small that amax/7 underflows)
gets q = 0 and scale 0. Dequantization is ``q · scale`` in float32.

``axis`` is the reduction (input) axis: for W[out, in] with ``axis=-1`` there is one scale per
output row, ``scales.shape == (out,)``; with ``group_size=g`` the axis is split into runs of g
consecutive elements and ``scales.shape == (out, in // g)``.

Packing (``pack_int4``), along the last axis: two's-complement nibbles, two per byte, element
2i in bits 0-3 and 2i+1 in bits 4-7; a row of odd length is padded with a zero high nibble, so
every row starts on a byte boundary. This is the pccx DDR weight layout (docs/numerics.md).
"""

from __future__ import annotations

import numpy as np

from npukit.errors import FormatError
from npukit.formats._minifloat import as_float32


def absmax_quantize(x: np.ndarray, qmax: int, qmin: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric quantization over the last axis of float32 ``x``: int8 codes and float32 scales.

    Shared by INT4 weights and the KV cache so both follow one documented rule.
    """
    if not np.all(np.isfinite(x)):
        raise FormatError("cannot quantize non-finite values (inf or NaN) to integers")
    amax = np.max(np.abs(x), axis=-1) if x.shape[-1] else np.zeros(x.shape[:-1], np.float32)
    scale = (amax / np.float32(qmax)).astype(np.float32)
    s = scale[..., None]
    q = np.zeros(x.shape, np.float32)
    np.divide(x, s, out=q, where=s > 0)
    np.rint(q, out=q)
    np.clip(q, -qmax if qmin is None else qmin, qmax, out=q)
    return q.astype(np.int8), scale


def _split(w: np.ndarray, axis: int, group_size: int | None, what: str) -> tuple[np.ndarray, int]:
    """Move ``axis`` last and cut it into groups: returns (..., n_groups, g) and the normalized axis."""
    if w.ndim == 0:
        raise FormatError(f"{what}: need at least one axis, got a scalar")
    try:
        ax = _norm_axis(axis, w.ndim)
    except (TypeError, ValueError):
        raise FormatError(f"{what}: axis {axis!r} out of range for {w.ndim}-d input") from None
    moved = np.moveaxis(w, ax, -1)
    n = moved.shape[-1]
    g = n if group_size is None else int(group_size)
    if g <= 0 or (n and n % g):
        raise FormatError(f"{what}: axis length {n} is not a multiple of group_size {group_size}")
    return moved.reshape(*moved.shape[:-1], n // g if g else 0, g), ax


def _norm_axis(axis: int, ndim: int) -> int:
    a = int(axis)
    if a != axis or not -ndim <= a < ndim:
        raise ValueError
    return a % ndim


def quantize_int4(w: object, axis: int = -1, group_size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Float weights -> (q: int8 in [-8, 7], same shape as w; scales: float32).

    Per channel (``group_size=None``): scales drop ``axis``. Per group: ``axis`` becomes
    ``len // group_size`` in the scales.
    """
    arr = as_float32(w, "quantize_int4")
    grouped, ax = _split(arr, axis, group_size, "quantize_int4")
    q, scale = absmax_quantize(grouped, 7)
    q = np.moveaxis(q.reshape(*grouped.shape[:-2], -1), -1, ax)
    scale = scale[..., 0] if group_size is None else np.moveaxis(scale, -1, ax)
    return np.ascontiguousarray(q), np.ascontiguousarray(scale)


def dequantize_int4(q: object, scales: object, axis: int = -1, group_size: int | None = None) -> np.ndarray:
    """Inverse of `quantize_int4` (up to rounding): ``q · scale`` in float32."""
    qa, sa = np.asarray(q), np.asarray(scales)
    if qa.dtype.kind not in "iu":
        raise FormatError(f"dequantize_int4: codes must be integers, got dtype {qa.dtype}")
    if qa.size and (int(qa.min()) < -8 or int(qa.max()) > 7):
        raise FormatError("dequantize_int4: codes must lie in [-8, 7]")
    grouped, ax = _split(qa, axis, group_size, "dequantize_int4")
    if group_size is None:  # scales drop the axis; the other axes keep their order
        want, sm = grouped.shape[:-2], sa
    else:  # scales carry n_groups at the axis position
        want, sm = grouped.shape[:-1], (np.moveaxis(sa, ax, -1) if sa.ndim == qa.ndim else sa)
    if sa.dtype.kind != "f" or sm.shape != want:
        raise FormatError(f"dequantize_int4: scales of shape {sa.shape} do not match codes {qa.shape}")
    sm = sm.astype(np.float32)
    s = sm[..., None, None] if group_size is None else sm[..., None]
    out = (grouped.astype(np.float32) * s).reshape(*grouped.shape[:-2], -1)
    return np.ascontiguousarray(np.moveaxis(out, -1, ax))


def pack_int4(q: object) -> np.ndarray:
    """Integer codes in [-8, 7] (..., k) -> uint8 (..., ceil(k/2)); layout in the module docstring."""
    a = np.asarray(q)
    if a.dtype.kind not in "iu":
        raise FormatError(f"pack_int4: codes must be integers, got dtype {a.dtype}")
    if a.ndim == 0:
        raise FormatError("pack_int4: need at least one axis, got a scalar")
    if a.size and (int(a.min()) < -8 or int(a.max()) > 7):
        raise FormatError("pack_int4: codes must lie in [-8, 7]")
    nib = (a.astype(np.int8) & np.int8(0xF)).view(np.uint8)
    if nib.shape[-1] % 2:
        nib = np.concatenate([nib, np.zeros((*nib.shape[:-1], 1), np.uint8)], axis=-1)
    return nib[..., 0::2] | (nib[..., 1::2] << np.uint8(4))


def unpack_int4(data: object, shape: tuple[int, ...]) -> np.ndarray:
    """uint8 packed rows -> int8 codes of ``shape``; ``data`` holds ``shape[:-1] + (ceil(k/2),)``
    bytes (any layout of that many bytes, e.g. flat)."""
    d = np.asarray(data)
    shape = tuple(int(s) for s in shape)
    if d.dtype != np.uint8:
        raise FormatError(f"unpack_int4: data must be uint8, got dtype {d.dtype}")
    if not shape or min(shape) < 0:
        raise FormatError(f"unpack_int4: bad shape {shape}")
    rows = (*shape[:-1], (shape[-1] + 1) // 2)
    if d.size != int(np.prod(rows)):
        raise FormatError(f"unpack_int4: shape {shape} needs {int(np.prod(rows))} bytes, got {d.size}")
    d = d.reshape(rows)
    out = np.empty((*rows[:-1], rows[-1] * 2), np.uint8)
    out[..., 0::2] = d & np.uint8(0xF)
    out[..., 1::2] = d >> np.uint8(4)
    # sign-extend the nibble: (n ^ 8) - 8 maps 0..7 -> 0..7 and 8..15 -> -8..-1
    v = (out ^ np.uint8(8)).view(np.int8) - np.int8(8)
    return np.ascontiguousarray(v[..., : shape[-1]])
