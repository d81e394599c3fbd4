"""Ternary formats against independent oracles: gguf-py (TQ1_0/TQ2_0), HF transformers
(pack_weights), torch (absmean), and hand-derived bytes from the documented layouts
(ternfpga base-3, bitnet.cpp I2_S)."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType, quants
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from npukit.errors import FormatError
from npukit.formats import ternary as tn

GG = {"TQ1_0": GGMLQuantizationType.TQ1_0, "TQ2_0": GGMLQuantizationType.TQ2_0}
KINDS = ("TQ1_0", "TQ2_0")

trit_arrays = hnp.arrays(
    np.int8,
    hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=23),
    elements=st.integers(-1, 1),
)


# --------------------------------------------------------------------------------------- absmean


def test_absmean_hand_example():
    w = np.array([[0.5, -1.0], [0.1, 2.0]])  # mean|W| = 0.9
    trits, s = tn.quantize_absmean(w)
    assert s == pytest.approx(1 / 0.9)
    assert trits.dtype == np.int8
    assert trits.tolist() == [[1, -1], [0, 1]]  # 0.56, -1.11, 0.11, 2.22 → round, clip


@pytest.mark.hf
def test_absmean_matches_torch_weight_quant():
    import torch
    rng = np.random.default_rng(1)
    w = rng.standard_normal((64, 96)) * 0.02
    trits, s = tn.quantize_absmean(w)
    tw = torch.from_numpy(w)
    ts = 1.0 / tw.abs().mean().clamp(min=1e-5)  # HF WeightQuant / bitnet.cpp converter formula
    ref = (tw * ts).round().clamp(-1, 1)
    assert np.array_equal(trits, ref.numpy().astype(np.int8))
    assert s == pytest.approx(float(ts), rel=1e-12)
    # scale semantics: y = (x @ trits.T) / s reproduces HF's fake-quantized linear
    x = rng.standard_normal((3, 96))
    fake = torch.nn.functional.linear(torch.from_numpy(x), ref / ts).numpy()
    assert np.allclose((x @ trits.T.astype(np.float64)) / s, fake, rtol=1e-12, atol=1e-15)


def test_absmean_all_zero_uses_eps():
    trits, s = tn.quantize_absmean(np.zeros((4, 4), np.float32))
    assert s == pytest.approx(1e5)
    assert not trits.any()


@pytest.mark.parametrize("bad", [np.ones((2, 2), np.int32), np.array([1.0, np.nan]), np.zeros((0,)), 3.0])
def test_absmean_rejects(bad):
    with pytest.raises(FormatError):
        tn.quantize_absmean(bad)


# --------------------------------------------------------------------------------------- base-3


def _ternfpga_digits(byte: int) -> list[int]:
    """ternfpga's decoder written out: repeated %3 and /3 from lane 0, then 0→0, 1→+1, 2→−1."""
    out = []
    for _ in range(5):
        d = byte % 3
        byte //= 3
        out.append({0: 0, 1: 1, 2: -1}[d])
    return out


def test_base3_all_243_codes_round_trip():
    codes = np.arange(243, dtype=np.uint8)
    trits = tn.unpack_base3(codes.reshape(243, 1), 5)
    assert trits.tolist() == [_ternfpga_digits(b) for b in range(243)]
    assert np.array_equal(tn.pack_base3(trits).reshape(-1), codes)


def test_base3_hand_vector_and_padding():
    # [-1, +1, 0, +1, -1, | +1, +1] → 2 + 3·1 + 27·1 + 81·2 = 194 ; 1 + 3·1 = 4 (high lanes padded 0)
    packed = tn.pack_base3(np.array([-1, 1, 0, 1, -1, 1, 1]))
    assert packed.dtype == np.uint8
    assert packed.tolist() == [194, 4]
    assert tn.unpack_base3(packed, 10).tolist() == [-1, 1, 0, 1, -1, 1, 1, 0, 0, 0]


@given(trit_arrays)
def test_base3_round_trip_property(t):
    packed = tn.pack_base3(t)
    assert packed.shape == (*t.shape[:-1], -(-t.shape[-1] // 5))
    assert np.array_equal(tn.unpack_base3(packed, t.shape[-1]), t)


@pytest.mark.parametrize("byte", range(243, 256))
def test_base3_rejects_invalid_bytes(byte):
    with pytest.raises(FormatError, match="243"):
        tn.unpack_base3(np.array([0, byte], np.uint8), 10)


@pytest.mark.parametrize(
    "call",
    [
        lambda: tn.pack_base3(np.array([0.0, 1.0])),
        lambda: tn.pack_base3(np.array([0, 2])),
        lambda: tn.pack_base3(np.int8(1)),
        lambda: tn.unpack_base3(np.array([1, 2], np.uint8), 11),
        lambda: tn.unpack_base3(np.array([1, 2], np.int16), 10),
    ],
)
def test_base3_errors(call):
    with pytest.raises(FormatError):
        call()


# --------------------------------------------------------------------------------------- TQ1_0 / TQ2_0


def _inputs(rng):
    scale = np.float32(rng.uniform(1e-3, 0.2))
    tern = (rng.integers(-1, 2, (6, 1024)) * scale).astype(np.float32)
    gauss = rng.standard_normal((5, 768)).astype(np.float32)
    zero = np.zeros((2, 512), np.float32)
    mixed = gauss[:2, :512].copy()
    mixed[0, 256:] = 0.0  # an all-zero block next to a non-zero one
    ties = np.tile(np.array([1.0, 0.5, -0.5, 0.49999997, -0.49999997, 0.0, 0.25, -1.0], np.float32), 32)
    return {"ternary": tern, "gauss": gauss, "zero": zero, "mixed": mixed, "ties": ties}


@pytest.mark.parametrize("kind", KINDS)
def test_tq_byte_identical_to_gguf(kind):
    rng = np.random.default_rng(2)
    for name, x in _inputs(rng).items():
        ours = tn.to_gguf(x, kind)
        ref = quants.quantize(x, GG[kind])
        assert ours.dtype == np.uint8 and ours.shape == ref.shape, name
        assert ours.tobytes() == ref.tobytes(), name
        dec = tn.from_gguf(ours, kind, x.shape)
        assert dec.dtype == np.float32
        assert dec.tobytes() == quants.dequantize(ref, GG[kind]).astype(np.float32).tobytes(), name


@pytest.mark.parametrize("kind", KINDS)
def test_tq_decode_arbitrary_bytes_like_gguf(kind):
    rng = np.random.default_rng(3)
    blob = rng.integers(0, 256, (7, 3 * tn.TQ_BLOCK_BYTES[kind]), dtype=np.uint8)
    with np.errstate(all="ignore"):  # random fp16 scales include inf and NaN
        ref = quants.dequantize(blob, GG[kind]).astype(np.float32)
    assert tn.from_gguf(blob.tobytes(), kind, (7, 768)).tobytes() == ref.tobytes()


@given(
    hnp.arrays(
        np.int8, st.tuples(st.integers(1, 3), st.sampled_from([256, 512])), elements=st.integers(-1, 1)
    ),
    st.floats(0.0001220703125, 10.0, width=16),
    st.sampled_from(KINDS),
)
def test_tq_ternary_times_scale_round_trips(t, scale, kind):
    x = t.astype(np.float32) * np.float32(scale)
    back = tn.from_gguf(tn.to_gguf(x, kind), kind, x.shape)
    # a block whose trits are all 0 stores d = 0; otherwise d = |scale| exactly (fp16 input)
    assert np.array_equal(back, x)


def test_tq_hand_vectors():
    x = np.zeros(256, np.float32)
    x[0], x[32], x[255] = 1.0, -1.0, 1.0
    tq2 = tn.to_gguf(x, "TQ2_0")
    # byte 0: c0 | c32<<2 | c64<<4 | c96<<6 = 2 | 0 | 1<<4 | 1<<6; byte 63 (elements 159,191,223,255)
    assert tq2[0] == 0x52 and tq2[63] == 0x95 and set(tq2[1:63].tolist()) == {0x55}
    assert tq2[64:].tolist() == [0x00, 0x3C]  # fp16 1.0, little endian
    tq1 = tn.to_gguf(x, "TQ1_0")
    # byte 0: v = 2·81 + 0·27 + 1·9 + 1·3 + 1 = 175 → ceil(175·256/243) = 185; all-ones v = 121 → 128
    assert tq1[0] == 185 and set(tq1[1:48].tolist()) == {128}
    # qh byte 3: elements 243, 247, 251, 255 → (1·27 + 1·9 + 1·3 + 2)·3 = 123 → ceil(123·256/243) = 130
    assert tq1[48:51].tolist() == [127, 127, 127] and tq1[51] == 130
    assert tq1[52:].tolist() == [0x00, 0x3C]


@pytest.mark.parametrize(
    "call",
    [
        lambda: tn.to_gguf(np.zeros((2, 300), np.float32), "TQ1_0"),
        lambda: tn.to_gguf(np.zeros((2, 256), np.int32), "TQ2_0"),
        lambda: tn.to_gguf(np.full(256, np.inf, np.float32), "TQ2_0"),
        lambda: tn.to_gguf(np.zeros(256, np.float32), "TQ3_0"),
        lambda: tn.from_gguf(np.zeros(54, np.uint8), "TQ1_0", (2, 256)),
        lambda: tn.from_gguf(np.zeros(66, np.uint8), "TQ2_0", (1, 100)),
        lambda: tn.from_gguf(np.zeros(66, np.int8), "TQ2_0", (256,)),
        lambda: tn.from_gguf(np.zeros(66, np.uint8), "TQ2_0", "abc"),
    ],
)
def test_tq_errors(call):
    with pytest.raises(FormatError):
        call()


# --------------------------------------------------------------------------------------- I2_S


def _i2s_hand(arch: str) -> tuple[np.ndarray, list[int]]:
    """Trits and bytes derived from quantize_i2_s (ggml-bitnet-mad.cpp): element j of a block
    goes to byte j % G at shift 6 − 2·(j // G), G = 32 (x86) or 16 (ARM); codes w + 1."""
    qk = tn.I2S_BLOCK[arch]
    g = qk // 4
    t = np.zeros(2 * qk, np.int8)
    t[0], t[g + 1], t[qk - 1], t[qk + 2 * g] = 1, -1, 1, -1
    zero = 0b01010101
    expect = [zero] * (2 * g)
    expect[0] = (2 << 6) | (1 << 4) | (1 << 2) | 1  # element 0, code 2, top bits
    expect[1] = (1 << 6) | (0 << 4) | (1 << 2) | 1  # element g + 1, code 0, bits 5:4
    expect[g - 1] = (1 << 6) | (1 << 4) | (1 << 2) | 2  # element qk − 1, bits 1:0
    expect[g] = (1 << 6) | (1 << 4) | (0 << 2) | 1  # second block, element 2g, bits 3:2
    return t, expect


@pytest.mark.parametrize("arch", ["x86", "arm"])
def test_i2s_hand_vector(arch):
    t, expect = _i2s_hand(arch)
    buf = tn.pack_i2s(t, 0.0625, arch)
    n4 = t.size // 4
    assert buf.size == n4 + 32
    assert buf[:n4].tolist() == expect
    assert buf[n4 : n4 + 4].tobytes() == np.float32(0.0625).tobytes()
    assert not buf[n4 + 4 :].any()
    trits, scale = tn.from_i2s(buf, (2, t.size // 2), arch)
    assert scale == 0.0625
    assert np.array_equal(trits.reshape(-1), t)


def test_to_i2s_mirrors_quantize_i2s_rules():
    t, expect = _i2s_hand("x86")
    w = t.astype(np.float32) * np.float32(0.37)
    w[5] = 5e-7  # below 1e-6: code 1 (zero), as quantize_i2_s
    w[9] = -0.01  # magnitudes are not rounded: the sign alone picks code 0
    expect[9] = (0 << 6) | (1 << 4) | (1 << 2) | 1
    buf = tn.to_i2s(w.reshape(2, 128))
    assert buf[: t.size // 4].tolist() == expect
    assert buf[t.size // 4 : t.size // 4 + 4].tobytes() == np.float32(0.37).tobytes()


@given(st.sampled_from(["x86", "arm"]), st.integers(1, 4), st.data())
def test_i2s_round_trip_property(arch, nblocks, data):
    n = nblocks * tn.I2S_BLOCK[arch]
    t = data.draw(hnp.arrays(np.int8, (n,), elements=st.integers(-1, 1)))
    scale = data.draw(st.floats(0.0009765625, 1.0, width=32))
    trits, s = tn.from_i2s(tn.pack_i2s(t, scale, arch), (n,), arch)
    assert np.array_equal(trits, t) and s == scale


@pytest.mark.parametrize(
    "call",
    [
        lambda: tn.pack_i2s(np.zeros(100, np.int8), 1.0),
        lambda: tn.pack_i2s(np.zeros(128, np.int8), 1.0, "riscv"),
        lambda: tn.pack_i2s(np.zeros(128, np.int8), float("nan")),
        lambda: tn.from_i2s(np.full(64, 0xFF, np.uint8), (128,)),  # code 3
        lambda: tn.from_i2s(np.zeros(20, np.uint8), (128,)),
        lambda: tn.from_i2s(np.zeros(64, np.uint8), (100,)),
    ],
)
def test_i2s_errors(call):
    with pytest.raises(FormatError):
        call()


# --------------------------------------------------------------------------------------- HF 2-bit


def test_hf_unpack_docstring_example():
    # the worked example in transformers' unpack_weights docstring
    packed = np.array([[0b10100001, 0b00011000], [0b10010000, 0b00001010]], np.uint8)
    expect = [[0, -1], [-1, 1], [-1, 1], [-1, 1], [1, 0], [0, -1], [1, -1], [1, -1]]
    assert tn.unpack_hf_2bit(packed, 8).tolist() == expect
    assert np.array_equal(tn.pack_hf_2bit(np.array(expect)), packed)


@pytest.mark.hf
@pytest.mark.slow  # first call imports transformers (~6 s)
@pytest.mark.parametrize("shape", [(8, 5), (7, 3), (13,), (1, 4), (6, 2, 3)])
def test_hf_pack_matches_transformers(shape):
    import torch
    from transformers.integrations.bitnet import pack_weights

    rng = np.random.default_rng(sum(shape))
    t = rng.integers(-1, 2, shape).astype(np.int8)
    ref = pack_weights(torch.from_numpy(t.astype(np.float32))).numpy()
    ours = tn.pack_hf_2bit(t)
    assert ours.dtype == np.uint8 and ours.shape == ref.shape
    assert np.array_equal(ours, ref)
    assert np.array_equal(tn.unpack_hf_2bit(ours, shape[0]), t)


@given(trit_arrays)
def test_hf_round_trip_property(t):
    assert np.array_equal(tn.unpack_hf_2bit(tn.pack_hf_2bit(t), t.shape[0]), t)


@pytest.mark.parametrize(
    "call",
    [
        lambda: tn.unpack_hf_2bit(np.full((2, 2), 0xFF, np.uint8), 8),  # code 3
        lambda: tn.unpack_hf_2bit(np.zeros((2, 2), np.uint8), 9),
        lambda: tn.pack_hf_2bit(np.array([[0.5]])),
    ],
)
def test_hf_errors(call):
    with pytest.raises(FormatError):
        call()
