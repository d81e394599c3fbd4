"""npukit's safetensors reader against the `safetensors` package (oracle), and its error paths."""

import json
import struct

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from npukit.errors import ModelError
from npukit.models.safetensors import (
    INDEX_NAME,
    SafetensorsFile,
    bf16_to_f32,
    open_checkpoint,
    save_safetensors,
)

pytestmark = pytest.mark.hf  # transformers / safetensors are the oracles


def _tensors(rng):
    return {
        "f32": rng.standard_normal((3, 5)).astype(np.float32),
        "f16": rng.standard_normal((4,)).astype(np.float16),
        "f64": rng.standard_normal((2, 2, 2)),
        "i8": rng.integers(-128, 128, (7,)).astype(np.int8),
        "u8": rng.integers(0, 256, (2, 3)).astype(np.uint8),
        "i32": rng.integers(-2**31, 2**31, (5,)).astype(np.int32),
        "i64": rng.integers(-2**40, 2**40, (3,)).astype(np.int64),
        "empty": np.zeros((0, 4), np.float32),
        "scalar": np.array(3.5, np.float32),
    }


def test_reads_what_the_safetensors_package_writes(tmp_path):
    rng = np.random.default_rng(0)
    ts = _tensors(rng)
    ts["bf16"] = rng.standard_normal((6, 3)).astype(ml_dtypes.bfloat16)
    save_file(ts, tmp_path / "a.safetensors", metadata={"format": "np"})
    f = SafetensorsFile(tmp_path / "a.safetensors")
    assert set(f.keys()) == set(ts) and f.metadata == {"format": "np"}
    for k, v in ts.items():
        assert f.shape(k) == v.shape
        if k == "bf16":
            assert f.dtype(k) == "BF16"
            np.testing.assert_array_equal(f.float32(k), v.astype(np.float32))
        else:
            np.testing.assert_array_equal(f.raw(k), v)
    np.testing.assert_array_equal(f.float32("f16"), ts["f16"].astype(np.float32))
    np.testing.assert_array_equal(f.rows("bf16", np.array([4, 1])), ts["bf16"][[4, 1]].astype(np.float32))
    # F32 tensors are views of the memory map: no private copy
    view = f.float32("f32")
    assert isinstance(view.base, np.ndarray) and not view.flags.writeable
    assert np.shares_memory(view, f.raw("f32"))
    with pytest.raises(ModelError, match="not a float"):
        f.float32("i8")


def test_the_safetensors_package_reads_what_we_write(tmp_path):
    ts = _tensors(np.random.default_rng(1))
    bits = np.random.default_rng(2).integers(0, 2**16, (4, 4)).astype(np.uint16)
    bits[bits & 0x7F80 == 0x7F80] = 0  # avoid NaN patterns for the equality check
    save_safetensors(tmp_path / "b.safetensors", {**ts, "bf": bits}, dtypes={"bf": "BF16"})
    back = load_file(tmp_path / "b.safetensors")
    for k, v in ts.items():
        np.testing.assert_array_equal(back[k], v)
    np.testing.assert_array_equal(back["bf"].astype(np.float32), bf16_to_f32(bits))


def _raw_file(tmp_path, header, data=b"", n=None):
    text = json.dumps(header).encode()
    p = tmp_path / "x.safetensors"
    p.write_bytes(struct.pack("<Q", len(text) if n is None else n) + text + data)
    return p


@pytest.mark.parametrize("header, data, n, msg", [
    ({}, b"", 10**6, "header length"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4, None, "truncated"),
    ({"a": {"dtype": "Q7", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, None, "unknown dtype"),
    ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 12, None, "needs 12 bytes"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12, None, "overlap"),
    ({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, b"\0" * 8, None, "non-negative"),
    ({"a": {"dtype": "F32", "shape": [2]}}, b"\0" * 8, None, "data_offsets"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, b"\0" * 8, None, "begin <= end"),
    ({"__metadata__": {"k": 1}}, b"", None, "__metadata__"),
    ([1, 2], b"", None, "not a JSON object"),
])
def test_corrupt_files_raise_one_line(tmp_path, header, data, n, msg):
    p = _raw_file(tmp_path, header, data, n)
    with pytest.raises(ModelError, match=msg) as e:
        SafetensorsFile(p)
    assert "\n" not in str(e.value) and str(p) in str(e.value)


def test_short_and_garbled_files(tmp_path):
    p = tmp_path / "s.safetensors"
    p.write_bytes(b"\x05\0\0")
    with pytest.raises(ModelError, match="truncated"):
        SafetensorsFile(p)
    p.write_bytes(struct.pack("<Q", 4) + b"{{{{")
    with pytest.raises(ModelError, match="invalid JSON"):
        SafetensorsFile(p)
    # a real file cut short
    good = tmp_path / "g.safetensors"
    save_file({"w": np.ones((64, 64), np.float32)}, good)
    blob = good.read_bytes()
    good.write_bytes(blob[:-100])
    with pytest.raises(ModelError, match="truncated"):
        SafetensorsFile(good)


def test_sharded_index(tmp_path):
    rng = np.random.default_rng(4)
    a = {"x": rng.standard_normal((3, 3)).astype(np.float32)}
    b = {"y": rng.standard_normal((2,)).astype(np.float32), "z": np.arange(4, dtype=np.int32)}
    save_file(a, tmp_path / "model-00001-of-00002.safetensors")
    save_file(b, tmp_path / "model-00002-of-00002.safetensors")
    wmap = {"x": "model-00001-of-00002.safetensors", "y": "model-00002-of-00002.safetensors",
            "z": "model-00002-of-00002.safetensors"}
    (tmp_path / INDEX_NAME).write_text(json.dumps({"metadata": {}, "weight_map": wmap}))
    ck = open_checkpoint(tmp_path)
    assert sorted(ck.keys()) == ["x", "y", "z"]
    np.testing.assert_array_equal(ck.float32("x"), a["x"])
    np.testing.assert_array_equal(ck.raw("z"), b["z"])
    wmap["w"] = "model-00001-of-00002.safetensors"
    (tmp_path / INDEX_NAME).write_text(json.dumps({"weight_map": wmap}))
    with pytest.raises(ModelError, match="'w' is not in shard"):
        open_checkpoint(tmp_path)
    wmap.pop("w")
    wmap["x"] = "model-00009-of-00002.safetensors"
    (tmp_path / INDEX_NAME).write_text(json.dumps({"weight_map": wmap}))
    with pytest.raises(ModelError, match="missing"):
        open_checkpoint(tmp_path)
    (tmp_path / INDEX_NAME).write_text("{not json")
    with pytest.raises(ModelError, match="corrupt index"):
        open_checkpoint(tmp_path)


def test_no_checkpoint(tmp_path):
    with pytest.raises(ModelError, match=r"no \*\.safetensors"):
        open_checkpoint(tmp_path)
    with pytest.raises(ModelError, match="no such"):
        open_checkpoint(tmp_path / "nope")
