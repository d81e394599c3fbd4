"""The VTA delegate against LiteRT BUILTIN_REF on random int8 models from the TFLite builders
(tests/models/tflite/tflite_cases.py: per-channel and per-tensor weights, strides, SAME/VALID,
dilations, depth multipliers, fused activations, odd channel counts, broadcasting ADD)."""

import numpy as np
import pytest
import tflite_cases as cases
from _litert_models import run_ref

from npukit.models.tflite import Interpreter, ModelBuilder
from npukit.models.tflite import options as O
from npukit.targets.vta.delegate import make_delegate

BUILDERS = {
    "CONV_2D": cases.conv2d_case,
    "DEPTHWISE_CONV_2D": cases.depthwise_case,
    "FULLY_CONNECTED": cases.fully_connected_case,
    "ADD": lambda rng: cases.binary_case(rng, "ADD"),
}


def _run(model, ins, variant):
    # the simulator itself is what these pin (the default runs the compiled host kernels)
    it = Interpreter(model, delegate=make_delegate(variant, overrides=["functional=simulate"]))
    return it, next(iter(it.run(list(ins)).values()))


@pytest.mark.parametrize("name", list(BUILDERS))
def test_exact_delegate_is_bit_identical_to_litert(name):
    descs = []
    for seed in range(12):
        model, ins, desc = BUILDERS[name](np.random.default_rng(1000 + seed))
        it, out = _run(model, ins, "exact")
        assert it.delegated_ops == 1 and it.host_ops == 0, desc
        np.testing.assert_array_equal(out, run_ref(model, *ins), err_msg=desc)
        descs.append(desc)
    text = " ".join(descs)
    if name != "ADD":  # both weight quantizations and several fused activations were exercised
        assert "pcTrue" in text and "pcFalse" in text
    assert len({d.split("act")[1][0] for d in descs}) >= 3


def _chain(rng):
    """conv → depthwise → ADD (residual) → FC: one model, four delegated ops, values flow VTA → VTA."""
    b = ModelBuilder()
    s = 0.05
    x = b.tensor("x", (1, 9, 9, 5), np.int8, s, 3)
    w1 = b.const("w1", rng.integers(-127, 128, (17, 3, 3, 5)).astype(np.int8),
                 scale=np.full(17, 0.01, np.float32), zero_point=0, axis=0)
    b1 = b.const("b1", rng.integers(-500, 500, 17).astype(np.int32), scale=np.full(17, 5e-4, np.float32),
                 zero_point=0)
    h1 = b.tensor("h1", (1, 9, 9, 17), np.int8, 0.3, -5)
    b.op("CONV_2D", [x, w1, b1], [h1], O.Conv2DOptions(O.PAD_SAME, 1, 1, O.ACT_RELU, 1, 1))
    w2 = b.const("w2", rng.integers(-127, 128, (1, 3, 3, 17)).astype(np.int8), scale=np.float32(0.02),
                 zero_point=0, axis=3)
    b2 = b.const("b2", rng.integers(-500, 500, 17).astype(np.int32), scale=np.float32(0.006), zero_point=0)
    h2 = b.tensor("h2", (1, 9, 9, 17), np.int8, 0.4, 7)
    b.op("DEPTHWISE_CONV_2D", [h1, w2, b2], [h2],
         O.DepthwiseConv2DOptions(O.PAD_SAME, 1, 1, 1, O.ACT_NONE, 1, 1))
    h3 = b.tensor("h3", (1, 9, 9, 17), np.int8, 0.5, -2)
    b.op("ADD", [h1, h2], [h3], O.AddOptions(O.ACT_RELU6))
    flat = b.tensor("flat", (1, 9 * 9 * 17), np.int8, 0.5, -2)
    shape = b.const("shape", np.array([1, 9 * 9 * 17], np.int32))
    b.op("RESHAPE", [h3, shape], [flat], O.ReshapeOptions((1, -1)))
    w3 = b.const("w3", rng.integers(-127, 128, (10, 9 * 9 * 17)).astype(np.int8), scale=np.float32(0.003),
                 zero_point=0)
    y = b.tensor("y", (1, 10), np.int8, 1.0, 0)
    b.op("FULLY_CONNECTED", [flat, w3], [y], O.FullyConnectedOptions(O.ACT_NONE))
    return b.build([x], [y]), [cases.int8(rng, (1, 9, 9, 5))]


def test_exact_chain_and_figures():
    model, ins = _chain(np.random.default_rng(7))
    it, out = _run(model, ins, "exact")
    assert it.delegated_ops == 4 and it.host_ops == 1  # RESHAPE stays on the host
    np.testing.assert_array_equal(out, run_ref(model, *ins))
    fig = it.plan.figures
    assert fig["vta_cycles"].tier == "projected" and fig["vta_cycles"].value > 0
    assert fig["vta_gemm_macs"].tier == "derived"
    # the dense conv: 81 rows × ceil(45/16)=3 k-blocks × 2 n-blocks uop iterations, 256 MACs each
    assert fig["vta_gemm_macs"].value >= 81 * 3 * 2 * 256


def _example_add_model():
    """The Alkali example (examples/tflite_vta/add/model.tflite): ADD(t1, t0), t0 s=0.02394966 zp=17,
    t1 s=0.02529984 zp=-1, out s=0.03020681 zp=-4 (refs/alkali_vta.md §1.6), widened to all pairs."""
    b = ModelBuilder()
    t0 = b.tensor("input_1", (1, 65536), np.int8, 0.02394966, 17)
    t1 = b.tensor("input_0", (1, 65536), np.int8, 0.02529984, -1)
    y = b.tensor("out", (1, 65536), np.int8, 0.03020681, -4)
    b.op("ADD", [t1, t0], [y], O.AddOptions(O.ACT_NONE))
    return b.build([t0, t1], [y])


def test_alkali_add_reproduces_the_seed_delegate_on_all_input_pairs():
    model = _example_add_model()
    grid = np.stack(np.meshgrid(np.arange(-128, 128), np.arange(-128, 128), indexing="ij"))
    ins = [grid[0].reshape(1, -1).astype(np.int8), grid[1].reshape(1, -1).astype(np.int8)]
    it, out = _run(model, ins, "alkali")
    assert it.delegated_ops == 1
    diff = out.astype(int) - run_ref(model, *ins).astype(int)
    # measured on the seed's arithmetic (refs/alkali_vta.md §1.7): −1 on 28,285 pairs, equal on 37,251
    assert (diff == -1).sum() == 28285 and (diff == 0).sum() == 37251
    it, exact = _run(model, ins, "exact")
    np.testing.assert_array_equal(exact, run_ref(model, *ins))


def test_alkali_random_add_only_rounds_down_and_leaves_the_rest_on_the_host():
    counts = {-1: 0, 0: 0}
    for seed in range(25):
        model, ins, desc = cases.binary_case(np.random.default_rng(seed), "ADD")
        it, out = _run(model, ins, "alkali")
        assert it.delegated_ops == 1, desc
        diff = out.astype(int) - run_ref(model, *ins).astype(int)
        assert set(np.unique(diff).tolist()) <= {-1, 0}, desc
        for k in counts:
            counts[k] += int((diff == k).sum())
    assert counts[-1] > 0 and counts[0] > counts[-1]
    model, ins, desc = cases.conv2d_case(np.random.default_rng(3))
    it, out = _run(model, ins, "alkali")
    assert it.delegated_ops == 0  # the seed's CONV_2D path is disabled: the host runs it
    np.testing.assert_array_equal(out, run_ref(model, *ins))
