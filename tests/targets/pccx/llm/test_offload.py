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
def test_pccx_logits_equal_quant_bit_for_bit_on_smollm2() -> None:
    model = load_model(installed_gguf("smollm2"))
    ids = model.tokenizer.encode("Free software means").ids
    quant = create_backend(model, "quant", kv="int8")
    pccx = create_backend(model, "pccx", kv="int8")
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
