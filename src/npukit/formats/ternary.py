"""Ternary weights (BitNet b1.58): absmean quantization and five byte layouts.

Layouts, each a pure re-arrangement of codes (bit tables in docs/formats.md):

* ternfpga base-3 (`pack_base3` / `unpack_base3`): five consecutive weights per byte,
  ``byte = t0 + 3·t1 + 9·t2 + 27·t3 + 81·t4`` with digit codes 0→0, 1→+1, 2→−1
  (Neumann-Labs/ternfpga ``models/export_weights.py``, ``rtl/ternary_unpack5.sv``).
* ggml TQ1_0 / TQ2_0 (`to_gguf` / `from_gguf`): 256-weight blocks with an fp16 absmax scale in the
  last two bytes, byte-identical to ``quantize_row_tq{1,2}_0_ref`` in ggml/src/ggml-quants.c
  (llama.cpp PR #8151) and to gguf-py's ``gguf.quants``.
* bitnet.cpp I2_S (`to_i2s` / `pack_i2s` / `from_i2s`): 2-bit codes w+1, 128-weight blocks
  (64 on ARM) in 32 (16) bytes, one fp32 tensor scale after the codes plus a 32-byte tail
  (microsoft/BitNet ``src/ggml-bitnet-mad.cpp`` ``quantize_i2_s``, commit 16da220a).
* HF transformers 2-bit (`pack_hf_2bit` / `unpack_hf_2bit`): codes w+1 packed along dim 0,
  LSB first (``transformers/integrations/bitnet.py`` ``pack_weights``).

Decoders are vectorized over whole tensors: a single 5-byte-item gather for base-3, chunked
uint8/uint16 digit arithmetic for TQ1_0/TQ2_0 (faster than gguf's dequantize, see the docs).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from npukit.errors import FormatError

__all__ = [
    "QK_K",
    "TQ_BLOCK_BYTES",
    "from_gguf",
    "from_i2s",
    "pack_base3",
    "pack_hf_2bit",
    "pack_i2s",
    "quantize_absmean",
    "to_gguf",
    "to_i2s",
    "unpack_base3",
    "unpack_hf_2bit",
]

QK_K = 256
TQ_BLOCK_BYTES = {"TQ1_0": 54, "TQ2_0": 66}
I2S_BLOCK = {"x86": 128, "arm": 64}
I2S_TAIL = 32
_ABSMEAN_EPS = 1e-5

TQKind = Literal["TQ1_0", "TQ2_0"]
I2SArch = Literal["x86", "arm"]


# ---------------------------------------------------------------------------------------------
# input checks


def _float_array(w: object, what: str) -> np.ndarray:
    a = np.asarray(w)
    if a.dtype.kind != "f":
        raise FormatError(f"{what}: expected a floating-point array, got dtype {a.dtype}")
    if a.ndim == 0:
        raise FormatError(f"{what}: expected at least one dimension, got a scalar")
    if not np.all(np.isfinite(a)):
        raise FormatError(f"{what}: input contains NaN or infinity")
    return a


def _trit_array(trits: object, what: str) -> np.ndarray:
    a = np.asarray(trits)
    if a.dtype.kind not in "iu":
        raise FormatError(f"{what}: trits must be an integer array, got dtype {a.dtype}")
    if a.ndim == 0:
        raise FormatError(f"{what}: expected at least one dimension, got a scalar")
    if a.size and (a.min() < -1 or a.max() > 1):
        raise FormatError(f"{what}: trits must be -1, 0 or +1 (found values in [{a.min()}, {a.max()}])")
    return a.astype(np.int8, copy=False)


def _byte_array(data: object, what: str) -> np.ndarray:
    if isinstance(data, bytes | bytearray | memoryview):
        return np.frombuffer(data, dtype=np.uint8)
    a = np.asarray(data)
    if a.dtype != np.uint8:
        raise FormatError(f"{what}: expected bytes or a uint8 array, got dtype {a.dtype}")
    return a


def _shape(shape: object, what: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in shape)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise FormatError(f"{what}: shape must be a sequence of integers, got {shape!r}") from None
    if not dims or any(d < 0 for d in dims):
        raise FormatError(f"{what}: shape must be non-empty with non-negative dims, got {dims}")
    return dims


# ---------------------------------------------------------------------------------------------
# BitNet b1.58 absmean quantization


def quantize_absmean(w: object) -> tuple[np.ndarray, float]:
    """Per-tensor absmean ternarization (BitNet b1.58; HF ``WeightQuant`` / bitnet.cpp converter).

    Returns ``(trits, s)`` with ``s = 1 / max(mean|W|, 1e-5)`` and
    ``trits = clip(round_half_even(W·s), −1, 1)`` as int8. ``s`` is the *multiplier* applied to W,
    i.e. the inverse of the dequantization step, so a BitNet linear computes
    ``y = (x @ trits.T) / s`` (HF ``BitLinear``'s ``weight_scale`` has this meaning; HF
    ``AutoBitLinear``'s multiplies and equals ``1/s``). Arithmetic is in float64.
    """
    a = _float_array(w, "quantize_absmean").astype(np.float64)
    if a.size == 0:
        raise FormatError("quantize_absmean: empty tensor has no mean")
    s = 1.0 / max(float(np.mean(np.abs(a))), _ABSMEAN_EPS)
    trits = np.clip(np.rint(a * s), -1, 1).astype(np.int8)
    return trits, s


# ---------------------------------------------------------------------------------------------
# ternfpga base-3: 5 trits per byte, lane 0 least significant, codes 0→0, 1→+1, 2→−1

_POW3 = np.array([1, 3, 9, 27, 81], dtype=np.int16)
_BASE3_VALID = 243


def _base3_table() -> np.ndarray:
    digits = (np.arange(_BASE3_VALID)[:, None] // _POW3[None, :]) % 3
    return np.where(digits == 2, -1, digits).astype(np.int8)  # (243, 5)


_BASE3_LUT = _base3_table()
_BASE3_LUT_V5 = _BASE3_LUT.view("V5").reshape(-1)  # one 5-byte item per byte: a single gather


def pack_base3(trits: object) -> np.ndarray:
    """Pack trits along the last axis, five per byte: (..., K) → (..., ceil(K/5)) uint8.

    A short last group is padded with zero weights (digit 0), as ternfpga's ``pack_row_trits5``.
    """
    t = _trit_array(trits, "pack_base3")
    k = t.shape[-1]
    nbytes = -(-k // 5)
    padded = np.zeros((*t.shape[:-1], nbytes * 5), dtype=np.int16)
    padded[..., :k] = t
    digits = padded % 3  # −1 → 2, 0 → 0, +1 → 1
    return (digits.reshape(*t.shape[:-1], nbytes, 5) @ _POW3).astype(np.uint8)


def unpack_base3(data: object, n: int) -> np.ndarray:
    """Inverse of `pack_base3`: (..., ceil(n/5)) uint8 → (..., n) int8 trits.

    Bytes 243..255 are not valid base-3 words (ternfpga's RTL silently aliases them) and raise
    `FormatError`.
    """
    b = _byte_array(data, "unpack_base3")
    if b.ndim == 0:
        raise FormatError("unpack_base3: expected at least one dimension, got a scalar")
    n = int(n)
    if n < 0 or b.shape[-1] != -(-n // 5):
        need = -(-max(n, 0) // 5)
        raise FormatError(f"unpack_base3: {n} trits need {need} bytes per row, got {b.shape[-1]}")
    if b.size and int(b.max()) >= _BASE3_VALID:
        bad = int(np.flatnonzero(b.reshape(-1) >= _BASE3_VALID)[0])
        raise FormatError(f"unpack_base3: byte {int(b.reshape(-1)[bad])} at flat index {bad} is not < 243")
    out = np.take(_BASE3_LUT_V5, b).view(np.int8).reshape(*b.shape[:-1], b.shape[-1] * 5)
    return out[..., :n] if out.shape[-1] != n else out


# ---------------------------------------------------------------------------------------------
# ggml TQ1_0 / TQ2_0


# Decoding constants. ggml extracts TQ1_0 trit n of a byte as ((byte·3^n mod 256)·3) >> 8 and TQ2_0
# code n as (byte >> 2n) & 3; doing that with uint8/uint16 SIMD arithmetic per chunk of blocks beats
# a gather from a 256-entry table (measured, docs/formats.md).
_TQ1_POW3 = np.array([1, 3, 9, 27, 81], dtype=np.uint8)[None, :, None]
_TQ2_SHIFTS = np.array([0, 2, 4, 6], dtype=np.uint8)[None, None, :, None]
_DECODE_CHUNK = 256  # blocks per chunk: the uint8/uint16/float32 temporaries stay in cache
# TQ1_0 encode: the ceil(v·256/243) byte for each base-3 value v = 0..242 (first element = most
# significant digit), i.e. the 8-bit fixed-point fraction of v/243 that the multiply decoder reads
_TQ1_BYTE = ((np.arange(243, dtype=np.int32) * 256 + 242) // 243).astype(np.uint8)


def _check_kind(kind: str) -> str:
    if kind not in TQ_BLOCK_BYTES:
        raise FormatError(f"unknown ternary GGUF type {kind!r}; expected TQ1_0 or TQ2_0")
    return kind


def _tq_codes(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ggml's per-block absmax step: d = max|x|, code = lroundf(x/d) + 1 ∈ {0, 1, 2} as uint8."""
    d = np.max(np.abs(blocks), axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    v = blocks * inv  # float32, |v| ≤ 1 up to one ulp, so rounding half away is a threshold test
    codes = (v >= 0.5).view(np.uint8) + np.uint8(1)
    codes -= (v <= -0.5).view(np.uint8)
    return codes, d


def _base3_msd_first(c: np.ndarray) -> np.ndarray:
    """Σ_n c[:, n, :]·3^(N−1−n) over axis 1 in uint8 (at most 242, no overflow)."""
    v = c[:, 0].copy()
    for n in range(1, c.shape[1]):
        v *= 3
        v += c[:, n]
    return v


def to_gguf(w: object, kind: TQKind) -> np.ndarray:
    """Quantize along the last axis into ggml TQ1_0/TQ2_0 blocks, byte-identical to ggml.

    ``w`` is any float array whose last dimension is a multiple of 256 (computed in float32 like
    ggml's ``quantize_row_*_ref``). Returns uint8 of shape ``(..., K/256·bytes_per_block)``.
    """
    kind = _check_kind(kind)
    x = _float_array(w, f"to_gguf({kind})")
    k = x.shape[-1]
    if k % QK_K:
        raise FormatError(f"to_gguf({kind}): last dimension {k} is not a multiple of {QK_K}")
    blocks = x.astype(np.float32).reshape(-1, QK_K)
    nb = blocks.shape[0]
    codes, d = _tq_codes(blocks)
    if kind == "TQ2_0":
        c = codes.reshape(nb, 2, 4, 32)
        qs = (c[:, :, 0] | (c[:, :, 1] << 2) | (c[:, :, 2] << 4) | (c[:, :, 3] << 6)).reshape(nb, 64)
    else:
        v0 = _base3_msd_first(codes[:, :160].reshape(nb, 5, 32))
        v1 = _base3_msd_first(codes[:, 160:240].reshape(nb, 5, 16))
        vh = _base3_msd_first(codes[:, 240:].reshape(nb, 4, 4)) * np.uint8(3)  # 5th digit is 0
        qs = np.take(_TQ1_BYTE, np.concatenate([v0, v1, vh], axis=1))
    dbytes = d.astype("<f2").view(np.uint8)
    out = np.concatenate([qs, dbytes], axis=1)
    return out.reshape(*x.shape[:-1], (k // QK_K) * TQ_BLOCK_BYTES[kind])


def from_gguf(data: object, kind: TQKind, shape: object) -> np.ndarray:
    """Decode TQ1_0/TQ2_0 blocks to float32 of ``shape`` exactly as ggml/gguf-py dequantize.

    ``data`` is bytes or a uint8 array holding ``prod(shape)/256`` blocks; the last dimension of
    ``shape`` must be a multiple of 256. Each weight is ``float32(fp16 d) · (code − 1)``.
    """
    kind = _check_kind(kind)
    dims = _shape(shape, f"from_gguf({kind})")
    if dims[-1] % QK_K:
        raise FormatError(f"from_gguf({kind}): last dimension {dims[-1]} is not a multiple of {QK_K}")
    b = _byte_array(data, f"from_gguf({kind})").reshape(-1)
    nb = int(np.prod(dims, dtype=np.int64)) // QK_K
    bs = TQ_BLOCK_BYTES[kind]
    if b.size != nb * bs:
        raise FormatError(f"from_gguf({kind}): shape {dims} needs {nb * bs} bytes, got {b.size}")
    blocks = b.reshape(nb, bs)
    d = blocks[:, bs - 2 :].copy().view("<f2").astype(np.float32)
    out = np.empty((nb, QK_K), dtype=np.float32)
    ch = min(nb, _DECODE_CHUNK)
    codes = np.empty((ch, QK_K), dtype=np.uint8)
    wide = np.empty((ch, QK_K), dtype=np.uint16)
    with np.errstate(invalid="ignore", over="ignore"):  # garbage fp16 d (inf/NaN) decodes as ggml's
        for s in range(0, nb, _DECODE_CHUNK):
            e = min(nb, s + _DECODE_CHUNK)
            m, bb, q = e - s, blocks[s:e], codes[: e - s]
            if kind == "TQ2_0":
                # byte m of 128-weight chunk c holds elements 128c + 32n + m at bits 2n
                q4 = q.reshape(m, 2, 4, 32)
                np.right_shift(bb[:, :64].reshape(m, 2, 1, 32), _TQ2_SHIFTS, out=q4)
                np.bitwise_and(q, 3, out=q)
                trit_codes = q
            else:
                # qs[0:32] byte m holds elements m + 32n; qs[32:48] 160 + m + 16n; qh 240 + m + 4n
                np.multiply(bb[:, None, :32], _TQ1_POW3, out=q[:, :160].reshape(m, 5, 32))
                np.multiply(bb[:, None, 32:48], _TQ1_POW3, out=q[:, 160:240].reshape(m, 5, 16))
                np.multiply(bb[:, None, 48:52], _TQ1_POW3[:, :4], out=q[:, 240:].reshape(m, 4, 4))
                w = wide[:m]
                w[...] = q
                w *= 3
                w >>= 8
                trit_codes = w
            o = out[s:e]
            o[...] = trit_codes
            o -= 1
            o *= d[s:e]
    return out.reshape(dims)


# ---------------------------------------------------------------------------------------------
# bitnet.cpp I2_S: codes w+1; block of QK weights → QK/4 bytes, element j at byte j % (QK/4),
# bit shift 6 − 2·(j // (QK/4)) (first group in the top bits); fp32 scale after the codes.

_I2_LUT = np.array([[(b >> s) & 3 for s in (6, 4, 2, 0)] for b in range(256)], dtype=np.int8) - 1


def _check_arch(arch: str) -> int:
    if arch not in I2S_BLOCK:
        raise FormatError(f"unknown I2_S layout {arch!r}; expected 'x86' or 'arm'")
    return I2S_BLOCK[arch]


def pack_i2s(trits: object, scale: float, arch: I2SArch = "x86") -> np.ndarray:
    """Pack ternary weights and their dequantization step into one I2_S buffer.

    The whole tensor is flattened row-major (bitnet.cpp packs ``nrow·n_per_row`` weights as one
    stream), so its size must be a multiple of the block (128 x86, 64 ARM). ``scale`` is the value
    a weight ±1 stands for (I2_S stores ``max|W|``, which for absmean-ternary weights is
    ``mean|W| = 1/s`` of `quantize_absmean`). Returns ``n/4 + 32`` bytes: codes, the float32 scale,
    then 28 zero bytes (bitnet.cpp leaves them unwritten).
    """
    qk = _check_arch(arch)
    if not np.isfinite(scale):
        raise FormatError(f"pack_i2s: scale must be finite, got {scale}")
    t = _trit_array(trits, "pack_i2s").reshape(-1)
    if t.size % qk:
        raise FormatError(f"pack_i2s: {t.size} weights are not a multiple of the {arch} block {qk}")
    codes = (t + 1).astype(np.uint8).reshape(-1, 4, qk // 4)
    packed = (codes[:, 0] << 6) | (codes[:, 1] << 4) | (codes[:, 2] << 2) | codes[:, 3]
    out = np.zeros(t.size // 4 + I2S_TAIL, dtype=np.uint8)
    out[: t.size // 4] = packed.reshape(-1)
    out[t.size // 4 : t.size // 4 + 4] = np.array([scale], dtype="<f4").view(np.uint8)
    return out


def to_i2s(w: object, arch: I2SArch = "x86") -> np.ndarray:
    """bitnet.cpp's ``quantize_i2_s`` on a float tensor (expected to be ternary × scale already).

    Scale = ``max|W|`` (stored as float32); a weight with ``|w| < 1e-6`` gets code 1 (zero),
    otherwise its sign picks code 2 (+1) or 0 (−1). Magnitudes are *not* rounded: this mirrors the
    C function, which assumes the converter already ternarized the weights.
    """
    x = _float_array(w, "to_i2s").astype(np.float32).astype(np.float64)
    scale = float(np.max(np.abs(x))) if x.size else 0.0
    trits = np.where(np.abs(x) < 1e-6, 0, np.where(x > 0, 1, -1)).astype(np.int8)
    return pack_i2s(trits, scale, arch)


def from_i2s(data: object, shape: object, arch: I2SArch = "x86") -> tuple[np.ndarray, float]:
    """Decode an I2_S buffer into ``(trits of shape, scale)``; weights are ``trits · scale``.

    Code 3 never comes out of ``quantize_i2_s`` and raises `FormatError`.
    """
    qk = _check_arch(arch)
    dims = _shape(shape, "from_i2s")
    n = int(np.prod(dims, dtype=np.int64))
    if n % qk:
        raise FormatError(f"from_i2s: {n} weights are not a multiple of the {arch} block {qk}")
    b = _byte_array(data, "from_i2s").reshape(-1)
    if b.size < n // 4 + 4:
        raise FormatError(f"from_i2s: shape {dims} needs at least {n // 4 + 4} bytes, got {b.size}")
    codes = b[: n // 4]
    if np.any((codes & 0x55) & (codes >> 1) & 0x55):  # some 2-bit field equals 0b11
        raise FormatError("from_i2s: code 3 is not a valid I2_S ternary code")
    t = _I2_LUT[codes.reshape(-1, qk // 4)].transpose(0, 2, 1)  # (block, group, pos)
    scale = float(b[n // 4 : n // 4 + 4].view("<f4")[0])
    return t.reshape(dims), scale


# ---------------------------------------------------------------------------------------------
# HF transformers pack_weights: codes w+1 along dim 0; packed[r] holds rows r + i·R at bits 2i


def pack_hf_2bit(trits: object) -> np.ndarray:
    """HF BitNet 2-bit packing: (out, ...) trits → (ceil(out/4), ...) uint8.

    Row ``r + i·R`` (R = ceil(out/4)) goes to bits ``2i..2i+1`` of packed row r with code w+1;
    slots past ``out`` stay 0 bits, as HF leaves them.
    """
    t = _trit_array(trits, "pack_hf_2bit")
    rows = t.shape[0]
    r = -(-rows // 4)
    codes = np.zeros((4 * r, *t.shape[1:]), dtype=np.uint8)
    codes[:rows] = t + 1
    c = codes.reshape(4, r, *t.shape[1:])
    return (c[0] | (c[1] << 2) | (c[2] << 4) | (c[3] << 6)).astype(np.uint8)


def unpack_hf_2bit(packed: object, rows: int) -> np.ndarray:
    """Inverse of `pack_hf_2bit`: (ceil(rows/4), ...) uint8 → (rows, ...) int8 trits."""
    b = _byte_array(packed, "unpack_hf_2bit")
    if b.ndim == 0:
        raise FormatError("unpack_hf_2bit: expected at least one dimension, got a scalar")
    rows = int(rows)
    if rows < 0 or b.shape[0] != -(-rows // 4):
        need = -(-max(rows, 0) // 4)
        raise FormatError(f"unpack_hf_2bit: {rows} rows need {need} packed rows, got {b.shape[0]}")
    fields = np.stack([(b >> s) & 3 for s in (0, 2, 4, 6)])  # (4, R, ...)
    out = fields.reshape(4 * b.shape[0], *b.shape[1:])[:rows]
    if np.any(out == 3):
        raise FormatError("unpack_hf_2bit: code 3 is not a valid ternary code")
    return out.astype(np.int8) - 1
