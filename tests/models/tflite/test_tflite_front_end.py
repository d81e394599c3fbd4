"""Reader, writer, errors and the delegate hook. The reader is checked against LiteRT's own view of
the same files (tensor names, shapes, dtypes, per-tensor and per-channel quantization)."""

from __future__ import annotations

import numpy as np
import pytest
import tflite_cases as cases
from _litert_models import conv1x1_per_channel_model, run_ref
from ai_edge_litert.interpreter import Interpreter as LiteRT

from npukit.errors import ModelError
from npukit.models.tflite import Interpreter, ModelBuilder, read_model, write_model
from npukit.models.tflite import options as O
from npukit.models.tflite.delegates import Plan, op_segments
from npukit.models.tflite.interpreter import prepare_op
from npukit.models.tflite.kernels import UnsupportedOp


def _assert_reader_matches_litert(data: bytes) -> None:
    model = read_model(data)
    ref = LiteRT(model_content=data)
    details = {d["index"]: d for d in ref.get_tensor_details()}
    for t in model.tensors:
        d = details[t.index]
        assert d["name"] == t.name
        assert tuple(d["shape"]) == t.shape
        assert np.dtype(d["dtype"]) == t.dtype
        q = d["quantization_parameters"]
        if t.quant is None:
            assert q["scales"].size == 0
        else:
            assert np.array_equal(q["scales"], t.quant.scale)
            assert np.array_equal(q["zero_points"], t.quant.zero_point)
            assert q["quantized_dimension"] == t.quant.axis
    assert [d["index"] for d in ref.get_input_details()] == list(model.inputs)
    assert [d["index"] for d in ref.get_output_details()] == list(model.outputs)


def test_reader_matches_litert_on_independently_built_and_own_models():
    rng = np.random.default_rng(3)
    other = conv1x1_per_channel_model((1, 4, 4, 5), 0.02, 3, rng.integers(-127, 128, (6, 5)),
                                      np.full(6, 0.01, np.float32), np.arange(6), 0.05, -2)
    _assert_reader_matches_litert(other)
    conv = read_model(other).ops[0]
    assert conv.name == "CONV_2D" and conv.options == O.Conv2DOptions(padding=O.PAD_VALID)
    for builder in (cases.conv2d_case, cases.depthwise_case, cases.shape_ops_case):
        _assert_reader_matches_litert(builder(rng)[0])


def test_write_read_round_trip_keeps_everything():
    data = cases.depthwise_case(np.random.default_rng(11))[0]
    model = read_model(data)
    again = read_model(write_model(model))
    assert [(o.name, o.inputs, o.outputs, o.options, o.version) for o in again.ops] == \
        [(o.name, o.inputs, o.outputs, o.options, o.version) for o in model.ops]
    for a, b in zip(model.tensors, again.tensors, strict=True):
        assert (a.name, a.shape, a.dtype) == (b.name, b.shape, b.dtype)
        assert (a.data is None) == (b.data is None)
        if a.data is not None:
            assert np.array_equal(a.data, b.data)
        if a.quant is not None:
            assert np.array_equal(a.quant.scale, b.quant.scale) and a.quant.axis == b.quant.axis


def _tanh_model() -> bytes:
    b = ModelBuilder()
    x = b.tensor("x", (1, 4), np.int8, 0.05, 0)
    y = b.tensor("y", (1, 4), np.int8, 1 / 128, 0)
    z = b.tensor("z", (1, 4), np.int8, 1 / 128, 0)
    b.op("LEAKY_RELU", [x], [y])
    b.op("TANH", [y], [z])
    return b.build([x], [z])


def test_unsupported_op_is_one_line_naming_op_and_index():
    with pytest.raises(UnsupportedOp, match=r"^op 0 LEAKY_RELU: not supported") as err:
        Interpreter(_tanh_model())
    assert "\n" not in str(err.value)


def test_float_model_is_refused_with_op_and_index():
    b = ModelBuilder()
    x = b.tensor("x", (1, 4), np.float32)
    w = b.const("w", np.ones((3, 4), np.float32))
    y = b.tensor("y", (1, 3), np.float32)
    b.op("FULLY_CONNECTED", [x, w, -1], [y])
    with pytest.raises(ModelError, match=r"^op 0 FULLY_CONNECTED: float tensor x: float models"):
        Interpreter(b.build([x], [y]))


@pytest.mark.parametrize("blob", [b"", b"garbage!", b"\x10\x00\x00\x00TFL3" + b"\xff" * 40])
def test_corrupt_files_are_model_errors(blob):
    with pytest.raises(ModelError):
        read_model(blob)


def test_input_binding_errors():
    model, inputs, _ = cases.binary_case(np.random.default_rng(0), "ADD")
    interp = Interpreter(model)
    with pytest.raises(ModelError, match="missing input"):
        interp.run(inputs[:1])
    with pytest.raises(ModelError, match="shape"):
        interp.run([inputs[0][..., :0], inputs[1]])
    with pytest.raises(ModelError, match="unknown input"):
        interp.run({"nope": inputs[0]})
    by_name = interp.run({"a": inputs[0], "c": inputs[1]})
    assert np.array_equal(next(iter(by_name.values())), run_ref(model, *inputs))


class _ConvOffload:
    """A toy delegate: every CONV_2D becomes a one-op segment it runs itself (with host kernels)."""

    name = "toy"

    def __init__(self) -> None:
        self.calls = 0

    def partition(self, model) -> Plan:
        def run_op(op, ins):
            self.calls += 1
            assert ins[1] is model.tensors[op.inputs[1]].data  # constants come from the model
            return prepare_op(model, op.index)(ins)

        return Plan(op_segments(model, [op.index for op in model.ops if op.name == "CONV_2D"], run_op, "toy"))


def test_delegate_segments_replace_host_ops_and_hooks_see_them():
    b = ModelBuilder()
    rng = np.random.default_rng(5)
    x = b.tensor("x", (1, 6, 6, 3), np.int8, 0.02, 1)
    h = b.tensor("h", (1, 6, 6, 4), np.int8, 0.05, -3)
    b.op("CONV_2D", [x, b.const("w", cases.int8(rng, (4, 3, 3, 3)), scale=0.01, zero_point=0),
                     b.const("b", np.arange(4, dtype=np.int32), scale=0.0002, zero_point=0)], [h])
    y = b.tensor("y", (1, 3, 3, 4), np.int8, 0.05, -3)
    b.op("MAX_POOL_2D", [h], [y], O.Pool2DOptions(O.PAD_VALID, 2, 2, 2, 2))
    data = b.build([x], [y])
    feed = cases.int8(rng, (1, 6, 6, 3))
    toy = _ConvOffload()
    interp = Interpreter(data, delegate=toy)
    records = []
    interp.hooks.append(records.append)
    out = interp.run([feed])["y"]
    assert toy.calls == 1 and interp.delegated_ops == 1 and interp.host_ops == 1
    assert [(r.name, r.where) for r in records] == [("toy:CONV_2D#0", "toy"), ("MAX_POOL_2D", "host")]
    assert np.array_equal(out, run_ref(data, feed))


def test_conv_params_expose_what_the_kernel_uses():
    """A delegate recomputing a layer from `conv_params` (plain NumPy here) matches LiteRT."""
    from npukit.formats import fixedpoint as fp
    from npukit.models.tflite.kernels.conv import conv_params

    rng = np.random.default_rng(4)
    x = cases.int8(rng, (1, 5, 5, 7))
    data = conv1x1_per_channel_model(x.shape, 0.03, -4, rng.integers(-127, 128, (9, 7)),
                                     np.linspace(0.002, 0.02, 9).astype(np.float32),
                                     rng.integers(-5000, 5000, 9), 0.2, 6)
    p = conv_params(read_model(data), 0)
    assert p.weights.shape == (9, 1, 1, 7) and p.weights_zero_point == 0 and p.multipliers.shape == (9,)
    acc = (x.astype(np.int64) - p.input_zero_point) @ p.weights.reshape(9, 7).T.astype(np.int64) + p.bias
    y = fp.multiply_by_quantized_multiplier(acc, p.multipliers, p.shifts).astype(np.int64)
    y = np.clip(y + p.output_zero_point, p.act_min, p.act_max)
    assert np.array_equal(y, run_ref(data, x))
    with pytest.raises(UnsupportedOp, match="not a convolution"):
        conv_params(read_model(_tanh_model()), 0)
