"""ggml tensor types decode bit-identically to the `gguf` package's NumPy reference
(``gguf.quants.dequantize``, gguf-py 0.19.0): on random block bytes (any bit pattern is a valid block;
fp16 scales forced to subnormal, ±0, ±inf and NaN with payloads) and on GGUF files written by
``gguf.GGUFWriter`` and read back by ``gguf.GGUFReader``."""

import gguf
import numpy as np
import pytest

from npukit.errors import ModelError
from npukit.models.gguf import GGML_TYPES, GGUFFile, dequantize

Q = gguf.GGMLQuantizationType
# byte offsets of each type's fp16 scale fields inside a block (ggml-common.h block structs)
FP16_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "Q2_K": [80, 82],
               "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208], "TQ1_0": [52], "TQ2_0": [64]}
SPECIAL_FP16 = np.array([0x0001, 0x03FF, 0x8001, 0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0x7C01,
                         0xFE5A, 0x7DFF, 0x7BFF, 0xFBFF, 0x0400], dtype=np.uint16)
ALL_TYPES = sorted(t.name for t in GGML_TYPES.values())


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype == np.float32 and np.array_equal(
        a.view(np.uint32), b.view(np.uint32))


def random_blocks(name: str, rows: int, blocks_per_row: int, seed: int) -> np.ndarray:
    t = next(t for t in GGML_TYPES.values() if t.name == name)
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=(rows * blocks_per_row, t.nbytes), dtype=np.uint8)
    for at in FP16_FIELDS.get(name, []):
        # every special value at every scale field, in some block each, plus random NaN payloads
        pick = rng.choice(raw.shape[0], size=raw.shape[0] // 3, replace=False)
        vals = np.concatenate([SPECIAL_FP16, (0x7C01 + rng.integers(0, 0x3FF, pick.size)).astype(np.uint16)
                               | (rng.integers(0, 2, pick.size) << 15).astype(np.uint16)])
        raw[pick, at:at + 2] = vals[:pick.size].view(np.uint8).reshape(-1, 2)
    return raw.reshape(rows, blocks_per_row * t.nbytes)


@pytest.mark.parametrize("name", ALL_TYPES)
def test_random_blocks_bit_identical_to_gguf(name):
    t = next(t for t in GGML_TYPES.values() if t.name == name)
    blocks_per_row = max(1, 4096 // t.block)
    raw = random_blocks(name, rows=12, blocks_per_row=blocks_per_row, seed=t.type_id)
    with np.errstate(all="ignore"):
        ref = gguf.quants.dequantize(raw, Q[name])
    ours = dequantize(raw, name, (12, blocks_per_row * t.block))
    assert same_bits(ours, ref.astype(np.float32, copy=False))
    # the special scales really reached the output (inf and NaN weights exist)
    if name in FP16_FIELDS:
        assert np.isnan(ours).any() and np.isinf(ours).any()


@pytest.mark.parametrize("name", ["F16", "Q5_1", "Q3_K", "Q6_K", "TQ1_0"])
def test_decoding_in_slices_changes_nothing(monkeypatch, name):
    """Big tensors decode a slice of blocks at a time; slice edges must not show."""
    import npukit.models.gguf.quants as quants

    t = next(t for t in GGML_TYPES.values() if t.name == name)
    raw = random_blocks(name, rows=5, blocks_per_row=max(1, 1024 // t.block), seed=7)
    shape = (5, raw.shape[1] // t.nbytes * t.block)
    whole = dequantize(raw, name, shape)
    monkeypatch.setattr(quants, "_CHUNK_WEIGHTS", 3 * t.block + 1)  # 3 blocks a slice, ragged end
    with np.errstate(all="ignore"):
        ref = gguf.quants.dequantize(raw, Q[name])
    assert same_bits(dequantize(raw, name, shape), whole) and same_bits(whole, ref)


def test_type_id_and_name_decode_alike_and_3d_shapes():
    raw = random_blocks("Q4_K", rows=6, blocks_per_row=2, seed=5)
    a = dequantize(raw, 12, (2, 3, 512))
    b = dequantize(raw.tobytes(), "Q4_K", (2, 3, 512))
    assert a.shape == (2, 3, 512) and same_bits(a, b)


def test_unknown_type_truncated_data_and_ragged_rows_are_model_errors():
    raw = random_blocks("Q8_0", rows=2, blocks_per_row=2, seed=1)
    with pytest.raises(ModelError, match=r"ggml type 16 \(IQ2_XXS\) is not supported"):
        dequantize(raw, 16, (2, 64))
    with pytest.raises(ModelError, match="ggml type 99 \\(unknown\\)"):
        dequantize(raw, 99, (2, 64))
    with pytest.raises(ModelError, match="truncated"):
        dequantize(raw.reshape(-1)[:-1], "Q8_0", (2, 64))
    with pytest.raises(ModelError, match="not a multiple of the 32-weight block"):
        dequantize(raw, "Q8_0", (4, 40))
    with pytest.raises(ModelError) as info:
        dequantize(raw, "Q5_K", (2, 64))
    assert "\n" not in str(info.value)


# -- real GGUF files ------------------------------------------------------------------------------
QUANTIZABLE = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "TQ1_0", "TQ2_0"]
RAW_ONLY = ["Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]  # gguf-py 0.19.0 cannot quantize to these


def write_file(path, rng):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    originals = {}
    for i, name in enumerate(QUANTIZABLE):
        x = (rng.standard_normal((3 + i % 3, 512)) * 0.05).astype(np.float32)
        originals[f"q.{name}"] = x
        enc = gguf.quants.quantize(x, Q[name])
        if name in ("F32", "F16"):
            w.add_tensor(f"q.{name}", enc)
        else:
            w.add_tensor(f"q.{name}", enc, raw_shape=enc.shape, raw_dtype=Q[name])
    for name in RAW_ONLY:
        raw = random_blocks(name, rows=4, blocks_per_row=2, seed=100 + len(name))
        w.add_tensor(f"r.{name}", raw, raw_shape=raw.shape, raw_dtype=Q[name])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return originals


def test_gguf_writer_files_decode_as_gguf_reader_does(tmp_path):
    path = tmp_path / "mixed.gguf"
    originals = write_file(path, np.random.default_rng(0))
    ours = GGUFFile(path)
    ref = gguf.GGUFReader(str(path))
    assert len(ref.tensors) == len(QUANTIZABLE) + len(RAW_ONLY) == len(ours.tensors)
    for rt in ref.tensors:
        with np.errstate(all="ignore"):
            expect = gguf.quants.dequantize(rt.data, rt.tensor_type)
        expect = expect.reshape(tuple(reversed(rt.shape.tolist())))
        got = ours.float32(rt.name)
        assert ours.type_name(rt.name) == rt.tensor_type.name
        assert same_bits(got, expect.astype(np.float32, copy=False)), rt.name
        if rt.name in originals:  # and the codecs are real: the round trip is close to the input
            err = np.abs(got - originals[rt.name]).max() / np.abs(originals[rt.name]).max()
            assert err < (0.6 if "TQ" in rt.name else 0.1), rt.name


def test_truncated_file_and_unsupported_tensor_are_one_line_model_errors(tmp_path):
    path = tmp_path / "mixed.gguf"
    write_file(path, np.random.default_rng(1))
    data = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:-100])
    with pytest.raises(ModelError, match="runs past the end of the file"):
        GGUFFile(cut)
    w = gguf.GGUFWriter(str(tmp_path / "iq.gguf"), "llama")
    w.add_tensor("iq", np.zeros((1, 66), np.uint8), raw_shape=(1, 66), raw_dtype=Q.IQ2_XXS)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    g = GGUFFile(tmp_path / "iq.gguf")
    with pytest.raises(ModelError, match=r"unsupported ggml type 16 \(IQ2_XXS\)") as info:
        g.float32("iq")
    assert "\n" not in str(info.value)
