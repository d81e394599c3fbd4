"""`npukit.models.tflite.evaluate`: top-1 over scikit-learn's held-out digits equals the top-1 of
LiteRT BUILTIN_REF's own outputs (computed here, independently), on the host and on VTA; a folder
dataset; bad datasets are typed errors."""

from __future__ import annotations

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter as LiteRT
from ai_edge_litert.interpreter import OpResolverType

import npukit
from npukit.errors import ConfigError
from npukit.models.tflite import digits, zoo
from npukit.models.tflite.evaluate import load_dataset


def _litert_top1(path, images: np.ndarray, labels: np.ndarray) -> int:
    ref = LiteRT(model_path=str(path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    ref.allocate_tensors()
    inp, out = ref.get_input_details()[0]["index"], ref.get_output_details()[0]["index"]
    correct = 0
    for img, label in zip(images, labels, strict=True):
        ref.set_tensor(inp, img[None])
        ref.invoke()
        correct += int(ref.get_tensor(out).argmax() == label)
    return correct


@pytest.mark.parametrize("target", ["ref", "vta"])
def test_digits_top1_equals_litert_reference(target):
    split = digits.load_split()
    images = digits.quantize_images(split.x_test)
    expect = _litert_top1(zoo.resolve("zoo:digits"), images, split.y_test)
    result = npukit.load_model("zoo:digits").evaluate("zoo:digits", target, progress=False)
    assert result.samples == len(split.y_test) == 450
    assert result.correct == expect
    assert result.agree_with_ref == result.samples
    if target == "vta":
        per = result.figures["vta_cycles_per_inference"]
        assert per.value > 0 and str(per.tier) == "projected"
        assert result.figures["vta_energy_total"].value == pytest.approx(
            result.figures["vta_energy_per_inference"].value * 450)
    else:
        assert "vta_cycles_per_inference" not in result.figures


def test_folder_dataset_and_limit(tmp_path):
    split = digits.load_split()
    x = digits.quantize_images(split.x_test[:30])  # (n, 8, 8, 1): the input without its batch axis
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", (split.y_test[:30] + 1) % 10)  # labels shifted: accuracy must drop
    m = npukit.load_model("zoo:digits")
    shifted = m.evaluate(str(tmp_path), limit=20, progress=False)
    right = m.evaluate("zoo:digits", limit=20, progress=False)
    assert shifted.samples == right.samples == 20
    assert shifted.correct < right.correct


def test_bad_datasets_are_config_errors(tmp_path):
    model = npukit.load_model("zoo:digits").model
    with pytest.raises(ConfigError, match="not a folder"):
        load_dataset(str(tmp_path / "missing"), model)
    np.save(tmp_path / "x.npy", np.zeros((3, 5, 5, 1), np.int8))
    np.save(tmp_path / "y.npy", np.zeros(3, np.int64))
    with pytest.raises(ConfigError, match="samples of shape"):
        load_dataset(str(tmp_path), model)
    with pytest.raises(ConfigError, match="unknown dataset"):
        load_dataset("zoo:cifar10", model)
    with pytest.raises(ConfigError, match="--limit"):
        load_dataset("zoo:digits", model, limit=0)
