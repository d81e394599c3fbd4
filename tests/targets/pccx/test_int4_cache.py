"""The INT4 image cache: a checkpoint seen before loads without quantizing, a changed one never stale.

Oracle: a fresh `Int4Store` quantization of the same file (what every run did before the cache).
"""

from __future__ import annotations

import numpy as np
import pytest

from npukit.models.gemma3n import Gemma3nConfig, Gemma3nWeights, synthetic_weights
from npukit.models.safetensors import open_checkpoint
from npukit.targets.pccx.gemma3n_quant import Int4Store
from npukit.targets.pccx.gemma3n_quant.cache import load_store

save_file = pytest.importorskip("safetensors.numpy").save_file

SL, FU = "sliding_attention", "full_attention"
CFG = dict(
    model_type="gemma3n_text", vocab_size=64, vocab_size_per_layer_input=64, hidden_size=16,
    hidden_size_per_layer_input=12, intermediate_size=[32, 32], num_hidden_layers=2, num_attention_heads=1,
    num_key_value_heads=1, head_dim=24, laurel_rank=8, num_kv_shared_layers=0, sliding_window=4,
    layer_types=[SL, FU], activation_sparsity_pattern=[0.95, 0], max_position_embeddings=64,
    altup_num_inputs=2, final_logit_softcapping=30.0,
)


def write(path, seed: int) -> Gemma3nWeights:
    cfg = Gemma3nConfig.from_hf(CFG)
    w = synthetic_weights(cfg, seed=seed)
    save_file({"model." + n: np.ascontiguousarray(w.get(n), np.float32) for n in w.shapes}, str(path))
    return Gemma3nWeights(cfg, open_checkpoint(path), str(path))


def same(a: Int4Store, b: Int4Store) -> bool:
    if a.mats.keys() != b.mats.keys() or a.vecs.keys() != b.vecs.keys():
        return False
    mats = all(np.array_equal(a.mats[n].packed, b.mats[n].packed)
               and np.array_equal(a.mats[n].scale.view(np.uint32), b.mats[n].scale.view(np.uint32))
               for n in a.mats)
    return mats and all(np.array_equal(a.vecs[n].view(np.uint32), b.vecs[n].view(np.uint32)) for n in a.vecs)


def test_cache_hit_equals_quantizing_and_a_changed_file_is_quantized_again(tmp_path, monkeypatch):
    monkeypatch.setenv("NPUKIT_INT4_CACHE", str(tmp_path / "cache"))
    ckpt = tmp_path / "model.safetensors"
    w = write(ckpt, 1)
    first, how = load_store(w)
    assert how == "quantized, cached" and same(first, Int4Store(w))
    again, how = load_store(Gemma3nWeights(w.config, open_checkpoint(ckpt), str(ckpt)))
    assert how == "cache hit" and same(again, Int4Store(w))
    w2 = write(ckpt, 2)  # new content at the same path
    changed, how = load_store(w2)
    assert how == "quantized, cached" and same(changed, Int4Store(w2)) and not same(changed, first)
    w1 = write(ckpt, 1)  # the first content again: its entry is found by content, not by path
    back, how = load_store(w1)
    assert how == "cache hit" and same(back, first)


def test_synthetic_weights_are_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("NPUKIT_INT4_CACHE", str(tmp_path / "cache"))
    _, how = load_store(synthetic_weights(Gemma3nConfig.from_hf(CFG), seed=0))
    assert how == "quantized" and not (tmp_path / "cache").exists()
