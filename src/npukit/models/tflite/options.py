"""Builtin operator options as dataclasses, read from and written to flatbuffer tables generically.

Each dataclass names its flatbuffer table (``TABLE``); its snake_case fields map to the generated
CamelCase accessors of the `tflite` package (``stride_w`` ↔ ``StrideW()`` / ``…AddStrideW``), and
tuple-valued fields are flatbuffer int vectors.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from typing import Any, ClassVar

# ActivationFunctionType and Padding enum values (schema.fbs)
ACT_NONE, ACT_RELU, ACT_RELU_N1_TO_1, ACT_RELU6, ACT_TANH, ACT_SIGN_BIT = range(6)
ACTIVATION_NAMES = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH", 5: "SIGN_BIT"}
PAD_SAME, PAD_VALID = 0, 1


@dataclass(frozen=True)
class AddOptions:
    TABLE: ClassVar[str] = "AddOptions"
    fused_activation_function: int = ACT_NONE


@dataclass(frozen=True)
class SubOptions:
    TABLE: ClassVar[str] = "SubOptions"
    fused_activation_function: int = ACT_NONE


@dataclass(frozen=True)
class MulOptions:
    TABLE: ClassVar[str] = "MulOptions"
    fused_activation_function: int = ACT_NONE


@dataclass(frozen=True)
class Conv2DOptions:
    TABLE: ClassVar[str] = "Conv2DOptions"
    padding: int = PAD_SAME
    stride_w: int = 1
    stride_h: int = 1
    fused_activation_function: int = ACT_NONE
    dilation_w_factor: int = 1
    dilation_h_factor: int = 1


@dataclass(frozen=True)
class DepthwiseConv2DOptions:
    TABLE: ClassVar[str] = "DepthwiseConv2DOptions"
    padding: int = PAD_SAME
    stride_w: int = 1
    stride_h: int = 1
    depth_multiplier: int = 1
    fused_activation_function: int = ACT_NONE
    dilation_w_factor: int = 1
    dilation_h_factor: int = 1


@dataclass(frozen=True)
class FullyConnectedOptions:
    TABLE: ClassVar[str] = "FullyConnectedOptions"
    fused_activation_function: int = ACT_NONE
    weights_format: int = 0
    keep_num_dims: bool = False


@dataclass(frozen=True)
class Pool2DOptions:
    TABLE: ClassVar[str] = "Pool2DOptions"
    padding: int = PAD_SAME
    stride_w: int = 1
    stride_h: int = 1
    filter_width: int = 1
    filter_height: int = 1
    fused_activation_function: int = ACT_NONE


@dataclass(frozen=True)
class ReducerOptions:
    TABLE: ClassVar[str] = "ReducerOptions"
    keep_dims: bool = False


@dataclass(frozen=True)
class ReshapeOptions:
    TABLE: ClassVar[str] = "ReshapeOptions"
    new_shape: tuple[int, ...] = ()


@dataclass(frozen=True)
class SqueezeOptions:
    TABLE: ClassVar[str] = "SqueezeOptions"
    squeeze_dims: tuple[int, ...] = ()


@dataclass(frozen=True)
class ConcatenationOptions:
    TABLE: ClassVar[str] = "ConcatenationOptions"
    axis: int = 0
    fused_activation_function: int = ACT_NONE


@dataclass(frozen=True)
class SoftmaxOptions:
    TABLE: ClassVar[str] = "SoftmaxOptions"
    beta: float = 1.0


@dataclass(frozen=True)
class StridedSliceOptions:
    TABLE: ClassVar[str] = "StridedSliceOptions"
    begin_mask: int = 0
    end_mask: int = 0
    ellipsis_mask: int = 0
    new_axis_mask: int = 0
    shrink_axis_mask: int = 0
    offset: bool = False


@dataclass(frozen=True)
class PackOptions:
    TABLE: ClassVar[str] = "PackOptions"
    values_count: int = 0
    axis: int = 0


@dataclass(frozen=True)
class ShapeOptions:
    TABLE: ClassVar[str] = "ShapeOptions"
    out_type: int = 2  # INT32


@dataclass(frozen=True)
class PadOptions:
    TABLE: ClassVar[str] = "PadOptions"


@dataclass(frozen=True)
class HardSwishOptions:
    TABLE: ClassVar[str] = "HardSwishOptions"


@dataclass(frozen=True)
class QuantizeOptions:
    TABLE: ClassVar[str] = "QuantizeOptions"


@dataclass(frozen=True)
class DequantizeOptions:
    TABLE: ClassVar[str] = "DequantizeOptions"


OPTION_CLASSES: dict[str, type] = {
    "ADD": AddOptions, "SUB": SubOptions, "MUL": MulOptions, "CONV_2D": Conv2DOptions,
    "DEPTHWISE_CONV_2D": DepthwiseConv2DOptions, "FULLY_CONNECTED": FullyConnectedOptions,
    "AVERAGE_POOL_2D": Pool2DOptions, "MAX_POOL_2D": Pool2DOptions, "MEAN": ReducerOptions,
    "RESHAPE": ReshapeOptions, "SQUEEZE": SqueezeOptions, "CONCATENATION": ConcatenationOptions,
    "PAD": PadOptions, "SOFTMAX": SoftmaxOptions, "HARD_SWISH": HardSwishOptions,
    "QUANTIZE": QuantizeOptions, "DEQUANTIZE": DequantizeOptions, "STRIDED_SLICE": StridedSliceOptions,
    "PACK": PackOptions, "SHAPE": ShapeOptions,
}
OPTION_TABLES: dict[str, str] = {op: cls.TABLE for op, cls in OPTION_CLASSES.items()}


def _camel(field: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in field.split("_"))


def _module(table: str):
    return importlib.import_module(f"tflite.{table}")


def builtin_options_type(table: str) -> int:
    return getattr(importlib.import_module("tflite.BuiltinOptions").BuiltinOptions, table)


def read_options(op_name: str, fb_table: Any) -> Any:
    """Parse an operator's BuiltinOptions table into the op's dataclass (defaults when absent)."""
    cls = OPTION_CLASSES.get(op_name)
    if cls is None:
        return None
    if fb_table is None:
        return cls()
    reader = getattr(_module(cls.TABLE), cls.TABLE)()
    reader.Init(fb_table.Bytes, fb_table.Pos)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        getter = _camel(f.name)
        if f.type.startswith("tuple"):
            if getattr(reader, getter + "IsNone")():
                values[f.name] = ()
            else:
                values[f.name] = tuple(int(v) for v in getattr(reader, getter + "AsNumpy")())
        else:
            values[f.name] = getattr(reader, getter)()
    return cls(**values)


def write_options(builder: Any, options: Any) -> int:
    """Serialize an options dataclass into ``builder``; returns the table offset."""
    table = options.TABLE
    mod = _module(table)
    vectors: dict[str, int] = {}
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        if f.type.startswith("tuple"):
            start = getattr(mod, f"{table}Start{_camel(f.name)}Vector")
            start(builder, len(value))
            for v in reversed(value):
                builder.PrependInt32(int(v))
            vectors[f.name] = builder.EndVector()
    getattr(mod, f"{table}Start")(builder)
    for f in dataclasses.fields(options):
        add = getattr(mod, f"{table}Add{_camel(f.name)}")
        add(builder, vectors[f.name] if f.name in vectors else getattr(options, f.name))
    return getattr(mod, f"{table}End")(builder)
