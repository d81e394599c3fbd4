"""W4A8 for GGUF LLMs: the vectorised grouped product (with and without FP16 offsets) is bit-identical
to pccx's instructions (`npukit.targets.pccx.numerics.gemv` chained with accm per group, REDUCE_SUM and
an FP16 GEMV for the offsets); the fast BF16 rounding equals `numerics.bf16`; the quant target runs the
installed SmolLM2 file."""

import numpy as np
import pytest

from npukit.errors import ConfigError, FormatError
from npukit.models.gguf.installed import installed_gguf
from npukit.models.loading import load_model
from npukit.runtime.backends import create_backend
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.llm.policy import requantize
from npukit.targets.pccx.llm.w4a8 import bf16_f32, grouped_gemm, grouped_gemv_reference


def _activations(rng: np.random.Generator, k: int) -> np.ndarray:
    xs = rng.standard_normal((6, k)).astype(np.float32) * rng.uniform(1e-3, 1e3, (6, 1)).astype(np.float32)
    xs[1, :64] = 0.0  # an all-zero group: exponent 0
    xs[4, 100] = 3e5  # one huge value: the rest of its group quantises to zero
    return nx.bf16(xs)


@pytest.mark.parametrize(("fmt", "affine"), [("int4", False), ("int8", False), ("int4", True)])
def test_grouped_gemm_equals_chained_pccx_instructions(fmt: str, affine: bool) -> None:
    rng = np.random.default_rng(3)
    w = requantize(rng.standard_normal((40, 192)).astype(np.float32) + 0.3, fmt, "F32", affine=affine)
    assert (w.offset is not None) == affine
    xs = _activations(rng, 192)
    got = grouped_gemm(xs, w)
    expect = np.stack([grouped_gemv_reference(x, w) for x in xs])
    assert np.array_equal(got.view(np.uint32), expect.view(np.uint32))


def test_fast_bf16_equals_numerics_on_every_kind_of_float32() -> None:
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 1 << 32, 400_000, dtype=np.uint64).astype(np.uint32)
    edge = np.array([0x7F7FFFFF, 0x7F7F8000, 0x7F7F7FFF, 0x00000001, 0x00008000, 0x80018000, 0x7F800000,
                     0xFF800001, 0x7FC00000, 0x3F808000, 0x3F818000], np.uint32)
    x = np.concatenate([bits, edge]).view(np.float32)
    assert np.array_equal(bf16_f32(x).view(np.uint32), nx.bf16(x).view(np.uint32))


def test_absmax_int4_codes_are_symmetric_and_groups_must_divide() -> None:
    rng = np.random.default_rng(4)
    w = rng.standard_normal((8, 64)).astype(np.float32)
    q = requantize(w, "int4", "F32", affine=False)
    amax = np.abs(w.reshape(8, 2, 32)).max(-1)
    assert np.array_equal(q.scale, (amax / np.float32(7)).astype(np.float32))
    assert q.codes.min() >= -7 and q.codes.max() <= 7
    with pytest.raises(FormatError, match="non-finite"):
        grouped_gemm(np.full((1, 64), np.inf, np.float32), q)


@pytest.mark.slow
def test_quant_target_on_smollm2() -> None:
    model = load_model(installed_gguf("smollm2"))
    ids = model.tokenizer.encode("The GNU General Public License is a free, copyleft license").ids
    golden = create_backend(model, "golden").prefill(ids)
    stats = {}
    for kv in ("fp16", "int4"):
        backend = create_backend(model, "quant", kv=kv)
        logits = backend.prefill(ids)
        stats[kv] = backend.stats()
        # quantised, not float: close to golden in direction, not equal
        cos = float(logits @ golden / np.linalg.norm(logits) / np.linalg.norm(golden))
        assert 0.95 < cos < 1.0
    c = model.config
    per_token_int4 = 2 * c.num_layers * c.num_kv_heads * (c.head_dim // 2 + 4 * c.head_dim // 32)
    assert stats["int4"]["kv_bytes"] == per_token_int4 * len(ids)
    errors = stats["fp16"]["weight_error"]
    assert set(errors) == {"q", "k", "v", "o", "gate", "up", "down", "embed"}
    # Q4_1 matrices map losslessly but for the FP16 offsets; the Q8_0 embedding is kept INT8, lossless
    assert all(e < 1e-3 for e in errors.values())
    assert errors["embed"] == 0.0
    assert stats["fp16"]["weight_policy"]["q"] == ["Q4_1 lossless"]
    with pytest.raises(ConfigError, match="does not support --kv fp32"):
        create_backend(model, "quant", kv="fp32")
