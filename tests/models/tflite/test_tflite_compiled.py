"""The compiled int8 path (the interpreter's default) against LiteRT BUILTIN_REF and against the
readable reference kernels (``compiled=False``): wide convolutions with large sums, the float32
BLAS path past the int8 kernels' K bound (with its K split), batches along N, and the compiled
kernels actually being the ones bound."""

from __future__ import annotations

import numpy as np
import pytest
import tflite_cases as cases
from _litert_models import run_ref

from npukit.models.tflite import Interpreter, ModelBuilder
from npukit.models.tflite import options as O
from npukit.models.tflite.kernels.compiled import _k_chunks


def _wide_conv(rng: np.random.Generator, n: int, cin: int, k: int, pad: int, stride: int):
    cout = 8
    s_in, s_w = 0.02, (rng.uniform(0.001, 0.004, cout)).astype(np.float32)
    w = rng.choice(np.array([-127, 127, -100, 90], np.int8), (cout, k, k, cin))  # large sums on purpose
    b = ModelBuilder()
    x = b.tensor("x", (n, 9, 9, cin), np.int8, s_in, int(rng.integers(-128, 128)))
    wt = b.const("w", w, scale=s_w, zero_point=0, axis=0)
    bias = b.const("b", rng.integers(-30000, 30000, cout).astype(np.int32),
                   scale=(np.float32(s_in) * s_w).astype(np.float32), zero_point=0)
    side = (9 + stride - 1) // stride if pad == O.PAD_SAME else (9 - k + stride) // stride
    y = b.tensor("y", (n, side, side, cout), np.int8, 0.1, int(rng.integers(-128, 128)))
    b.op("CONV_2D", [x, wt, bias], [y], O.Conv2DOptions(pad, stride, stride, O.ACT_NONE, 1, 1))
    return b.build([x], [y]), [rng.integers(-128, 128, (n, 9, 9, cin)).astype(np.int8)], w


@pytest.mark.parametrize(("cin", "k", "pad", "stride"), [(64, 3, O.PAD_SAME, 1), (96, 3, O.PAD_VALID, 2),
                                                         (600, 1, O.PAD_SAME, 1)])
def test_wide_convolution_splits_k_and_stays_exact(cin, k, pad, stride):
    rng = np.random.default_rng(cin)
    model, inputs, w = _wide_conv(rng, 2, cin, k, pad, stride)
    assert len(_k_chunks(k * k * cin, w)) >= 2  # sums past float32's exact range (the BLAS path would split)
    expect = run_ref(model, *inputs)
    ours = next(iter(Interpreter(model).run(inputs).values()))
    assert np.array_equal(ours, expect), f"{(ours != expect).sum()} of {ours.size} differ"
    assert np.unique(expect).size > 10


@pytest.mark.parametrize(("builder", "args"), [(cases.conv2d_case, ()), (cases.depthwise_case, ()),
                                               (cases.fully_connected_case, ()), (cases.softmax_case, ()),
                                               (cases.binary_case, ("ADD",)), (cases.binary_case, ("SUB",)),
                                               (cases.pool_case, ("AVERAGE_POOL_2D",)),
                                               (cases.quantize_case, ()), (cases.dequantize_case, ()),
                                               (cases.pool_case, ("MAX_POOL_2D",)),
                                               (cases.binary_case, ("MUL",)), (cases.mean_case, ())])
def test_compiled_equals_reference_kernels(builder, args):
    for seed in range(100, 130):
        model, inputs, desc = builder(np.random.default_rng(seed), *args)
        fast = Interpreter(model)
        slow = Interpreter(model, compiled=False)
        a, b = fast.run(inputs), slow.run(inputs)
        assert all(np.array_equal(a[k], b[k]) for k in a), f"seed {seed}: {desc}"


def test_compiled_kernels_are_bound_by_default():
    model, _, _ = cases.conv2d_case(np.random.default_rng(1))
    assert "compiled" in Interpreter(model)._kernels[0].__module__
    assert "compiled" not in Interpreter(model, compiled=False)._kernels[0].__module__


def test_beyond_the_int8_kernels_bound_the_exact_blas_path_runs():
    """K > 65,536 (past the int32 bound of the packed int8 sums) keeps the K-split float32 BLAS
    CONV_2D; it must still equal LiteRT."""
    from npukit.models.tflite.kernels import _nb_gemm

    rng = np.random.default_rng(3)
    cin, cout = _nb_gemm.MAX_K + 500, 4
    b = ModelBuilder()
    x = b.tensor("x", (1, 2, 2, cin), np.int8, 0.02, 5)
    w = rng.integers(-127, 128, (cout, 1, 1, cin)).astype(np.int8)
    s_w = np.full(cout, 0.001, np.float32)
    wt = b.const("w", w, scale=s_w, zero_point=0, axis=0)
    bias = b.const("b", rng.integers(-3000, 3000, cout).astype(np.int32),
                   scale=(np.float32(0.02) * s_w).astype(np.float32), zero_point=0)
    y = b.tensor("y", (1, 2, 2, cout), np.int8, 2.0, -3)
    b.op("CONV_2D", [x, wt, bias], [y], O.Conv2DOptions(O.PAD_VALID, 1, 1, O.ACT_NONE, 1, 1))
    model = b.build([x], [y])
    inputs = [rng.integers(-128, 128, (1, 2, 2, cin)).astype(np.int8)]
    interp = Interpreter(model)
    assert "_conv_gemm" in interp._kernels[0].__qualname__
    ours = next(iter(interp.run(inputs).values()))
    assert np.array_equal(ours, run_ref(model, *inputs))
    assert np.unique(ours).size > 3


@pytest.mark.parametrize(("builder", "args"), [(cases.pool_case, ("MAX_POOL_2D",)),
                                               (cases.binary_case, ("MUL",)), (cases.mean_case, ()),
                                               (cases.quantize_case, ())])
def test_pooling_mean_mul_and_requantize_bind_compiled_kernels(builder, args):
    """MAX_POOL_2D, MEAN, MUL and QUANTIZE int8 → int8 run numba kernels on the compiled path (the
    equality tests above and the LiteRT ones then check those kernels, not the NumPy fallbacks)."""
    for seed in range(4):
        model, _, desc = builder(np.random.default_rng(seed), *args)
        kernel = Interpreter(model)._kernels[0]
        assert kernel.__module__.endswith("kernels.compiled"), desc
        assert kernel.__qualname__ != "prepare_quantize.<locals>.run" or "float" in desc, desc


@pytest.mark.parametrize(("cin", "mult", "stride", "extreme"), [(40, 1, 1, False), (20, 2, 2, False),
                                                                  (64, 1, 2, False), (32, 1, 1, True)])
def test_wide_depthwise_rows_and_channel_tail_equal_litert(cin, mult, stride, extreme):
    """DEPTHWISE_CONV_2D with several 16-channel blocks run a whole output row at a time, plus a
    tail of 8 channels (40 outputs), a depth multiplier and strides: LiteRT BUILTIN_REF's bits.
    ``extreme``: weights and inputs at −128 (two such products overflow an int16 pair sum, so the
    kernel must take its one-tap-at-a-time path) and at ±127 (the largest pair sums)."""
    rng = np.random.default_rng(cin * 10 + mult)
    cout, n, h, w = cin * mult, 2, 11, 7
    s_w = rng.uniform(0.002, 0.02, cout).astype(np.float32)
    b = ModelBuilder()
    x = b.tensor("x", (n, h, w, cin), np.int8, 0.03, int(rng.integers(-128, 128)))
    weights = rng.integers(-127, 128, (1, 3, 3, cout)).astype(np.int8)
    if extreme:
        weights = rng.choice(np.array([-128, -127, 127], np.int8), weights.shape)
    wt = b.const("w", weights, scale=s_w, zero_point=0, axis=3)
    bias = b.const("b", rng.integers(-20000, 20000, cout).astype(np.int32),
                   scale=(np.float32(0.03) * s_w).astype(np.float32), zero_point=0)
    side = (-(-h // stride), -(-w // stride))
    y = b.tensor("y", (n, *side, cout), np.int8, 0.05, int(rng.integers(-128, 128)))
    b.op("DEPTHWISE_CONV_2D", [x, wt, bias], [y],
         O.DepthwiseConv2DOptions(O.PAD_SAME, stride, stride, mult, O.ACT_NONE, 1, 1))
    model = b.build([x], [y])
    inputs = [rng.integers(-128, 128, (n, h, w, cin)).astype(np.int8)]
    if extreme:
        inputs[0][:, :6] = rng.choice(np.array([-128, 127], np.int8), inputs[0][:, :6].shape)
    ours = next(iter(Interpreter(model).run(inputs).values()))
    expect = run_ref(model, *inputs)
    assert np.array_equal(ours, expect), f"{(ours != expect).sum()} of {ours.size} differ"
    assert np.unique(expect).size > 50
