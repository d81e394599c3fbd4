"""Tiny random Gemma 3n models from transformers (the independent oracle), saved as HF directories.

Every parameter is randomised — including norm weights and ``correct_output_scale``, which
transformers initialises to constants (the latter to zero, which would hide per-layer-input bugs).
"""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

SL, FU = "sliding_attention", "full_attention"
# the npukit-side quant tests' config: 6 mixed layers, KV sharing, two sparse layers, window 5
MIXED = dict(
    model_type="gemma3n_text", vocab_size=128, vocab_size_per_layer_input=112, hidden_size=64,
    hidden_size_per_layer_input=8, intermediate_size=[128, 96, 128, 96, 128, 96], num_hidden_layers=6,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, laurel_rank=8, num_kv_shared_layers=2,
    sliding_window=5, layer_types=[SL, SL, FU, SL, SL, FU],
    activation_sparsity_pattern=[0.95, 0.9, 0, 0, 0, 0], max_position_embeddings=256,
    final_logit_softcapping=30.0,
)

TINY = dict(
    vocab_size=96, vocab_size_per_layer_input=80, hidden_size=32, hidden_size_per_layer_input=8,
    intermediate_size=[48, 64, 48, 64, 48, 64, 48, 64], num_hidden_layers=8, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, laurel_rank=4, num_kv_shared_layers=4, sliding_window=6,
    layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention",
                 "sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    activation_sparsity_pattern=[0.95, 0.8, 0.0, 0.95, 0.0, 0.9, 0.0, 0.0],
    max_position_embeddings=128, rope_theta=5000.0, rope_local_base_freq=100.0,
    final_logit_softcapping=30.0, eos_token_id=1,
)


def hf_config(**over):
    from transformers import Gemma3nTextConfig

    kw = {**TINY, **over}
    return Gemma3nTextConfig(**kw)


def hf_model(seed: int = 0, **over):
    """A Gemma3nForCausalLM (fp32, eager attention) with every parameter randomised."""
    import torch
    from transformers import Gemma3nForCausalLM

    torch.manual_seed(seed)
    cfg = hf_config(**over)
    cfg._attn_implementation = "eager"
    model = Gemma3nForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:  # norms and scales: around 1, clearly not constant
                p.copy_(1.0 + 0.3 * (2 * torch.rand(p.shape, generator=g) - 1))
            elif "coefs" in name:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
    return model


def save_hf(model, path: Path, **kw) -> Path:
    model.save_pretrained(path, safe_serialization=True, **kw)
    return path


def hf_greedy(model, prompt: list[int], n: int) -> tuple[list[int], np.ndarray]:
    """Greedy tokens and the logits that chose each one, via transformers' own KV-cached decode."""
    import torch
    from transformers import DynamicCache

    ids = torch.tensor([prompt])
    cache = DynamicCache(config=model.config)
    toks, logits = [], []
    with torch.no_grad():
        out = model(input_ids=ids, past_key_values=cache, use_cache=True)
        for _ in range(n):
            row = out.logits[0, -1].float().numpy()
            tok = int(row.argmax())
            toks.append(tok)
            logits.append(row)
            out = model(input_ids=torch.tensor([[tok]]), past_key_values=cache, use_cache=True)
    return toks, np.stack(logits)


def write_config_only(path: Path, cfg: dict) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg))
    return path


@functools.cache
def cached_model(seed: int = 0):
    """One random tiny model per seed per test process (building one costs about a second)."""
    return hf_model(seed)


@functools.cache
def cached_dir(seed: int = 0) -> Path:
    """The cached model saved with ``save_pretrained`` in a temporary directory (removed at exit)."""
    root = Path(tempfile.mkdtemp(prefix="npukit-gemma3n-"))
    atexit.register(shutil.rmtree, root, True)
    return save_hf(cached_model(seed), root / "model")


@functools.cache
def cached_greedy(seed: int, prompt: tuple[int, ...], n: int) -> tuple[list[int], np.ndarray]:
    return hf_greedy(cached_model(seed), list(prompt), n)
