"""`Interpreter.run_batch`: a batch along N through one plan gives every sample exactly what `run`
gives it alone (the real zoo models: convolutions, depthwise, residual ADDs, pooling, RESHAPE,
FULLY_CONNECTED, SOFTMAX, QUANTIZE/DEQUANTIZE), and bad batches are one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from npukit.errors import ModelError
from npukit.models.tflite import Interpreter, zoo


def _samples(interp: Interpreter, n: int, seed: int) -> np.ndarray:
    t = interp.model.input_tensors()[0]
    rng = np.random.default_rng(seed)
    shape = (n, *t.shape[1:])
    if t.dtype == np.float32:
        return rng.normal(size=shape).astype(np.float32)
    return rng.integers(-128, 128, shape).astype(t.dtype)


@pytest.mark.parametrize("spec", ["zoo:digits", "zoo:resnet8-cifar10", "zoo:ds-cnn-kws"])
def test_batch_equals_one_at_a_time(spec):
    interp = Interpreter(zoo.resolve(spec))
    xs = _samples(interp, 5, 3)
    batched = interp.run_batch(xs)
    for i, x in enumerate(xs):
        alone = interp.run([x[None]])
        for name, out in alone.items():
            assert batched[name].shape[0] == 5
            assert np.array_equal(batched[name][i], out[0]), (spec, i, name)


def test_bad_batches_are_model_errors():
    interp = Interpreter(zoo.resolve("zoo:digits"))
    with pytest.raises(ModelError, match="is not"):
        interp.run_batch(np.zeros((3, 8, 9, 1), np.int8))
    with pytest.raises(ModelError, match="is not"):
        interp.run_batch(np.zeros((8, 8, 1), np.int8))
