"""TFLite's requantization on the VTA ALU (``--set requant=vta``): the limb sequence of
`delegate.requant` against `fixedpoint.multiply_by_quantized_multiplier` (itself bit-exact with
LiteRT, tests/formats) at the edges of its range, and random models against LiteRT BUILTIN_REF."""

import numpy as np
import pytest
import tflite_cases as cases
from _litert_models import run_ref

from npukit.formats import fixedpoint as fp
from npukit.models.tflite import Interpreter
from npukit.targets.vta.delegate import make_delegate
from npukit.targets.vta.delegate.gemm import GemmProgram
from npukit.targets.vta.delegate.requant import LIMIT, Requant
from npukit.targets.vta.hw import VtaHw


@pytest.mark.parametrize("seed", range(6))
def test_limb_sequence_equals_multiply_by_quantized_multiplier(seed):
    rng = np.random.default_rng(seed)
    n = 19
    # K = 1 and large biases: accumulators spread over ±(2^30 − 2^15), both signs, exact ties likely
    bias = rng.integers(-(LIMIT - 2**15) // 1, LIMIT - 2**15, n).astype(np.int32) >> int(rng.integers(0, 20))
    bias[:3] = [LIMIT - 2**15 - 1, -(LIMIT - 2**15 - 1), 0]
    reals = np.exp(rng.uniform(np.log(1e-7), np.log(0.999), n))
    reals[3] = 0.5  # multiplier 2^30: m2 = 1, m1 = m0 = 0
    mult, shift = fp.quantize_multipliers(reals)
    w = rng.integers(-127, 128, (1, n)).astype(np.int8)
    a = rng.integers(-128, 128, (300, 1)).astype(np.int8)
    a[:2, 0] = [-128, 127]
    zp = int(rng.integers(-128, 128))
    prog = GemmProgram(VtaHw(), 300, w, bias, Requant(mult, shift, zp, -128, 127))
    assert prog.requant is not None
    acc = a.astype(np.int64) @ w.astype(np.int64) + bias
    expect = np.clip(fp.multiply_by_quantized_multiplier(acc, mult, shift).astype(np.int64) + zp, -128, 127)
    np.testing.assert_array_equal(prog.run(a), expect)


def test_left_shifts_and_the_bound():
    rng = np.random.default_rng(9)
    mult, shift = fp.quantize_multipliers(np.array([3.7, 1.0, 1.5, 0.25]))
    assert shift.max() > 0
    w = rng.integers(-127, 128, (40, 4)).astype(np.int8)
    a = rng.integers(-128, 128, (50, 40)).astype(np.int8)
    prog = GemmProgram(VtaHw(), 50, w, np.zeros(4, np.int32), Requant(mult, shift, -3, -128, 127))
    acc = a.astype(np.int64) @ w.astype(np.int64)
    expect = np.clip(fp.multiply_by_quantized_multiplier(acc, mult, shift).astype(np.int64) - 3, -128, 127)
    np.testing.assert_array_equal(prog.run(a), expect)
    # an accumulator bound at 2^30 leaves the rescale to the host (int32 export)
    big = GemmProgram(VtaHw(), 2, np.ones((1, 1), np.int8), np.array([LIMIT - 100], np.int32),
                      Requant(mult[:1], shift[:1], 0, -128, 127))
    assert big.requant is None and big.planes == 4


BUILDERS = {"CONV_2D": cases.conv2d_case, "DEPTHWISE_CONV_2D": cases.depthwise_case,
            "ADD": lambda rng: cases.binary_case(rng, "ADD")}


@pytest.mark.parametrize("name", list(BUILDERS))
def test_random_models_with_the_rescale_on_vta_equal_litert(name):
    for seed in range(6):
        model, ins, desc = BUILDERS[name](np.random.default_rng(2000 + seed))
        delegate = make_delegate("exact", overrides=["requant=vta", "functional=simulate"])
        it = Interpreter(model, delegate=delegate)
        out = next(iter(it.run(list(ins)).values()))
        np.testing.assert_array_equal(out, run_ref(model, *ins), err_msg=desc)
        assert it.plan.figures["host_requant_elements"].value == 0, desc
