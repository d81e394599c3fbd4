"""A small int8 model that reaches every compiled TFLite kernel once (``npukit doctor --warm``):
QUANTIZE from float, CONV_2D on each of its paths (channels padded in the canvas, a 1×1
convolution read in place, channel counts that are and are not multiples of 16),
DEPTHWISE_CONV_2D, ADD, SUB, MUL, MAX_POOL_2D, QUANTIZE int8 → int8, AVERAGE_POOL_2D, MEAN,
FULLY_CONNECTED, SOFTMAX and DEQUANTIZE. Running it through the
compiled interpreter compiles (or loads from numba's cache) the same builds a real model uses."""

from __future__ import annotations

import numpy as np

from npukit.models.tflite import options as O
from npukit.models.tflite.writer import ModelBuilder


def _conv(b: ModelBuilder, x, cin: int, cout: int, k: int, name: str, rng: np.random.Generator,
          depthwise: bool = False):
    shape = (1, k, k, cout) if depthwise else (cout, k, k, cin)
    w = b.const(f"{name}_w", rng.integers(-127, 128, shape).astype(np.int8), scale=0.02, zero_point=0)
    bias = b.const(f"{name}_b", rng.integers(-500, 500, cout).astype(np.int32), scale=0.05 * 0.02,
                   zero_point=0)
    y = b.tensor(name, (1, 8, 8, cout), np.int8, 0.05, 3)
    if depthwise:
        options = O.DepthwiseConv2DOptions(O.PAD_SAME, 1, 1, 1, O.ACT_RELU)
        b.op("DEPTHWISE_CONV_2D", [x, w, bias], [y], options)
    else:
        b.op("CONV_2D", [x, w, bias], [y], O.Conv2DOptions(O.PAD_SAME, 1, 1, O.ACT_RELU))
    return y


def warm_model() -> bytes:
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    x = b.tensor("x", (1, 8, 8, 3), np.float32)
    q = b.tensor("q", (1, 8, 8, 3), np.int8, 0.05, -2)
    b.op("QUANTIZE", [x], [q])
    c1 = _conv(b, q, 3, 16, 3, "c1", rng)  # 3 channels padded to 4 in the canvas
    c2 = _conv(b, c1, 16, 16, 1, "c2", rng)  # 1×1: the input rows read in place
    c3 = _conv(b, c2, 16, 16, 3, "c3", rng, depthwise=True)
    add = b.tensor("add", (1, 8, 8, 16), np.int8, 0.08, 1)
    b.op("ADD", [c1, c3], [add], O.AddOptions(O.ACT_NONE))
    sub = b.tensor("sub", (1, 8, 8, 16), np.int8, 0.08, 0)
    b.op("SUB", [add, c2], [sub], O.SubOptions(O.ACT_NONE))
    mul = b.tensor("mul", (1, 8, 8, 16), np.int8, 0.1, -5)
    b.op("MUL", [sub, c2], [mul], O.MulOptions(O.ACT_NONE))
    peak = b.tensor("peak", (1, 8, 8, 16), np.int8, 0.1, -5)
    b.op("MAX_POOL_2D", [mul], [peak], O.Pool2DOptions(O.PAD_SAME, 1, 1, 3, 3, O.ACT_NONE))
    rescaled = b.tensor("rescaled", (1, 8, 8, 16), np.int8, 0.07, 2)
    b.op("QUANTIZE", [peak], [rescaled])  # int8 → int8: a requantization
    c4 = _conv(b, rescaled, 16, 20, 3, "c4", rng)  # 20 channels: a vector and a scalar tail
    pool = b.tensor("pool", (1, 1, 1, 20), np.int8, 0.05, 3)
    b.op("AVERAGE_POOL_2D", [c4], [pool], O.Pool2DOptions(O.PAD_VALID, 1, 1, 8, 8, O.ACT_NONE))
    pooled = b.tensor("pooled", (1, 20), np.int8, 0.05, 3)
    shape = b.const("shape", np.array([1, 20], np.int32))
    b.op("RESHAPE", [pool, shape], [pooled], O.ReshapeOptions((1, 20)))
    mean = b.tensor("mean", (1, 20), np.int8, 0.04, -1)
    b.op("MEAN", [c4, b.const("axes", np.array([1, 2], np.int32))], [mean], O.ReducerOptions(False))
    flat = b.tensor("flat", (1, 20), np.int8, 0.05, 3)  # the scale FULLY_CONNECTED's bias is made for
    b.op("ADD", [pooled, mean], [flat], O.AddOptions(O.ACT_NONE))
    fc_w = b.const("fc_w", rng.integers(-127, 128, (10, 20)).astype(np.int8), scale=0.02, zero_point=0)
    fc_b = b.const("fc_b", rng.integers(-500, 500, 10).astype(np.int32), scale=0.05 * 0.02, zero_point=0)
    logits = b.tensor("logits", (1, 10), np.int8, 0.02, 0)
    b.op("FULLY_CONNECTED", [flat, fc_w, fc_b], [logits], O.FullyConnectedOptions(O.ACT_NONE))
    probs = b.tensor("probs", (1, 10), np.int8, 1 / 256, -128)
    b.op("SOFTMAX", [logits], [probs], O.SoftmaxOptions(1.0))
    real = b.tensor("real", (1, 10), np.float32)
    b.op("DEQUANTIZE", [probs], [real])
    return b.build([x], [real])


def warm() -> np.ndarray:
    """Run `warm_model` once on the compiled path (compiling its kernels on a first run); its output."""
    from npukit.models.tflite.interpreter import Interpreter

    x = np.random.default_rng(1).normal(size=(1, 8, 8, 3)).astype(np.float32)
    return next(iter(Interpreter(warm_model()).run([x]).values()))
