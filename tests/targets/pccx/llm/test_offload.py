"""The ``pccx`` target for the GGUF LLM families (matrix products as pccx programs on the simulated NPU,
vector operations on the host): logits bit-identical to the ``quant`` target, per-token cycles, and the
CLI streams text with the target's tiered figures."""

import numpy as np
import pytest

from npukit.cli.main import main
from npukit.models.gguf.installed import installed_gguf
from npukit.models.loading import load_model
from npukit.runtime.backends import create_backend


@pytest.mark.slow
@pytest.mark.parametrize(("name", "kv"), [("smollm2", "int8"), ("gemma3", "fp16")])
def test_pccx_logits_equal_quant_bit_for_bit(name: str, kv: str) -> None:
    """SmolLM2: Q4_1 lossless INT4 with offsets; Gemma 3: re-quantised affine INT4 and the INT8 LM head
    of 262 144 rows (5 row slices), all as grouped GEMVs."""
    model = load_model(installed_gguf(name))
    ids = model.tokenizer.encode("Free software means").ids
    quant = create_backend(model, "quant", kv=kv)
    pccx = create_backend(model, "pccx", kv=kv)
    a, b = quant.prefill(ids), pccx.prefill(ids)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    for token in (int(np.argmax(a)), 42):
        a, b = quant.step(token), pccx.step(token)
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    stats = pccx.stats()
    assert len(stats["simulated_cycles_per_token"]) == 2 and min(stats["simulated_cycles_per_token"]) > 0
    figs = stats["figures"]
    assert figs["cycles_per_token"]["tier"] == "derived" and figs["projected_tok_per_s"]["value"] > 0
    # every matrix (7 per layer) and the LM head became one program
    assert stats["programs"] == 7 * model.config.num_layers + 1


@pytest.mark.slow
def test_generate_on_pccx_streams_text_and_cycles(capsys) -> None:
    path = str(installed_gguf("smollm2"))
    assert main(["generate", path, "--prompt", "The capital of France is", "--max-new-tokens", "3",
                 "--target", "pccx"]) == 0
    cap = capsys.readouterr()
    assert cap.out.strip()  # decoded text streamed
    assert "cycles_per_token" in cap.err and "derived" in cap.err
