"""The policy's products as real pccx programs: assembled in the strict (v002) profile, run on the
functional simulator, bit-identical to the vectorised `grouped_gemm` the quant target uses, and timed."""

import numpy as np
import pytest

from npukit.models.gguf.installed import installed_gguf
from npukit.models.llm.weights import open_gguf_llm
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.llm.gptq import gptq_affine
from npukit.targets.pccx.llm.model import LlmW4A8
from npukit.targets.pccx.llm.policy import affine_fit, requantize
from npukit.targets.pccx.llm.program import product_program, run_product
from npukit.targets.pccx.llm.w4a8 import GroupedMatrix, grouped_gemm


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(a.view(np.uint32), b.view(np.uint32)))


@pytest.mark.parametrize(("fmt", "affine"), [("int4", True), ("int4", False), ("int8", False)])
def test_simulated_product_is_bit_identical_to_grouped_gemm(fmt: str, affine: bool) -> None:
    rng = np.random.default_rng(11)
    w = requantize(rng.standard_normal((72, 192)).astype(np.float32) + 0.2, fmt, "F32", affine=affine)
    x = nx.bf16(rng.standard_normal(192).astype(np.float32) * np.float32(5))
    x[32:64] = 0.0  # a group of zeros: its exponent and sum are 0
    y, timing = run_product(w, x)
    assert _same(y, grouped_gemm(x[None], w)[0])
    assert timing.cycles > 0
    prog = product_program(w, 0, 100, 50)
    gemvs = prog.source.count("gemv ")
    assert gemvs == 6 + (1 if affine else 0)  # one per group of 32, plus the offsets' FP16 GEMV
    assert prog.source.count("cvo.reduce_sum") == (6 if affine else 0)


@pytest.mark.slow
def test_real_llm_matrices_run_on_the_simulator_as_the_quant_target_computes() -> None:
    """SmolLM2's Q4_1 q projection (lossless INT4 + offsets) and Gemma 3's Q5_0 one (re-quantised:
    round to nearest, and GPTQ on a Hessian of random inputs, which a real calibration would make
    in the same format without taking a minute here)."""
    cases = (("smollm2", "blk.0.attn_q.weight", "gptq"), ("gemma3", "blk.3.attn_k.weight", "gguf"),
             ("gemma3", "blk.3.attn_k.weight", ""))
    for name, tensor, policy in cases:
        _cfg, weights, _g = open_gguf_llm(installed_gguf(name))
        if policy:
            w = LlmW4A8(weights, policy=policy).matrix(tensor)
        else:
            x = np.random.default_rng(2).standard_normal((1024, 640))
            codes, scale, offset = gptq_affine(weights.tensor(tensor), x.T @ x, affine_fit)
            w = GroupedMatrix(codes, scale, 32, "int4", offset)
        rng = np.random.default_rng(1)
        x = nx.bf16(rng.standard_normal(w.codes.shape[1]).astype(np.float32))
        y, timing = run_product(w, x)
        assert _same(y, grouped_gemm(x[None], w)[0])
        assert timing.cycles > 0
