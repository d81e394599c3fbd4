"""The in-memory form of a .tflite model: tensors, operators with parsed options, one subgraph.

The reader (`reader.py`) builds it from a flatbuffer, the writer (`writer.py`) turns one back into a
flatbuffer, and the interpreter walks ``Model.ops`` in order. Everything is plain data so a delegate
can look at ops by index and take a subset.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from npukit.models.tflite.options import OPTION_TABLES

# TFLite TensorType enum value -> numpy dtype (the types this package reads or writes)
TENSOR_TYPES: dict[int, np.dtype] = {
    0: np.dtype(np.float32), 1: np.dtype(np.float16), 2: np.dtype(np.int32), 3: np.dtype(np.uint8),
    4: np.dtype(np.int64), 6: np.dtype(np.bool_), 7: np.dtype(np.int16), 9: np.dtype(np.int8),
    10: np.dtype(np.float64),
}
TYPE_CODES: dict[np.dtype, int] = {v: k for k, v in TENSOR_TYPES.items()}

# BuiltinOperator codes of the ops this package names (others are read as "BUILTIN_<code>")
OP_CODES: dict[str, int] = {
    "ADD": 0, "AVERAGE_POOL_2D": 1, "CONCATENATION": 2, "CONV_2D": 3, "DEPTHWISE_CONV_2D": 4,
    "DEQUANTIZE": 6, "FULLY_CONNECTED": 9, "LOGISTIC": 14, "MAX_POOL_2D": 17, "MUL": 18,
    "RELU": 19, "RELU_N1_TO_1": 20, "RELU6": 21, "RESHAPE": 22, "SOFTMAX": 25, "TANH": 28, "PAD": 34,
    "MEAN": 40, "SUB": 41, "SQUEEZE": 43, "STRIDED_SLICE": 45, "SHAPE": 77, "PACK": 83,
    "LEAKY_RELU": 98, "QUANTIZE": 114, "HARD_SWISH": 117,
}
OP_NAMES: dict[int, str] = {v: k for k, v in OP_CODES.items()}

# Op versions the writer stamps (the int8 variants' versions in the TFLite op-version table)
OP_VERSIONS: dict[str, int] = {
    "ADD": 2, "SUB": 2, "MUL": 2, "CONV_2D": 3, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 4,
    "AVERAGE_POOL_2D": 2, "MAX_POOL_2D": 2, "MEAN": 2, "RESHAPE": 1, "SQUEEZE": 1, "CONCATENATION": 2,
    "PAD": 2, "SOFTMAX": 2, "LOGISTIC": 2, "HARD_SWISH": 1, "QUANTIZE": 2, "DEQUANTIZE": 2,
    "RELU": 2, "RELU6": 2, "RELU_N1_TO_1": 1, "TANH": 2, "STRIDED_SLICE": 2, "SHAPE": 1, "PACK": 2,
}


def op_name(code: int) -> str:
    return OP_NAMES.get(code, _builtin_name(code))


def _builtin_name(code: int) -> str:
    import importlib

    enum = importlib.import_module("tflite.BuiltinOperator").BuiltinOperator
    for name, value in vars(enum).items():
        if value == code and not name.startswith("_"):
            return name
    return f"BUILTIN_{code}"


@dataclass(frozen=True)
class Quant:
    """Affine quantization: real = scale · (q − zero_point), per tensor (one entry) or per channel."""

    scale: np.ndarray  # float32
    zero_point: np.ndarray  # int64
    axis: int = 0

    @property
    def per_channel(self) -> bool:
        return self.scale.size > 1

    @property
    def s(self) -> float:
        """The per-tensor scale as the float32 value the flatbuffer holds, widened."""
        return float(self.scale[0])

    @property
    def zp(self) -> int:
        return int(self.zero_point[0])


@dataclass
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    quant: Quant | None = None
    data: np.ndarray | None = None  # constants only (weights, bias, shapes, paddings)

    @property
    def is_const(self) -> bool:
        return self.data is not None

    def describe(self) -> str:
        q = ""
        if self.quant is not None:
            if self.quant.per_channel:
                q = f" per-channel(axis {self.quant.axis}, {self.quant.scale.size} scales)"
            else:
                q = f" scale={self.quant.s:.6g} zp={self.quant.zp}"
        kind = " const" if self.is_const else ""
        return f"{self.name} {list(self.shape)} {self.dtype}{q}{kind}"


@dataclass
class Op:
    index: int
    name: str  # BuiltinOperator name, e.g. "CONV_2D"
    inputs: tuple[int, ...]  # tensor indices, -1 = optional input left out
    outputs: tuple[int, ...]
    options: Any = None  # a dataclass from options.py, or None
    version: int = 1


@dataclass
class Model:
    tensors: list[Tensor]
    ops: list[Op]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def tensor(self, index: int) -> Tensor:
        return self.tensors[index]

    def input_tensors(self) -> list[Tensor]:
        return [self.tensors[i] for i in self.inputs]

    def output_tensors(self) -> list[Tensor]:
        return [self.tensors[i] for i in self.outputs]

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for op in self.ops:
            counts[op.name] = counts.get(op.name, 0) + 1
        return counts


def options_table(name: str) -> str | None:
    """The flatbuffer options table an op uses (None when it has none)."""
    return OPTION_TABLES.get(name)
