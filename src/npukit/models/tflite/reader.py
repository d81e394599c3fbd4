"""Read a .tflite flatbuffer (schema v3, via the `tflite` package's generated accessors) into a `Model`.

Only the first subgraph is read (the models this package targets have one). A malformed file is a
`ModelError` with one line, never a flatbuffers traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from npukit.errors import ModelError
from npukit.models.tflite.model import TENSOR_TYPES, Model, Op, Quant, Tensor, op_name
from npukit.models.tflite.options import read_options


def read_model(source: str | os.PathLike | bytes) -> Model:
    """Parse ``source`` (a path or the file's bytes) into a `Model`."""
    if isinstance(source, bytes | bytearray | memoryview):
        buf, what = bytes(source), "model bytes"
    else:
        path = Path(source)
        try:
            buf = path.read_bytes()
        except OSError as exc:
            raise ModelError(f"cannot read {path}: {exc.strerror or exc}") from None
        what = str(path)
    if len(buf) < 8 or buf[4:8] != b"TFL3":
        raise ModelError(f"{what}: not a TFLite flatbuffer (no TFL3 identifier)")
    try:
        return _parse(buf)
    except ModelError:
        raise
    except Exception as exc:  # flatbuffers raises assorted errors on corrupt offsets
        raise ModelError(f"{what}: corrupt TFLite flatbuffer ({type(exc).__name__}: {exc})") from None


def _parse(buf: bytes) -> Model:
    import tflite

    fb = tflite.Model.GetRootAs(buf, 0)
    if fb.SubgraphsLength() < 1:
        raise ModelError("TFLite model has no subgraph")
    graph = fb.Subgraphs(0)
    codes = []
    for i in range(fb.OperatorCodesLength()):
        c = fb.OperatorCodes(i)
        code = max(int(c.BuiltinCode()), int(c.DeprecatedBuiltinCode()))
        codes.append((op_name(code) if code != 32 else f"CUSTOM:{_text(c.CustomCode())}", int(c.Version())))
    tensors = [_tensor(fb, graph.Tensors(i), i, buf) for i in range(graph.TensorsLength())]
    ops = []
    for i in range(graph.OperatorsLength()):
        o = graph.Operators(i)
        name, version = codes[o.OpcodeIndex()]
        ins = tuple(int(v) for v in o.InputsAsNumpy()) if not o.InputsIsNone() else ()
        outs = tuple(int(v) for v in o.OutputsAsNumpy()) if not o.OutputsIsNone() else ()
        options = read_options(name, o.BuiltinOptions() if o.BuiltinOptionsType() else None)
        ops.append(Op(i, name, ins, outs, options, version))
    inputs = tuple(int(v) for v in graph.InputsAsNumpy()) if not graph.InputsIsNone() else ()
    outputs = tuple(int(v) for v in graph.OutputsAsNumpy()) if not graph.OutputsIsNone() else ()
    return Model(tensors, ops, inputs, outputs, description=_text(fb.Description()))


def _text(b: bytes | None) -> str:
    return b.decode("utf-8", "replace") if b else ""


def _tensor(fb, t, index: int, buf: bytes) -> Tensor:
    ttype = int(t.Type())
    dtype = TENSOR_TYPES.get(ttype)
    shape = tuple(int(v) for v in t.ShapeAsNumpy()) if not t.ShapeIsNone() else ()
    name = _text(t.Name()) or f"t{index}"
    if dtype is None:  # still readable for `info`; the interpreter refuses ops that touch it
        dtype = np.dtype(f"V{1}")
    return Tensor(index, name, shape, dtype, _quant(t.Quantization()), _data(fb, t, dtype, shape, buf))


def _quant(q) -> Quant | None:
    if q is None or q.ScaleIsNone() or q.ScaleLength() == 0:
        return None
    scale = np.asarray(q.ScaleAsNumpy(), dtype=np.float32).copy()
    zp = (np.asarray(q.ZeroPointAsNumpy(), dtype=np.int64).copy() if not q.ZeroPointIsNone()
          else np.zeros(scale.size, np.int64))
    if zp.size == 0:
        zp = np.zeros(scale.size, np.int64)
    return Quant(scale, zp, int(q.QuantizedDimension()))


def _data(fb, t, dtype: np.dtype, shape: tuple[int, ...], buf: bytes) -> np.ndarray | None:
    bi = int(t.Buffer())
    if bi <= 0 or bi >= fb.BuffersLength() or dtype.kind == "V":
        return None
    b = fb.Buffers(bi)
    if b.Offset() > 1:  # large-model layout: data after the flatbuffer
        raw = buf[b.Offset(): b.Offset() + b.Size()]
    elif b.DataIsNone() or b.DataLength() == 0:
        return None
    else:
        raw = b.DataAsNumpy().tobytes()
    count = int(np.prod(shape)) if shape else 1
    if len(raw) != count * dtype.itemsize:
        raise ModelError(f"tensor {_text(t.Name())}: buffer holds {len(raw)} bytes, shape {list(shape)} "
                         f"of {dtype} needs {count * dtype.itemsize}")
    return np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(shape)
