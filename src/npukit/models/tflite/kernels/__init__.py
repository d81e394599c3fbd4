"""The int8 reference kernels, one module per op family; `KERNELS` maps an op name to its prepare step.

A prepare step takes a `Ctx` (model + op), checks types and quantization, precomputes multipliers
and tables, and returns ``run(inputs) -> outputs`` over NumPy arrays.
"""

from __future__ import annotations

from collections.abc import Callable

from npukit.models.tflite.kernels import activation, arith, conv, pool, shape
from npukit.models.tflite.kernels.common import Ctx, Kernel, UnsupportedOp

KERNELS: dict[str, Callable[[Ctx], Kernel]] = {
    "ADD": arith.prepare_add,
    "SUB": arith.prepare_sub,
    "MUL": arith.prepare_mul,
    "CONV_2D": conv.prepare_conv2d,
    "DEPTHWISE_CONV_2D": conv.prepare_depthwise,
    "FULLY_CONNECTED": conv.prepare_fully_connected,
    "AVERAGE_POOL_2D": pool.prepare_average_pool,
    "MAX_POOL_2D": pool.prepare_max_pool,
    "MEAN": pool.prepare_mean,
    "RESHAPE": shape.prepare_reshape,
    "SQUEEZE": shape.prepare_squeeze,
    "CONCATENATION": shape.prepare_concatenation,
    "PAD": shape.prepare_pad,
    "SHAPE": shape.prepare_shape,
    "PACK": shape.prepare_pack,
    "STRIDED_SLICE": shape.prepare_strided_slice,
    "SOFTMAX": activation.prepare_softmax,
    "LOGISTIC": activation.prepare_logistic,
    "TANH": activation.prepare_tanh,
    "RELU": activation.prepare_relu,
    "RELU6": activation.prepare_relu,
    "RELU_N1_TO_1": activation.prepare_relu,
    "HARD_SWISH": activation.prepare_hard_swish,
    "QUANTIZE": activation.prepare_quantize,
    "DEQUANTIZE": activation.prepare_dequantize,
}

__all__ = ["KERNELS", "Ctx", "Kernel", "UnsupportedOp"]
