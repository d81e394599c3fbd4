"""ggml tensor types decoded to float32, bit-identical to gguf-py's NumPy reference.

Block layouts are ggml's (``ggml-common.h``); every type stores whole blocks of ``block`` weights in
``nbytes`` bytes, fp16 scales little-endian. Bit-identity with ``gguf.quants.dequantize`` is a
matter of doing the same float32 operations in the same order: scales are widened fp16 → float32
first, a sub-block scale is the float32 product ``d · sc`` rounded once, and the "minus a minimum"
types subtract (or add) the separately rounded minimum product afterwards — never a fused or
re-associated form, which would change the last bit, nor a swapped operand order, which changes
which NaN payload survives when both operands are NaN (x86 returns the first operand's).

Ternary types: TQ1_0 / TQ2_0 are decoded by `npukit.formats.ternary` (already bit-identical to
ggml); I2_S (bitnet.cpp's fork, one fp32 scale per tensor) is handled by the GGUF reader.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from npukit.errors import FormatError, ModelError
from npukit.formats import ternary

F32 = np.float32
QK_K = 256  # weights per K-quant super-block
_CHUNK_WEIGHTS = 1 << 21  # decode in slices of ~2 M weights: temporaries stay a few tens of MB


def _f16(blocks: np.ndarray, at: int) -> np.ndarray:
    """The fp16 at byte offset ``at`` of every block, widened to float32, shape (nb, 1)."""
    return np.ascontiguousarray(blocks[:, at:at + 2]).view("<f2").astype(F32)


def _nibbles(qs: np.ndarray, run: int) -> np.ndarray:
    """Split bytes into 4-bit fields: each run of ``run`` bytes yields its low nibbles, then its
    high nibbles (ggml's order for Q4_0 … Q5_K). (nb, n) uint8 → (nb, 2n) uint8."""
    nb, n = qs.shape
    runs = qs.reshape(nb, n // run, 1, run)
    out = np.empty((nb, n // run, 2, run), dtype=np.uint8)
    np.bitwise_and(runs, 0x0F, out=out[:, :, :1])
    np.right_shift(runs, 4, out=out[:, :, 1:])
    return out.reshape(nb, 2 * n)


def _bit_planes(qs: np.ndarray, run: int, width: int) -> np.ndarray:
    """Split each run of ``run`` bytes into its ``8 // width`` fields of ``width`` bits, lowest
    field first: (nb, n) uint8 → (nb, n·8/width) uint8, run-major."""
    nb, n = qs.shape
    fields = 8 // width
    shifts = np.arange(0, 8, width, dtype=np.uint8).reshape(1, 1, fields, 1)
    planes = (qs.reshape(nb, n // run, 1, run) >> shifts) & np.uint8((1 << width) - 1)
    return planes.reshape(nb, n * fields)


# -- 32-weight types ------------------------------------------------------------------------------
def _low5(blocks: np.ndarray, qh_at: int) -> np.ndarray:
    """Q5_0/Q5_1 5-bit codes: nibbles of qs[16] plus bit j of the little-endian u32 qh as bit 4."""
    qh = np.ascontiguousarray(blocks[:, qh_at:qh_at + 4])
    high = np.unpackbits(qh, axis=1, bitorder="little")  # bit j of the u32 = element j
    return _nibbles(blocks[:, qh_at + 4:], 16) | (high << np.uint8(4))


def _q4_0(b: np.ndarray) -> np.ndarray:
    codes = _nibbles(b[:, 2:], 16).astype(np.int8) - np.int8(8)
    return _f16(b, 0) * codes.astype(F32)


def _q4_1(b: np.ndarray) -> np.ndarray:
    return _f16(b, 0) * _nibbles(b[:, 4:], 16).astype(F32) + _f16(b, 2)


def _q5_0(b: np.ndarray) -> np.ndarray:
    codes = _low5(b, 2).astype(np.int8) - np.int8(16)
    return _f16(b, 0) * codes.astype(F32)


def _q5_1(b: np.ndarray) -> np.ndarray:
    return _f16(b, 0) * _low5(b, 4).astype(F32) + _f16(b, 2)


def _q8_0(b: np.ndarray) -> np.ndarray:
    return b[:, 2:].view(np.int8).astype(F32) * _f16(b, 0)


# -- K-quants (256-weight super-blocks) -----------------------------------------------------------
def _k_scale_min(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K's 12 bytes → 8 six-bit scales and 8 six-bit minimums. Sub-blocks 0-3 keep their
    scale in bytes 0-3 and minimum in bytes 4-7 (low 6 bits); sub-blocks 4-7 take the nibbles of
    bytes 8-11 (scale low, minimum high) with the top two bits of bytes 0-3 / 4-7 above them."""
    lo_sc, lo_min, mixed = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    sc = np.concatenate([lo_sc & 0x3F, (mixed & 0x0F) | ((lo_sc >> 6) << 4)], axis=1)
    mn = np.concatenate([lo_min & 0x3F, (mixed >> 4) | ((lo_min >> 6) << 4)], axis=1)
    return sc, mn


def _per_sub(values: np.ndarray, n_sub: int) -> np.ndarray:
    """(nb, 256) → (nb, n_sub, 256/n_sub) so a (nb, n_sub, 1) scale broadcasts per sub-block."""
    return values.reshape(values.shape[0], n_sub, -1)


def _q2_k(b: np.ndarray) -> np.ndarray:
    scales, d, dmin = b[:, 0:16], _f16(b, 80), _f16(b, 82)
    codes = _bit_planes(b[:, 16:80], 32, 2).astype(F32)
    step = (d * (scales & 0x0F).astype(F32))[:, :, None]
    low = (dmin * (scales >> 4).astype(F32))[:, :, None]
    return (step * _per_sub(codes, 16) - low).reshape(-1, QK_K)


def _q3_k_scales(packed: np.ndarray) -> np.ndarray:
    """16 six-bit scales: low nibbles from bytes 0-7 (low nibbles first, then high nibbles), the top
    two bits from bytes 8-11, two bits per scale, scale s at bits 2·(s // 4) of byte 8 + s % 4."""
    low = _nibbles(packed[:, :8], 8)
    top = _bit_planes(packed[:, 8:12], 4, 2)
    return ((low | (top << np.uint8(4))).astype(np.int8) - np.int8(32)).astype(F32)


def _q3_k(b: np.ndarray) -> np.ndarray:
    hmask, qs, d = b[:, 0:32], b[:, 32:96], _f16(b, 108)
    low = _bit_planes(qs, 32, 2).astype(np.int8)
    # weight i has its high bit in hmask[i % 32] at bit i // 32; a clear bit means "subtract 4"
    high_clear = np.unpackbits(hmask[:, None, :], axis=1, bitorder="little") ^ np.uint8(1)
    codes = (low - (high_clear.reshape(-1, QK_K) << np.uint8(2)).astype(np.int8)).astype(F32)
    step = (d * _q3_k_scales(b[:, 96:108]))[:, :, None]
    return (step * _per_sub(codes, 16)).reshape(-1, QK_K)


def _k_affine(b: np.ndarray, codes: np.ndarray) -> np.ndarray:
    sc, mn = _k_scale_min(b[:, 4:16])
    step = (_f16(b, 0) * sc.astype(F32))[:, :, None]
    low = (_f16(b, 2) * mn.astype(F32))[:, :, None]
    return (step * _per_sub(codes.astype(F32), 8) - low).reshape(-1, QK_K)


def _q4_k(b: np.ndarray) -> np.ndarray:
    return _k_affine(b, _nibbles(b[:, 16:144], 32))


def _q5_k(b: np.ndarray) -> np.ndarray:
    # weight i's fifth bit is bit i // 32 of qh[i % 32]
    high = np.unpackbits(b[:, None, 16:48], axis=1, bitorder="little").reshape(-1, QK_K)
    return _k_affine(b, _nibbles(b[:, 48:176], 32) | (high << np.uint8(4)))


def _q6_k(b: np.ndarray) -> np.ndarray:
    ql, qh, d = b[:, 0:128], b[:, 128:192], _f16(b, 208)
    # each 128-weight half: 64 ql bytes give nibbles (low then high of all 64), 32 qh bytes give
    # four 2-bit planes; weight 32j + l of the half = nibble plane j, then qh plane j, of byte l
    nb = b.shape[0]
    low = _nibbles(ql.reshape(nb * 2, 64), 64).reshape(nb, QK_K)
    high = _bit_planes(qh.reshape(nb * 2, 32), 32, 2).reshape(nb, QK_K)
    codes = ((low | (high << np.uint8(4))).astype(np.int8) - np.int8(32)).astype(F32)
    step = (d * b[:, 192:208].view(np.int8).astype(F32))[:, :, None]
    return (step * _per_sub(codes, 16)).reshape(-1, QK_K)


# -- plain floats and ternary ---------------------------------------------------------------------
# F32 and F16 return views: the copy into the float32 output is the only pass over the data
def _f32(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view("<f4")


def _f16_plain(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view("<f2")


def _bf16(b: np.ndarray) -> np.ndarray:
    return (np.ascontiguousarray(b).view("<u2").astype(np.uint32) << 16).view(F32)


def _tq(kind: ternary.TQKind) -> Callable[[np.ndarray], np.ndarray]:
    def decode(b: np.ndarray) -> np.ndarray:
        return ternary.from_gguf(np.ascontiguousarray(b), kind, (b.shape[0], QK_K))
    return decode


@dataclass(frozen=True)
class GGMLType:
    """One ggml tensor type: ``block`` weights stored in ``nbytes`` bytes."""

    type_id: int
    name: str
    block: int
    nbytes: int
    decode: Callable[[np.ndarray], np.ndarray]  # (n, nbytes) uint8 -> (n, block), cast to float32


_TYPES = [
    GGMLType(0, "F32", 1, 4, _f32), GGMLType(1, "F16", 1, 2, _f16_plain),
    GGMLType(30, "BF16", 1, 2, _bf16),
    GGMLType(2, "Q4_0", 32, 18, _q4_0), GGMLType(3, "Q4_1", 32, 20, _q4_1),
    GGMLType(6, "Q5_0", 32, 22, _q5_0), GGMLType(7, "Q5_1", 32, 24, _q5_1),
    GGMLType(8, "Q8_0", 32, 34, _q8_0),
    GGMLType(10, "Q2_K", QK_K, 84, _q2_k), GGMLType(11, "Q3_K", QK_K, 110, _q3_k),
    GGMLType(12, "Q4_K", QK_K, 144, _q4_k), GGMLType(13, "Q5_K", QK_K, 176, _q5_k),
    GGMLType(14, "Q6_K", QK_K, 210, _q6_k),
    GGMLType(34, "TQ1_0", QK_K, 54, _tq("TQ1_0")), GGMLType(35, "TQ2_0", QK_K, 66, _tq("TQ2_0")),
]
GGML_TYPES: dict[int, GGMLType] = {t.type_id: t for t in _TYPES}
# ggml type ids npukit recognises but cannot decode (named in the error a user sees)
UNSUPPORTED_NAMES = {9: "Q8_1", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S",
                     20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16",
                     26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M", 39: "MXFP4"}


def ggml_type(kind: int | str) -> GGMLType:
    """The decodable ggml type with this id or name; `ModelError` naming it otherwise."""
    for t in _TYPES:
        if kind in (t.type_id, t.name):
            return t
    label = UNSUPPORTED_NAMES.get(kind, "unknown") if isinstance(kind, int) else "unknown"
    raise ModelError(f"ggml type {kind} ({label}) is not supported; supported: "
                     + ", ".join(t.name for t in _TYPES))


def dequantize(data: object, kind: int | str, shape: tuple[int, ...]) -> np.ndarray:
    """Decode the ggml-encoded bytes of a tensor of ``shape`` (row-major, rows along the last axis)
    to float32. ``data`` must hold exactly the tensor's blocks; rows must be whole blocks."""
    t = ggml_type(kind)
    raw = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes | bytearray) else np.asarray(data)
    if raw.dtype != np.uint8:
        raise ModelError(f"{t.name} data must be bytes or uint8, got {raw.dtype}")
    n = int(np.prod(shape, dtype=np.int64))
    if shape and shape[-1] % t.block:
        raise ModelError(f"{t.name} tensor of shape {tuple(shape)}: row length {shape[-1]} "
                         f"is not a multiple of the {t.block}-weight block")
    need = n // t.block * t.nbytes
    if raw.size != need:
        what = "truncated" if raw.size < need else "too long"
        raise ModelError(f"{t.name} tensor of shape {tuple(shape)}: data {what} "
                         f"({raw.size} bytes, needs {need})")
    blocks = raw.reshape(-1, t.nbytes)
    out = np.empty((blocks.shape[0], t.block), dtype=F32)
    step = max(1, _CHUNK_WEIGHTS // t.block)
    try:
        with np.errstate(all="ignore"):  # inf/NaN scales decode as the reference does, silently
            for s in range(0, blocks.shape[0], step):
                out[s:s + step] = t.decode(blocks[s:s + step])
    except FormatError as exc:
        raise ModelError(f"{t.name}: {exc}") from None
    return out.reshape(shape)
