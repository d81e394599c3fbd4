"""The shipped project-trained model (assets/digits-int8): its accuracy claim is recomputed on the
held-out split of scikit-learn's digits, and LiteRT's reference kernels agree on every output."""

from __future__ import annotations

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter as LiteRT
from ai_edge_litert.interpreter import OpResolverType

from npukit.models.tflite import digits, read_model


def test_asset_is_small_int8_and_per_channel():
    files = {p.name: p.stat().st_size for p in digits.asset_dir().iterdir()}
    assert {"digits_int8.tflite", "metrics.json", "samples.npz"} <= set(files)
    assert sum(files.values()) < 100_000
    model = read_model(digits.asset_dir() / "digits_int8.tflite")
    assert [op.name for op in model.ops] == ["RESHAPE", "FULLY_CONNECTED", "FULLY_CONNECTED", "SOFTMAX"]
    assert model.tensors[model.ops[1].inputs[1]].quant.per_channel
    assert all(t.dtype != np.float32 for t in model.tensors)


@pytest.fixture(scope="module")
def split():
    return digits.load_split()  # importing scikit-learn takes a few seconds: once per module


@pytest.mark.slow
def test_accuracy_claim_recomputed_and_litert_agrees(split):
    metrics = digits.load_metrics()
    assert split.y_test.size == metrics["n_test"] == 450
    images = digits.quantize_images(split.x_test)
    path = digits.asset_dir() / "digits_int8.tflite"
    pred, ours = digits.predict(path, images)
    correct = int((pred == split.y_test).sum())
    assert correct == metrics["int8_correct"]
    assert round(correct / split.y_test.size, 6) == metrics["int8_accuracy"]
    assert metrics["int8_accuracy"] > 0.9
    ref = LiteRT(model_path=str(path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    ref.allocate_tensors()
    inp, out = ref.get_input_details()[0]["index"], ref.get_output_details()[0]["index"]
    for i, img in enumerate(images):
        ref.set_tensor(inp, img[None])
        ref.invoke()
        assert np.array_equal(ref.get_tensor(out)[0], ours[i]), f"held-out sample {i}"


@pytest.mark.slow
def test_samples_are_held_out_rows(split):
    with np.load(digits.asset_dir() / "samples.npz") as s:
        images, labels = s["images"], s["labels"]
    test_images = digits.quantize_images(split.x_test)
    for img, label in zip(images, labels, strict=True):
        rows = np.flatnonzero((test_images == img).all(axis=(1, 2, 3)))
        assert rows.size and label in split.y_test[rows]
