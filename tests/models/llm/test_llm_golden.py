"""The ``golden`` target of the GGUF LLM families against transformers' float model loaded from the same
file (``from_pretrained(dir, gguf_file=...)``, float32, eager attention): identical greedy tokens and
logits within float noise, on both installed checkpoints."""

import numpy as np
import pytest

from npukit.errors import ModelError
from npukit.models.gguf.installed import installed_gguf
from npukit.models.loading import load_model
from npukit.runtime.backends import create_backend

PROMPT = "Everyone is permitted to copy and distribute verbatim copies of this license document, but"
NEW_TOKENS = 12


@pytest.mark.slow
@pytest.mark.parametrize("name,family", [("smollm2", "llama"), ("gemma3", "gemma3")])
def test_golden_equals_transformers_float(name: str, family: str) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    path = installed_gguf(name)
    model = load_model(path)
    assert model.family == family
    ids = model.tokenizer.encode(PROMPT).ids
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        expect_logits = hf(torch.tensor([ids])).logits[0, -1].numpy()
        expect = hf.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False,
                             min_new_tokens=NEW_TOKENS)[0, len(ids):].tolist()
    del hf
    backend = create_backend(model, "golden")
    logits = backend.prefill(ids)
    # float noise: summation order differs from torch's; 1e-4 of the logit range (~25) is far below
    # any change a real difference would make
    assert np.max(np.abs(logits - expect_logits)) < 1e-3
    got = []
    for _ in range(NEW_TOKENS):
        got.append(int(np.argmax(logits)))
        logits = backend.step(got[-1])
    assert got == expect
    assert backend.stats()["positions"] == len(ids) + NEW_TOKENS


def test_config_from_gguf_metadata() -> None:
    gemma = load_model(installed_gguf("gemma3")).config
    assert (gemma.num_layers, gemma.hidden_size, gemma.num_heads, gemma.num_kv_heads, gemma.head_dim) == (
        18, 640, 4, 1, 256)
    assert [gemma.is_sliding(i) for i in range(6)] == [True] * 5 + [False]
    assert (gemma.sliding_window, gemma.query_scale, gemma.tied_embeddings) == (512, 1 / 16, True)
    assert (gemma.layer_theta(0), gemma.layer_theta(5)) == (1e4, 1e6)
    smol = load_model(installed_gguf("smollm2")).config
    assert (smol.arch, smol.num_layers, smol.hidden_size, smol.num_heads, smol.num_kv_heads) == (
        "llama", 30, 576, 9, 3)
    assert not smol.is_sliding(0)


def test_bad_token_id_is_a_model_error() -> None:
    backend = create_backend(load_model(installed_gguf("smollm2")), "golden")
    with pytest.raises(ModelError, match="token ids"):
        backend.prefill([49152])
