"""Tiny int8 .tflite models built with the `tflite` package's flatbuffer builders, run by LiteRT.

Test helper only: LiteRT (ai-edge-litert) with the BUILTIN_REF op resolver is the oracle for
TFLite's reference integer kernels (the default XNNPACK path rounds differently).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import flatbuffers
import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType

# the package's __init__ rebinds tflite.Model etc. to classes; the builder functions live in modules
_fb = {n: importlib.import_module(f"tflite.{n}") for n in (
    "Model", "SubGraph", "Tensor", "Buffer", "Operator", "OperatorCode", "QuantizationParameters",
    "FullyConnectedOptions", "AddOptions", "Conv2DOptions", "TensorType", "BuiltinOperator",
    "BuiltinOptions",
)}
INT8 = _fb["TensorType"].TensorType.INT8
INT32 = _fb["TensorType"].TensorType.INT32


@dataclass
class TensorSpec:
    shape: tuple[int, ...]
    dtype: int
    scale: list[float]
    zero_point: list[int]
    data: np.ndarray | None = None  # constant tensors (weights, bias)
    quantized_dimension: int = 0


def _int_vector(b: flatbuffers.Builder, start, values, prepend) -> int:
    start(b, len(values))
    for v in reversed(values):
        prepend(v)
    return b.EndVector()


def _build(tensors: list[TensorSpec], inputs: list[int], outputs: list[int], op_code: int,
           op_version: int, options_type: int, options_fn) -> bytes:
    fb = _fb
    b = flatbuffers.Builder(1024)
    # buffers: 0 is the mandatory empty buffer, then one per tensor
    buf_offsets = []
    for spec in [None, *tensors]:
        data_off = None
        if spec is not None and spec.data is not None:
            raw = np.ascontiguousarray(spec.data).tobytes()
            data_off = b.CreateByteVector(raw)
        fb["Buffer"].BufferStart(b)
        if data_off is not None:
            fb["Buffer"].BufferAddData(b, data_off)
        buf_offsets.append(fb["Buffer"].BufferEnd(b))
    tensor_offsets = []
    for i, spec in enumerate(tensors):
        name = b.CreateString(f"t{i}")
        fb["QuantizationParameters"].QuantizationParametersStartScaleVector(b, len(spec.scale))
        for s in reversed(spec.scale):
            b.PrependFloat32(s)
        scale_off = b.EndVector()
        fb["QuantizationParameters"].QuantizationParametersStartZeroPointVector(b, len(spec.zero_point))
        for z in reversed(spec.zero_point):
            b.PrependInt64(z)
        zp_off = b.EndVector()
        Q = fb["QuantizationParameters"]
        Q.QuantizationParametersStart(b)
        Q.QuantizationParametersAddScale(b, scale_off)
        Q.QuantizationParametersAddZeroPoint(b, zp_off)
        Q.QuantizationParametersAddQuantizedDimension(b, spec.quantized_dimension)
        q_off = Q.QuantizationParametersEnd(b)
        shape_off = _int_vector(b, fb["Tensor"].TensorStartShapeVector, list(spec.shape), b.PrependInt32)
        T = fb["Tensor"]
        T.TensorStart(b)
        T.TensorAddShape(b, shape_off)
        T.TensorAddType(b, spec.dtype)
        T.TensorAddBuffer(b, i + 1)
        T.TensorAddName(b, name)
        T.TensorAddQuantization(b, q_off)
        tensor_offsets.append(T.TensorEnd(b))
    options_off = options_fn(b)
    O = fb["Operator"]
    op_inputs = [i for i in range(len(tensors)) if i not in outputs]
    op_in = _int_vector(b, O.OperatorStartInputsVector, op_inputs, b.PrependInt32)
    op_out = _int_vector(b, O.OperatorStartOutputsVector, outputs, b.PrependInt32)
    O.OperatorStart(b)
    O.OperatorAddOpcodeIndex(b, 0)
    O.OperatorAddInputs(b, op_in)
    O.OperatorAddOutputs(b, op_out)
    O.OperatorAddBuiltinOptionsType(b, options_type)
    O.OperatorAddBuiltinOptions(b, options_off)
    op_off = O.OperatorEnd(b)
    S = fb["SubGraph"]
    S.SubGraphStartTensorsVector(b, len(tensor_offsets))
    for t in reversed(tensor_offsets):
        b.PrependUOffsetTRelative(t)
    tensors_vec = b.EndVector()
    in_vec = _int_vector(b, S.SubGraphStartInputsVector, inputs, b.PrependInt32)
    out_vec = _int_vector(b, S.SubGraphStartOutputsVector, outputs, b.PrependInt32)
    S.SubGraphStartOperatorsVector(b, 1)
    b.PrependUOffsetTRelative(op_off)
    ops_vec = b.EndVector()
    S.SubGraphStart(b)
    S.SubGraphAddTensors(b, tensors_vec)
    S.SubGraphAddInputs(b, in_vec)
    S.SubGraphAddOutputs(b, out_vec)
    S.SubGraphAddOperators(b, ops_vec)
    sg_off = S.SubGraphEnd(b)
    C = fb["OperatorCode"]
    C.OperatorCodeStart(b)
    C.OperatorCodeAddDeprecatedBuiltinCode(b, op_code)
    C.OperatorCodeAddBuiltinCode(b, op_code)
    C.OperatorCodeAddVersion(b, op_version)
    code_off = C.OperatorCodeEnd(b)
    M = fb["Model"]
    M.ModelStartOperatorCodesVector(b, 1)
    b.PrependUOffsetTRelative(code_off)
    codes_vec = b.EndVector()
    M.ModelStartSubgraphsVector(b, 1)
    b.PrependUOffsetTRelative(sg_off)
    sgs_vec = b.EndVector()
    M.ModelStartBuffersVector(b, len(buf_offsets))
    for o in reversed(buf_offsets):
        b.PrependUOffsetTRelative(o)
    bufs_vec = b.EndVector()
    M.ModelStart(b)
    M.ModelAddVersion(b, 3)
    M.ModelAddOperatorCodes(b, codes_vec)
    M.ModelAddSubgraphs(b, sgs_vec)
    M.ModelAddBuffers(b, bufs_vec)
    b.Finish(M.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def add_model(n: int, s1: float, zp1: int, s2: float, zp2: int, so: float, zpo: int) -> bytes:
    """One int8 ADD of two [n] tensors (no fused activation)."""
    tensors = [TensorSpec((n,), INT8, [s1], [zp1]), TensorSpec((n,), INT8, [s2], [zp2]),
               TensorSpec((n,), INT8, [so], [zpo])]

    def options(b):
        A = _fb["AddOptions"]
        A.AddOptionsStart(b)
        return A.AddOptionsEnd(b)

    return _build(tensors, [0, 1], [2], _fb["BuiltinOperator"].BuiltinOperator.ADD, 2,
                  _fb["BuiltinOptions"].BuiltinOptions.AddOptions, options)


def fully_connected_model(x_shape: tuple[int, int], s_in: float, zp_in: int, weights: np.ndarray,
                          s_w: float, bias: np.ndarray, s_out: float, zp_out: int) -> bytes:
    """One int8 FULLY_CONNECTED: input [B, K], OI weights [N, K] (zp 0), int32 bias [N]."""
    n = weights.shape[0]
    tensors = [
        TensorSpec(x_shape, INT8, [s_in], [zp_in]),
        TensorSpec(weights.shape, INT8, [s_w], [0], weights.astype(np.int8)),
        TensorSpec((n,), INT32, [float(np.float32(s_in) * np.float32(s_w))], [0], bias.astype("<i4")),
        TensorSpec((x_shape[0], n), INT8, [s_out], [zp_out]),
    ]

    def options(b):
        F = _fb["FullyConnectedOptions"]
        F.FullyConnectedOptionsStart(b)
        return F.FullyConnectedOptionsEnd(b)

    return _build(tensors, [0], [3], _fb["BuiltinOperator"].BuiltinOperator.FULLY_CONNECTED, 4,
                  _fb["BuiltinOptions"].BuiltinOptions.FullyConnectedOptions, options)


def conv1x1_per_channel_model(x_shape: tuple[int, int, int, int], s_in: float, zp_in: int,
                              weights: np.ndarray, s_w: np.ndarray, bias: np.ndarray, s_out: float,
                              zp_out: int) -> bytes:
    """One int8 CONV_2D, 1×1 VALID stride 1, per-output-channel weight scales (OHWI [N,1,1,C])."""
    n, c = weights.shape
    nhw = x_shape[:3]
    bias_scales = [float(np.float32(s_in) * np.float32(s)) for s in s_w]
    tensors = [
        TensorSpec(x_shape, INT8, [s_in], [zp_in]),
        TensorSpec((n, 1, 1, c), INT8, [float(s) for s in s_w], [0] * n, weights.astype(np.int8)),
        TensorSpec((n,), INT32, bias_scales, [0] * n, bias.astype("<i4")),
        TensorSpec((*nhw, n), INT8, [s_out], [zp_out]),
    ]

    def options(b):
        C = _fb["Conv2DOptions"]
        C.Conv2DOptionsStart(b)
        C.Conv2DOptionsAddPadding(b, 1)  # VALID
        C.Conv2DOptionsAddStrideW(b, 1)
        C.Conv2DOptionsAddStrideH(b, 1)
        C.Conv2DOptionsAddDilationWFactor(b, 1)
        C.Conv2DOptionsAddDilationHFactor(b, 1)
        return C.Conv2DOptionsEnd(b)

    return _build(tensors, [0], [3], _fb["BuiltinOperator"].BuiltinOperator.CONV_2D, 3,
                  _fb["BuiltinOptions"].BuiltinOptions.Conv2DOptions, options)


def run_ref(model: bytes, *inputs: np.ndarray) -> np.ndarray:
    """Run with TFLite's reference kernels (BUILTIN_REF) and return the single output."""
    interp = Interpreter(model_content=model,
                         experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    interp.allocate_tensors()
    for detail, value in zip(interp.get_input_details(), inputs, strict=True):
        interp.set_tensor(detail["index"], value)
    interp.invoke()
    return interp.get_tensor(interp.get_output_details()[0]["index"]).copy()
