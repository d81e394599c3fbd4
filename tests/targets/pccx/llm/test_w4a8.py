"""W4A8 for GGUF LLMs: the vectorised grouped product is bit-identical to pccx's GEMV instruction
(`npukit.targets.pccx.numerics.gemv`, chained with accm per group), the INT4 policy's codes and scales
follow the absmax rule, and the quant target runs the installed SmolLM2 file."""

import numpy as np
import pytest

from npukit.errors import ConfigError, FormatError
from npukit.formats.int4 import quantize_int4
from npukit.models.gguf.installed import installed_gguf
from npukit.models.loading import load_model
from npukit.runtime.backends import create_backend
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.llm.w4a8 import GroupedMatrix, grouped_gemm, grouped_gemv_reference


@pytest.mark.parametrize("fmt", ["int4", "int8"])
def test_grouped_gemm_equals_chained_pccx_gemv(fmt: str) -> None:
    rng = np.random.default_rng(3)
    w = GroupedMatrix.quantize(rng.standard_normal((40, 192)).astype(np.float32), 32, fmt)
    xs = rng.standard_normal((6, 192)).astype(np.float32) * rng.uniform(1e-3, 1e3, (6, 1)).astype(np.float32)
    xs[1, :64] = 0.0  # an all-zero group: exponent 0
    xs[4, 100] = 3e5  # one huge value: the rest of its group quantises to zero
    xs = nx.bf16(xs)
    got = grouped_gemm(xs, w)
    expect = np.stack([grouped_gemv_reference(x, w) for x in xs])
    assert np.array_equal(got.view(np.uint32), expect.view(np.uint32))


def test_int4_codes_follow_the_absmax_rule() -> None:
    rng = np.random.default_rng(4)
    w = rng.standard_normal((8, 64)).astype(np.float32)
    q = GroupedMatrix.quantize(w, 32)
    codes, scale = quantize_int4(w, axis=-1, group_size=32)
    assert np.array_equal(q.codes, codes) and np.array_equal(q.scale, scale)
    assert q.codes.min() >= -7 and q.codes.max() <= 7
    with pytest.raises(FormatError, match="multiple"):
        GroupedMatrix.quantize(w[:, :40], 32)


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
        assert 0.9 < cos < 1.0
    assert stats["int4"]["kv_bytes"] * 4 == stats["fp16"]["kv_bytes"]
    errors = stats["fp16"]["weight_error"]
    assert set(errors) == {"q", "k", "v", "o", "gate", "up", "down", "embed"}
    assert all(0.0 < e < 0.2 for e in errors.values())
    with pytest.raises(ConfigError, match="does not support --kv fp32"):
        create_backend(model, "quant", kv="fp32")
