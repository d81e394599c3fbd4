"""Every supported op on random int8 models built by npukit's writer equals LiteRT's reference
kernels (OpResolverType.BUILTIN_REF) bit for bit: per-channel and per-tensor weights, strides,
paddings, dilations, depth multipliers, fused activations, odd channel counts, broadcasting."""

from __future__ import annotations

import numpy as np
import pytest
import tflite_cases as cases
from _litert_models import run_ref

from npukit.models.tflite import Interpreter


def _check(builder, seeds, *args) -> int:
    """Run each seeded case on both interpreters; return how many had non-constant outputs."""
    varied = 0
    for seed in seeds:
        rng = np.random.default_rng(seed)
        model, inputs, desc = builder(rng, *args)
        expect = run_ref(model, *inputs)
        ours = next(iter(Interpreter(model).run(inputs).values()))
        assert ours.dtype == expect.dtype and ours.shape == expect.shape, desc
        assert np.array_equal(ours, expect), f"seed {seed}: {desc}: {(ours != expect).sum()} differ"
        varied += int(np.unique(expect).size > 1)
    return varied


def test_conv2d():
    assert _check(cases.conv2d_case, range(60)) >= 50


def test_depthwise_conv2d():
    assert _check(cases.depthwise_case, range(60)) >= 50


def test_fully_connected():
    assert _check(cases.fully_connected_case, range(40)) >= 30


@pytest.mark.parametrize("name", ["ADD", "SUB", "MUL"])
def test_elementwise_binary(name):
    assert _check(cases.binary_case, range(40), name) >= 30


@pytest.mark.parametrize("name", ["AVERAGE_POOL_2D", "MAX_POOL_2D"])
def test_pooling(name):
    assert _check(cases.pool_case, range(40), name) >= 30


def test_mean():
    assert _check(cases.mean_case, range(50)) >= 35


def test_softmax():
    assert _check(cases.softmax_case, range(40)) >= 30


@pytest.mark.parametrize("name", ["LOGISTIC", "HARD_SWISH", "TANH", "RELU", "RELU6", "RELU_N1_TO_1"])
def test_unary_lookup_ops(name):
    assert _check(cases.unary_case, range(40), name) >= 35


def test_quantize_dequantize():
    assert _check(cases.quantize_case, range(20)) >= 18
    assert _check(cases.dequantize_case, range(10)) == 10


def test_shape_ops():
    assert _check(cases.shape_ops_case, range(20)) >= 15


def test_fully_connected_rescales_in_double_with_ties_away_from_zero():
    """LiteRT 2.3.0's reference FULLY_CONNECTED int8 computes round(acc · s_in·s_w/s_out) in double:
    −2.5 → −3. Single-rounding MultiplyByQuantizedMultiplier would give −2 (ties toward +∞), double
    rounding too; exact ties (real multiplier 1/2) tell the three apart."""
    from npukit.models.tflite import ModelBuilder

    accs = np.array([-5, -3, -1, 1, 3, 5, -7, 7], np.int32)
    b = ModelBuilder()
    x = b.tensor("x", (1, 1), np.int8, 0.5, 0)
    w = b.const("w", np.ones((8, 1), np.int8), scale=0.25, zero_point=0)
    bias = b.const("b", accs, scale=0.125, zero_point=0)  # x = 0, so acc = bias
    y = b.tensor("y", (1, 8), np.int8, 0.25, 0)
    b.op("FULLY_CONNECTED", [x, w, bias], [y])
    model, feed = b.build([x], [y]), np.zeros((1, 1), np.int8)
    expect = run_ref(model, feed)
    assert expect[0].tolist() == [-3, -2, -1, 1, 2, 3, -4, 4]
    assert np.array_equal(Interpreter(model).run([feed])["y"], expect)


def test_strided_slice_shape_pack():
    from ai_edge_litert.interpreter import Interpreter as LiteRT
    from ai_edge_litert.interpreter import OpResolverType

    varied = 0
    for seed in range(40):
        model, inputs, desc = cases.strided_slice_case(np.random.default_rng(seed))
        ref = LiteRT(model_content=model, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
        ref.allocate_tensors()
        ref.set_tensor(ref.get_input_details()[0]["index"], inputs[0])
        ref.invoke()
        ours = list(Interpreter(model).run(inputs).values())
        for d, mine in zip(ref.get_output_details(), ours, strict=True):
            expect = ref.get_tensor(d["index"])
            assert mine.shape == expect.shape and np.array_equal(mine, expect), f"seed {seed}: {desc}"
        varied += int(np.unique(ours[0]).size > 1)
    assert varied >= 30
