"""Build .tflite flatbuffers without TensorFlow: `ModelBuilder` assembles a `Model`, `write_model`
serializes any `Model` with the `tflite` package's generated builder functions.

    b = ModelBuilder()
    x = b.tensor("x", (1, 8, 8, 3), np.int8, scale=0.02, zero_point=-3)
    w = b.const("w", weights_int8, scale=per_channel_scales, zero_point=0, axis=0)
    bias = b.const("bias", bias_int32, scale=..., zero_point=0)
    y = b.tensor("y", (1, 8, 8, 16), np.int8, scale=0.05, zero_point=1)
    b.op("CONV_2D", [x, w, bias], [y], Conv2DOptions(stride_w=1, stride_h=1))
    data = b.build(inputs=[x], outputs=[y])
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import flatbuffers
import numpy as np

from npukit.errors import ModelError
from npukit.models.tflite.model import OP_CODES, OP_VERSIONS, TYPE_CODES, Model, Op, Quant, Tensor
from npukit.models.tflite.options import OPTION_CLASSES, builtin_options_type, write_options


def _fb(name: str):
    return importlib.import_module(f"tflite.{name}")


class ModelBuilder:
    """Collects tensors and ops; `build` returns the flatbuffer bytes, `model` the `Model`."""

    def __init__(self, description: str = "npukit") -> None:
        self.tensors: list[Tensor] = []
        self.ops: list[Op] = []
        self.description = description

    def tensor(self, name: str, shape: Sequence[int], dtype, scale=None, zero_point=None,
               axis: int = 0, data: np.ndarray | None = None) -> int:
        """Add a tensor; ``scale``/``zero_point`` scalars (per tensor) or sequences (per channel)."""
        quant = None
        if scale is not None:
            s = np.atleast_1d(np.asarray(scale, dtype=np.float32))
            z = np.atleast_1d(np.asarray(0 if zero_point is None else zero_point, dtype=np.int64))
            if z.size == 1 and s.size > 1:
                z = np.repeat(z, s.size)
            quant = Quant(s, z, axis)
        dt = np.dtype(dtype)
        if data is not None:
            data = np.asarray(data).astype(dt).reshape(tuple(shape))
        self.tensors.append(Tensor(len(self.tensors), name, tuple(int(d) for d in shape), dt, quant, data))
        return len(self.tensors) - 1

    def const(self, name: str, data: np.ndarray, scale=None, zero_point=None, axis: int = 0,
              dtype=None) -> int:
        a = np.asarray(data)
        return self.tensor(name, a.shape, dtype or a.dtype, scale, zero_point, axis, a)

    def op(self, name: str, inputs: Sequence[int], outputs: Sequence[int], options=None) -> int:
        if name not in OP_CODES:
            raise ModelError(f"ModelBuilder: unknown op {name!r}")
        cls = OPTION_CLASSES.get(name)
        if options is None and cls is not None:
            options = cls()
        self.ops.append(Op(len(self.ops), name, tuple(inputs), tuple(outputs), options,
                           OP_VERSIONS.get(name, 1)))
        return len(self.ops) - 1

    def model(self, inputs: Sequence[int], outputs: Sequence[int]) -> Model:
        return Model(list(self.tensors), list(self.ops), tuple(inputs), tuple(outputs), self.description)

    def build(self, inputs: Sequence[int], outputs: Sequence[int]) -> bytes:
        return write_model(self.model(inputs, outputs))


def _int_vector(b: flatbuffers.Builder, values: Sequence[int], prepend=None) -> int:
    b.StartVector(4, len(values), 4)
    for v in reversed(values):
        (prepend or b.PrependInt32)(int(v))
    return b.EndVector()


def _offset_vector(b: flatbuffers.Builder, offsets: Sequence[int]) -> int:
    b.StartVector(4, len(offsets), 4)
    for o in reversed(offsets):
        b.PrependUOffsetTRelative(o)
    return b.EndVector()


def _quant_table(b: flatbuffers.Builder, q: Quant) -> int:
    Q = _fb("QuantizationParameters")
    b.StartVector(4, q.scale.size, 4)
    for s in reversed(q.scale.tolist()):
        b.PrependFloat32(s)
    scale_off = b.EndVector()
    b.StartVector(8, q.zero_point.size, 8)
    for z in reversed(q.zero_point.tolist()):
        b.PrependInt64(int(z))
    zp_off = b.EndVector()
    Q.QuantizationParametersStart(b)
    Q.QuantizationParametersAddScale(b, scale_off)
    Q.QuantizationParametersAddZeroPoint(b, zp_off)
    Q.QuantizationParametersAddQuantizedDimension(b, q.axis)
    return Q.QuantizationParametersEnd(b)


def _buffers(b: flatbuffers.Builder, model: Model) -> tuple[list[int], dict[int, int]]:
    B = _fb("Buffer")
    offsets, index_of = [], {}
    B.BufferStart(b)
    offsets.append(B.BufferEnd(b))  # buffer 0: the mandatory empty one
    for t in model.tensors:
        if t.data is None:
            continue
        raw = np.ascontiguousarray(t.data.astype(t.dtype.newbyteorder("<"))).tobytes()
        b.StartVector(1, len(raw), 16)  # 16-byte alignment keeps int32/float data aligned
        b.head -= len(raw)
        b.Bytes[b.head: b.head + len(raw)] = raw
        data_off = b.EndVector()
        B.BufferStart(b)
        B.BufferAddData(b, data_off)
        index_of[t.index] = len(offsets)
        offsets.append(B.BufferEnd(b))
    return offsets, index_of


def _tensor_table(b: flatbuffers.Builder, t: Tensor, buffer_index: int) -> int:
    T = _fb("Tensor")
    if t.dtype not in TYPE_CODES:
        raise ModelError(f"tensor {t.name}: dtype {t.dtype} cannot be written")
    name = b.CreateString(t.name)
    q_off = _quant_table(b, t.quant) if t.quant is not None else None
    shape_off = _int_vector(b, t.shape)
    T.TensorStart(b)
    T.TensorAddShape(b, shape_off)
    T.TensorAddType(b, TYPE_CODES[t.dtype])
    T.TensorAddBuffer(b, buffer_index)
    T.TensorAddName(b, name)
    if q_off is not None:
        T.TensorAddQuantization(b, q_off)
    return T.TensorEnd(b)


def _op_table(b: flatbuffers.Builder, op: Op, code_index: int) -> int:
    O = _fb("Operator")
    opts = write_options(b, op.options) if op.options is not None else None
    ins = _int_vector(b, op.inputs)
    outs = _int_vector(b, op.outputs)
    O.OperatorStart(b)
    O.OperatorAddOpcodeIndex(b, code_index)
    O.OperatorAddInputs(b, ins)
    O.OperatorAddOutputs(b, outs)
    if opts is not None:
        O.OperatorAddBuiltinOptionsType(b, builtin_options_type(op.options.TABLE))
        O.OperatorAddBuiltinOptions(b, opts)
    return O.OperatorEnd(b)


def _code_table(b: flatbuffers.Builder, name: str, version: int) -> int:
    C = _fb("OperatorCode")
    code = OP_CODES[name]
    C.OperatorCodeStart(b)
    C.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))  # int8 field; 127 = "see builtin_code"
    C.OperatorCodeAddBuiltinCode(b, code)
    C.OperatorCodeAddVersion(b, version)
    return C.OperatorCodeEnd(b)


def write_model(model: Model) -> bytes:
    """Serialize ``model`` (one subgraph) to .tflite bytes."""
    b = flatbuffers.Builder(1024 + sum(t.data.nbytes for t in model.tensors if t.data is not None))
    buffer_offsets, buffer_of = _buffers(b, model)
    tensor_offsets = [_tensor_table(b, t, buffer_of.get(t.index, 0)) for t in model.tensors]
    codes: list[tuple[str, int]] = []
    op_offsets = []
    for op in model.ops:
        key = (op.name, op.version)
        if key not in codes:
            codes.append(key)
        op_offsets.append(_op_table(b, op, codes.index(key)))
    S = _fb("SubGraph")
    tensors_vec = _offset_vector(b, tensor_offsets)
    in_vec, out_vec = _int_vector(b, model.inputs), _int_vector(b, model.outputs)
    ops_vec = _offset_vector(b, op_offsets)
    sg_name = b.CreateString("main")
    S.SubGraphStart(b)
    S.SubGraphAddTensors(b, tensors_vec)
    S.SubGraphAddInputs(b, in_vec)
    S.SubGraphAddOutputs(b, out_vec)
    S.SubGraphAddOperators(b, ops_vec)
    S.SubGraphAddName(b, sg_name)
    sg = S.SubGraphEnd(b)
    code_offsets = [_code_table(b, n, v) for n, v in codes]
    M = _fb("Model")
    codes_vec = _offset_vector(b, code_offsets)
    sgs_vec = _offset_vector(b, [sg])
    bufs_vec = _offset_vector(b, buffer_offsets)
    desc = b.CreateString(model.description or "npukit")
    M.ModelStart(b)
    M.ModelAddVersion(b, 3)
    M.ModelAddOperatorCodes(b, codes_vec)
    M.ModelAddSubgraphs(b, sgs_vec)
    M.ModelAddDescription(b, desc)
    M.ModelAddBuffers(b, bufs_vec)
    b.Finish(M.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())
